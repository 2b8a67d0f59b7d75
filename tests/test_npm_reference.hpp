// Installs pinned npm packages (a reference implementation) into a folder of
// the build tree on first use, for the parity tests.
#pragma once

#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sao_test {

// Nothing happens when every path of `ready` (relative to `dir`) exists;
// otherwise `npm install`s `packages` into `dir`, and a failure stops the
// test with npm's output and `what`.
inline void install_npm_packages(const std::filesystem::path& dir, const std::vector<std::string>& packages,
                                 const std::vector<std::string>& ready, const std::string& what) {
  bool installed = true;
  for (const auto& path : ready) installed = installed && std::filesystem::exists(dir / path);
  if (installed) return;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "package.json") << "{\"name\": \"sao-" << dir.filename().string() << "\", \"private\": true}";
  std::string command = "npm install --prefix " + quoted(dir.string()) + " --no-audit --no-fund";
  for (const auto& package : packages) command += " " + package;
  const auto result = run_command(command + " 2>&1");
  INFO(result.output);
  REQUIRE_MESSAGE(result.exit_code == 0, "npm could not install " << what);
}

}  // namespace sao_test
