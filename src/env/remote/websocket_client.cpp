// WebSocket client over websocketpp; see websocket_client.hpp.
#include "env/remote/websocket_client.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/utf8.hpp"

// Standalone asio (no Boost). websocketpp is chosen over writing RFC 6455
// framing by hand: docs/decisions.md.
#define ASIO_STANDALONE
#include <websocketpp/client.hpp>
#include <websocketpp/config/asio_no_tls_client.hpp>

#include <chrono>
#include <deque>

namespace sao::env {

namespace {
using Client = websocketpp::client<websocketpp::config::asio_client>;
constexpr int64_t kCloseTimeoutMs = 200;

}  // namespace

// Member order is destruction order reversed: the connection goes first, then
// the endpoint, then the io_context both use.
struct WebSocketClient::Impl {
  asio::io_context io;
  Client client;
  Client::connection_ptr connection;
  std::deque<std::string> inbox;
  bool open = false;
  bool ended = false;  // failed or closed; `ending` says how
  std::string ending;

  Impl() {
    client.clear_access_channels(websocketpp::log::alevel::all);
    client.clear_error_channels(websocketpp::log::elevel::all);
    client.init_asio(&io);
  }

  // Runs handlers until `done()` or the deadline; false on the deadline.
  template <typename Done>
  bool run_until(Done done, int64_t deadline_ms) {
    while (!done()) {
      const int64_t left = deadline_ms - base::steady_ms();
      if (left <= 0) return false;
      if (io.stopped()) io.restart();
      if (io.run_one_for(std::chrono::milliseconds(left)) == 0 && io.stopped() && !done()) {
        // No work left at all: nothing can make `done()` true any more.
        return done();
      }
    }
    return true;
  }
};

WebSocketClient::WebSocketClient(std::string peer) : peer_(std::move(peer)) {}

WebSocketClient::~WebSocketClient() {
  if (!impl_) return;
  try {
    if (impl_->open && impl_->connection) {
      websocketpp::lib::error_code ignored;
      impl_->connection->close(websocketpp::close::status::normal, "", ignored);
      impl_->run_until([&] { return impl_->ended; }, base::steady_ms() + kCloseTimeoutMs);
    }
  } catch (...) {
    // Closing is a courtesy; the socket goes with the io_context anyway.
  }
  impl_->io.stop();
}

void WebSocketClient::abort() {
  if (!impl_) return;
  impl_->io.stop();
  impl_.reset();
}

bool WebSocketClient::is_open() const {
  return impl_ && impl_->open && !impl_->ended;
}

void WebSocketClient::connect(const std::string& url, int64_t timeout_ms) {
  abort();
  impl_ = std::make_unique<Impl>();
  Impl& impl = *impl_;
  websocketpp::lib::error_code error;
  impl.connection = impl.client.get_connection(url, error);
  if (error) throw Error(peer_ + ": cannot open '" + url + "': " + error.message());
  impl.connection->set_max_message_size(kMaxMessageBytes);
  impl.connection->set_open_handshake_timeout(static_cast<long>(timeout_ms));
  impl.connection->set_open_handler([&impl](websocketpp::connection_hdl) { impl.open = true; });
  impl.connection->set_fail_handler([&impl](websocketpp::connection_hdl handle) {
    auto connection = impl.client.get_con_from_hdl(handle);
    impl.ended = true;
    const int status = static_cast<int>(connection->get_response_code());
    impl.ending = connection->get_ec().message();
    if (status != 0 && status != 101) {
      impl.ending = "the server answered the WebSocket handshake with HTTP " + std::to_string(status) + " " +
                    connection->get_response_msg();
    }
  });
  impl.connection->set_close_handler([&impl](websocketpp::connection_hdl handle) {
    auto connection = impl.client.get_con_from_hdl(handle);
    impl.ended = true;
    const auto code = connection->get_remote_close_code();
    const std::string reason = connection->get_remote_close_reason();
    impl.ending = "the server closed the connection (code " + std::to_string(code) +
                  (reason.empty() ? "" : ", " + base::truncate_utf8(reason, 200)) + ")";
  });
  impl.connection->set_message_handler([&impl](websocketpp::connection_hdl, Client::message_ptr message) {
    impl.inbox.push_back(message->get_payload());
  });
  impl.client.connect(impl.connection);
  const bool settled = impl.run_until([&] { return impl.open || impl.ended; }, base::steady_ms() + timeout_ms);
  if (impl.ended) {
    const std::string why = impl.ending;
    abort();
    throw Error(peer_ + ": cannot open '" + url + "': " + why);
  }
  if (!settled) {
    abort();
    throw Error(peer_ + ": cannot open '" + url + "': no WebSocket handshake within " + std::to_string(timeout_ms) +
                " ms");
  }
}

void WebSocketClient::send_text(const std::string& text) {
  if (!is_open()) {
    throw Error(peer_ + ": the WebSocket is not open" + (impl_ && impl_->ended ? ": " + impl_->ending : std::string()));
  }
  const websocketpp::lib::error_code error = impl_->connection->send(text, websocketpp::frame::opcode::text);
  if (error) throw Error(peer_ + ": cannot send: " + error.message());
}

bool WebSocketClient::receive_text(std::string& text, int64_t timeout_ms) {
  if (!impl_) throw Error(peer_ + ": the WebSocket is not open");
  Impl& impl = *impl_;
  const bool arrived =
      impl.run_until([&] { return !impl.inbox.empty() || impl.ended; }, base::steady_ms() + timeout_ms);
  if (!impl.inbox.empty()) {
    text = std::move(impl.inbox.front());
    impl.inbox.pop_front();
    return true;
  }
  if (impl.ended) throw Error(peer_ + ": " + impl.ending);
  return arrived;  // false: the deadline passed
}

}  // namespace sao::env
