// C++ environment plugins: a shared library that registers environments with
// sao at run time, so a new C++ environment needs no fork and no rebuild of
// sao. `env.plugin: "path/to/libmyenv.so"` loads it (env/remote/plugin_loader.hpp);
// examples/env_plugin/ builds one out of tree with find_package(sao).
//
// A plugin includes this header (and env/environment.hpp through it), writes
// its env::Environment subclasses, and ends with one line:
//
//   void register_my_envs(const sao::env::EnvironmentRegistrar& registrar) {
//     registrar("my_game", [](const nlohmann::json& config, const std::string& where) {
//       return std::make_unique<MyGame>(config, where);
//     });
//   }
//   SAO_ENV_PLUGIN(register_my_envs)
//
// The macro exports two C functions: sao_env_plugin_abi() returns the stamp
// below, which sao compares with its own before anything else runs, and
// sao_env_plugin_register() hands the plugin a registrar. The stamp names
// what must match for C++ objects (std::string, std::function, nlohmann::json,
// the Environment vtable) to cross the library boundary: the plugin ABI
// version, sao's version, the compiler, libstdc++ and its string ABI, and
// nlohmann_json's version. A plugin built against another sao is refused with
// both stamps in the message, never loaded into a crash.
//
// Everything a plugin needs from sao is in headers (Environment's members are
// inline), so the library links nothing of sao's.
#pragma once

#include "env/environment.hpp"
#include "sao/plugin_abi.hpp"

#include <functional>
#include <string>

#define SAO_ENV_PLUGIN_STRINGIFY_(x) #x
#define SAO_ENV_PLUGIN_STRINGIFY(x) SAO_ENV_PLUGIN_STRINGIFY_(x)
// clang-format off
#define SAO_ENV_PLUGIN_ABI_STAMP                                                   \
  "sao-env-plugin " SAO_ENV_PLUGIN_STRINGIFY(SAO_ENV_PLUGIN_ABI)                   \
  "; sao " SAO_VERSION_STRING                                                      \
  "; compiler " __VERSION__                                                        \
  "; libstdc++ " SAO_ENV_PLUGIN_STRINGIFY(__GLIBCXX__)                             \
  "; cxx11 abi " SAO_ENV_PLUGIN_STRINGIFY(_GLIBCXX_USE_CXX11_ABI)                  \
  "; nlohmann_json " SAO_ENV_PLUGIN_STRINGIFY(NLOHMANN_JSON_VERSION_MAJOR)         \
  "." SAO_ENV_PLUGIN_STRINGIFY(NLOHMANN_JSON_VERSION_MINOR)
// clang-format on

namespace sao::env {

// Registers one environment under `name` (an existing name is replaced).
using EnvironmentRegistrar = std::function<void(const std::string& name, EnvironmentFactory factory)>;

}  // namespace sao::env

#define SAO_ENV_PLUGIN(register_function)                                              \
  extern "C" __attribute__((visibility("default"))) const char* sao_env_plugin_abi() { \
    return SAO_ENV_PLUGIN_ABI_STAMP;                                                   \
  }                                                                                    \
  extern "C" __attribute__((visibility("default"))) void sao_env_plugin_register(      \
      const ::sao::env::EnvironmentRegistrar& registrar) {                             \
    register_function(registrar);                                                      \
  }
