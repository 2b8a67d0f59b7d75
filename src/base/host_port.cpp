// HOST:PORT parsing; see host_port.hpp.
#include "base/host_port.hpp"

#include "base/error.hpp"

#include <charconv>
#include <limits>

namespace sao::base {

HostPort parse_host_port(std::string_view text, const std::string& what) {
  const auto colon = text.rfind(':');
  std::string_view host = colon == std::string_view::npos ? std::string_view{} : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || colon + 1 == text.size()) {
    throw Error(what + " '" + std::string(text) + "': expected HOST:PORT, e.g. 127.0.0.1:7420");
  }
  const std::string_view digits = text.substr(colon + 1);
  // from_chars on an unsigned type takes neither a sign nor white space, so
  // "+80", "-0" and " 80" are refused, and an overflow is an error.
  unsigned port = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (error != std::errc{} || end != digits.data() + digits.size() || port > std::numeric_limits<uint16_t>::max()) {
    throw Error(what + " '" + std::string(text) + "': port must be a number in 0..65535");
  }
  return {std::string(host), static_cast<uint16_t>(port)};
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace sao::base
