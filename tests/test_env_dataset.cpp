// The dataset task: data files, verifiers and the environment over them.
// Each verifier is held to exact verdicts (what a reward of 1 means is the
// whole contract), each bad line to an error naming file:line, and the split
// to "a held-out problem is never trained on".
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "env/tasks/data_file.hpp"
#include "env/tasks/dataset_env.hpp"
#include "env/environment.hpp"
#include "env/verifier.hpp"
#include "train/task_runner.hpp"

#include "test_process_helpers.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using nlohmann::json;
using sao::env::DataLine;
using sao::env::make_verifier;

using sao_test::error_of;

namespace {

fs::path temp_dir() {
  static const fs::path dir = [] {
    auto path = fs::temp_directory_path() / ("sao_test_dataset_" + std::to_string(::getpid()));
    fs::create_directories(path);
    return path;
  }();
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const auto path = temp_dir() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

sao::env::Verdict verify(const json& verifier, const json& answer, const std::string& response) {
  auto made = make_verifier(verifier, "task.verifier");
  return made->verify("prompt", response, made->prepare(answer, "data.jsonl:1"));
}

std::unique_ptr<sao::env::Environment> dataset(const json& config) {
  return sao::env::make_environment("dataset", config, "cfg.task");
}

}  // namespace

TEST_CASE("verifier exact: trimmed equality, options, lists of accepted answers and numbers as text") {
  CHECK(verify("exact", "Paris", "  Paris\n").correct);
  CHECK_FALSE(verify("exact", "Paris", "paris").correct);
  CHECK(verify(json{{"type", "exact"}, {"case_sensitive", false}}, "Paris", "PARIS").correct);
  CHECK_FALSE(verify("exact", "New York", "New   York").correct);
  CHECK(verify(json{{"type", "exact"}, {"collapse_whitespace", true}}, "New York", "New \t York").correct);
  CHECK(verify("exact", json::array({"colour", "color"}), "color").correct);
  CHECK(verify("exact", 42, "42").correct);
  const auto wrong = verify("exact", "Paris", "Lyon");
  CHECK(wrong.reward == 0.0);
  CHECK(wrong.reason == "expected 'Paris', got 'Lyon'");
  CHECK(verify("exact", "Paris", "Paris").reward == 1.0);
}

TEST_CASE("verifier numeric and last_number: tolerance, thousands commas, the last number, reasons") {
  CHECK(verify("numeric", 19, "19").correct);
  CHECK(verify("numeric", 19, " 19.0 ").correct);
  CHECK(verify("numeric", "1234", "1,234").correct);
  CHECK_FALSE(verify("numeric", 19, "19 apples").correct);
  CHECK(verify("numeric", 19, "19 apples").reason == "the response '19 apples' is not a number");
  CHECK(verify("numeric", 0.5, "5e-1").correct);
  CHECK_FALSE(verify("numeric", 1.0, "1.001").correct);
  CHECK(verify(json{{"type", "numeric"}, {"tolerance", 0.01}}, 1.0, "1.001").correct);
  CHECK(verify(json{{"type", "numeric"}, {"relative_tolerance", 0.01}}, 1000, "1009").correct);
  CHECK_FALSE(verify(json{{"type", "numeric"}, {"relative_tolerance", 0.01}}, 1000, "1011").correct);
  CHECK(verify("last_number", 7, "3 + 4 = 7").correct);
  CHECK(verify("last_number", 4, "3-4").correct);  // a minus between terms is not a sign
  CHECK(verify("last_number", -4, "x = -4").correct);
  CHECK(verify("last_number", 1234567, "so the total is 1,234,567.").correct);
  CHECK(verify("last_number", 12, "first 1,2 then 12").correct);
  const auto none = verify("last_number", 7, "seven");
  CHECK_FALSE(none.correct);
  CHECK(none.reason == "no number in the response");
  CHECK(verify("last_number", 7, "I think 8").reason == "expected 7, got 8");
  double value = 0;
  CHECK(sao::env::parse_number_text(" -3.25 ", value));
  CHECK(value == -3.25);
  CHECK_FALSE(sao::env::parse_number_text("", value));
  CHECK_FALSE(sao::env::parse_number_text("12abc", value));
  CHECK_FALSE(sao::env::parse_number_text("1,23", value));
}

TEST_CASE("verifier regex: the whole trimmed response must match a PCRE2 pattern") {
  CHECK(verify("regex", "\\d{3}-\\d{4}", " 555-1234 ").correct);
  CHECK_FALSE(verify("regex", "\\d{3}-\\d{4}", "call 555-1234").correct);
  CHECK(verify("regex", json::array({"yes", "y(es)?"}), "y").correct);
  CHECK(verify("regex", "\\p{Lu}+", "ÉCOLE").correct);
  CHECK(verify("regex", ".+", std::string("\xff\xfe")).correct);  // invalid UTF-8 is replaced, not thrown
  CHECK(verify("regex", "abc", "abd").reason == "'abd' does not match /abc/");
  const auto bad = error_of([] { verify("regex", "(unclosed", "x"); });
  CHECK(bad.find("data.jsonl:1: \"answer\" pattern: the pattern does not compile") == 0);
}

TEST_CASE("verifier config errors name the key") {
  CHECK(error_of([] { make_verifier("fuzzy", "task.verifier"); }) ==
        "task.verifier.type: unknown verifier 'fuzzy' (one of exact, numeric, last_number, regex, command)");
  CHECK(error_of([] {
          make_verifier(json{{"type", "exact"}, {"tolerance", 1}}, "task.verifier");
        }).find("tolerance") != std::string::npos);
  CHECK(error_of([] {
          make_verifier(json{{"type", "numeric"}, {"tolerance", -1}}, "task.verifier");
        }) == "task.verifier.tolerance: must be a number in [0, 1e+09], got -1");
  CHECK(error_of([] {
          make_verifier(json{{"type", "command"}}, "task.verifier");
        }) == "task.verifier: set exactly one of command ([\"program\", \"arg\", ...]) or address (\"host:port\")");
  CHECK(error_of([] {
          make_verifier(json{{"type", "command"}, {"command", {"/no/such/verifier"}}}, "task.verifier");
        }).find("does not exist") != std::string::npos);
  CHECK(error_of([] { verify("numeric", "seven", "7"); }) ==
        "data.jsonl:1: \"answer\" '\"seven\"' is not a number (the numeric verifier needs one)");
  CHECK(error_of([] { verify("exact", json::array(), "7"); }) ==
        "data.jsonl:1: \"answer\" is an empty list (no response could be correct)");
  CHECK(error_of([] {
          verify("exact", json{{"a", 1}}, "7");
        }) ==
        "data.jsonl:1: \"answer\" must be a string, a number or a list of them for the exact verifier, got object");
}

TEST_CASE("data files: every bad line is named by file and line number") {
  const auto good =
      write_file("good.jsonl", "{\"prompt\":\"a\",\"answer\":1}\n\n  \n{\"prompt\":\"b\",\"answer\":2}\r\n");
  const auto lines = sao::env::read_jsonl_file(good, "cfg.task.train");
  REQUIRE(lines.size() == 2);
  CHECK(lines[1].where == good + ":4");
  CHECK(lines[1].value["prompt"] == "b");
  const auto broken = write_file("broken.jsonl", "{\"prompt\":\"a\",\"answer\":1}\n{\"prompt\": oops}\n");
  CHECK(error_of([&] { sao::env::read_jsonl_file(broken, "cfg.task.train"); }).find(broken + ":2: not a JSON line") ==
        0);
  const auto array = write_file("array.jsonl", "[1,2]\n");
  CHECK(error_of([&] { sao::env::read_jsonl_file(array, "cfg.task.train"); }) ==
        array + ":1: expected a JSON object per line, got array");
  // Errors about the whole file name the config key and the absolute path.
  const auto empty = write_file("empty.jsonl", "\n\n");
  CHECK(error_of([&] { sao::env::read_jsonl_file(empty, "cfg.task.train"); }) ==
        "cfg.task.train: " + std::filesystem::absolute(empty).lexically_normal().string() +
            ": no lines (an empty data file)");
  const auto missing = (temp_dir() / "missing.jsonl").string();
  CHECK(error_of([&] { sao::env::read_jsonl_file(missing, "cfg.task.heldout"); }) ==
        "cfg.task.heldout: " + std::filesystem::absolute(missing).lexically_normal().string() +
            ": cannot read (No such file or directory)");
  CHECK(error_of([&] { sao::env::read_jsonl_file(temp_dir().string(), "cfg.task.train"); }) ==
        "cfg.task.train: " + std::filesystem::absolute(temp_dir()).lexically_normal().string() +
            ": not a regular file");
  const auto deep = write_file("deep.jsonl", std::string(100000, '[') + "\n");
  CHECK(error_of([&] { sao::env::read_jsonl_file(deep, "cfg.task.train"); }).find(deep + ":1: not a JSON line") == 0);
}

TEST_CASE("demonstrations: prompt/response, dataset lines and chat transcripts") {
  const auto one = sao::env::demonstration_of({json{{"prompt", "2+2="}, {"response", "4"}}, "d:1"});
  REQUIRE(one.turns.size() == 1);
  CHECK(one.prompt == "2+2=");
  CHECK(one.turns[0].action == "4");
  CHECK(sao::env::demonstration_of({json{{"prompt", "p"}, {"answer", 19}}, "d:2"}).turns[0].action == "19");
  CHECK(sao::env::demonstration_of({json{{"prompt", "p"}, {"answer", {"yes", "y"}}}, "d:3"}).turns[0].action == "yes");
  const json chat = {{"messages",
                      {{{"role", "system"}, {"content", "Be brief."}},
                       {{"role", "user"}, {"content", "Reverse ab."}},
                       {{"role", "assistant"}, {"content", "ba"}},
                       {{"role", "tool"}, {"content", "ok"}},
                       {{"role", "assistant"}, {"content", "done"}}}}};
  const auto transcript = sao::env::demonstration_of({chat, "d:4"});
  CHECK(transcript.prompt == "Be brief.\n\nReverse ab.");
  REQUIRE(transcript.turns.size() == 2);
  CHECK(transcript.turns[0].action == "ba");
  CHECK(transcript.turns[0].observation == "ok");
  CHECK(transcript.turns[0].observation_role == "tool");  // a chat template renders it as a tool turn
  CHECK(transcript.turns[1].action == "done");
  CHECK(transcript.turns[1].observation.empty());
  CHECK(transcript.tools.empty());
  json with_tools = chat;
  with_tools["tools"] = {{{"type", "function"}, {"function", {{"name", "calc"}}}}};
  CHECK(sao::env::demonstration_of({with_tools, "d:10"}).tools ==
        R"([{"function":{"name":"calc"},"type":"function"}])");
  with_tools["tools"] = "calc";
  CHECK(error_of([&] {
          sao::env::demonstration_of({with_tools, "d:11"});
        }) == "d:11: \"tools\" must be a list of tool schemas");
  with_tools["tools"] = {1};
  CHECK(error_of([&] {
          sao::env::demonstration_of({with_tools, "d:12"});
        }) == "d:12: every entry of \"tools\" must be an object");
  CHECK(error_of([] {
          sao::env::demonstration_of(
              {json{{"messages", {{{"role", "tool"}, {"content", "1"}}, {{"role", "assistant"}, {"content", "a"}}}}},
               "d:13"});
        }) == "d:13: messages[0]: a tool message cannot open the conversation");
  CHECK(error_of([] {
          sao::env::demonstration_of({json{{"prompt", "p"}}, "d:5"});
        }) == "d:5: needs \"response\" (a string), or an \"answer\" that is a string or a number");
  CHECK(error_of([] {
          sao::env::demonstration_of({json{{"messages", {{{"role", "user"}, {"content", "q"}}}}}, "d:6"});
        }) == "d:6: \"messages\" must end with an assistant message (the demonstrated response)");
  CHECK(error_of([] {
          sao::env::demonstration_of({json{{"messages", {{{"role", "assistant"}, {"content", "a"}}}}}, "d:7"});
        }) == "d:7: messages[0]: the conversation must start with a user message");
  CHECK(error_of([] {
          sao::env::demonstration_of({json{{"messages", {{{"role", "user"}, {"content", 3}}}}}, "d:8"});
        }) == "d:8: messages[0]: \"content\" must be a string, got number");
  CHECK(error_of([] {
          sao::env::demonstration_of({json{{"messages", {{{"role", "robot"}, {"content", "x"}}}}}, "d:9"});
        }) == "d:9: messages[0]: unknown role 'robot' (system, user, assistant or tool)");
}

TEST_CASE("dataset env: one-turn episodes scored by the verifier, with accuracy, success and a reason") {
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "{\"prompt\":\"Add " + std::to_string(i) + " and 1.\",\"answer\":" + std::to_string(i + 1) + "}\n";
  const auto path = write_file("add.jsonl", text);
  auto env = dataset({{"name", "dataset"}, {"train", path}, {"verifier", "numeric"}, {"heldout_fraction", 0.2}});
  const auto first = env->reset(11);
  CHECK(first.observation.rfind("Add ", 0) == 0);
  CHECK(first.info["episode_key"].get<std::string>().rfind("dataset:", 0) == 0);
  const int a = std::stoi(first.observation.substr(4));
  const auto right = env->step(std::to_string(a + 1));
  CHECK(right.terminated);
  CHECK(right.reward == 1.0);
  CHECK(right.info["accuracy"] == 1.0);
  CHECK(right.info["success"] == true);
  CHECK(right.info["item"].get<std::string>().rfind(path + ":", 0) == 0);
  CHECK(error_of([&] { env->step("1"); }) == "dataset env: step() called before reset() or after the episode ended");
  env->reset(11);
  const auto wrong = env->step("0");
  CHECK(wrong.reward == 0.0);
  CHECK(wrong.info["success"] == false);
  CHECK(wrong.info["reason"] == "expected " + std::to_string(a + 1) + ", got 0");
  CHECK(env->reset(11).observation == first.observation);  // the same seed, the same problem

  // The split: disjoint, deterministic, roughly the fraction, and reset() never yields a held-out problem.
  std::set<std::string> heldout;
  for (int64_t i = 0; i < env->heldout_size(); ++i) heldout.insert(env->reset_heldout(i).observation);
  CHECK(env->heldout_size() > 2);
  CHECK(env->heldout_size() < 25);
  for (uint64_t seed = 0; seed < 300; ++seed) CHECK(heldout.count(env->reset(seed).observation) == 0);
  CHECK(error_of([&] { env->reset_heldout(env->heldout_size()); }).find("outside [0, ") != std::string::npos);
  // Demonstrations come from the training split only, answering with the answer.
  for (const auto& episode : env->demonstrations(64, 3)) {
    CHECK(heldout.count(episode.prompt) == 0);
    CHECK(std::stoi(episode.turns.at(0).action) == std::stoi(episode.prompt.substr(4)) + 1);
  }
  CHECK(env->limits().max_turns == 1);
}

TEST_CASE("dataset env: several turns from messages and from turns; per-turn rewards") {
  const auto path = write_file(
      "chat.jsonl",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"Reverse ab.\"},{\"role\":\"assistant\",\"content\":\"ba\"},"
      "{\"role\":\"user\",\"content\":\"Now in capitals.\"}],\"answer\":\"BA\"}\n"
      "{\"turns\":[{\"prompt\":\"Reverse "
      "cd.\",\"answer\":\"dc\"},{\"prompt\":\"Capitals?\",\"answer\":\"DC\",\"response\":\"DC\"}]}\n");
  auto env = dataset({{"name", "dataset"}, {"train", path}, {"heldout_fraction", 0}});
  CHECK(env->limits().max_turns == 2);
  CHECK(env->heldout_size() == 0);
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const auto start = env->reset(seed);
    const bool ab = start.observation == "Reverse ab.";
    const auto middle = env->step(ab ? "ba" : "xx");
    CHECK_FALSE(middle.done());
    CHECK(middle.observation == (ab ? "Now in capitals." : "Capitals?"));
    CHECK(middle.reward == (ab ? 1.0 : 0.0));
    const auto end = env->step(ab ? "BA" : "DC");
    CHECK(end.terminated);
    CHECK(end.reward == 1.0);
    CHECK(end.info["accuracy"] == (ab ? 1.0 : 0.5));
    CHECK(end.info["success"] == ab);
    if (!ab) CHECK(end.info["reason"] == "expected 'dc', got 'xx'");
  }
  const auto demos = env->demonstrations(8, 1);
  REQUIRE(demos.size() == 8);
  for (const auto& demo : demos) {
    REQUIRE(demo.turns.size() == 2);
    CHECK(demo.turns[0].observation == (demo.prompt == "Reverse ab." ? "Now in capitals." : "Capitals?"));
  }
}

TEST_CASE("dataset env: config and line errors name the file, the line and the key") {
  const auto good =
      write_file("one.jsonl", "{\"prompt\":\"q\",\"answer\":\"a\"}\n{\"prompt\":\"r\",\"answer\":\"b\"}\n");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}});
        }) == "cfg.task.train: missing (a JSON-lines file, or a list of them)");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", good}, {"shuffle", true}});
        }).find("shuffle") != std::string::npos);
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", good}, {"heldout_fraction", 1.0}});
        }) == "cfg.task.heldout_fraction: must be a number in [0, 1), got 1.0");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", good}, {"verifier", 3}});
        }).find("cfg.task.verifier: must be a verifier type") == 0);
  const auto both = write_file("both.jsonl", "{\"prompt\":\"q\",\"messages\":[],\"answer\":1}\n");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", both}});
        }) == both + ":1: needs exactly one of \"prompt\", \"messages\" or \"turns\" (it has several)");
  const auto no_answer = write_file("noanswer.jsonl", "{\"prompt\":\"q\"}\n");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", no_answer}});
        }) == no_answer + ":1: missing \"answer\"");
  // The same problem in a held-out file and a training file.
  const auto heldout = write_file("heldout.jsonl", "{\"prompt\":\"r\",\"answer\":\"b\"}\n");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", good}, {"heldout", heldout}});
        }) == good + ":2: the same problem as held-out " + heldout +
                  ":1 (a held-out problem must never be trained on; remove one of them)");
  CHECK(error_of([&] {
          dataset({{"name", "dataset"}, {"train", good}, {"heldout", heldout}, {"heldout_fraction", 0.2}});
        }) == "cfg.task: set heldout files or heldout_fraction, not both");
  const auto other = write_file("other.jsonl", "{\"prompt\":\"s\",\"answer\":\"c\"}\n");
  const auto third = write_file("third.jsonl", "{\"prompt\":\"t\",\"answer\":\"d\"}\n");
  auto env = dataset({{"name", "dataset"}, {"train", json::array({other, third})}, {"heldout", heldout}});
  CHECK(env->heldout_size() == 1);
  CHECK(env->reset_heldout(0).observation == "r");
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) seen.insert(env->reset(seed).observation);
  CHECK(seen == std::set<std::string>{"s", "t"});
}

TEST_CASE("dataset env: a command verifier speaks one JSON line per verification") {
  const auto script = write_file("verifier.py", R"PY(
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    req = json.loads(line)
    if req["method"] == "close":
        break
    if mode == "crash":
        sys.stderr.write("verifier exploded\n"); sys.exit(4)
    if mode == "noreward":
        print(json.dumps({"id": req["id"], "correct": True}), flush=True); continue
    good = req["response"].strip().lower() == str(req["answer"]).lower()
    print(json.dumps({"id": req["id"], "reward": 0.5 if good else -0.25, "correct": good,
                      "reason": "checked " + req["prompt"]}), flush=True)
)PY");
  const auto data = write_file("cmd.jsonl", "{\"prompt\":\"Capital of France?\",\"answer\":\"Paris\"}\n");
  auto make = [&](const std::string& mode) {
    return dataset(
        {{"name", "dataset"},
         {"train", data},
         {"heldout_fraction", 0},
         {"verifier", {{"type", "command"}, {"command", {"python3", script, mode}}, {"timeout_ms", 20000}}}});
  };
  auto env = make("ok");
  env->reset(1);
  const auto good = env->step("paris");
  CHECK(good.reward == 0.5);
  CHECK(good.info["success"] == true);
  CHECK(good.info["reason"] == "checked Capital of France?");
  env->reset(2);
  CHECK(env->step("Lyon").reward == -0.25);

  auto crashing = make("crash");
  crashing->reset(1);
  const auto crash = error_of([&] { crashing->step("x"); });
  CHECK(crash.find("verifier 'crash': verify (id 1): no reply: the process exited with status 4") == 0);
  CHECK(crash.find("verifier exploded") != std::string::npos);
  CHECK(error_of([&] { crashing->step("x"); }).find("step() called before reset()") != std::string::npos);

  auto incomplete = make("noreward");
  incomplete->reset(1);
  CHECK(error_of([&] {
          incomplete->step("x");
        }).find("verifier 'noreward': verify (id 1): reply needs \"reward\" (a number)") == 0);
}

TEST_CASE("sft.data: demonstrations whose prompt is a held-out problem are dropped") {
  std::string problems;
  for (int i = 0; i < 200; ++i)
    problems += "{\"prompt\":\"Add " + std::to_string(i) + " and 2.\",\"answer\":" + std::to_string(i + 2) + "}\n";
  const auto data = write_file("sft_problems.jsonl", problems);
  auto config = sao::config::load_run_config(
      "", {"env.name=\"dataset\"", "task={\"name\":\"dataset\",\"train\":\"" + data + "\",\"verifier\":\"numeric\"}",
           "sft.data=\"" + data + "\""});
  CHECK(config.sft.data == data);
  auto env = sao::env::make_environment("dataset", config.task_document, "cfg.task");
  std::set<std::string> heldout;
  for (int64_t i = 0; i < env->heldout_size(); ++i) heldout.insert(env->reset_heldout(i).observation);
  REQUIRE_FALSE(heldout.empty());
  int64_t dropped = 0;
  const auto episodes = sao::train::demonstrations_apart_from_heldout(config, &dropped);
  CHECK(dropped == static_cast<int64_t>(heldout.size()));
  CHECK(episodes.size() + heldout.size() == 200);
  for (const auto& episode : episodes) CHECK(heldout.count(episode.prompt) == 0);

  const auto bad =
      write_file("sft_bad.jsonl", "{\"prompt\":\"q\",\"response\":\"a\"}\n{\"prompt\":\"q\",\"response\":7}\n");
  config.sft.data = bad;
  CHECK(error_of([&] { sao::train::demonstrations_apart_from_heldout(config, &dropped); }) ==
        bad + ":2: \"response\" must be a string, got number");
  // A missing file names the key, from the --set that set it, and the path.
  const auto gone = (temp_dir() / "gone.jsonl").string();
  config.sft.data = gone;
  CHECK(error_of([&] { sao::train::demonstrations_apart_from_heldout(config, &dropped); }) ==
        "--set sft.data=\"" + data + "\": sft.data: " + gone + ": cannot read (No such file or directory)");
}
