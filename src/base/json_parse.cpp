// Depth- and size-limited JSON parsing; see json_parse.hpp. One SAX pass
// checks syntax and depth without building anything, so a hostile document
// is refused before any value exists; only then is the value built.
#include "base/json_parse.hpp"

#include "base/error.hpp"

#include <iterator>

namespace sao::base {
namespace {

// A pointer into the text that counts the bytes the parser has consumed.
// nlohmann's SAX events carry no position, and a depth error should say
// where it happened; the lexer reads through this iterator one byte at a
// time, so when start_array fires the count ends at the '[' just read.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* position, std::size_t* consumed) : position_(position), consumed_(consumed) {}
  reference operator*() const { return *position_; }
  CountingIterator& operator++() {
    ++position_;
    ++*consumed_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& other) const { return position_ == other.position_; }
  bool operator!=(const CountingIterator& other) const { return position_ != other.position_; }

 private:
  const char* position_;
  std::size_t* consumed_;
};

// Accepts every value and refuses to open container number max_depth + 1.
// Byte positions are 1-based counts of bytes read, as in nlohmann's own
// parse errors, so both kinds of error point the same way.
class DepthCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  DepthCheck(std::size_t max_depth, const std::size_t* consumed) : max_depth_(max_depth), consumed_(consumed) {}

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool key(string_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::json::exception& error) override {
    problem_ = "not valid JSON at byte " + std::to_string(position) + ": " + error.what();
    return false;
  }

  const std::string& problem() const { return problem_; }

 private:
  bool enter() {
    if (++depth_ <= max_depth_) return true;
    problem_ =
        "JSON nested deeper than " + std::to_string(max_depth_) + " levels at byte " + std::to_string(*consumed_);
    return false;
  }
  bool leave() {
    --depth_;
    return true;
  }

  std::size_t max_depth_;
  const std::size_t* consumed_;
  std::size_t depth_ = 0;
  std::string problem_;
};

}  // namespace

nlohmann::json parse_json_limited(std::string_view text, const std::string& where, std::size_t max_depth,
                                  std::size_t max_bytes) {
  if (text.size() > max_bytes)
    throw Error(where + ": JSON text is " + std::to_string(text.size()) + " bytes, over the limit of " +
                std::to_string(max_bytes));
  std::size_t consumed = 0;
  DepthCheck check(max_depth, &consumed);
  const char* begin = text.data();
  const bool accepted = nlohmann::json::sax_parse(CountingIterator(begin, &consumed),
                                                  CountingIterator(begin + text.size(), &consumed), &check);
  if (!accepted) throw Error(where + ": " + check.problem());
  try {
    return nlohmann::json::parse(begin, begin + text.size());
  } catch (const nlohmann::json::exception& error) {
    // Unreachable when both passes agree on the grammar; kept so a library
    // difference still surfaces as a sao::Error naming the source.
    throw Error(where + ": not valid JSON: " + error.what());
  }
}

std::string dump_json(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sao::base
