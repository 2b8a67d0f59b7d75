// What the end-to-end tests share: running a command and reading its
// output, reading a file whole, quoting for the shell, a loopback TCP
// connection, and the message of the sao::Error an action throws. Header-only; each test executable includes what it
// uses.
#pragma once

#include "base/error.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace sao_test {

// The message of the sao::Error `action` throws; "(no error)" when it throws none.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "(no error)";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through the shell and collects its output.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs `command` through the shell; its exit status (-1 if it did not exit).
inline int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The whole file ("" if it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Single-quoted for the shell.
inline std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A connected TCP socket to 127.0.0.1:port.
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  return fd;
}

// Reads exactly one HTTP reply from `fd` (headers, then Content-Length bytes
// of body), so the connection can carry another request; "" when the server
// closes first.
inline std::string read_one_http_reply(int fd) {
  std::string reply;
  char byte = 0;
  while (reply.find("\r\n\r\n") == std::string::npos) {
    if (::recv(fd, &byte, 1, 0) != 1) return "";
    reply.push_back(byte);
  }
  const auto at = reply.find("Content-Length: ");
  REQUIRE(at != std::string::npos);
  const size_t length = std::stoul(reply.substr(at + 16, reply.find("\r\n", at) - at - 16));
  for (size_t body = 0; body < length; ++body) {
    if (::recv(fd, &byte, 1, 0) != 1) return "";
    reply.push_back(byte);
  }
  return reply;
}

// A loopback listener on a free port (returned in `*port`) that allows
// SO_REUSEPORT, as cpp-httplib's default socket options made the console's:
// a second listener that also set it would share the port unnoticed.
inline int listen_loopback_sharing_port(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  *port = ntohs(address.sin_port);
  return fd;
}

}  // namespace sao_test
