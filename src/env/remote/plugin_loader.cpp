// Plugin loading; see plugin_loader.hpp.
#include "env/remote/plugin_loader.hpp"

#include "base/error.hpp"
#include "env/env_plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>

namespace sao::env {

namespace {
using AbiFunction = const char* (*)();
using RegisterFunction = void (*)(const EnvironmentRegistrar&);
}  // namespace

const char* host_plugin_abi_stamp() {
  return SAO_ENV_PLUGIN_ABI_STAMP;
}

std::vector<std::string> load_environment_plugin(const std::string& path, const std::string& where) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<std::string>> loaded;  // canonical path -> names
  std::error_code error;
  const auto canonical = std::filesystem::canonical(path, error);
  if (error) throw Error(where + ": plugin '" + path + "' cannot be found (" + error.message() + ")");
  if (!std::filesystem::is_regular_file(canonical)) throw Error(where + ": plugin '" + path + "' is not a file");
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = loaded.find(canonical.string()); it != loaded.end()) return it->second;

  // RTLD_LOCAL: two plugins may define the same internal symbols.
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = ::dlerror();
    throw Error(where + ": cannot load plugin '" + path + "': " + (reason != nullptr ? reason : "unknown error"));
  }
  auto fail = [&](const std::string& problem) {
    ::dlclose(handle);  // nothing of it has run or been registered yet
    throw Error(where + ": plugin '" + path + "' " + problem);
  };
  const auto abi = reinterpret_cast<AbiFunction>(::dlsym(handle, "sao_env_plugin_abi"));
  const auto registration = reinterpret_cast<RegisterFunction>(::dlsym(handle, "sao_env_plugin_register"));
  if (abi == nullptr || registration == nullptr) {
    fail(
        "is not a sao environment plugin (it exports no sao_env_plugin_abi / sao_env_plugin_register; end the "
        "plugin's source with SAO_ENV_PLUGIN(register_function) from env/env_plugin.hpp)");
  }
  const std::string stamp = abi();
  if (stamp != host_plugin_abi_stamp()) {
    fail("was built against another sao: it says \"" + stamp + "\", this sao is \"" + host_plugin_abi_stamp() +
         "\"; rebuild the plugin against this build's headers (cmake --install, then find_package(sao))");
  }
  std::vector<std::string> names;
  const EnvironmentRegistrar registrar = [&names](const std::string& name, EnvironmentFactory factory) {
    if (name.empty()) throw Error("an environment name is empty");
    if (!factory) throw Error("environment '" + name + "' has no factory");
    register_environment(name, std::move(factory));
    names.push_back(name);
  };
  try {
    registration(registrar);
  } catch (const std::exception& failure) {
    // Some names may be registered already, so the library stays loaded.
    throw Error(where + ": plugin '" + path + "' failed while registering: " + failure.what());
  }
  if (names.empty()) throw Error(where + ": plugin '" + path + "' registered no environment");
  loaded[canonical.string()] = names;
  return names;
}

}  // namespace sao::env
