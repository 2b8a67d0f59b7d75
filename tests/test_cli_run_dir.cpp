// The sao binary takes --run-dir as a name, byte for byte: it goes into the
// run config through the JSON library, never pasted between quotes (a
// backslash made a directory with quotes in its name, and "\u0041" was
// decoded to "A").
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {
// Single-quoted for the shell.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

TEST_CASE("--run-dir with a backslash and \\u0041 names exactly that directory") {
  const fs::path base = fs::temp_directory_path() / ("sao_test_run_dir_" + std::to_string(::getpid()));
  fs::create_directories(base);
  const std::string name = "x\\y\\u0041\"q";
  const fs::path run_dir = base / name;
  const std::string command = std::string(SAO_BINARY) + " sft --steps 1 --set sft.log_every=1 --set eval.batch_size=8" +
                              " --set task.test_size=8 --run-dir " + quoted(run_dir.string()) + " > " +
                              quoted((base / "log.txt").string()) + " 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(fs::is_directory(run_dir));
  CHECK(fs::exists(run_dir / "config.json"));
  std::ifstream in(run_dir / "config.json");
  const auto stored = nlohmann::json::parse(in);
  CHECK(stored["run"]["dir"] == run_dir.string());
  // Nothing else was created beside it (no directory named with quotes or a decoded "A").
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(base)) entries += entry.is_directory() ? 1 : 0;
  CHECK(entries == 1);
  fs::remove_all(base);
}
