// Evaluation of a parsed chat template over Values.
#pragma once

#include "tokenizer/chat_template_parser.hpp"

#include <map>
#include <string>
#include <vector>

namespace sao::tokenizer::jinja {

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& where, const OrderedJson& variables) : where_(where) {
    scopes_.emplace_back();
    if (variables.is_object()) {
      for (const auto& [key, value] : variables.items()) scopes_.back()[key] = from_json(value);
    }
  }
  Flow run(const Body& body, std::string& out);

 private:
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

  static constexpr int64_t kMaxSteps = 1'000'000;
  static constexpr size_t kMaxOutputBytes = 64u << 20;
  std::string where_;
  int line_ = 1;
  int64_t steps_ = 0;
  std::vector<std::map<std::string, Value>> scopes_;
};

}  // namespace sao::tokenizer::jinja
