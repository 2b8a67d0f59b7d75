// The sao binary takes --run-dir as a name, byte for byte: it goes into the
// run config through the JSON library, never pasted between quotes (a
// backslash made a directory with quotes in its name, and "\u0041" was
// decoded to "A").
#include "report/run_summary.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

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

namespace {
// Runs `command` through the shell with stdout and stderr into `log`; returns
// the exit status and the log's text.
std::pair<int, std::string> run_logged(const std::string& command, const fs::path& log) {
  const int status = std::system((command + " > " + quoted(log.string()) + " 2>&1").c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
}
}  // namespace

TEST_CASE("sao eval --pass-k prints pass@1..K of the held-out split and refuses a bad K") {
  const fs::path base = fs::temp_directory_path() / ("sao_test_pass_k_" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string sao = SAO_BINARY;
  const std::string small = " --set eval.batch_size=8 --set task.test_size=8";
  REQUIRE(run_logged(sao + " sft --steps 1" + small + " --run-dir " + quoted((base / "run").string()), base / "sft.log")
              .first == 0);
  const std::string eval = sao + " eval --checkpoint " + quoted((base / "run" / "sft").string()) + small;

  const auto [status, log] = run_logged(eval + " --pass-k 4", base / "eval.log");
  REQUIRE(status == 0);
  const auto last_line = log.substr(log.rfind("\n{") + 1);  // the JSON line closes the output
  const auto line = nlohmann::json::parse(last_line);
  CHECK(line["problems"] == 8);
  CHECK(line["samples"] == 4);
  CHECK(line["temperature"] == 1.0);
  REQUIRE(line["pass_at"].size() == 3);  // k = 1, 2 and the sample count 4
  const double p1 = line["pass_at"]["1"], p2 = line["pass_at"]["2"], p4 = line["pass_at"]["4"];
  CHECK(0.0 <= p1);
  CHECK(p1 <= p2);
  CHECK(p2 <= p4);
  CHECK(p4 <= 1.0);
  // pass@K with K samples is the fraction of problems solved at least once:
  // a multiple of 1/8 here.
  CHECK(p4 * 8 == doctest::Approx(std::round(p4 * 8)));
  CHECK(log.find("pass@4") != std::string::npos);

  const auto zero = run_logged(eval + " --pass-k 0", base / "zero.log");
  CHECK(zero.first != 0);
  CHECK(zero.second.find("--pass-k: K must be in [1, 256], got 0") != std::string::npos);
  const auto cold = run_logged(eval + " --pass-k 2 --pass-k-temperature 0", base / "cold.log");
  CHECK(cold.first != 0);
  CHECK(cold.second.find("--pass-k-temperature: must be > 0, got 0") != std::string::npos);
  const auto alone = run_logged(eval + " --pass-k-temperature 0.5", base / "alone.log");
  CHECK(alone.first != 0);
  CHECK(alone.second.find("--pass-k-temperature needs --pass-k K") != std::string::npos);
  // Arithmetic's held-out episodes report worked answers ("w..>") through
  // info "counts": evaluation sums them, on their own lines and in the JSON line.
  const auto plain = run_logged(eval, base / "plain.log");
  CHECK(plain.first == 0);
  CHECK(plain.second.find("\nworked: ") != std::string::npos);
  CHECK(plain.second.find("\nworked_correct: ") != std::string::npos);
  const auto json_begin = plain.second.rfind("\n{");
  REQUIRE(json_begin != std::string::npos);
  const auto eval_line = nlohmann::json::parse(plain.second.substr(json_begin + 1));
  const auto counts = sao::report::counts_of_eval_line(eval_line);
  CHECK(counts.size() == 2);
  REQUIRE(counts["worked"].is_number_integer());
  CHECK(counts["worked"].get<int64_t>() >= 0);
  CHECK(counts["worked"].get<int64_t>() <= eval_line["total"].get<int64_t>());
  CHECK(counts["worked_correct"].get<int64_t>() <= counts["worked"].get<int64_t>());
  CHECK(eval_line["total"] == 8);
  fs::remove_all(base);
}
