// The dataset task; see dataset_env.hpp.
#include "env/tasks/dataset_env.hpp"
#include "env/env_config.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "env/tasks/data_file.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <unordered_map>

namespace sao::env {

namespace {

const nlohmann::json& answer_of(const nlohmann::json& object, const std::string& where) {
  const auto it = object.find("answer");
  if (it == object.end()) throw Error(where + ": missing \"answer\"");
  return *it;
}

DatasetTurn make_turn(std::string prompt, const nlohmann::json& answer, std::string response, const Verifier& verifier,
                      const std::string& where) {
  DatasetTurn turn;
  turn.prompt = std::move(prompt);
  turn.answer = verifier.prepare(answer, where);
  turn.response = response.empty() ? verifier.demonstration_text(turn.answer) : std::move(response);
  return turn;
}

DatasetProblem parse_problem(const DataLine& line, const Verifier& verifier) {
  const auto& value = line.value;
  DatasetProblem problem;
  problem.where = line.where;
  const int formats = int(value.contains("prompt")) + int(value.contains("messages")) + int(value.contains("turns"));
  if (formats != 1) {
    throw Error(line.where + ": needs exactly one of \"prompt\", \"messages\" or \"turns\"" +
                (formats > 1 ? " (it has several)" : ""));
  }
  if (value.contains("prompt")) {
    problem.turns.push_back(make_turn(required_string(value, "prompt", line.where), answer_of(value, line.where),
                                      optional_string(value, "response", line.where), verifier, line.where));
  } else if (value.contains("messages")) {
    const auto turns = chat_turns_of(value["messages"], /*ends_with_reply=*/false, line.where);
    for (size_t t = 0; t < turns.size(); ++t) {
      const std::string at = line.where + ": turn " + std::to_string(t + 1);
      const bool last = t + 1 == turns.size();
      // An earlier turn's reference answer is the assistant message after it.
      problem.turns.push_back(
          make_turn(turns[t].prompt, last ? answer_of(value, line.where) : nlohmann::json(turns[t].reply),
                    last ? optional_string(value, "response", line.where) : turns[t].reply, verifier, at));
      problem.turns.back().role = turns[t].role;
    }
  } else {
    const auto& turns = value["turns"];
    if (!turns.is_array() || turns.empty()) throw Error(line.where + ": \"turns\" must be a non-empty list");
    for (size_t t = 0; t < turns.size(); ++t) {
      const std::string at = line.where + ": turns[" + std::to_string(t) + "]";
      if (!turns[t].is_object()) throw Error(at + ": must be an object {\"prompt\", \"answer\"}");
      problem.turns.push_back(make_turn(required_string(turns[t], "prompt", at), answer_of(turns[t], at),
                                        optional_string(turns[t], "response", at), verifier, at));
    }
  }
  std::string content;
  for (const auto& turn : problem.turns) {
    content += turn.prompt;
    content += '\x1f';
    content += base::dump_json(turn.answer.answer);
    content += '\x1e';
  }
  problem.content_hash = hash_text(content);
  return problem;
}

std::vector<std::string> paths_of(base::JsonReader& reader, const nlohmann::json& config, const char* key) {
  std::vector<std::string> paths;
  reader.mark_known(key);
  if (!config.contains(key)) return paths;
  if (config[key].is_string()) {
    std::string one;
    reader.read(key, one);
    paths.push_back(one);
  } else {
    reader.read(key, paths);
  }
  for (const auto& path : paths) {
    if (path.empty()) throw Error(reader.where() + "." + key + ": a path is empty");
  }
  return paths;
}

std::string episode_key(const DatasetProblem& problem) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(problem.content_hash));
  return std::string("dataset:") + hex;
}

}  // namespace

DatasetConfig dataset_config_from_json(const nlohmann::json& config, const std::string& where) {
  DatasetConfig result;
  result.where = where;
  base::JsonReader reader(config, where);
  read_env_name(reader, DatasetEnvironment::kName, where);
  result.train = paths_of(reader, config, "train");
  result.heldout = paths_of(reader, config, "heldout");
  const bool fraction_given = config.contains("heldout_fraction");
  reader.read("heldout_fraction", result.heldout_fraction, base::RealRange{0.0, 1.0, false, true});
  // A string or an object: make_verifier checks its shape and names the parts.
  reader.read("verifier", result.verifier);
  reader.reject_unknown_keys();
  if (result.train.empty()) throw Error(where + ".train: missing (a JSON-lines file, or a list of them)");
  if (!result.heldout.empty()) {
    if (fraction_given && result.heldout_fraction > 0.0) {
      throw Error(where + ": set heldout files or heldout_fraction, not both");
    }
    result.heldout_fraction = 0.0;
  }
  make_verifier(result.verifier, where + ".verifier");  // checks the section now, not at the first episode
  return result;
}

std::shared_ptr<const DatasetSplit> load_dataset(const DatasetConfig& config, const Verifier& verifier) {
  auto split = std::make_shared<DatasetSplit>();
  std::unordered_map<uint64_t, std::string> heldout_where;
  for (const auto& path : config.heldout) {
    for (const auto& line : read_jsonl_file(path, config.where + ".heldout")) {
      auto problem = parse_problem(line, verifier);
      heldout_where.emplace(problem.content_hash, problem.where);
      split->heldout.push_back(std::move(problem));
    }
  }
  for (const auto& path : config.train) {
    for (const auto& line : read_jsonl_file(path, config.where + ".train")) {
      auto problem = parse_problem(line, verifier);
      if (const auto it = heldout_where.find(problem.content_hash); it != heldout_where.end()) {
        throw Error(problem.where + ": the same problem as held-out " + it->second +
                    " (a held-out problem must never be trained on; remove one of them)");
      }
      const bool held_out = config.heldout_fraction > 0.0 &&
                            base::hash_unit(base::splitmix64(problem.content_hash)) < config.heldout_fraction;
      (held_out ? split->heldout : split->train).push_back(std::move(problem));
    }
  }
  if (split->train.empty()) {
    throw Error(config.train.front() + ": no training problems (every line went to the held-out split)");
  }
  for (const auto* part : {&split->train, &split->heldout}) {
    for (const auto& problem : *part) {
      split->max_turns = std::max<int64_t>(split->max_turns, static_cast<int64_t>(problem.turns.size()));
      for (const auto& turn : problem.turns) {
        split->max_prompt_bytes = std::max<int64_t>(split->max_prompt_bytes, static_cast<int64_t>(turn.prompt.size()));
      }
    }
  }
  return split;
}

DatasetEnvironment::DatasetEnvironment(std::shared_ptr<const DatasetSplit> data, std::shared_ptr<Verifier> verifier)
    : data_(std::move(data)), verifier_(std::move(verifier)) {
  for (size_t i = 0; i < data_->train.size(); ++i) {
    const auto& turns = data_->train[i].turns;
    const bool complete =
        std::all_of(turns.begin(), turns.end(), [](const DatasetTurn& turn) { return !turn.response.empty(); });
    if (complete) demonstrable_.push_back(i);
  }
}

EnvStep DatasetEnvironment::begin(const DatasetProblem& problem) {
  problem_ = &problem;
  turn_ = 0;
  correct_turns_ = 0;
  first_wrong_reason_.clear();
  EnvStep result;
  result.observation = problem.turns.front().prompt;
  result.info = {{"episode_key", episode_key(problem)}, {"item", problem.where}};
  return result;
}

EnvStep DatasetEnvironment::reset(uint64_t seed) {
  const auto index = base::splitmix64(seed ^ 0x6a09e667f3bcc909ULL) % data_->train.size();
  return begin(data_->train[index]);
}

EnvStep DatasetEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("dataset env: held-out index " + std::to_string(index) + " outside [0, " +
                std::to_string(heldout_size()) + ")");
  }
  return begin(data_->heldout[static_cast<size_t>(index)]);
}

EnvStep DatasetEnvironment::step(const std::string& action) {
  if (problem_ == nullptr) throw Error("dataset env: step() called before reset() or after the episode ended");
  const auto& problem = *problem_;
  const auto& turn = problem.turns[turn_];
  Verdict verdict;
  try {
    verdict = verifier_->verify(turn.prompt, action, turn.answer);
  } catch (...) {
    problem_ = nullptr;  // a verifier that failed ends the episode (the runtime counts it lost)
    throw;
  }
  if (verdict.correct) {
    ++correct_turns_;
  } else if (first_wrong_reason_.empty()) {
    first_wrong_reason_ = verdict.reason;
  }
  EnvStep result;
  result.reward = verdict.reward;
  ++turn_;
  const auto turns = static_cast<int64_t>(problem.turns.size());
  if (turn_ < problem.turns.size()) {
    result.observation = problem.turns[turn_].prompt;
    result.info = {{"correct", verdict.correct}, {"reason", verdict.reason}};
    if (problem.turns[turn_].role != "user") result.info["role"] = problem.turns[turn_].role;
    return result;
  }
  result.terminated = true;
  const bool all_correct = correct_turns_ == turns;
  result.info = {{"accuracy", static_cast<double>(correct_turns_) / static_cast<double>(turns)},
                 {"success", all_correct},
                 {"reason", all_correct ? verdict.reason : first_wrong_reason_},
                 {"item", problem.where}};
  problem_ = nullptr;
  return result;
}

EnvLimits DatasetEnvironment::limits() const {
  EnvLimits limits;
  limits.max_turns = data_->max_turns;
  limits.max_observation_bytes = data_->max_prompt_bytes;
  return limits;
}

std::vector<SftEpisode> DatasetEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::vector<SftEpisode> episodes;
  if (demonstrable_.empty()) return episodes;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, demonstrable_.size() - 1);
  for (int64_t i = 0; i < count; ++i) {
    const auto& problem = data_->train[demonstrable_[pick(rng)]];
    SftEpisode episode;
    episode.prompt = problem.turns.front().prompt;
    for (size_t t = 0; t < problem.turns.size(); ++t) {
      SftTurn turn;
      turn.action = problem.turns[t].response;
      if (t + 1 < problem.turns.size()) {
        turn.observation = problem.turns[t + 1].prompt;
        turn.observation_role = problem.turns[t + 1].role;
      }
      episode.turns.push_back(std::move(turn));
    }
    episodes.push_back(std::move(episode));
  }
  return episodes;
}

namespace {
struct SharedDataset {
  std::shared_ptr<const DatasetSplit> split;
  std::shared_ptr<Verifier> verifier;
};

// The files' identities: a changed file is read again.
std::string file_stamps(const DatasetConfig& config) {
  std::string stamps;
  for (const auto* paths : {&config.train, &config.heldout}) {
    for (const auto& path : *paths) {
      struct stat info {};
      if (::stat(path.c_str(), &info) == 0) {
        stamps += path + "@" + std::to_string(info.st_size) + ":" + std::to_string(info.st_mtim.tv_sec) + "." +
                  std::to_string(info.st_mtim.tv_nsec) + ";";
      }
    }
  }
  return stamps;
}
}  // namespace

std::unique_ptr<Environment> make_dataset_environment(const nlohmann::json& config, const std::string& where) {
  const auto parsed = dataset_config_from_json(config, where);
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const DatasetSplit>> splits;
  static std::map<std::string, std::weak_ptr<Verifier>> verifiers;
  const std::string verifier_key = base::dump_json(parsed.verifier);
  const std::string split_key = base::dump_json(config) + "|" + file_stamps(parsed);
  std::lock_guard<std::mutex> lock(mutex);
  auto verifier = verifiers[verifier_key].lock();
  if (!verifier) {
    verifier = make_verifier(parsed.verifier, where + ".verifier");
    verifiers[verifier_key] = verifier;
  }
  // The latest data set stays loaded even when no environment holds it: a run
  // builds one environment to check its config and then the real ones, and
  // would otherwise read and parse every file twice.
  static std::shared_ptr<const DatasetSplit> latest;
  auto split = splits[split_key].lock();
  if (!split) {
    split = load_dataset(parsed, *verifier);
    splits[split_key] = split;
  }
  latest = split;
  return std::make_unique<DatasetEnvironment>(std::move(split), std::move(verifier));
}

}  // namespace sao::env
