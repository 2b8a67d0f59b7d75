// Evaluation of a parsed chat template over Values.
#pragma once

#include "tokenizer/chat_template/parser.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sao::tokenizer::jinja {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& where, const OrderedJson& variables)
      : where_(where), allowance_(kMaxValueBytes, [this](std::size_t limit) {
          fail("the template's values take more than " + std::to_string(limit) +
               " bytes (made or copied while rendering)");
        }) {
    scopes_.emplace_back();
    if (variables.is_object()) {
      for (const auto& [key, value] : variables.items()) scopes_.back()[key] = from_json(value);
    }
  }
  // Renders `body` within the limits below.
  std::string render(const Body& body);

 private:
  Flow run(const Body& body, std::string& out);
  [[noreturn]] void fail(const std::string& message) const { Failure(where_, line_)(message); }
  Value lookup(const std::string& name) const;
  void assign(const Node& node);
  std::vector<Value> iterate(const Value& value);
  void run_for(const Node& node, std::string& out);
  void bind_targets(const Node& node, const Value& item);
  int64_t as_index(const Value& v, const char* what) const;
  Value attribute(const Value& value, const std::string& name);
  Value index(const Value& value, const Value& key);
  Value slice(const Value& value, const Expr& e);
  // Python's str.strip: with `chars`, exactly those characters; without,
  // every character str.isspace() accepts (ASCII and Unicode spaces).
  static std::string strip_chars(const std::string& text, const Value* chars, bool left, bool right);
  Value call_method(const Value& function, const std::vector<Value>& args);
  Value call(const Expr& e);
  Value apply_filter(const std::string& name, const Value& value, const std::vector<Value>& args,
                     const std::vector<std::pair<std::string, Value>>& keywords);
  bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args);
  bool contains(const Value& container, const Value& item);
  Value arithmetic(const std::string& op, const Value& a, const Value& b);
  bool less(const Value& a, const Value& b);
  Value eval(const Expr& e);
  Value power(const Value& a, const Value& b);
  Value repeat(const Value& value, int64_t count);
  Value to_int(const Value& value);
  std::string join_text(const std::vector<Value>& items, const std::string& separator);
  // tojson as transformers defines it: json.dumps(ensure_ascii=False), item
  // separator ", " (or "," with indent), key separator ": ".
  std::string to_json_text(const Value& v, int64_t indent, int depth);
  // What {{ value }} prints: Python's str().
  std::string to_text(const Value& v);
  bool equal(const Value& a, const Value& b, int depth = 0);

  // Bounds on one render, far above what real templates use (a long
  // conversation takes thousands of steps and a few MiB) and low enough
  // that a hostile template ends in an error naming the limit.
  void spend_steps(uint64_t count);
  void check_text_size(uint64_t bytes, const std::string& what) const;
  void check_data_depth(int depth, const char* what) const;
  [[noreturn]] void overflow(const std::string& op, int64_t x, int64_t y) const;

  static constexpr uint64_t kMaxSteps = 1'000'000;  // statements, loop turns, items copied or compared
  static constexpr size_t kMaxOutputBytes = 64u << 20;
  static constexpr size_t kMaxTextBytes = 64u << 20;         // any one string
  static constexpr size_t kMaxValueBytes = size_t{1} << 30;  // all values made or copied (ValueAllowance)
  static constexpr int kMaxDataDepth = 256;                  // lists and dicts inside each other
  static constexpr int64_t kMaxIndent = 1024;                // tojson(indent=N), indent(N)
  static constexpr int64_t kMaxRange = 100000;               // items of one range()
  std::string where_;
  int line_ = 1;
  ValueAllowance allowance_;  // before scopes_: it outlives them, and empties what cycles keep alive
  uint64_t steps_ = 0;
  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace sao::tokenizer::jinja
