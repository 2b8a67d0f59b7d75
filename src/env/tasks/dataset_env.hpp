// The dataset task: problems from JSON-lines files, scored by a verifier
// (verifier.hpp). The most common RL task - prompts with reference answers -
// without writing a program. docs/environments.md is the user's guide.
//
// A line (other keys are ignored; data_file.hpp has the transcript rules):
//   {"prompt": "...", "answer": A}                     one turn
//   {"prompt": "...", "answer": A, "response": "..."}  + a demonstration
//   {"messages": [..., {"role":"user",...}], "answer": A}
//       several turns: each user message is a turn's prompt, the assistant
//       message after it that turn's reference answer, and "answer" answers
//       the last user message
//   {"turns": [{"prompt": "...", "answer": A, "response"?: "..."}, ...]}
// A is what the verifier compares with: a string, a number, or a list of
// accepted answers (any one scores).
//
// An episode plays one problem: each turn's action is verified, the reward is
// the verdict's (1 / 0 for the built-in verifiers), and the next turn's prompt
// is the next observation. The final step is terminated with info
// {"accuracy": correct turns / turns, "success": every turn correct,
//  "reason": the verdict of the first wrong turn (or the last), "item": file:line}.
//
// Split: "heldout" files, or else a fraction of the "train" files chosen by a
// hash of each problem's content (prompts and answers), so the split is the
// same on every machine and for every order of lines. A held-out problem never
// appears in training: the same problem in both files is an error.
//
// Demonstrations (sao sft without sft.data): each training problem's
// "response" per turn, else its answer where the verifier's answer is a
// response (exact, numeric, last_number; not regex).
//
// Config keys: name ("dataset"), train (a path or a list of paths), heldout
// (path or list; default none), heldout_fraction (0.1 when heldout is unset;
// 0 disables), verifier ("exact" or {"type": ..., options}; default exact).
// Paths are relative to the working directory.
#pragma once

#include "env/environment.hpp"
#include "env/verifier.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sao::env {

struct DatasetTurn {
  std::string prompt;
  std::string role = "user";  // the prompt's chat role ("tool" from a "messages" line)
  PreparedAnswer answer;
  std::string response;  // demonstration text; "" when there is none
};

struct DatasetProblem {
  std::vector<DatasetTurn> turns;
  uint64_t content_hash = 0;  // over prompts and answers: the split and the episode key
  std::string where;          // "file:line"
};

struct DatasetConfig {
  std::vector<std::string> train;
  std::vector<std::string> heldout;
  double heldout_fraction = 0.1;
  nlohmann::json verifier = "exact";
  std::string where = "task";  // the section's origin: a file error names where.train / where.heldout
};

// The problems of one data set, read and split once; shared read-only by
// every environment object of a process.
struct DatasetSplit {
  std::vector<DatasetProblem> train;
  std::vector<DatasetProblem> heldout;
  int64_t max_turns = 0;
  int64_t max_prompt_bytes = 0;
};

DatasetConfig dataset_config_from_json(const nlohmann::json& config, const std::string& where);
// Reads and splits the files, preparing every answer with `verifier`.
// Throws sao::Error naming file:line for a bad line, and naming both lines
// when a held-out problem also occurs in a training file.
std::shared_ptr<const DatasetSplit> load_dataset(const DatasetConfig& config, const Verifier& verifier);

class DatasetEnvironment final : public Environment {
 public:
  // The verifier may be shared by every environment of the process (a command
  // verifier is one process, not one per concurrent episode).
  DatasetEnvironment(std::shared_ptr<const DatasetSplit> data, std::shared_ptr<Verifier> verifier);

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "dataset";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return static_cast<int64_t>(data_->heldout.size()); }
  EnvStep reset_heldout(int64_t index) override;
  EnvLimits limits() const override;
  std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const override;

  const DatasetSplit& data() const { return *data_; }

 private:
  EnvStep begin(const DatasetProblem& problem);

  std::shared_ptr<const DatasetSplit> data_;
  std::shared_ptr<Verifier> verifier_;
  std::vector<size_t> demonstrable_;         // training problems with a demonstration for every turn
  const DatasetProblem* problem_ = nullptr;  // the open episode's problem
  size_t turn_ = 0;
  int64_t correct_turns_ = 0;
  std::string first_wrong_reason_;
};

// Loads each data set once per process (keyed by the config and the files'
// sizes and modification times) and shares it, with its verifier, between the
// environments made from it while any of them lives.
std::unique_ptr<Environment> make_dataset_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
