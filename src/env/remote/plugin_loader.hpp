// Loading C++ environment plugins (env_plugin.hpp) into this process.
#pragma once

#include <string>
#include <vector>

namespace sao::env {

// This build's stamp (what a plugin's sao_env_plugin_abi() must return).
const char* host_plugin_abi_stamp();

// Loads the shared library at `path` once per process (a second call with
// the same file returns the first call's names), checks its ABI stamp and
// lets it register its environments. Returns the names it registered.
// Throws sao::Error naming `where` and the path when the file cannot be
// loaded, is not a sao plugin, was built against another sao (both stamps
// quoted), registers nothing, or throws while registering. A loaded plugin
// is never unloaded: its factories' code must outlive every environment.
// Only load plugins named by the user: loading runs the library's code.
std::vector<std::string> load_environment_plugin(const std::string& path, const std::string& where);

}  // namespace sao::env
