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
// Transports: "command" runs a subprocess whose stdin and stdout are one end
// of a socket pair (so writing to a dead process is an error, never SIGPIPE);
// its stderr is captured and the tail is quoted in errors. "address" connects
// to host:port over TCP; one connection is one environment session.
//
// Supervision. Each call has a deadline of timeout_ms (the first call after
// a start: startup_timeout_ms when longer). A timeout is counted
// and stops the process (or drops the connection), because a late reply would
// desynchronise the stream. A process that has died or a connection that has
// dropped is restarted at the next reset() (counted; at most max_restarts).
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
// (0: not stated; reported in limits()).
#pragma once

#include "env/environment.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace sao::env {

struct ExternalConfig {
  std::vector<std::string> command;
  std::string address;
  std::string cwd;
  std::string label;
  int64_t timeout_ms = 2000;
  // The first call after the process starts (or the connection is made)
  // may take this long instead: starting an interpreter or loading a model
  // is not a hung step.
  int64_t startup_timeout_ms = 30000;
  int64_t max_restarts = 100;
  int64_t heldout_size = 0;
  int64_t max_turns = 0;
};

class ExternalEnvironment final : public Environment {
 public:
  // Does not start the process: the first reset() does.
  explicit ExternalEnvironment(ExternalConfig config);
  ~ExternalEnvironment() override;  // sends close, then stops the process
  ExternalEnvironment(const ExternalEnvironment&) = delete;
  ExternalEnvironment& operator=(const ExternalEnvironment&) = delete;

  EnvStep reset(uint64_t seed) override;
  EnvStep step(const std::string& action) override;
  std::string name() const override { return "external"; }
  int64_t heldout_size() const override { return config_.heldout_size; }
  EnvStep reset_heldout(int64_t index) override;
  // Remembered and sent with the next reset as "learner_step".
  void on_training_step(int64_t learner_step) override { learner_step_ = learner_step; }
  EnvLimits limits() const override;

  const std::string& label() const { return label_; }
  int64_t restarts() const { return restarts_; }  // process starts / reconnects after the first
  int64_t timeouts() const { return timeouts_; }
  int64_t calls() const { return calls_; }
  pid_t pid() const { return pid_; }  // -1 when no process runs (or for TCP)
  bool connected() const { return fd_ >= 0; }
  // {"restarts":..,"timeouts":..,"calls":..,"errors":..}
  nlohmann::json stats() const;

 private:
  EnvStep open_or_close_episode(const nlohmann::json& reply);
  EnvStep begin_episode(nlohmann::json request);
  nlohmann::json call(nlohmann::json request);
  void ensure_connected();
  void start_process();
  void connect_tcp();
  void disconnect();
  bool process_alive();
  std::string exit_description();  // "exited with status 3", with the stderr tail
  void drain_stderr();
  void send_line(const std::string& line, int64_t deadline_ms, const std::string& what);
  bool read_line(std::string& line, int64_t deadline_ms, const std::string& what);  // false: timed out
  [[noreturn]] void fail(const std::string& what, const std::string& problem, bool restart);

  ExternalConfig config_;
  std::string label_;
  int fd_ = -1;                // socket to the process (socket pair) or the TCP peer
  bool just_started_ = false;  // the next call is the first since a (re)start
  int stderr_fd_ = -1;         // read end of the process's stderr
  pid_t pid_ = -1;
  int exit_status_ = -1;  // waitpid status once reaped
  bool reaped_ = false;
  std::string buffer_;       // bytes received after the last full line
  std::string stderr_tail_;  // last bytes the process wrote to stderr
  bool ever_connected_ = false;
  bool episode_open_ = false;
  int64_t next_id_ = 1;
  int64_t learner_step_ = 0;
  int64_t restarts_ = 0;
  int64_t timeouts_ = 0;
  int64_t calls_ = 0;
  int64_t errors_ = 0;
};

ExternalConfig external_config_from_json(const nlohmann::json& config, const std::string& where);
std::unique_ptr<Environment> make_external_environment(const nlohmann::json& config, const std::string& where);

}  // namespace sao::env
