// One request, one reply per line of JSON, to a subprocess or a TCP peer,
// with deadlines, restarts and errors that name the peer. The transport under
// the external environment (external_env.hpp) and the dataset task's command
// verifier (verifier.hpp); docs/environments.md specifies both protocols.
//
// Transports: "command" runs a subprocess whose stdin and stdout are one end
// of a socket pair (so writing to a dead process is an error, never SIGPIPE);
// its stderr is captured and the tail is quoted in errors. "address" connects
// to host:port over TCP; one connection is one session.
//
// Supervision. Each call has a deadline of timeout_ms (the first call after a
// start: startup_timeout_ms when longer). A timeout is counted and stops the
// process (or drops the connection), because a late reply would desynchronise
// the stream. ensure_connected() restarts a process that has died or a
// connection that has dropped (counted; at most max_restarts).
#pragma once

#include "base/json_reader.hpp"

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sao::env {

struct JsonLineChannelConfig {
  std::vector<std::string> command;  // argv; or empty and `address` set
  std::string address;               // "host:port"
  std::string cwd;
  int64_t timeout_ms = 2000;
  // The first call after the process starts (or the connection is made)
  // may take this long instead: starting an interpreter or loading a model
  // is not a hung call.
  int64_t startup_timeout_ms = 30000;
  int64_t max_restarts = 100;
};

class JsonLineChannel {
 public:
  // `peer` starts every error message, e.g. "external env 'guess.py'";
  // `role` names it in "the <role> reported an error". Starts nothing: the
  // first ensure_connected() does.
  JsonLineChannel(JsonLineChannelConfig config, std::string peer, std::string role);
  ~JsonLineChannel();  // sends {"method":"close"}, then stops the process
  JsonLineChannel(const JsonLineChannel&) = delete;
  JsonLineChannel& operator=(const JsonLineChannel&) = delete;

  // Starts the process or connects when there is none (a restart after the
  // first start, counted against max_restarts).
  void ensure_connected();
  // Adds a fresh "id", sends the request and returns the reply, checked to be
  // a JSON object (depth-limited) with the same id and no "error" key. Every
  // problem throws sao::Error "<peer>: <method> (id N): <problem>"; a timeout
  // or a malformed reply also disconnects (restart at the next
  // ensure_connected()). Call ensure_connected() first.
  nlohmann::json call(nlohmann::json request);
  // Ends the session politely ({"method":"close"}, then EOF; the process is
  // stopped): the next ensure_connected() starts a fresh one, not counted as
  // a restart.
  void close();
  // Throws the same kind of error for a problem the caller found in a reply
  // (counted as an error); restart = true disconnects as well.
  [[noreturn]] void fail(const std::string& what, const std::string& problem, bool restart);

  // "<method> (id N)" of the latest call, for the caller's own errors.
  const std::string& last_call() const { return last_call_; }
  int64_t restarts() const { return restarts_; }  // process starts / reconnects after the first
  int64_t timeouts() const { return timeouts_; }
  int64_t calls() const { return calls_; }
  int64_t errors() const { return errors_; }
  pid_t pid() const { return pid_; }  // -1 when no process runs (or for TCP)
  bool connected() const { return fd_ >= 0; }

 private:
  void start_process();
  void connect_tcp();
  void disconnect();
  bool process_alive();
  std::string exit_description();  // "exited with status 3", with the stderr tail
  void drain_stderr();
  void send_line(const std::string& line, int64_t deadline_ms, const std::string& what);
  bool read_line(std::string& line, int64_t deadline_ms, const std::string& what);  // false: timed out

  JsonLineChannelConfig config_;
  std::string peer_;
  std::string role_;
  std::string last_call_;
  int fd_ = -1;                // socket to the process (socket pair) or the TCP peer
  bool just_started_ = false;  // the next call is the first since a (re)start
  int stderr_fd_ = -1;         // read end of the process's stderr
  pid_t pid_ = -1;
  int exit_status_ = -1;  // waitpid status once reaped
  bool reaped_ = false;
  std::string buffer_;       // bytes received after the last full line
  std::string stderr_tail_;  // last bytes the process wrote to stderr
  bool ever_connected_ = false;
  int64_t next_id_ = 1;
  int64_t restarts_ = 0;
  int64_t timeouts_ = 0;
  int64_t calls_ = 0;
  int64_t errors_ = 0;
};

// Reads the keys command, address, cwd, timeout_ms, startup_timeout_ms and
// max_restarts (the external env's and the command verifier's).
void read_channel_config(base::JsonReader& reader, JsonLineChannelConfig& config);
// The label errors use when none is configured: the script (the last
// argument) or the program, without its directory; or the address.
std::string default_channel_label(const JsonLineChannelConfig& config);

// Checks a command or an address as the config reader does: exactly one set,
// a program that exists and is executable (searched on PATH when it has no
// '/'), an address of the form host:port. Throws sao::Error naming `where`.
void validate_channel_config(const JsonLineChannelConfig& config, const std::string& where);

}  // namespace sao::env
