// The environment interface: what an RL task looks like to the runtime.
// Deliberately small and text-based: an environment sees the policy's
// decoded action text and answers with the next observation text, a reward
// and whether the episode is over. Tokenizing is the rollout's job, so
// environments never depend on a vocabulary.
//
// How the runtime plays an episode (actors/run/rollout_actor.cpp, and
// train/episode_eval.cpp for held-out evaluation):
//   reset(seed) -> observation O0; the policy sees [BOS] + bytes(O0)
//   repeat: the policy generates until EOS (or rollout.max_new_tokens);
//           step(action text, EOS stripped) -> reward, terminated, truncated, O
//           if not done, bytes(O) are appended (an empty O becomes one
//           <|obs|> token) and the policy generates the next action.
// The whole episode is ONE token sequence, so it must fit the model's
// max_position_embeddings; limits() lets an environment state its sizes.
//
// Limits. Two turn limits apply: the environment's own (limits().max_turns;
// reaching it ends the episode with truncated = true, or terminated when
// running out of turns is part of the game's rules) and the runtime's
// rollout.max_turns (the rollout truncates after that many turns whatever the
// environment says). Set rollout.max_turns >= limits().max_turns.
//
// Rewards. Every step's reward is a per-turn reward: the runtime places it on
// that turn's last action token (algo::Turn::reward), so shaping rewards on
// intermediate turns and an outcome reward on the final turn both work.
// Report task success in info["accuracy"] (0 or 1, or a fraction) on the final
// step: the runtime logs it as accuracy, and episode_eval counts success from
// info["success"] or info["accuracy"]. info["reason"] (a short string) is
// quoted in held-out transcripts.
//
// Tools (agentic tasks). An action may be a tool call in the model's own chat
// format (Qwen's "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>");
// the environment runs the tool and answers with its result as the next
// observation, setting info["role"] = "tool" on that step so a chat template
// renders it as a tool turn (Qwen: <tool_response> inside a user turn;
// otherwise "user" is assumed). At reset, info["tools"] (a JSON list of
// function schemas, {"type": "function", "function": {"name", "description",
// "parameters"}}) is shown to the policy where the template lists tools.
// tokenizer::ChatTokenizer renders both; the plain format shows text only.
//
// Errors. Bad config, an action after the episode ended, or a misbehaving
// external process throw sao::Error naming the environment and the problem;
// the runtime's env actor turns that into one lost (counted) episode.
//
// Threading. One Environment object plays one episode at a time and is used
// from one thread at a time; the runtime makes one per concurrent episode
// (they may be reused: reset() starts a fresh episode on the same object).
//
// A new environment: copy src/env/tasks/example_env.{hpp,cpp} (a commented
// template), register it in environment.cpp or with register_environment(),
// and run tests/test_env_contract.cpp, which checks every registered one.
#pragma once

#include "base/error.hpp"
#include "base/hash.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sao::env {

struct EnvStep {
  std::string observation;  // text the policy sees next (the prompt, at reset)
  double reward = 0.0;      // reward for the action just taken (0 at reset)
  bool terminated = false;  // the episode ended on its own (next value is 0)
  bool truncated = false;   // cut by a turn/length limit (learner bootstraps)
  // Free-form. Conventions: "accuracy" / "success" on the final step; at
  // reset, "episode_key": a string naming the episode's content (problem,
  // layout) so tests can check that held-out episodes never occur in training.
  nlohmann::json info = nlohmann::json::object();

  bool done() const { return terminated || truncated; }
};

// Sizes the runtime needs to budget the context; 0 means "not stated".
struct EnvLimits {
  int64_t max_turns = 0;              // the environment ends every episode within this many steps
  int64_t max_action_bytes = 0;       // longer actions are never correct (set rollout.max_new_tokens >= this + 1)
  int64_t max_observation_bytes = 0;  // longest observation text, reset's included
};

// A demonstration for the supervised warm start, as text. The token layout
// the trainer builds (train/episode_sft.hpp) is exactly the rollout's:
//   [BOS] prompt  action_1 [EOS] observation_1  action_2 [EOS] ... action_n [EOS]
// Loss falls on action tokens and their EOS where `train` is true; prompts and
// observations are context only. The last turn's observation is empty (the
// episode ended). train = false keeps a (e.g. deliberately noisy) action as
// context without teaching it, so the model learns to recover from mistakes
// without learning to make them.
struct SftTurn {
  std::string action;
  std::string observation;  // what the environment answered (empty after the final action)
  bool train = true;
  std::string observation_role = "user";  // "user" or "tool" (info "role" of that step)
};

struct SftEpisode {
  std::string prompt;  // reset's observation
  std::vector<SftTurn> turns;
  std::string tools;  // reset's info "tools" as JSON text, "" for none
};

class Environment {
 public:
  virtual ~Environment() = default;

  // Starts a new training episode; the same seed gives the same episode.
  // Training episodes never come from the held-out split.
  virtual EnvStep reset(uint64_t seed) = 0;
  // Applies the policy's action text (without its stop token). Throws
  // sao::Error when called before reset() or after the episode ended.
  virtual EnvStep step(const std::string& action) = 0;
  virtual std::string name() const = 0;

  // The held-out split for evaluation: episode `index` in [0, heldout_size()),
  // identical on every run and platform and disjoint from what reset() can
  // produce. heldout_size() == 0 means the environment has none, and then
  // reset_heldout throws sao::Error.
  virtual int64_t heldout_size() const { return 0; }
  // Inline, like every member here: a plugin (env_plugin.hpp) needs no symbol of sao's.
  virtual EnvStep reset_heldout(int64_t index) {
    throw Error("environment '" + name() + "' has no held-out split (reset_heldout(" + std::to_string(index) +
                ") called)");
  }

  // Called by the runtime with the learner's step count whenever it advances
  // (and once on a freshly made environment, before its first reset), so a
  // drifting environment can change its rules with training progress. Most
  // environments ignore it.
  virtual void on_training_step(int64_t learner_step) {}

  virtual EnvLimits limits() const { return {}; }

  // Demonstrations for the supervised warm start (same seed, same episodes),
  // drawn from the training split. Empty when the environment has none.
  virtual std::vector<SftEpisode> demonstrations(int64_t count, uint64_t seed) const { return {}; }
};

// Builds an environment from its config section. Throws sao::Error for bad
// config, naming `where`.
using EnvironmentFactory =
    std::function<std::unique_ptr<Environment>(const nlohmann::json& config, const std::string& where)>;

// A registry so a config names an environment by string. Built-ins:
// arithmetic, example, maze, drift, calculator, countdown, external, dataset,
// openenv; plugins
// (env_plugin.hpp, env.plugin) add theirs at run time.
void register_environment(const std::string& name, EnvironmentFactory factory);
// Throws sao::Error for an unknown name, listing the known ones.
std::unique_ptr<Environment> make_environment(const std::string& name, const nlohmann::json& config,
                                              const std::string& where);
std::vector<std::string> registered_environments();
// True for the built-in environments that run entirely inside this process
// from their config section (arithmetic, example, maze, drift, calculator,
// countdown). Any other
// name (external: a program to run or an address to connect to; dataset:
// files to read and perhaps a verifier program; openenv: a server to reach;
// one registered at run time)
// acts outside the process, so its config must come
// from the user, never from an untrusted file such as a checkpoint.
bool is_self_contained_environment(const std::string& name);

// Shared helpers for implementations.
// Seeds and split hashes use base::splitmix64 and base::hash_unit (base/hash.hpp).
// FNV-1a over the bytes, then splitmix64: a portable hash of a text key.
inline uint64_t hash_text(const std::string& text) {
  return base::splitmix64(base::fnv1a64(text));
}
// ASCII whitespace trimmed at both ends.
inline std::string trim_ascii(const std::string& text) {
  const char* space = " \t\r\n\f\v";
  const auto begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

}  // namespace sao::env
