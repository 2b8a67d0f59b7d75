// One connection's byte stream, plain or TLS (OpenSSL), for the sockets sao
// opens itself beside CAF (the bulk weight channel). TLS here is the
// cluster's: both sides show a certificate signed by the cluster's CA
// (deploy/cluster-certs), as CAF's OpenSSL module requires of every node.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

struct ssl_st;
struct ssl_ctx_st;

namespace sao::net {

// OpenSSL's queued errors of this thread as one line (and clears them).
std::string openssl_errors();

// A node's certificate files; all empty = plaintext.
struct TlsFiles {
  std::string ca_file;
  std::string certificate_file;
  std::string key_file;
  bool enabled() const { return !ca_file.empty(); }
};

// A TLS context for one side of a link: this node's certificate and key,
// and the CA a peer's certificate must be signed by (checked both ways).
class TlsContext {
 public:
  // Throws sao::Error naming `what` and the file that cannot be loaded.
  TlsContext(const TlsFiles& files, bool server, const std::string& what);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return context_; }
  bool server() const { return server_; }

 private:
  ssl_ctx_st* context_ = nullptr;
  bool server_ = false;
};

// A connected socket, and its TLS session once `start_tls` succeeded. Does
// not own the socket (its owner closes it); frees the session.
class Link {
 public:
  explicit Link(int fd) : fd_(fd) {}
  // Takes over a session whose handshake is done (net/tls_gate.hpp).
  Link(int fd, ssl_st* session) : fd_(fd), ssl_(session) {}
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // The handshake, as the context's side. False with `*problem` set (e.g.
  // "TLS handshake failed: ... certificate verify failed").
  bool start_tls(const TlsContext& context, std::string* problem);
  // Writes all of `data`; reads exactly `size` bytes. False on error,
  // timeout (the socket's) or end of stream, with `*problem` set. Never
  // raises SIGPIPE.
  bool send_all(const void* data, uint64_t size, std::string* problem);
  bool receive_all(void* data, uint64_t size, std::string* problem);
  bool encrypted() const { return ssl_ != nullptr; }
  ssl_st* session() const { return ssl_; }

 private:
  int fd_;
  ssl_st* ssl_ = nullptr;
};

}  // namespace sao::net
