// "HOST:PORT" as given on a command line or in a config (--listen, --join,
// --connect, an external environment's "address"), parsed in one place so
// every flag accepts the same forms and reports the same errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sao::base {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// Splits at the last ':'; an IPv6 host may be bracketed ("[::1]:7420" ->
// "::1"). The port is decimal digits only, 0..65535 (0 asks the OS for a free
// one where a caller listens). Throws sao::Error naming `what` and the text:
//   "<what> '<text>': expected HOST:PORT, e.g. 127.0.0.1:7420"
//   "<what> '<text>': port must be a number in 0..65535"
HostPort parse_host_port(std::string_view text, const std::string& what);

// True for a name or address that stays on this machine: localhost, ::1,
// 127.0.0.0/8.
bool is_loopback_host(std::string_view host);

}  // namespace sao::base
