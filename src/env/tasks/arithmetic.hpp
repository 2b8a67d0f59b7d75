// The first RL task: integer arithmetic ("12+34=" -> "46"). Why this task:
// answers are exactly checkable, difficulty is a dial (digit counts, operators),
// and a byte-level model can learn it in minutes, so it exercises the whole
// async RL loop end to end. The train/test split is a fixed hash of the problem
// itself rather than of a seed, so no seed, run or restart can ever leak a
// held-out problem into training.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace sao::env {

struct ArithmeticConfig {
  int min_digits = 1;
  int max_digits = 2;
  std::string operators = "+-";
  double test_fraction = 0.1;
  int test_size = 400;
  // "plain": the answer as written ("132"); "reversed": sign first, then the
  // digits least significant first ("231", "-7" stays "-7", "-12" -> "-21").
  // Reversed answers let a tiny transformer compute carries in the order it
  // writes, so it learns the rule instead of memorising problems.
  std::string answer_format = "plain";
  // The warm-start teacher's slip rate: the probability that a demonstration
  // (SFT) writes the answer of a pupil who forgets every carry and borrow
  // ("19+23=" -> "32", "42-17=" -> "35") where that differs from the right
  // one. Rewards always check the right answer, so RL has a systematic error
  // to undo that more demonstrations would only reinforce. Applies to + and -.
  double demonstration_slip_rate = 0.0;
  // The probability that a demonstration shows its work: "w", the answer's
  // digits least significant first, '>' and then the answer ("19+23=" ->
  // "w24>42", "3-15=" -> "w-21>-12"). Only with answer_format "plain". The
  // verifier grades a worked answer by what follows its last '>', so a
  // policy may answer directly or work first. Once learnt, the worked form is
  // far more accurate for a tiny transformer (it writes the carries in the
  // order it computes them), and a teacher who shows it only some of the
  // time leaves RL a choice that reward alone teaches (docs/decisions.md,
  // "A teacher who shows its work half the time"; config/sao_worked.json).
  double demonstration_worked_rate = 0.0;

  // Throws sao::Error naming the offending key ("task.max_digits ...").
  // Also checks that at least test_size held-out problems exist, which may
  // enumerate part of the problem space (bounded; cheap for sane configs).
  void validate() const;
};

struct ArithmeticProblem {
  int64_t a = 0;
  char op = '+';
  int64_t b = 0;

  std::string prompt() const;  // "12+34="
  std::string answer() const;  // canonical decimal: "46", "-7"
  int64_t result() const;      // throws sao::Error on an unknown op or overflow

  bool operator==(const ArithmeticProblem& other) const { return a == other.a && op == other.op && b == other.b; }
  bool operator!=(const ArithmeticProblem& other) const { return !(*this == other); }
  bool operator<(const ArithmeticProblem& other) const;
};

// Prints the prompt form ("12+34="), so failing test assertions and logs show
// the problem readably.
std::ostream& operator<<(std::ostream& out, const ArithmeticProblem& problem);

enum class Split { kTrain, kTest };

// Deterministic across platforms and seeds: a fixed 64-bit mix of (a, op, b)
// mapped to [0, 1) and compared with test_fraction.
Split split_of(const ArithmeticProblem& problem, double test_fraction);

class ArithmeticTask {
 public:
  explicit ArithmeticTask(ArithmeticConfig config);  // validates, builds test_set

  // Operand digit counts uniform in [min_digits, max_digits] (each operand
  // independently), operand uniform among numbers with that many digits (no
  // leading zeros; 0 counts as 1-digit), operator uniform from operators.
  // Rejection-samples until the problem is in the train split.
  ArithmeticProblem sample_train(std::mt19937_64& rng) const;

  // test_size distinct held-out problems, all Split::kTest, identical on every
  // run and platform (fixed internal seed, portable sampling).
  const std::vector<ArithmeticProblem>& test_set() const { return test_set_; }

  // Exact match after trimming ASCII whitespace on both ends. model_output is
  // the text generated after the prompt, already cut at EOS, specials removed.
  // `answer_format` is "plain" or "reversed" (see ArithmeticConfig). A worked
  // output (it starts with 'w' and holds a '>') is graded by the text after
  // its last '>'.
  static bool verify(const ArithmeticProblem& problem, std::string_view model_output,
                     const std::string& answer_format = "plain");
  // The answer text the model should write, in the given format.
  static std::string target_text(const ArithmeticProblem& problem, const std::string& answer_format = "plain");

  // The result without carries or borrows: each digit of a + b is the digits'
  // sum mod 10, each digit of a - b the larger digit less the smaller
  // (negated when b > a). Equals result() for '*' and when nothing carries.
  static int64_t carry_forgotten_result(const ArithmeticProblem& problem);
  // The worked form of an answer value: "w" + its digits least significant
  // first + ">" + the value ("w24>42").
  static std::string worked_text(int64_t value);
  // Whether an output is in the worked form (starts with 'w' after trimming).
  static bool is_worked(std::string_view model_output);
  // The text a verifier compares: the trimmed output, or for a worked one
  // that holds a '>' the trimmed text after its last '>'.
  static std::string_view graded_answer(std::string_view model_output);
  // A warm-start demonstration's answer text: target_text(), or with
  // probability demonstration_slip_rate the carry-forgotten answer; then,
  // with probability demonstration_worked_rate, its worked form.
  std::string demonstration_text(const ArithmeticProblem& problem, std::mt19937_64& rng) const;

  // Full SFT text for the warm start: prompt() + answer(). The caller adds
  // BOS/EOS tokens.
  static std::string sft_text(const ArithmeticProblem& problem, const std::string& answer_format = "plain");

  const ArithmeticConfig& config() const { return config_; }

 private:
  ArithmeticProblem sample_any(std::mt19937_64& rng) const;
  std::vector<ArithmeticProblem> build_test_set() const;

  ArithmeticConfig config_;
  std::vector<ArithmeticProblem> test_set_;
};

}  // namespace sao::env
