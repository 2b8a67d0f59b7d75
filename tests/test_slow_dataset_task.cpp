// README "Bring your own task", exactly as written there: a JSON-lines data
// file and one config file go from nothing to a trained run
// (sao sft --data, then sao train), and reinforcement learning lifts held-out
// accuracy above where the warm start left it. Also: the example data sets
// in the repo are what examples/datasets/make_examples.py writes.
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using sao_test::quoted;
using sao_test::read_text;
using sao_test::run_command;

namespace {

std::vector<nlohmann::json> json_lines(const fs::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

}  // namespace

TEST_CASE("the example data sets are what the script in the repo writes") {
  const fs::path out = fs::temp_directory_path() / ("sao_examples_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const std::string source = SAO_SOURCE_DIR;
  const auto made = run_command("/usr/bin/python3 " + quoted(source + "/examples/datasets/make_examples.py") + " " +
                                quoted(out.string()) + "");
  REQUIRE_MESSAGE(made.exit_code == 0, made.output);
  for (const char* name : {"add_words.jsonl", "add_words_demos.jsonl", "reverse.jsonl"}) {
    CHECK_MESSAGE(read_text(out / name) == read_text(fs::path(source) / "examples/datasets" / name), name);
  }
  fs::remove_all(out);
}

TEST_CASE("README: a data file and a config file -> sao sft --data -> sao train -> held-out accuracy above the start") {
  const fs::path run_dir = fs::temp_directory_path() / ("sao_byo_task_" + std::to_string(::getpid()));
  fs::remove_all(run_dir);
  const std::string in_source = "cd " + quoted(SAO_SOURCE_DIR) + " && " + quoted(SAO_BINARY);
  const std::string common = " --config examples/datasets/add_words.json --run-dir " + quoted(run_dir.string());
  const auto sft = run_command(in_source + " sft" + common + " --data examples/datasets/add_words_demos.jsonl");
  REQUIRE_MESSAGE(sft.exit_code == 0, sft.output);
  // --data is the working directory's, recorded absolute.
  CHECK(sft.output.find("demonstrations from " + std::string(SAO_SOURCE_DIR) +
                        "/examples/datasets/add_words_demos.jsonl (") != std::string::npos);
  CHECK(sft.output.find("dropped: prompt of a held-out problem)") != std::string::npos);
  double start = -1.0;
  for (const auto& line : json_lines(run_dir / "sft_metrics.jsonl")) {
    if (line.contains("eval")) start = line["heldout_accuracy"].get<double>();
  }
  REQUIRE(start >= 0.0);

  const auto train = run_command(in_source + " train" + common + "");
  REQUIRE_MESSAGE(train.exit_code == 0, train.output);
  std::vector<nlohmann::json> evals;
  for (const auto& line : json_lines(run_dir / "metrics.jsonl")) {
    if (line.contains("eval")) evals.push_back(line);
  }
  REQUIRE(evals.size() >= 2);
  CHECK(evals.front()["heldout_accuracy"].get<double>() == doctest::Approx(start));  // the run starts from the warm start
  CHECK(evals.back()["step"] == 300);
  const double end = evals.back()["heldout_accuracy"].get<double>();
  MESSAGE("held-out accuracy: warm start " << start << ", after 300 SAO steps " << end);
  CHECK(end > start);
  CHECK(evals.back()["total"].get<int64_t>() >= 20);
  fs::remove_all(run_dir);
}
