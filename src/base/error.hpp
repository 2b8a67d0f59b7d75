// One exception type for the core library. The core reports bad input
// (config, checkpoint, environment output) by throwing sao::Error with a
// message that names what was wrong and where; actor code catches it at the
// mailbox boundary and turns it into an error value, so no exception ever
// crosses an actor's message handler.
#pragma once

#include <stdexcept>
#include <string>

namespace sao {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sao
