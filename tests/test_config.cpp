// Run-config loading: the embedded default parses, overrides apply, and bad
// input names the key and the file.
#include "base/error.hpp"
#include "config/run_config.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using sao::config::apply_override;
using sao::config::default_config_document;
using sao::config::parse_run_config;

namespace {
std::string error_of(const nlohmann::json& document) {
  try {
    parse_run_config(document, "test.json");
  } catch (const sao::Error& error) {
    return error.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the embedded default config parses and matches config/default.json") {
  const auto config = parse_run_config(default_config_document(), "embedded");
  CHECK(config.model.vocab_size == 264);
  CHECK(config.task_document["max_digits"] >= config.task_document["min_digits"]);
  const auto file = sao::config::read_json_file(std::string(SAO_SOURCE_DIR) + "/config/default.json");
  CHECK(file == default_config_document());
}

namespace {
// The learner keys an algorithm preset chooses (they differ between the
// presets). config/default.json may leave them out: a file that selects
// another algorithm is merged over default.json, so a value named there
// would override that algorithm's preset.
std::set<std::string> preset_chosen_learner_keys() {
  using sao::algo::Algorithm;
  using sao::algo::LearnerConfig;
  const auto sao_preset = LearnerConfig::preset(Algorithm::kSao).to_json();
  std::set<std::string> keys;
  for (const auto algorithm : {Algorithm::kGrpo, Algorithm::kPpo}) {
    const auto other = LearnerConfig::preset(algorithm).to_json();
    for (const auto& item : sao_preset.items()) {
      if (item.key() != "algorithm" && other.at(item.key()) != item.value()) keys.insert(item.key());
    }
  }
  return keys;
}
}  // namespace

TEST_CASE("config/default.json sets every key, each to the code's default, so the two cannot drift") {
  const auto file = sao::config::read_json_file(std::string(SAO_SOURCE_DIR) + "/config/default.json");
  const auto code = sao::config::run_config_to_json(sao::config::RunConfig{});
  const auto preset_chosen = preset_chosen_learner_keys();
  CHECK(preset_chosen.count("baseline") == 1);  // the rule below exempts what it should
  CHECK(preset_chosen.count("actor_lr") == 0);

  for (const auto& section : file.items()) {
    INFO("default.json section '" << section.key() << "'");
    REQUIRE(code.contains(section.key()));
    for (const auto& key : section.value().items()) {
      INFO("key " << section.key() << "." << key.key() << " = " << key.value().dump());
      REQUIRE(code[section.key()].contains(key.key()));
      CHECK(code[section.key()][key.key()] == key.value());
    }
  }
  for (const auto& section : code.items()) {
    INFO("section '" << section.key() << "' of the run config");
    REQUIRE(file.contains(section.key()));
    for (const auto& key : section.value().items()) {
      INFO("key " << section.key() << "." << key.key() << " (code default " << key.value().dump()
                  << ") is missing from config/default.json");
      const bool exempt = section.key() == "learner" && preset_chosen.count(key.key()) == 1;
      CHECK((file[section.key()].contains(key.key()) || exempt));
    }
  }
  // The reader takes every key into the field the writer took it from.
  CHECK(sao::config::run_config_to_json(parse_run_config(file, "default.json")) == code);
}

TEST_CASE("unknown keys are errors that name the key and the file") {
  auto document = default_config_document();
  document["sft"]["learing_rate"] = 0.1;
  CHECK(error_of(document).find("test.json.sft: unknown key 'learing_rate'") == 0);
  document = default_config_document();
  document["model"]["hiden_size"] = 3;
  CHECK(error_of(document).find("test.json: model: unknown key 'hiden_size'") == 0);
  document = default_config_document();
  document["optimiser"] = nlohmann::json::object();
  CHECK(error_of(document).find("test.json: unknown key 'optimiser'") == 0);
}

TEST_CASE("wrong types and bad values name the key") {
  auto document = default_config_document();
  document["sft"]["steps"] = "many";
  CHECK(error_of(document) == "test.json.sft.steps: must be an integer in [0, 100000000], got string \"many\"");
  document = default_config_document();
  document["sft"]["batch_size"] = 0;
  CHECK(error_of(document) == "test.json.sft.batch_size: must be an integer in [1, 1048576], got 0");
  document = default_config_document();
  document["model"]["num_key_value_heads"] = 3;
  CHECK(error_of(document).find("num_key_value_heads (3)") != std::string::npos);
  document = default_config_document();
  document["task"]["max_digits"] = 12;
  CHECK(error_of(document).find("task.max_digits") != std::string::npos);
  document = default_config_document();
  document["env"]["latency"] = "lognormal";
  CHECK(error_of(document) == "test.json.env.latency_ms: must be > 0 with latency \"lognormal\"");
  document["env"]["latency_ms"] = 500;
  CHECK(parse_run_config(document, "test.json").env.latency.mean_ms == 500);
  document = default_config_document();
  document["task"]["demonstration_slip_rate"] = 2;
  CHECK(error_of(document) == "test.json.task.demonstration_slip_rate: must be a number in [0, 1], got 2");
  document = default_config_document();
  document["task"]["answer_format"] = "reversed";
  document["task"]["demonstration_worked_rate"] = 0.5;
  CHECK(error_of(document) ==
        "test.json.task: task.demonstration_worked_rate: a worked answer writes the reversed digits before the "
        "answer, so it needs answer_format \"plain\" (got \"reversed\"); set it to 0 to use answer_format "
        "\"reversed\"");
  document = default_config_document();
  document["sft"] = 5;
  CHECK(error_of(document) == "test.json.sft: expected an object, got number 5");
}

TEST_CASE("integer keys have ranges: a value that would wrap or never finish is refused with the range") {
  const std::vector<std::tuple<const char*, const char*, int64_t, std::string>> cases = {
      {"train", "scheduler_threads", 4294967297LL,
       "train.scheduler_threads: must be an integer in [1, 256], got 4294967297"},
      {"rollout", "num_actors", 4294967297LL, "rollout.num_actors: must be an integer in [1, 1024], got 4294967297"},
      {"threads", "torch_intra_op", 1000000, "threads.torch_intra_op: must be an integer in [1, 256], got 1000000"},
      {"sft", "steps", -5, "sft.steps: must be an integer in [0, 100000000], got -5"},
      {"rollout", "max_new_tokens", 0, "rollout.max_new_tokens: must be an integer in [1, 65536], got 0"},
      {"replay", "max_staleness", -2, "replay.max_staleness: must be an integer in [-1, 100000000], got -2"},
      {"eval", "batch_size", 0, "eval.batch_size: must be an integer in [1, 1048576], got 0"},
      {"train", "max_actor_failures", 0, "train.max_actor_failures: must be an integer in [1, 1000000], got 0"},
  };
  for (const auto& [section, key, value, message] : cases) {
    auto document = default_config_document();
    document[section][key] = value;
    INFO(section << "." << key);
    CHECK(error_of(document) == "test.json." + message);
  }
}

TEST_CASE("--set overrides parse JSON values, fall back to strings, and reject bad paths") {
  auto document = default_config_document();
  apply_override(document, "sft.steps=7");
  apply_override(document, "run.name=exp1");
  apply_override(document, "model.tie_word_embeddings=false");
  const auto config = parse_run_config(document, "x");
  CHECK(config.sft.steps == 7);
  CHECK(config.run.name == "exp1");
  CHECK_FALSE(config.model.tie_word_embeddings);
  CHECK_THROWS_WITH(apply_override(document, "sft.steps"), doctest::Contains("expected key.path=value"));
  CHECK_THROWS_WITH(apply_override(document, "sft..steps=1"), doctest::Contains("empty key segment"));
  CHECK_THROWS_WITH(apply_override(document, "sft.steps.x=1"), doctest::Contains("'steps' is not a section"));
}

TEST_CASE("a config file that is not JSON names the file and the byte") {
  const auto path = std::filesystem::temp_directory_path() / "sao_test_bad_config.json";
  std::ofstream(path) << "{\"run\": {\"seed\": 1,}}";
  CHECK_THROWS_WITH(sao::config::read_json_file(path.string()),
                    doctest::Contains(("config " + path.string() + ": not valid JSON at byte").c_str()));
  CHECK_THROWS_WITH(sao::config::read_json_file("/nonexistent/x.json"), "config /nonexistent/x.json: cannot open file");
  std::filesystem::remove(path);
}

TEST_CASE("a config nested 10^5 levels deep, or a FIFO in place of a file, is refused, not a crash or a hang") {
  const auto dir = std::filesystem::temp_directory_path() / ("sao_test_config_limits_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto deep = dir / "deep.json";
  std::ofstream(deep) << std::string(100000, '[') << std::string(100000, ']');
  CHECK_THROWS_WITH_AS(sao::config::read_json_file(deep.string()),
                       ("config " + deep.string() + ": JSON nested deeper than 256 levels at byte 257").c_str(),
                       sao::Error);
  CHECK_THROWS_WITH_AS(sao::config::load_run_config(deep.string(), {}),
                       doctest::Contains("JSON nested deeper than 256 levels"), sao::Error);
  const auto fifo = dir / "fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(sao::config::read_json_file(fifo.string()),
                       ("config " + fifo.string() +
                        ": not a regular file (a FIFO, device or directory cannot be a "
                        "config)")
                           .c_str(),
                       sao::Error);
  CHECK_THROWS_WITH_AS(sao::config::read_json_file(dir.string()), doctest::Contains("not a regular file"), sao::Error);
  // A --set value nested too deep is taken as text, never parsed into a deep value.
  auto document = sao::config::default_config_document();
  apply_override(document, "run.name=" + std::string(100000, '['));
  CHECK(document["run"]["name"].is_string());
  std::filesystem::remove_all(dir);
}

TEST_CASE("every shipped config parses, as an overlay on the embedded default") {
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SAO_SOURCE_DIR) + "/config")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path().string());
    CHECK_NOTHROW(sao::config::load_run_config(entry.path().string(), {}));
    ++parsed;
  }
  CHECK(parsed >= 5);
  const auto grpo = sao::config::load_run_config(std::string(SAO_SOURCE_DIR) + "/config/grpo_arith.json", {});
  CHECK(grpo.learner.algorithm == sao::algo::Algorithm::kGrpo);
  CHECK(grpo.replay.synchronous);
  CHECK(grpo.replay.group_size == 8);
  CHECK(grpo.replay.max_batch == 64);
  // Keys the preset does not name come from the embedded default.
  CHECK(grpo.model.hidden_size == parse_run_config(default_config_document(), "d").model.hidden_size);
}

TEST_CASE("derived settings: GRPO needs whole groups per rollout batch") {
  auto document = default_config_document();
  document["learner"]["algorithm"] = "grpo";
  document["learner"]["group_size"] = 5;
  CHECK(error_of(document).find("rollout.slots (32) must be a multiple of learner.group_size (5)") !=
        std::string::npos);
}

TEST_CASE("derived settings: a weight delay above replay.max_staleness is refused, since it would drop every episode") {
  auto document = default_config_document();
  document["rollout"]["weight_delay_versions"] = 8;
  document["replay"]["max_staleness"] = 12;
  CHECK(parse_run_config(document, "test.json").rollout.weight_delay_versions == 8);
  document["replay"]["max_staleness"] = 4;
  CHECK(error_of(document) ==
        "test.json: rollout.weight_delay_versions (8) exceeds replay.max_staleness (4): every trajectory would be "
        "dropped as stale");
  document["replay"]["max_staleness"] = -1;  // never drop
  CHECK(parse_run_config(document, "test.json").rollout.weight_delay_versions == 8);
  document["rollout"]["weight_delay_versions"] = 4097;
  CHECK(error_of(document) == "test.json.rollout.weight_delay_versions: must be an integer in [0, 4096], got 4097");
}

TEST_CASE("a model vocabulary smaller than the tokenizer's is refused") {
  auto document = default_config_document();
  document["model"]["vocab_size"] = 100;
  CHECK(error_of(document) == "test.json: model.vocab_size 100 is smaller than the byte tokenizer's 264");
}

TEST_CASE("an SFT curriculum: phases parse, round-trip, merge over the task, and map steps to phases") {
  auto document = default_config_document();
  document["task"]["demonstration_worked_rate"] = 0.5;
  document["sft"]["steps"] = 100;
  document["sft"]["curriculum"] = nlohmann::json::parse(
      R"([{"fraction": 0.3, "task": {"demonstration_worked_rate": 1.0}},
          {"fraction": 0.2, "task": {"demonstration_slip_rate": 0.1}}])");
  const auto config = parse_run_config(document, "test.json");
  REQUIRE(config.sft.curriculum.size() == 2);
  CHECK(config.sft.curriculum[0].fraction == 0.3);
  CHECK(sao::config::run_config_to_json(config)["sft"]["curriculum"] == document["sft"]["curriculum"]);
  CHECK(sao::config::run_config_to_json(parse_run_config(sao::config::run_config_to_json(config), "again")) ==
        sao::config::run_config_to_json(config));

  const auto first = sao::config::sft_phase_task(config, 0);
  CHECK(first["demonstration_worked_rate"] == 1.0);
  CHECK(first["demonstration_slip_rate"] == 0.0);  // the run's own value, not merged away
  const auto second = sao::config::sft_phase_task(config, 1);
  CHECK(second["demonstration_worked_rate"] == 0.5);
  CHECK(second["demonstration_slip_rate"] == 0.1);
  CHECK_THROWS_WITH(sao::config::sft_phase_task(config, 2), "sft_phase_task: phase 2 of a curriculum of 2");

  using sao::config::sft_phase_end;
  using sao::config::sft_phase_of_step;
  CHECK(sft_phase_end(config.sft, 0) == 30);
  CHECK(sft_phase_end(config.sft, 1) == 50);
  CHECK(sft_phase_end(config.sft, 2) == 100);
  CHECK(sft_phase_of_step(config.sft, 0) == 0);
  CHECK(sft_phase_of_step(config.sft, 29) == 0);
  CHECK(sft_phase_of_step(config.sft, 30) == 1);
  CHECK(sft_phase_of_step(config.sft, 49) == 1);
  CHECK(sft_phase_of_step(config.sft, 50) == 2);
  CHECK(sft_phase_of_step(config.sft, 99) == 2);
  // The phases scale with sft.steps: a 10-step smoke test runs 3 + 2 + 5.
  auto short_run = config.sft;
  short_run.steps = 10;
  CHECK(sft_phase_end(short_run, 0) == 3);
  CHECK(sft_phase_end(short_run, 1) == 5);
  // Thirds written to four places cover the whole run and no more.
  document["sft"]["curriculum"] =
      nlohmann::json::parse(R"([{"fraction": 0.3333}, {"fraction": 0.3333}, {"fraction": 0.3334}])");
  auto thirds = parse_run_config(document, "test.json").sft;
  thirds.steps = 1200;
  CHECK(sft_phase_end(thirds, 0) == 400);
  CHECK(sft_phase_end(thirds, 1) == 800);
  CHECK(sft_phase_end(thirds, 2) == 1200);
  CHECK(sft_phase_of_step(thirds, 1199) == 2);
}

TEST_CASE("a bad SFT curriculum is refused with the phase and what is wrong") {
  const auto with_curriculum = [](const std::string& curriculum) {
    auto document = default_config_document();
    document["sft"]["curriculum"] = nlohmann::json::parse(curriculum);
    return error_of(document);
  };
  CHECK(with_curriculum("5") ==
        R"(test.json.sft.curriculum: expected an array of phases {"fraction": F, "task": {...}}, got number)");
  CHECK(with_curriculum("[[]]") ==
        R"(test.json.sft.curriculum[0]: expected a phase {"fraction": F, "task": {...}}, got array)");
  CHECK(with_curriculum(R"([{"task": {}}])") ==
        "test.json.sft.curriculum[0].fraction: missing (the share of sft.steps the phase runs, in (0, 1])");
  CHECK(with_curriculum(R"([{"fraction": 0}])") ==
        "test.json.sft.curriculum[0].fraction: must be a number in (0, 1], got 0");
  CHECK(with_curriculum(R"([{"fraction": 1.5}])") ==
        "test.json.sft.curriculum[0].fraction: must be a number in (0, 1], got 1.5");
  CHECK(with_curriculum(R"([{"fraction": 0.5}, {"fraction": "half"}])") ==
        R"(test.json.sft.curriculum[1].fraction: must be a number in (0, 1], got string "half")");
  CHECK(
      with_curriculum(R"([{"fraction": 0.5, "tasks": {}}])").find("test.json.sft.curriculum[0]: unknown key 'tasks'") ==
      0);
  CHECK(with_curriculum(R"([{"fraction": 0.5, "task": 1}])") ==
        "test.json.sft.curriculum[0].task: expected an object of task keys, got number");
  CHECK(with_curriculum(R"([{"fraction": 0.75}, {"fraction": 0.5}])") ==
        "test.json.sft.curriculum: its phases' fractions add up to 1.25, more than 1 (the whole of sft.steps)");
  // The phase's task is checked as the environment would check it, and named.
  CHECK(with_curriculum(R"([{"fraction": 0.5, "task": {"demonstration_worked_rate": 2}}])") ==
        "test.json.sft.curriculum[0].task.demonstration_worked_rate: must be a number in [0, 1], got 2");
  CHECK(with_curriculum(R"([{"fraction": 0.5, "task": {"max_digitz": 3}}])").find("test.json.sft.curriculum[0].task") ==
        0);
  auto document = default_config_document();
  document["sft"]["data"] = "demos.jsonl";
  document["sft"]["curriculum"] = nlohmann::json::parse(R"([{"fraction": 0.5}])");
  CHECK(error_of(document) ==
        "test.json.sft.curriculum: phases change the task's own demonstrations, but test.json.sft.data "
        "('demos.jsonl') replaces them with a file; set one of the two");
}

TEST_CASE("the default's SFT curriculum applies to arithmetic's own demonstrations only") {
  using sao::config::load_run_config;
  const std::string dir = std::string(SAO_SOURCE_DIR) + "/config/";
  const auto by_default = load_run_config("", {});
  REQUIRE(by_default.sft.curriculum.size() == 1);
  CHECK(by_default.sft.curriculum[0].fraction == 0.667);
  CHECK(by_default.sft.curriculum[0].task == nlohmann::json{{"demonstration_worked_rate", 1.0}});
  CHECK(by_default.task_document["demonstration_worked_rate"] == 0.3);
  // Another environment, or demonstrations from a file: no phases.
  CHECK(load_run_config(dir + "sao_countdown.json", {}).sft.curriculum.empty());
  CHECK(load_run_config(dir + "sao_agentic.json", {}).sft.curriculum.empty());
  CHECK(load_run_config("", {"sft.data=demos.jsonl"}).sft.curriculum.empty());
  // ... unless asked for, where a file of demonstrations conflicts with it.
  // (A --set path is the working directory's, made absolute.)
  const std::string sets = R"(--set sft.data=demos.jsonl, --set sft.curriculum=[{"fraction": 0.5}]: sft)";
  CHECK_THROWS_WITH(
      load_run_config("", {"sft.data=demos.jsonl", R"(sft.curriculum=[{"fraction": 0.5}])"}),
      (sets + ".curriculum: phases change the task's own demonstrations, but " + sets + ".data ('" +
       (std::filesystem::current_path() / "demos.jsonl").string() + "') replaces them with a file; set one of the two")
          .c_str());
  // The presets that keep earlier runs reproducible turn it off.
  const auto plain = load_run_config(dir + "arith_plain.json", {});
  CHECK(plain.sft.curriculum.empty());
  CHECK(plain.task_document["demonstration_worked_rate"] == 0.0);
  CHECK(plain.eval.max_new_tokens == 8);
  CHECK(plain.train.steps == 600);
  const auto worked = load_run_config(dir + "sao_worked.json", {});
  CHECK(worked.sft.curriculum.empty());
  CHECK(worked.task_document["demonstration_worked_rate"] == 0.5);
  // A config written before curricula existed (as a checkpoint stores it) ran without one.
  auto older = sao::config::default_config_document();
  older["sft"].erase("curriculum");
  CHECK(parse_run_config(older, "old/sao.json").sft.curriculum.empty());
  // An explicit null is an error, not "absent".
  CHECK_THROWS_WITH(
      load_run_config("", {"sft.curriculum=null"}),
      R"(--set sft.curriculum=null: sft.curriculum: expected an array of phases {"fraction": F, "task": {...}}, got null)");
}

TEST_CASE(
    "rollout.slots: the old name episodes_per_actor is still read; both at once, or a pool below a block, are "
    "refused") {
  auto document = default_config_document();
  document["rollout"].erase("slots");
  document["rollout"]["episodes_per_actor"] = 8;
  CHECK(parse_run_config(document, "test.json").rollout.slots == 8);
  document["rollout"]["slots"] = 8;
  CHECK(error_of(document) ==
        "test.json.rollout: both 'slots' and its old name 'episodes_per_actor' are set; keep 'slots'");
  document = default_config_document();
  document["rollout"]["kv_cache_tokens"] = 3;
  CHECK(error_of(document) ==
        "test.json.rollout.kv_cache_tokens: 3 holds less than one block of kv_block_size (4) tokens; 0 sizes the pool "
        "as slots x model.max_position_embeddings");
  document["rollout"]["kv_cache_tokens"] = 0;
  const auto config = parse_run_config(document, "test.json");
  CHECK(config.rollout.kv_pool_tokens(config.model.max_position_embeddings) ==
        config.rollout.slots * config.model.max_position_embeddings);
}
