// What every environment's config reader shares.
#pragma once

#include "base/json_reader.hpp"

#include <string>

namespace sao::env {

// Reads the section's optional "name" and checks that it is `expected` (a
// class's kName); throws sao::Error naming `where`.name otherwise.
void read_env_name(base::JsonReader& reader, const char* expected, const std::string& where);

}  // namespace sao::env
