// tests/openenv/guess_server.py as a process the test owns: started on a
// free port (or a given one), killed when this goes away.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

namespace sao_test {

inline const std::string kOpenEnvServerScript = std::string(SAO_SOURCE_DIR) + "/tests/openenv/guess_server.py";

// One guess_server.py process; killed when this goes away. Waits for the
// "listening PORT" line, so a test never races the server's start.
class OpenEnvServer {
 public:
  explicit OpenEnvServer(const std::string& fault = "none", int port = 0, const std::vector<std::string>& extra = {}) {
    int out[2];
    REQUIRE(::pipe(out) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const std::string port_text = std::to_string(port);
    std::vector<std::string> args = {"python3", kOpenEnvServerScript, "--port", port_text, "--fault", fault};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    REQUIRE(::posix_spawnp(&pid_, "python3", &actions, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    FILE* stream = ::fdopen(out[0], "r");
    char line[128] = {0};
    REQUIRE(std::fgets(line, sizeof(line), stream) != nullptr);
    std::fclose(stream);
    const std::string announced(line);
    REQUIRE(announced.rfind("listening ", 0) == 0);
    port_ = std::stoi(announced.substr(10));
  }
  ~OpenEnvServer() { stop(); }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace sao_test
