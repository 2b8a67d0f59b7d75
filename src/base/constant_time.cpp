// Constant-time comparison; see constant_time.hpp.
#include "base/constant_time.hpp"

namespace sao::base {

bool constant_time_equal(std::string_view given, std::string_view expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  // Index `expected` modulo its length rather than branching at its end, so
  // the loop's shape does not depend on the secret's length either; an empty
  // secret is compared as one NUL (the length mismatch is already recorded).
  const std::string_view against = expected.empty() ? std::string_view("", 1) : expected;
  for (std::string_view::size_type i = 0; i < given.size(); ++i) {
    difference |= static_cast<unsigned char>(given[i] ^ against[i % against.size()]);
  }
  return difference == 0;
}

}  // namespace sao::base
