// Plain or TLS links; see tls_link.hpp.
#include "net/tls_link.hpp"

#include "base/error.hpp"
#include "base/tcp_socket.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

namespace sao::net {

std::string openssl_errors() {
  std::string text;
  while (const auto code = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    if (!text.empty()) text += "; ";
    text += buffer;
  }
  return text;
}

namespace {

// Why an SSL call returned `result`: OpenSSL's queue, else the socket's errno.
std::string tls_problem(ssl_st* ssl, int result) {
  const int kind = SSL_get_error(ssl, result);
  auto text = openssl_errors();
  if (kind == SSL_ERROR_ZERO_RETURN) return "the peer closed the TLS session";
  if (kind == SSL_ERROR_SYSCALL && text.empty()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return "timed out";
    return errno == 0 ? "the peer closed the connection" : std::strerror(errno);
  }
  if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) return "timed out";
  return text.empty() ? "TLS error " + std::to_string(kind) : text;
}

// OpenSSL writes with write(2) (in SSL_read too), which raises SIGPIPE on a connection the peer
// closed; the signal is held back for the call and a pending one dropped.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~NoSigpipe() {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t pipe_;
  sigset_t previous_;
};

}  // namespace

TlsContext::TlsContext(const TlsFiles& files, bool server, const std::string& what) : server_(server) {
  ERR_clear_error();
  context_ = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (context_ == nullptr) throw Error(what + ": cannot create a TLS context: " + openssl_errors());
  SSL_CTX_set_min_proto_version(context_, TLS1_2_VERSION);
  const auto fail = [&](const std::string& file) {
    const auto reason = openssl_errors();
    SSL_CTX_free(context_);
    throw Error(what + ": cannot load " + file + ": " + reason);
  };
  if (SSL_CTX_use_certificate_chain_file(context_, files.certificate_file.c_str()) != 1) fail(files.certificate_file);
  if (SSL_CTX_use_PrivateKey_file(context_, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) fail(files.key_file);
  if (SSL_CTX_load_verify_locations(context_, files.ca_file.c_str(), nullptr) != 1) fail(files.ca_file);
  SSL_CTX_set_verify(context_, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
}

TlsContext::~TlsContext() {
  SSL_CTX_free(context_);
}

Link::~Link() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // the socket BIO does not close the descriptor
}

bool Link::start_tls(const TlsContext& context, std::string* problem) {
  ERR_clear_error();
  ssl_ = SSL_new(context.get());
  if (ssl_ == nullptr) {
    *problem = "TLS: " + openssl_errors();
    return false;
  }
  SSL_set_fd(ssl_, fd_);
  NoSigpipe guard;
  const int result = context.server() ? SSL_accept(ssl_) : SSL_connect(ssl_);
  if (result != 1) {
    *problem = "TLS handshake failed: " + tls_problem(ssl_, result);
    const long verify = SSL_get_verify_result(ssl_);
    if (verify != X509_V_OK) *problem += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
    return false;
  }
  return true;
}

bool Link::send_all(const void* data, uint64_t size, std::string* problem) {
  if (ssl_ == nullptr) return base::send_all(fd_, data, size, problem);
  NoSigpipe guard;
  const char* next = static_cast<const char*>(data);
  uint64_t left = size;
  ERR_clear_error();
  while (left > 0) {
    const int chunk = static_cast<int>(std::min<uint64_t>(left, 1u << 24));
    const int wrote = SSL_write(ssl_, next, chunk);
    if (wrote <= 0) {
      *problem = "send failed after " + std::to_string(size - left) + " of " + std::to_string(size) +
                 " bytes: " + tls_problem(ssl_, wrote);
      return false;
    }
    next += wrote;
    left -= static_cast<uint64_t>(wrote);
  }
  return true;
}

bool Link::receive_all(void* data, uint64_t size, std::string* problem) {
  if (ssl_ == nullptr) return base::receive_all(fd_, data, size, problem);
  NoSigpipe guard;  // a read may write too (TLS 1.3 session tickets, alerts)
  char* next = static_cast<char*>(data);
  uint64_t left = size;
  ERR_clear_error();
  while (left > 0) {
    const int chunk = static_cast<int>(std::min<uint64_t>(left, 1u << 24));
    errno = 0;
    const int got = SSL_read(ssl_, next, chunk);
    if (got <= 0) {
      const auto why = tls_problem(ssl_, got);
      *problem = why.rfind("the peer closed", 0) == 0
                     ? "the peer closed the connection after " + std::to_string(size - left) + " of " +
                           std::to_string(size) + " bytes"
                     : "receive failed after " + std::to_string(size - left) + " of " + std::to_string(size) +
                           " bytes: " + why;
      return false;
    }
    next += got;
    left -= static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace sao::net
