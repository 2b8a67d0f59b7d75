// A blocking WebSocket client with a deadline on every operation, for the
// OpenEnv environment's session transport (openenv_env.hpp). The protocol
// work (handshake, framing, masking, ping/pong, close) is websocketpp's over
// standalone asio (Debian libwebsocketpp-dev, libasio-dev); this class only
// turns its callbacks into calls that return or throw within a deadline, and
// keeps both libraries' headers inside one translation unit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace sao::env {

class WebSocketClient {
 public:
  // `peer` starts every error message.
  explicit WebSocketClient(std::string peer);
  ~WebSocketClient();  // a polite close frame, bounded by a short deadline
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  // Opens "ws://host:port/path". Throws sao::Error: the URL, a refused or
  // failed connection, a handshake the server refused (with its HTTP
  // status), or no open connection within timeout_ms.
  void connect(const std::string& url, int64_t timeout_ms);
  // Sends one text message. Throws when the connection is not open.
  void send_text(const std::string& text);
  // The next text message, or false when none arrived within timeout_ms.
  // Throws when the connection closes or fails (with the close code and
  // reason) or a message is longer than max_message_bytes.
  bool receive_text(std::string& text, int64_t timeout_ms);
  // Drops the connection at once (after a timeout the stream is out of step).
  void abort();
  bool is_open() const;

  static constexpr size_t kMaxMessageBytes = 16u << 20;

 private:
  struct Impl;
  std::string peer_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sao::env
