// The drifting arithmetic environment and the recovery metric; see drift_env.hpp.
#include "env/tasks/drift_env.hpp"
#include "env/env_config.hpp"

#include "env/tasks/arithmetic_env.hpp"

#include "base/error.hpp"
#include "base/json_reader.hpp"

#include <algorithm>
#include <random>

namespace sao::env {

DriftRegime DriftRegime::parse(const std::string& text, const std::string& where) {
  DriftRegime regime;
  regime.name = text;
  const auto at = text.rfind('@');
  const std::string style = text.substr(0, at);
  if (at != std::string::npos) {
    regime.operators = text.substr(at + 1);
    if (regime.operators.empty()) throw Error(where + ": regime \"" + text + "\" names no operators after '@'");
    for (char op : regime.operators) {
      if (op != '+' && op != '-' && op != '*') {
        throw Error(where + ": regime \"" + text + "\" has unknown operator '" + std::string(1, op) +
                    "' after '@' (expected +, - or *)");
      }
    }
  }
  const auto plus = style.find('+');
  regime.answer_format = style.substr(0, plus);
  if (plus != std::string::npos) {
    regime.suffix = style.substr(plus + 1);
    if (regime.suffix.empty()) throw Error(where + ": regime \"" + text + "\" has an empty suffix after '+'");
  }
  if (regime.answer_format != "plain" && regime.answer_format != "reversed") {
    throw Error(where + ": unknown regime \"" + text +
                "\" (expected plain or reversed, optionally +SUFFIX and @OPERATORS)");
  }
  return regime;
}

std::string DriftRegime::target(const ArithmeticProblem& problem) const {
  return ArithmeticTask::target_text(problem, answer_format) + suffix;
}

bool DriftRegime::accepts(const ArithmeticProblem& problem, const std::string& action) const {
  // Graded as the arithmetic verifier grades: a worked answer ("w24>42") by
  // the text after its last '>', so a policy warm-started to show its work
  // (task.demonstration_worked_rate) is judged on its answer in every regime.
  return ArithmeticTask::graded_answer(action) == target(problem);
}

std::string DriftRegime::demonstration(const ArithmeticTask& task, const ArithmeticProblem& problem,
                                       std::mt19937_64& rng) const {
  // The teacher's knobs (slips, worked answers) are defined on plain answers;
  // a reversed regime's demonstrations are its exact target.
  if (answer_format != "plain") return target(problem);
  return task.demonstration_text(problem, rng) + suffix;
}

namespace {
// Everything about a DriftConfig that can be wrong without looking at the
// arithmetic keys; messages name keys under `where` ("cfg.task", or "drift"
// for a config built in code).
void validate_drift(const DriftConfig& config, const std::string& where) {
  if (config.switch_every < 1) throw Error(where + ".switch_every: must be >= 1");
  if (config.regimes.empty()) throw Error(where + ".regimes: must name at least one regime");
  if (config.demonstration_regimes != "current" && config.demonstration_regimes != "all") {
    throw Error(where + ".demonstration_regimes: expected \"current\" or \"all\", got \"" +
                config.demonstration_regimes + "\"");
  }
  for (size_t i = 0; i < config.regimes.size(); ++i) {
    const std::string regime_where = where + ".regimes[" + std::to_string(i) + "]";
    for (char op : DriftRegime::parse(config.regimes[i], regime_where).operators) {
      if (config.task.operators.find(op) == std::string::npos) {
        throw Error(regime_where + ": regime \"" + config.regimes[i] + "\" asks operator '" + std::string(1, op) +
                    "', which " + where + ".operators \"" + config.task.operators + "\" does not include");
      }
    }
  }
}
}  // namespace

DriftEnvironment::DriftEnvironment(DriftConfig config) : config_(std::move(config)), task_(config_.task) {
  validate_drift(config_, "drift");
  for (const auto& text : config_.regimes) {
    regimes_.push_back(DriftRegime::parse(text, "drift.regimes"));
    ArithmeticConfig regime_task = config_.task;
    if (!regimes_.back().operators.empty()) regime_task.operators = regimes_.back().operators;
    // A regime task only samples training problems; the held-out set is the
    // whole task's, which may be larger than one operator's share of it.
    regime_task.test_size = 1;
    regime_tasks_.emplace_back(regime_task);
  }
}

int64_t DriftEnvironment::regime_index_at(int64_t learner_step) const {
  const int64_t phase = std::max<int64_t>(0, learner_step) / config_.switch_every;
  return phase % static_cast<int64_t>(regimes_.size());
}

std::vector<int64_t> DriftEnvironment::switch_steps(int64_t total_steps) const {
  std::vector<int64_t> steps;
  if (regimes_.size() < 2) return steps;  // one regime never switches
  for (int64_t s = config_.switch_every; s < total_steps; s += config_.switch_every) steps.push_back(s);
  return steps;
}

void DriftEnvironment::on_training_step(int64_t learner_step) {
  learner_step_ = learner_step;
}

EnvStep DriftEnvironment::start(const ArithmeticProblem& problem) {
  problem_ = problem;
  episode_regime_ = regime_index();
  open_ = true;
  EnvStep result;
  result.observation = problem_.prompt();
  result.info = {{"episode_key", problem_.prompt()}, {"regime", regimes_[static_cast<size_t>(episode_regime_)].name}};
  return result;
}

EnvStep DriftEnvironment::reset(uint64_t seed) {
  std::mt19937_64 rng(seed);
  return start(regime_tasks_[static_cast<size_t>(regime_index())].sample_train(rng));
}

EnvStep DriftEnvironment::reset_heldout(int64_t index) {
  if (index < 0 || index >= heldout_size()) {
    throw Error("drift: held-out index " + std::to_string(index) + " outside [0, " + std::to_string(heldout_size()) +
                ")");
  }
  return start(task_.test_set()[static_cast<size_t>(index)]);
}

EnvStep DriftEnvironment::step(const std::string& action) {
  if (!open_) throw Error("drift: step() called before reset() or after the episode ended");
  open_ = false;
  const auto& regime = regimes_[static_cast<size_t>(episode_regime_)];
  const bool correct = regime.accepts(problem_, action);
  EnvStep result;
  result.reward = correct ? 1.0 : 0.0;
  result.terminated = true;
  result.info = {{"accuracy", correct ? 1.0 : 0.0},
                 {"counts", worked_answer_counts(action, correct)},
                 {"regime", regime.name},
                 {"regime_index", episode_regime_},
                 {"answer", regime.target(problem_)}};
  return result;
}

EnvLimits DriftEnvironment::limits() const {
  size_t suffix = 0;
  for (const auto& regime : regimes_) suffix = std::max(suffix, regime.suffix.size());
  return arithmetic_limits(config_.task.max_digits, static_cast<int64_t>(suffix));
}

std::vector<SftEpisode> DriftEnvironment::demonstrations(int64_t count, uint64_t seed) const {
  std::mt19937_64 rng(seed);
  std::vector<SftEpisode> episodes;
  for (int64_t i = 0; i < count; ++i) {
    auto demo_regime = static_cast<size_t>(regime_index());
    if (config_.demonstration_regimes == "all") {
      std::uniform_int_distribution<size_t> pick(0, regimes_.size() - 1);
      demo_regime = pick(rng);
    }
    const auto problem = regime_tasks_[demo_regime].sample_train(rng);
    const auto answer = regimes_[demo_regime].demonstration(regime_tasks_[demo_regime], problem, rng);
    episodes.push_back({problem.prompt(), {{answer, "", true}}, ""});
  }
  return episodes;
}

std::vector<Recovery> recovery_after_switches(const std::vector<double>& rewards,
                                              const std::vector<int64_t>& switch_steps, int64_t window,
                                              double tolerance) {
  if (window < 1) throw Error("recovery_after_switches: window must be >= 1, got " + std::to_string(window));
  const auto n = static_cast<int64_t>(rewards.size());
  for (size_t i = 0; i < switch_steps.size(); ++i) {
    const int64_t s = switch_steps[i];
    if (s < 1 || s >= n) {
      throw Error("recovery_after_switches: switch step " + std::to_string(s) + " outside [1, " + std::to_string(n) +
                  ") (the reward series has " + std::to_string(n) + " steps)");
    }
    if (i > 0 && s <= switch_steps[i - 1]) {
      throw Error("recovery_after_switches: switch steps must be strictly increasing (" +
                  std::to_string(switch_steps[i - 1]) + " then " + std::to_string(s) + ")");
    }
  }
  auto mean = [&](int64_t begin, int64_t end) {  // [begin, end)
    double sum = 0.0;
    for (int64_t t = begin; t < end; ++t) sum += rewards[static_cast<size_t>(t)];
    return sum / static_cast<double>(end - begin);
  };
  std::vector<Recovery> result;
  for (size_t i = 0; i < switch_steps.size(); ++i) {
    const int64_t s = switch_steps[i];
    const int64_t previous = i > 0 ? switch_steps[i - 1] : 0;
    const int64_t next = i + 1 < switch_steps.size() ? switch_steps[i + 1] : n;
    Recovery recovery;
    recovery.switch_step = s;
    recovery.pre_level = mean(std::max(s - window, previous), s);
    for (int64_t t = s + window - 1; t < next; ++t) {
      if (mean(t - window + 1, t + 1) >= recovery.pre_level - tolerance - 1e-12) {
        recovery.steps_to_recover = t - s + 1;
        break;
      }
    }
    result.push_back(recovery);
  }
  return result;
}

DriftConfig drift_config_from_json(const nlohmann::json& config, const std::string& where) {
  DriftConfig result;
  base::JsonReader reader(config, where);
  read_env_name(reader, DriftEnvironment::kName, where);
  reader.read("switch_every", result.switch_every, base::IntRange{1, 100000000});
  reader.read("regimes", result.regimes);
  reader.read("demonstration_regimes", result.demonstration_regimes);
  reader.read("min_digits", result.task.min_digits, base::IntRange{1, 9});
  reader.read("max_digits", result.task.max_digits, base::IntRange{1, 9});
  reader.read("operators", result.task.operators);
  reader.read("test_fraction", result.task.test_fraction, base::RealRange{0.0, 0.5, true, false});
  reader.read("test_size", result.task.test_size, base::IntRange{1, 1000000});
  reader.read("demonstration_slip_rate", result.task.demonstration_slip_rate, base::RealRange{0.0, 1.0});
  reader.read("demonstration_worked_rate", result.task.demonstration_worked_rate, base::RealRange{0.0, 1.0});
  reader.reject_unknown_keys();
  validate_drift(result, where);
  try {
    result.task.validate();
  } catch (const Error& error) {
    throw Error(where + ": " + error.what());
  }
  return result;
}

std::unique_ptr<Environment> make_drift_environment(const nlohmann::json& config, const std::string& where) {
  return std::make_unique<DriftEnvironment>(drift_config_from_json(config, where));
}

}  // namespace sao::env
