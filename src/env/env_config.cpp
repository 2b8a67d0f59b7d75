// Shared config reading; see env_config.hpp.
#include "env/env_config.hpp"

#include "base/error.hpp"

namespace sao::env {

void read_env_name(base::JsonReader& reader, const char* expected, const std::string& where) {
  std::string name = expected;
  reader.read("name", name);
  if (name != expected) throw Error(where + ".name: expected \"" + expected + "\", got \"" + name + "\"");
}

}  // namespace sao::env
