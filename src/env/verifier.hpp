// Verifiers: how the dataset task (dataset_env.hpp) scores a response
// against an item's reference answer. docs/environments.md lists them with
// their config keys; in short:
//   exact        the trimmed response equals the answer (case_sensitive,
//                collapse_whitespace)
//   numeric      the trimmed response is a number within tolerance of it
//   last_number  the last number written anywhere in the response is
//   regex        the answer is a PCRE2 pattern the whole trimmed response
//                must match
//   command      a program (or host:port) answers one JSON line per
//                verification, under the external env's supervision
// An answer may be a list of accepted answers for every verifier but
// command (which receives the answer as it is): any one of them scores.
#pragma once

#include "base/unicode_regex.hpp"
#include "env/remote/json_line_channel.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace sao::env {

struct Verdict {
  double reward = 0.0;  // 1 correct, 0 wrong for the built-in verifiers; the program's for command
  bool correct = false;
  std::string reason;  // one line for metrics and transcripts, e.g. "expected 42, got 41"
};

// An item's answer, checked and prepared once when the data set loads.
struct PreparedAnswer {
  nlohmann::json answer;                                            // as written in the file
  std::vector<std::string> texts;                                   // exact: accepted strings
  std::vector<double> numbers;                                      // numeric, last_number: accepted values
  std::vector<std::shared_ptr<const base::UnicodeRegex>> patterns;  // regex
};

class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual std::string type() const = 0;
  // Checks an answer from a data file and prepares it; throws sao::Error
  // naming `where` (file:line) when the verifier cannot use it.
  virtual PreparedAnswer prepare(const nlohmann::json& answer, const std::string& where) const = 0;
  // Scores a response (any bytes; invalid UTF-8 is replaced first).
  // `prompt` is the turn's prompt text, for command verifiers. Thread-safe:
  // one verifier serves every environment of a process.
  virtual Verdict verify(const std::string& prompt, const std::string& response, const PreparedAnswer& answer) = 0;
  // The text a demonstration should answer with, or "" when the answer is
  // not itself a response (a regex pattern, a command's answer object).
  virtual std::string demonstration_text(const PreparedAnswer& answer) const = 0;
};

// Builds a verifier from the dataset task's "verifier" section (a string is
// shorthand for {"type": ...}). Throws sao::Error naming `where` and the key.
std::unique_ptr<Verifier> make_verifier(const nlohmann::json& config, const std::string& where);

// Numbers as the numeric verifiers read them: an optional sign, digits with
// optional thousands commas ("1,234"), an optional fraction or exponent.
// parse_number_text needs all of `text` (ASCII whitespace trimmed) to be one
// number; last_number_in finds the last one anywhere. false: none.
bool parse_number_text(const std::string& text, double& value);
bool last_number_in(const std::string& text, double& value, std::string* written = nullptr);

}  // namespace sao::env
