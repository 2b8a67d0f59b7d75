// Verifiers for the dataset task; see verifier.hpp.
#include "env/verifier.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "base/utf8.hpp"
#include "env/environment.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace sao::env {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The end of the number starting at `begin` (a sign, a digit or a '.'), or
// `begin` when none starts there. `digits` receives it without commas.
size_t scan_number(const std::string& text, size_t begin, std::string& digits) {
  digits.clear();
  size_t i = begin;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
    digits += text[i];
    ++i;
  }
  const size_t integer_begin = i;
  while (i < text.size() && is_digit(text[i])) digits += text[i++];
  const size_t integer_digits = i - integer_begin;
  // Thousands separators: after a leading group of 1-3 digits, commas each
  // followed by exactly three digits ("1,234,567"; "1,2" is two numbers).
  if (integer_digits >= 1 && integer_digits <= 3) {
    while (i + 3 < text.size() && text[i] == ',' && is_digit(text[i + 1]) && is_digit(text[i + 2]) &&
           is_digit(text[i + 3]) && (i + 4 >= text.size() || !is_digit(text[i + 4]))) {
      digits.append(text, i + 1, 3);
      i += 4;
    }
  }
  size_t fraction_digits = 0;
  if (i + 1 < text.size() && text[i] == '.' && is_digit(text[i + 1])) {
    digits += '.';
    ++i;
    while (i < text.size() && is_digit(text[i])) {
      digits += text[i++];
      ++fraction_digits;
    }
  }
  if (integer_digits == 0 && fraction_digits == 0) return begin;
  if (i + 1 < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '-' || text[j] == '+')) ++j;
    if (j < text.size() && is_digit(text[j])) {
      digits.append(text, i, j - i);
      while (j < text.size() && is_digit(text[j])) digits += text[j++];
      i = j;
    }
  }
  return i;
}

double to_double(const std::string& digits) {
  return std::strtod(digits.c_str(), nullptr);  // scan_number wrote only what strtod reads in full
}

std::string number_text(double value) {
  std::ostringstream out;
  out.precision(15);
  out << value;
  return out.str();
}

// The answer, or each element of a list of accepted answers.
std::vector<nlohmann::json> accepted_answers(const nlohmann::json& answer, const std::string& where) {
  if (!answer.is_array()) return {answer};
  if (answer.empty()) throw Error(where + ": \"answer\" is an empty list (no response could be correct)");
  return std::vector<nlohmann::json>(answer.begin(), answer.end());
}

std::string collapse_whitespace(const std::string& text) {
  std::string out;
  bool space = false;
  for (const char c : text) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::string lower_ascii(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

class ExactVerifier final : public Verifier {
 public:
  ExactVerifier(bool case_sensitive, bool collapse) : case_sensitive_(case_sensitive), collapse_(collapse) {}
  std::string type() const override { return "exact"; }

  PreparedAnswer prepare(const nlohmann::json& answer, const std::string& where) const override {
    PreparedAnswer prepared;
    prepared.answer = answer;
    for (const auto& accepted : accepted_answers(answer, where)) {
      if (accepted.is_string()) {
        prepared.texts.push_back(accepted.get<std::string>());
      } else if (accepted.is_number()) {
        prepared.texts.push_back(base::dump_json(accepted));  // 42 is accepted as "42"
      } else {
        throw Error(where + ": \"answer\" must be a string, a number or a list of them for the exact verifier, got " +
                    std::string(accepted.type_name()));
      }
    }
    return prepared;
  }

  Verdict verify(const std::string&, const std::string& response, const PreparedAnswer& answer) override {
    const std::string given = normalise(response);
    for (const auto& text : answer.texts) {
      if (normalise(text) == given) return {1.0, true, "exact match"};
    }
    return {0.0, false,
            "expected " + base::quoted_excerpt(answer.texts.front(), 80) + ", got " +
                base::quoted_excerpt(trim_ascii(response), 80)};
  }

  std::string demonstration_text(const PreparedAnswer& answer) const override { return answer.texts.front(); }

 private:
  std::string normalise(const std::string& text) const {
    std::string out = trim_ascii(text);
    if (collapse_) out = collapse_whitespace(out);
    if (!case_sensitive_) out = lower_ascii(out);
    return out;
  }
  bool case_sensitive_;
  bool collapse_;
};

class NumericVerifier final : public Verifier {
 public:
  NumericVerifier(bool last_number, double tolerance, double relative_tolerance)
      : last_number_(last_number), tolerance_(tolerance), relative_tolerance_(relative_tolerance) {}
  std::string type() const override { return last_number_ ? "last_number" : "numeric"; }

  PreparedAnswer prepare(const nlohmann::json& answer, const std::string& where) const override {
    PreparedAnswer prepared;
    prepared.answer = answer;
    for (const auto& accepted : accepted_answers(answer, where)) {
      double value = 0.0;
      if (accepted.is_number()) {
        value = accepted.get<double>();
      } else if (!accepted.is_string() || !parse_number_text(accepted.get<std::string>(), value)) {
        throw Error(where + ": \"answer\" " + base::quoted_excerpt(base::dump_json(accepted), 80) +
                    " is not a number (the " + type() + " verifier needs one)");
      }
      if (!std::isfinite(value)) throw Error(where + ": \"answer\" is not finite");
      prepared.numbers.push_back(value);
      prepared.texts.push_back(accepted.is_string() ? trim_ascii(accepted.get<std::string>()) : number_text(value));
    }
    return prepared;
  }

  Verdict verify(const std::string&, const std::string& response, const PreparedAnswer& answer) override {
    double value = 0.0;
    std::string written;
    const bool found = last_number_ ? last_number_in(response, value, &written) : parse_number_text(response, value);
    if (!found) {
      return {0.0, false,
              last_number_ ? "no number in the response"
                           : "the response " + base::quoted_excerpt(trim_ascii(response), 80) + " is not a number"};
    }
    if (!last_number_) written = trim_ascii(response);
    for (const double expected : answer.numbers) {
      if (std::fabs(value - expected) <= tolerance_ + relative_tolerance_ * std::fabs(expected)) {
        return {1.0, true, "number matches (" + written + ")"};
      }
    }
    return {0.0, false, "expected " + answer.texts.front() + ", got " + written};
  }

  std::string demonstration_text(const PreparedAnswer& answer) const override { return answer.texts.front(); }

 private:
  bool last_number_;
  double tolerance_;
  double relative_tolerance_;
};

class RegexVerifier final : public Verifier {
 public:
  std::string type() const override { return "regex"; }

  PreparedAnswer prepare(const nlohmann::json& answer, const std::string& where) const override {
    PreparedAnswer prepared;
    prepared.answer = answer;
    for (const auto& accepted : accepted_answers(answer, where)) {
      if (!accepted.is_string()) {
        throw Error(where + ": \"answer\" must be a pattern string (or a list of them) for the regex verifier, got " +
                    std::string(accepted.type_name()));
      }
      prepared.texts.push_back(accepted.get<std::string>());
      prepared.patterns.push_back(std::make_shared<const base::UnicodeRegex>(
          accepted.get<std::string>(), where + ": \"answer\" pattern", base::RegexSyntax::kPcre2));
    }
    return prepared;
  }

  Verdict verify(const std::string&, const std::string& response, const PreparedAnswer& answer) override {
    const std::string given = trim_ascii(base::replace_invalid_utf8(response));
    for (size_t i = 0; i < answer.patterns.size(); ++i) {
      if (answer.patterns[i]->matches_whole(given)) return {1.0, true, "matches /" + answer.texts[i] + "/"};
    }
    return {
        0.0, false,
        base::quoted_excerpt(given, 80) + " does not match /" + base::truncate_utf8(answer.texts.front(), 80) + "/"};
  }

  std::string demonstration_text(const PreparedAnswer&) const override { return ""; }
};

// Protocol (docs/environments.md):
//   -> {"id":1,"method":"verify","prompt":"...","response":"...","answer":<as in the file>}
//   <- {"id":1,"reward":1.0,"correct":true,"reason":"..."}        ("reason" optional)
class CommandVerifier final : public Verifier {
 public:
  CommandVerifier(JsonLineChannelConfig config, const std::string& label)
      : channel_(std::move(config), "verifier '" + label + "'", "verifier") {}
  std::string type() const override { return "command"; }

  PreparedAnswer prepare(const nlohmann::json& answer, const std::string&) const override {
    PreparedAnswer prepared;
    prepared.answer = answer;
    return prepared;
  }

  Verdict verify(const std::string& prompt, const std::string& response, const PreparedAnswer& answer) override {
    std::lock_guard<std::mutex> lock(mutex_);  // one process answers one request at a time
    channel_.ensure_connected();
    const auto reply = channel_.call({{"method", "verify"},
                                      {"prompt", prompt},
                                      {"response", base::replace_invalid_utf8(response)},
                                      {"answer", answer.answer}});
    const std::string what = channel_.last_call();
    if (!reply.contains("reward") || !reply["reward"].is_number()) {
      channel_.fail(what, "reply needs \"reward\" (a number): " + base::quoted_excerpt(base::dump_json(reply), 80),
                    true);
    }
    if (!reply.contains("correct") || !reply["correct"].is_boolean()) {
      channel_.fail(
          what, "reply needs \"correct\" (true or false): " + base::quoted_excerpt(base::dump_json(reply), 80), true);
    }
    if (reply.contains("reason") && !reply["reason"].is_string()) {
      channel_.fail(what, "\"reason\" must be a string", true);
    }
    Verdict verdict;
    verdict.reward = reply["reward"].get<double>();
    if (!std::isfinite(verdict.reward)) channel_.fail(what, "\"reward\" is not finite", true);
    verdict.correct = reply["correct"].get<bool>();
    verdict.reason = reply.value("reason", std::string(verdict.correct ? "correct" : "wrong"));
    return verdict;
  }

  std::string demonstration_text(const PreparedAnswer& answer) const override {
    return answer.answer.is_string() ? answer.answer.get<std::string>() : "";
  }

 private:
  std::mutex mutex_;
  JsonLineChannel channel_;
};

}  // namespace

bool parse_number_text(const std::string& text, double& value) {
  const std::string trimmed = trim_ascii(text);
  if (trimmed.empty()) return false;
  std::string digits;
  if (scan_number(trimmed, 0, digits) != trimmed.size()) return false;
  value = to_double(digits);
  return true;
}

bool last_number_in(const std::string& text, double& value, std::string* written) {
  bool found = false;
  std::string digits;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    // A sign counts only where it cannot be a minus between two terms ("3-4").
    const bool sign_here = (c == '-' || c == '+') && i + 1 < text.size() &&
                           (is_digit(text[i + 1]) || text[i + 1] == '.') &&
                           (i == 0 || std::isalnum(static_cast<unsigned char>(text[i - 1])) == 0);
    if (is_digit(c) || sign_here || (c == '.' && i + 1 < text.size() && is_digit(text[i + 1]))) {
      const size_t end = scan_number(text, i, digits);
      if (end > i) {
        found = true;
        value = to_double(digits);
        if (written != nullptr) *written = text.substr(i, end - i);
        i = end;
        continue;
      }
    }
    ++i;
  }
  return found;
}

std::unique_ptr<Verifier> make_verifier(const nlohmann::json& config, const std::string& where) {
  const nlohmann::json section = config.is_string() ? nlohmann::json{{"type", config}} : config;
  if (!section.is_object()) {
    throw Error(where + ": must be a verifier type (\"exact\", ...) or an object {\"type\": ...}, got " +
                std::string(config.type_name()));
  }
  base::JsonReader reader(section, where);
  std::string type;
  reader.read("type", type);
  const std::string known = "exact, numeric, last_number, regex, command";
  if (type.empty()) throw Error(where + ".type: missing (one of " + known + ")");
  if (type == "exact") {
    bool case_sensitive = true;
    bool collapse = false;
    reader.read("case_sensitive", case_sensitive);
    reader.read("collapse_whitespace", collapse);
    reader.reject_unknown_keys();
    return std::make_unique<ExactVerifier>(case_sensitive, collapse);
  }
  if (type == "numeric" || type == "last_number") {
    double tolerance = 1e-6;
    double relative_tolerance = 0.0;
    reader.read("tolerance", tolerance, base::RealRange{0.0, 1e9});
    reader.read("relative_tolerance", relative_tolerance, base::RealRange{0.0, 1e6});
    reader.reject_unknown_keys();
    return std::make_unique<NumericVerifier>(type == "last_number", tolerance, relative_tolerance);
  }
  if (type == "regex") {
    reader.reject_unknown_keys();
    return std::make_unique<RegexVerifier>();
  }
  if (type == "command") {
    JsonLineChannelConfig channel;
    std::string label;
    read_channel_config(reader, channel);
    reader.read("label", label);
    reader.reject_unknown_keys();
    validate_channel_config(channel, where);
    if (label.empty()) label = default_channel_label(channel);
    return std::make_unique<CommandVerifier>(std::move(channel), label);
  }
  throw Error(where + ".type: unknown verifier '" + type + "' (one of " + known + ")");
}

}  // namespace sao::env
