// External environments: an environment in another process or on another
// machine, in any language, spoken to with line-oriented JSON (one request,
// one reply per line). docs/environments.md is the full protocol spec;
// deploy/envs/guess_number.py is a complete example.
//
//   -> {"id":1,"method":"reset","seed":42,"learner_step":0}       (+ "heldout":I for held-out episode I)
//   <- {"id":1,"observation":"...","reward":0.0,"terminated":false,"truncated":false,"info":{}}
//   -> {"id":2,"method":"step","action":"17"}
//   <- {"id":2,"observation":"higher","reward":0.0,"terminated":false,"truncated":false,"info":{}}
//   <- {"id":N,"error":"message"}                                 (the env refuses a request)
//   -> {"id":9,"method":"close"}                                  (no reply needed; then EOF)
//
// Transport and supervision (deadlines, restarts, the stderr tail in errors):
// env::JsonLineChannel (json_line_channel.hpp). A process that has died or a
// connection that has dropped is restarted at the next reset() (counted; at
// most max_restarts).
// Every problem throws sao::Error naming the env, the call and the problem:
// not JSON, not an object, wrong or missing id, a missing or mistyped field,
// an "error" reply, the process exiting or the connection closing, timeouts.
// After an error the episode is over (step() throws until the next reset);
// after a protocol error the process is also restarted at the next reset.
//
// Config keys: name ("external"), command ([argv...]) or address
// ("host:port"), cwd (""), label (for messages; default: the script or the
// address), timeout_ms (2000), startup_timeout_ms (30000), max_restarts (100), heldout_size (0: the env
// has no held-out split; N: reset_heldout(i) sends "heldout": i), max_turns
// (0: not stated; reported in limits()), process_per_episode (false: one
// process plays episode after episode, each begun with a reset; true: a fresh
// process for every episode, for an environment that cannot be reset).
#pragma once

#include "env/environment.hpp"
#include "env/remote/json_line_channel.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace sao::env {

struct ExternalConfig {
  JsonLineChannelConfig channel;  // command or address, cwd, deadlines, max_restarts
  std::string label;
  int64_t heldout_size = 0;
  int64_t max_turns = 0;
  bool process_per_episode = false;
};

class ExternalEnvironment final : public Environment {
 public:
  // Does not start the process: the first reset() does.
  explicit ExternalEnvironment(ExternalConfig config);
  ExternalEnvironment(const ExternalEnvironment&) = delete;
  ExternalEnvironment& operator=(const ExternalEnvironment&) = delete;

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  // The one spelling of its name: registry, config section, name().
  static constexpr const char* kName = "external";
  std::string name() const override { return kName; }
  int64_t heldout_size() const override { return config_.heldout_size; }
  EnvStep reset_heldout(int64_t index) override;
  // Remembered and sent with the next reset as "learner_step".
  void on_training_step(int64_t learner_step) override { learner_step_ = learner_step; }
  EnvLimits limits() const override;

  const std::string& label() const { return label_; }
  int64_t restarts() const { return channel_.restarts(); }
  int64_t timeouts() const { return channel_.timeouts(); }
  int64_t calls() const { return channel_.calls(); }
  pid_t pid() const { return channel_.pid(); }
  bool connected() const { return channel_.connected(); }
  // {"restarts":..,"timeouts":..,"calls":..,"errors":..}
  nlohmann::json stats() const;

 private:
  EnvStep open_or_close_episode(const nlohmann::json& reply);
  EnvStep begin_episode(nlohmann::json request);
  nlohmann::json call(nlohmann::json request);  // the channel's call, then the reply's fields checked

  ExternalConfig config_;
  std::string label_;
  JsonLineChannel channel_;
  bool episode_open_ = false;
  int64_t learner_step_ = 0;
};

ExternalConfig external_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_external_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
