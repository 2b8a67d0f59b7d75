// The introspection console against a live run on a tiny model: the actor
// list is complete with the right kinds; the real `sao console` binary's
// commands do what they claim (pause stops new rollouts, set changes
// admission and batching, checkpoint writes one, stop ends the run) and
// each is logged; control without the token is refused; /metrics parses as
// Prometheus text; and the dashboard renders its charts and actor table
// with data in headless Chromium (screenshot kept as a test artifact).
#include "actors/train.hpp"
#include "config/run_config.hpp"
#include "env/tasks/arithmetic.hpp"
#include "model/checkpoint.hpp"
#include "model/transformer.hpp"
#include "test_process_helpers.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/task_runner.hpp"

#include <doctest/doctest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

constexpr int kRollouts = 2;

sao::config::RunConfig tiny_config(const std::string& run_dir) {
  return sao::config::load_run_config("", {
                                              "run.dir=\"" + run_dir + "\"",
                                              "model.hidden_size=32",
                                              "model.intermediate_size=64",
                                              "model.num_hidden_layers=1",
                                              "model.num_attention_heads=2",
                                              "model.num_key_value_heads=1",
                                              "model.max_position_embeddings=32",
                                              "task.min_digits=1",
                                              "task.max_digits=1",
                                              "task.test_size=8",
                                              // Plain answers: 4 new tokens leave no room for a worked one.
                                              "task.demonstration_worked_rate=0",
                                              "sft.curriculum=[]",
                                              "eval.max_new_tokens=4",
                                              "rollout.max_new_tokens=4",
                                              "rollout.slots=8",
                                              "rollout.num_actors=" + std::to_string(kRollouts),
                                              "train.steps=1000000",  // ends by the console's stop
                                              "train.eval_every=10",
                                              "train.checkpoint_every=0",
                                              "console.port=0",
                                          });
}

using sao_test::CommandResult;
using sao_test::run_command;

// A warm start trained once and saved; every run loads its own copy, so the
// charts (and the README's screenshot) show a policy that earns reward.
sao::model::CausalLM warm_policy(const sao::config::RunConfig& config) {
  static const std::string saved = [&] {
    const auto dir = (fs::temp_directory_path() / ("sao_slow_console_sft_" + std::to_string(::getpid()))).string();
    sao::model::CausalLM policy(config.model);
    sao::model::init_weights(*policy, 3);
    sao::train::run_warm_start(policy, config, nullptr);
    sao::model::save_policy_checkpoint(dir, policy, {{"tokenizer", "byte"}, {"stage", "sft"}});
    return dir;
  }();
  return sao::model::load_policy_checkpoint(saved);
}

CommandResult console(const std::string& run_dir, const std::string& command) {
  return run_command(std::string(SAO_BINARY) + " console --run-dir " + run_dir + " --command \"" + command + "\"");
}

struct Endpoint {
  std::string host;
  int port = 0;
  std::string token;
};

nlohmann::json get_json(httplib::Client& client, const std::string& path) {
  auto reply = client.Get(path.c_str());
  REQUIRE(reply);
  INFO(reply->body);
  REQUIRE(reply->status == 200);
  return nlohmann::json::parse(reply->body);
}

nlohmann::json actor_named(const nlohmann::json& actors, const std::string& name) {
  for (const auto& actor : actors) {
    if (actor["name"] == name) return actor;
  }
  FAIL("no actor named " << name);
  return {};
}

// How long the test waits for an event before calling it a hang: not a
// speed requirement (the run shares two cores with a build in CI).
constexpr auto kHangGuard = std::chrono::milliseconds(std::chrono::minutes(3));

// Polls `condition` every 100 ms for at most `limit`.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return condition();
}

std::vector<nlohmann::json> metrics_lines(const std::string& run_dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::string read_file(const fs::path& path) {
  return sao_test::read_text(path);
}

void check_prometheus_text(const std::string& text) {
  static const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*")*\})? (NaN|[+-]Inf|-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)$)");
  static const std::regex comment(R"(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
  std::set<std::string> typed, helped;
  std::istringstream in(text);
  int samples = 0;
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (std::regex_match(line, match, comment)) {
      (match[1] == "TYPE" ? typed : helped).insert(match[2]);
      continue;
    }
    INFO("line: " << line);
    CHECK(std::regex_match(line, sample));
    const auto name = line.substr(0, line.find_first_of("{ "));
    CHECK(typed.count(name) == 1);
    CHECK(helped.count(name) == 1);
    ++samples;
  }
  CHECK(samples > 20);
}

}  // namespace

TEST_CASE("the console watches and steers a live run") {
  const auto dir = fs::temp_directory_path() / ("sao_slow_console_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string run_dir = dir.string();
  const auto config = tiny_config(run_dir);
  auto policy = warm_policy(config);
  std::atomic<bool> stop_requested{false};
  auto run =
      std::async(std::launch::async, [&] { return sao::actors::run_training(config, policy, "", &stop_requested); });

  REQUIRE(eventually([&] { return fs::exists(dir / "console.json"); }, kHangGuard));
  const auto endpoint_json = nlohmann::json::parse(read_file(dir / "console.json"));
  const Endpoint endpoint{endpoint_json["host"], endpoint_json["port"].get<int>(), endpoint_json["token"]};
  CHECK(endpoint.host == "127.0.0.1");
  CHECK(endpoint.token.size() == 32);
  CHECK((fs::status(dir / "console.json").permissions() & fs::perms::others_read) == fs::perms::none);
  httplib::Client client(endpoint.host, endpoint.port);
  client.set_read_timeout(60);
  REQUIRE(eventually([&] { return !get_json(client, "/api/metrics?since=-1")["latest"].is_null(); }, kHangGuard));

  SUBCASE("introspection lists every actor with its kind, node, id and counters") {
    const auto actors = get_json(client, "/api/actors");
    std::map<std::string, int> kinds;
    std::set<uint64_t> ids;
    for (const auto& actor : actors) {
      ++kinds[actor["kind"].get<std::string>()];
      ids.insert(actor["actor_id"].get<uint64_t>());
      CHECK(!actor["node"].get<std::string>().empty());
      CHECK(actor["state"] != "unresponsive");
    }
    CHECK(kinds == std::map<std::string, int>{{"coordinator", 1},
                                              {"learner", 1},
                                              {"replay", 1},
                                              {"weight_sync", 1},
                                              {"metrics", 1},
                                              {"introspection", 1},
                                              {"rollout", kRollouts},
                                              {"env", 1}});
    CHECK(ids.size() == actors.size());
    const auto learner = actor_named(actors, "learner");
    CHECK(learner["messages_handled"].get<int64_t>() > 0);
    CHECK(learner["numbers"]["step"].get<double>() >= 1);
    CHECK(actor_named(actors, "rollout-1")["numbers"].contains("tokens_per_s"));
    CHECK(actor_named(actors, "replay")["numbers"].contains("max_staleness"));
    const auto weight_sync = actor_named(actors, "weight-sync");
    CHECK(weight_sync["numbers"].contains("version.rollout-0"));
    CHECK(weight_sync["numbers"].contains("version.rollout-1"));
    const auto top = console(run_dir, "top");
    CHECK(top.exit_code == 0);
    CHECK(top.output.find("rollout-1") != std::string::npos);
    const auto inspect = console(run_dir, "inspect replay");
    CHECK(inspect.output.find("mailbox depth") != std::string::npos);
    CHECK(console(run_dir, "inspect nobody").output.find("inspect nobody: no such actor") != std::string::npos);
  }

  SUBCASE("control without the right token is refused and changes nothing") {
    auto missing = client.Post("/api/control", R"({"command":"pause"})", "application/json");
    REQUIRE(missing);
    CHECK(missing->status == 401);
    CHECK(missing->body.find("control needs the run's token") != std::string::npos);
    auto wrong = client.Post("/api/control", {{"Authorization", "Bearer 0123456789abcdef0123456789abcdef"}},
                             R"({"command":"pause"})", "application/json");
    REQUIRE(wrong);
    CHECK(wrong->status == 403);
    CHECK(get_json(client, "/api/metrics?since=999999999")["knobs"]["rollouts_paused"] == 0.0);
    const auto without = run_command(std::string(SAO_BINARY) + " console --connect " + endpoint.host + ":" +
                                     std::to_string(endpoint.port) + " --command pause");
    CHECK(without.exit_code != 0);
    CHECK(without.output.find("control commands need the run's token") != std::string::npos);
  }

  SUBCASE("/metrics is valid Prometheus text") {
    auto reply = client.Get("/metrics");
    REQUIRE(reply);
    CHECK(reply->status == 200);
    CHECK(reply->get_header_value("Content-Type").find("text/plain") == 0);
    check_prometheus_text(reply->body);
    CHECK(reply->body.find("\nsao_step ") != std::string::npos);
    CHECK(reply->body.find("sao_actor_up{actor=\"learner\"") != std::string::npos);
  }

  SUBCASE("pause stops new rollouts; resume starts them again") {
    auto paused = console(run_dir, "pause rollouts");
    CHECK(paused.exit_code == 0);
    CHECK(paused.output.find("rollouts paused") != std::string::npos);
    auto all_paused = [&] {
      int count = 0;
      for (const auto& actor : get_json(client, "/api/actors")) count += actor["state"] == "paused";
      return count == kRollouts;
    };
    REQUIRE(eventually(all_paused, kHangGuard));
    auto received = [&] {
      return actor_named(get_json(client, "/api/actors"), "replay")["numbers"]["received"].get<double>();
    };
    const double before = received();
    std::this_thread::sleep_for(1500ms);
    CHECK(received() == before);
    CHECK(get_json(client, "/api/metrics?since=999999999")["knobs"]["rollouts_paused"] == 1.0);
    CHECK(console(run_dir, "resume").exit_code == 0);
    CHECK(eventually([&] { return received() > before; }, kHangGuard));
  }

  SUBCASE("set changes admission and batching, is logged, and bad values are refused by name") {
    auto staleness = console(run_dir, "set max_staleness 0");
    CHECK(staleness.exit_code == 0);
    CHECK(staleness.output.find("set max_staleness = 0") != std::string::npos);
    const auto actors = get_json(client, "/api/actors");
    CHECK(actor_named(actors, "replay")["numbers"]["max_staleness"] == 0.0);
    CHECK_FALSE(actor_named(actors, "learner")["numbers"].contains("max_staleness"));  // one owner: replay
    // Back to a limit two rollouts can meet while the learner waits for 8.
    CHECK(console(run_dir, "set max_staleness 4").exit_code == 0);

    CHECK(console(run_dir, "set min_batch 8").exit_code == 0);
    const auto set_at = get_json(client, "/api/metrics?since=999999999")["events"].back()["step"].get<int64_t>();
    REQUIRE(eventually(
        [&] { return get_json(client, "/api/metrics?since=999999999")["latest"]["step"].get<int64_t>() >= set_at + 4; },
        kHangGuard));
    for (const auto& line : metrics_lines(run_dir)) {
      if (line.contains("event") || line.contains("eval") || line["step"].get<int64_t>() <= set_at + 1) continue;
      CHECK(line["trajectories"].get<double>() >= 8);
      CHECK(line["min_batch"] == 8.0);
      CHECK(line["max_staleness"] == 4.0);
    }
    const auto log = read_file(dir / "control.log");
    CHECK(log.find("set max_staleness 0") != std::string::npos);
    CHECK(log.find("set max_staleness 4") != std::string::npos);
    CHECK(log.find("set min_batch 8") != std::string::npos);

    auto zero = console(run_dir, "set min_batch 0");
    CHECK(zero.exit_code != 0);
    CHECK(zero.output.find("set min_batch: must be an integer in [1, ") != std::string::npos);
    CHECK(zero.output.find("], got 0") != std::string::npos);
    auto bogus = console(run_dir, "set temperature 2");
    CHECK(bogus.exit_code != 0);
    CHECK(bogus.output.find("not a live knob") != std::string::npos);
    auto too_small = console(run_dir, "set max_batch 4");
    CHECK(too_small.output.find("max_batch: must be >= min_batch") != std::string::npos);
    CHECK(actor_named(get_json(client, "/api/actors"), "replay")["numbers"]["max_batch"] == 64.0);
    auto lr = console(run_dir, "set actor_lr 0.0002");
    CHECK(lr.exit_code == 0);
    CHECK(actor_named(get_json(client, "/api/actors"), "learner")["numbers"]["actor_lr"] == 0.0002);
  }

  SUBCASE("checkpoint on request") {
    auto saved = console(run_dir, "checkpoint");
    CHECK(saved.exit_code == 0);
    CHECK(saved.output.find("checkpoint written to") != std::string::npos);
    CHECK(fs::exists(dir / "checkpoint" / "learner" / "learner_state.json"));
    CHECK(read_file(dir / "control.log").find(" checkpoint ") != std::string::npos);
  }

  SUBCASE("the dashboard renders charts and the actor table in headless Chromium") {
    // Enough steps for the charts to show a trend in the screenshot.
    REQUIRE(eventually(
        [&] { return get_json(client, "/api/metrics?since=999999999")["latest"]["step"].get<int64_t>() >= 40; }, 90s));
    const std::string url = "http://" + endpoint.host + ":" + std::to_string(endpoint.port) + "/";
    const std::string chromium =
        "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars "
        "--virtual-time-budget=6000 ";
    const auto dom = run_command(chromium + "--dump-dom " + url);
    INFO(dom.output.substr(0, 2000));
    REQUIRE(dom.exit_code == 0);
    CHECK(dom.output.find("data-kind=\"learner\"") != std::string::npos);
    CHECK(dom.output.find("data-kind=\"rollout\"") != std::string::npos);
    const std::regex reward_points(R"re(id="chart-reward" data-points="([0-9]+)")re");
    std::smatch match;
    REQUIRE(std::regex_search(dom.output, match, reward_points));
    CHECK(std::stoi(match[1]) > 0);
    const auto artifacts = fs::path(SAO_ARTIFACT_DIR);
    fs::create_directories(artifacts);
    const auto png = artifacts / "dashboard.png";
    fs::remove(png);
    const auto shot = run_command(chromium + "--window-size=1400,1100 --screenshot=" + png.string() + " " + url);
    CHECK(shot.exit_code == 0);
    CHECK(fs::exists(png));
    CHECK(fs::file_size(png) > 10000);
  }

  auto stopped = console(run_dir, "stop");
  CHECK(stopped.exit_code == 0);
  CHECK(stopped.output.find("stopping") != std::string::npos);
  REQUIRE(run.wait_for(120s) == std::future_status::ready);
  const auto outcome = run.get();
  CHECK(outcome.reason == "stopped on request");
  CHECK(outcome.actors_left_running == 0);
  CHECK_FALSE(fs::exists(dir / "console.json"));
  fs::remove_all(dir);
}
