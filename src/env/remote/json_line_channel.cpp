// JSON-lines transport; see json_line_channel.hpp.
#include "env/remote/json_line_channel.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/host_port.hpp"
#include "base/json_parse.hpp"
#include "base/json_reader.hpp"
#include "base/tcp_socket.hpp"
#include "base/utf8.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace sao::env {

namespace {
constexpr size_t kMaxLine = 1 << 20;
constexpr size_t kStderrTail = 2000;

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}
}  // namespace

JsonLineChannel::JsonLineChannel(JsonLineChannelConfig config, std::string peer, std::string role)
    : config_(std::move(config)), peer_(std::move(peer)), role_(std::move(role)) {}

JsonLineChannel::~JsonLineChannel() {
  close();
}

void JsonLineChannel::close() {
  if (fd_ >= 0) {
    // Best effort, never blocking: a polite close, then EOF.
    const std::string line = base::dump_json(nlohmann::json{{"id", next_id_++}, {"method", "close"}}) + "\n";
    [[maybe_unused]] auto sent = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  disconnect();
  ever_connected_ = false;
}

void JsonLineChannel::fail(const std::string& what, const std::string& problem, bool restart) {
  ++errors_;
  if (restart) disconnect();
  throw Error(peer_ + ": " + what + ": " + problem);
}

void JsonLineChannel::disconnect() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
  stderr_fd_ = -1;
  buffer_.clear();
  if (pid_ > 0 && !reaped_) {
    // Its stdin is closed now; give it 200 ms to exit on its own, then kill it.
    for (int i = 0; i < 40 && process_alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
      exit_status_ = status;
    }
  }
  pid_ = -1;
}

bool JsonLineChannel::process_alive() {
  if (pid_ <= 0 || reaped_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    exit_status_ = status;
  }
  return !reaped_;
}

void JsonLineChannel::drain_stderr() {
  if (stderr_fd_ < 0) return;
  char chunk[4096];
  while (true) {
    const auto n = ::read(stderr_fd_, chunk, sizeof(chunk));
    if (n > 0) {
      stderr_tail_.append(chunk, static_cast<size_t>(n));
      if (stderr_tail_.size() > kStderrTail) {
        // Keep the last kStderrTail bytes, starting on a character boundary.
        size_t cut = stderr_tail_.size() - kStderrTail;
        while (cut < stderr_tail_.size() && (static_cast<unsigned char>(stderr_tail_[cut]) & 0xC0) == 0x80) ++cut;
        stderr_tail_.erase(0, cut);
      }
      continue;
    }
    if (n == 0) {  // the process closed stderr (usually: it exited)
      ::close(stderr_fd_);
      stderr_fd_ = -1;
    }
    return;
  }
}

std::string JsonLineChannel::exit_description() {
  if (pid_ <= 0) return "the connection was closed by the peer";
  // The stream closes a moment before the exit status is available.
  for (int i = 0; i < 100 && process_alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  drain_stderr();
  std::string text;
  if (!reaped_) {
    text = "the process closed its stdout";
  } else if (WIFEXITED(exit_status_)) {
    text = "the process exited with status " + std::to_string(WEXITSTATUS(exit_status_));
  } else if (WIFSIGNALED(exit_status_)) {
    text = "the process was killed by signal " + std::to_string(WTERMSIG(exit_status_)) + " (" +
           ::strsignal(WTERMSIG(exit_status_)) + ")";
  } else {
    text = "the process stopped";
  }
  if (!stderr_tail_.empty()) {
    const size_t keep = std::min<size_t>(stderr_tail_.size(), 400);
    text += "; its stderr ends with: " + stderr_tail_.substr(stderr_tail_.size() - keep);
  }
  return text;
}

void JsonLineChannel::start_process() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    fail("start", std::string("cannot create a socket pair: ") + std::strerror(errno), false);
  }
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    ::close(pair[0]);
    ::close(pair[1]);
    fail("start", std::string("cannot create a pipe: ") + std::strerror(saved), false);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair[1], 0);
  posix_spawn_file_actions_adddup2(&actions, pair[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  if (!config_.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, config_.cwd.c_str());
  // The child starts with default signal handling and no blocked signals,
  // whatever this process has set up.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (const auto& arg : config_.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(pair[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(pair[0]);
    ::close(err[0]);
    fail("start", "cannot run " + base::quoted_excerpt(config_.command.front()) + ": " + std::strerror(rc), false);
  }
  fd_ = pair[0];
  stderr_fd_ = err[0];
  set_nonblocking(fd_);
  set_nonblocking(stderr_fd_);
  pid_ = pid;
  reaped_ = false;
  exit_status_ = -1;
  stderr_tail_.clear();
}

void JsonLineChannel::connect_tcp() {
  base::HostPort address;
  try {
    address = base::parse_host_port(config_.address, "address");  // a config from JSON was checked on reading
  } catch (const Error& error) {
    fail("connect", error.what(), false);
  }
  std::string problem;
  fd_ = base::connect_tcp(address.host, address.port, config_.timeout_ms, &problem);
  if (fd_ < 0) fail("connect", "cannot connect to " + base::quoted_excerpt(config_.address) + ": " + problem, false);
}

void JsonLineChannel::ensure_connected() {
  if (fd_ >= 0 && pid_ > 0 && !process_alive()) disconnect();
  if (fd_ >= 0 && pid_ < 0) {  // TCP: has the peer hung up since the last call?
    pollfd item{fd_, POLLIN, 0};
    char byte = 0;
    if (::poll(&item, 1, 0) > 0 && ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0) disconnect();
  }
  if (fd_ >= 0) return;
  if (ever_connected_) {
    if (restarts_ >= config_.max_restarts) {
      fail("restart", "gave up after " + std::to_string(restarts_) + " restarts (max_restarts)", false);
    }
    ++restarts_;
  }
  ever_connected_ = true;
  just_started_ = true;
  if (config_.command.empty()) {
    connect_tcp();
  } else {
    start_process();
  }
}

void JsonLineChannel::send_line(const std::string& line, int64_t deadline_ms, const std::string& what) {
  size_t offset = 0;
  while (offset < line.size()) {
    const auto n = ::send(fd_, line.data() + offset, line.size() - offset, MSG_NOSIGNAL);
    if (n > 0) {
      offset += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      const int64_t left = deadline_ms - base::steady_ms();
      pollfd item{fd_, POLLOUT, 0};
      if (left <= 0 || ::poll(&item, 1, static_cast<int>(left)) == 0) {
        ++timeouts_;
        fail(what,
             "could not send the request within " + std::to_string(config_.timeout_ms) +
                 " ms (timeouts: " + std::to_string(timeouts_) + ")",
             true);
      }
      continue;
    }
    fail(what, "cannot send the request: " + exit_description(), true);
  }
}

bool JsonLineChannel::read_line(std::string& line, int64_t deadline_ms, const std::string& what) {
  char chunk[65536];
  while (true) {
    const auto newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return true;
    }
    if (buffer_.size() > kMaxLine) fail(what, "reply is longer than 1 MiB without a newline", true);
    const int64_t left = deadline_ms - base::steady_ms();
    if (left <= 0) return false;
    pollfd items[2] = {{fd_, POLLIN, 0}, {stderr_fd_, POLLIN, 0}};
    const int ready = ::poll(items, stderr_fd_ >= 0 ? 2 : 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) fail(what, std::string("poll failed: ") + std::strerror(errno), true);
    if (ready <= 0) continue;
    if (stderr_fd_ >= 0 && items[1].revents != 0) drain_stderr();
    if (items[0].revents == 0) continue;
    const auto n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      fail(what, "no reply: " + exit_description(), true);
    }
  }
}

nlohmann::json JsonLineChannel::call(nlohmann::json request) {
  const int64_t id = next_id_++;
  request["id"] = id;
  ++calls_;
  const std::string what = request.value("method", std::string("call")) + " (id " + std::to_string(id) + ")";
  last_call_ = what;
  // The first reply of a fresh process also covers its start (an
  // interpreter, a model load): it gets startup_timeout_ms when that is longer.
  const int64_t allowed_ms =
      just_started_ ? std::max(config_.timeout_ms, config_.startup_timeout_ms) : config_.timeout_ms;
  just_started_ = false;
  const int64_t deadline = base::steady_ms() + allowed_ms;
  // Invalid UTF-8 in an action becomes U+FFFD rather than an exception.
  send_line(base::dump_json(request) + "\n", deadline, what);
  std::string line;
  if (!read_line(line, deadline, what)) {
    ++timeouts_;
    fail(what,
         "no reply within " + std::to_string(allowed_ms) + " ms (timeouts: " + std::to_string(timeouts_) +
             "); the process is stopped and restarts at the next reset",
         true);
  }
  // Depth-limited: a reply nested 10^5 deep would overflow the stack the
  // first time it is printed or compared.
  nlohmann::json reply;
  try {
    reply = base::parse_json_limited(line, "reply");
  } catch (const Error& error) {
    const std::string reason = error.what();
    const bool too_deep = reason.find("nested deeper") != std::string::npos;
    fail(what,
         too_deep ? reason
                  : "reply is not JSON: " + base::quoted_excerpt(line) + " (write logs to stderr, never to stdout)",
         true);
  }
  if (!reply.is_object()) fail(what, "reply is not a JSON object: " + base::quoted_excerpt(line), true);
  if (!reply.contains("id")) fail(what, "reply has no \"id\": " + base::quoted_excerpt(line), true);
  if (!reply["id"].is_number_integer() || reply["id"].get<int64_t>() != id) {
    fail(what, "reply has id " + base::dump_json(reply["id"]) + ", expected " + std::to_string(id), true);
  }
  if (reply.contains("error")) {
    const auto& error = reply["error"];
    fail(what,
         "the " + role_ +
             " reported an error: " + (error.is_string() ? error.get<std::string>() : base::dump_json(error)),
         false);
  }
  return reply;
}

namespace {
bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// A program that cannot be started would fail every episode; say so at
// start, as the shell would, instead of losing episodes one by one.
void require_runnable(const std::string& program, const std::string& cwd, const std::string& where) {
  if (program.find('/') != std::string::npos) {
    const std::string path = program[0] == '/' || cwd.empty() ? program : cwd + "/" + program;
    if (!is_executable_file(path))
      throw Error(where + ": program '" + program + "' " +
                  (::access(path.c_str(), F_OK) == 0 ? "is not an executable file" : "does not exist") +
                  (cwd.empty() ? "" : " (relative to cwd '" + cwd + "')"));
    return;
  }
  const char* path_variable = std::getenv("PATH");
  const std::string search = path_variable != nullptr ? path_variable : "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= search.size()) {
    size_t end = search.find(':', begin);
    if (end == std::string::npos) end = search.size();
    const std::string directory = end > begin ? search.substr(begin, end - begin) : ".";
    if (is_executable_file(directory + "/" + program)) return;
    begin = end + 1;
  }
  throw Error(where + ": program '" + program + "' not found on PATH (" + search + ")");
}
}  // namespace

void read_channel_config(base::JsonReader& reader, JsonLineChannelConfig& config) {
  reader.read("command", config.command);
  reader.read("address", config.address);
  reader.read("cwd", config.cwd);
  reader.read("timeout_ms", config.timeout_ms, base::IntRange{1, 3600000});
  reader.read("startup_timeout_ms", config.startup_timeout_ms, base::IntRange{1, 3600000});
  reader.read("max_restarts", config.max_restarts, base::IntRange{0, 1000000});
}

std::string default_channel_label(const JsonLineChannelConfig& config) {
  if (config.command.empty()) return config.address;
  const std::string& script = config.command.size() > 1 ? config.command.back() : config.command.front();
  const auto slash = script.find_last_of('/');
  return slash == std::string::npos ? script : script.substr(slash + 1);
}

void validate_channel_config(const JsonLineChannelConfig& config, const std::string& where) {
  if (config.command.empty() == config.address.empty()) {
    throw Error(where + ": set exactly one of command ([\"program\", \"arg\", ...]) or address (\"host:port\")");
  }
  if (!config.command.empty() && config.command.front().empty()) throw Error(where + ".command: program is empty");
  if (!config.command.empty()) require_runnable(config.command.front(), config.cwd, where + ".command");
  if (!config.address.empty()) base::parse_host_port(config.address, where + ".address");  // throws if malformed
}

}  // namespace sao::env
