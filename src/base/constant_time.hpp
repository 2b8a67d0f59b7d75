// Comparing secrets (the cluster's shared secret, the console's control
// token) so that the time taken does not tell a guesser how much of a guess
// was right.
#pragma once

#include <string_view>

namespace sao::base {

// True when `given` equals `expected`. Always reads all of `given` (whose
// length the caller chose) and never exits early on content, so the time
// depends on given.size() only: not on how many leading characters match nor
// on whether the lengths differ. A length mismatch is false. Empty equals
// empty; callers that must refuse an unset secret check that themselves.
bool constant_time_equal(std::string_view given, std::string_view expected);

}  // namespace sao::base
