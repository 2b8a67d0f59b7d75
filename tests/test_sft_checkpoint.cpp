// SFT batches, the warm-start loss going down, and checkpoint directories
// that round-trip and fail loudly on bad content.
#include "base/error.hpp"
#include "config/run_config.hpp"
#include "env/tasks/arithmetic_env.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "train/episode_sft.hpp"
#include "train/pass_at_k.hpp"
#include "train/sft.hpp"
#include "train/task_runner.hpp"

#include "test_checkpoint_fixtures.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  return sao_test::fresh_dir("", name);
}
using sao_test::small_config;
}  // namespace

namespace {
sao::env::SftEpisode one_turn(const std::string& prompt, const std::string& answer) {
  return {prompt, {{answer, "", true}}, ""};
}
}  // namespace

TEST_CASE("SFT batches mask exactly the answer and EOS targets") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  const auto batch = sao::train::make_episode_sft_batch(tokenizer, {one_turn("12+34=", "46"), one_turn("3-10=", "-7")});
  // Row 0: BOS "12+34=" "46" EOS = 10 tokens; row 1: BOS "3-10=" "-7" EOS = 9 tokens + PAD.
  CHECK(batch.input_ids.sizes() == torch::IntArrayRef({2, 10}));
  CHECK(batch.tokens == 19);
  CHECK(batch.input_ids[1][9].item<int64_t>() == tokenizer.pad_id());
  // Targets at positions 7, 8, 9 of row 0 ('4', '6', EOS) are predicted at 6, 7, 8.
  const std::vector<bool> expected_row0 = {false, false, false, false, false, false, true, true, true};
  const std::vector<bool> expected_row1 = {false, false, false, false, false, true, true, true, false};
  for (int64_t t = 0; t < 9; ++t) {
    CHECK(batch.target_mask[0][t].item<bool>() == expected_row0[static_cast<size_t>(t)]);
    CHECK(batch.target_mask[1][t].item<bool>() == expected_row1[static_cast<size_t>(t)]);
  }
}

TEST_CASE("arithmetic's demonstrations are its teacher's answers to training problems, the same for the same seed") {
  sao::env::ArithmeticConfig config;
  config.demonstration_slip_rate = 1.0;  // every + and - that carries or borrows is answered wrongly
  const sao::env::ArithmeticEnvironment environment(config);
  const auto episodes = environment.demonstrations(64, 11);
  REQUIRE(episodes.size() == 64);
  CHECK(environment.demonstrations(64, 11).front().turns.front().action == episodes.front().turns.front().action);
  std::set<std::string> heldout;
  for (const auto& problem : environment.task().test_set()) heldout.insert(problem.prompt());
  // The same draw as the teacher's: one generator, problem then answer.
  std::mt19937_64 rng(11);
  int64_t slipped = 0;
  for (const auto& episode : episodes) {
    const auto problem = environment.task().sample_train(rng);
    CHECK(episode.prompt == problem.prompt());
    CHECK(heldout.count(episode.prompt) == 0);
    REQUIRE(episode.turns.size() == 1);
    CHECK(episode.turns[0].observation.empty());
    CHECK(episode.turns[0].train);
    const auto answer = environment.task().demonstration_text(problem, rng);
    CHECK(episode.turns[0].action == answer);
    slipped += answer != problem.answer() ? 1 : 0;
  }
  CHECK(slipped > 0);
}

TEST_CASE("the SFT learning rate warms up linearly and decays to 10%") {
  sao::config::SftSection options;
  options.learning_rate = 1.0;
  options.warmup_steps = 10;
  options.steps = 110;
  CHECK(sao::train::sft_learning_rate(options, 0) == doctest::Approx(0.1));
  CHECK(sao::train::sft_learning_rate(options, 9) == doctest::Approx(1.0));
  CHECK(sao::train::sft_learning_rate(options, 60) == doctest::Approx(0.55));
  CHECK(sao::train::sft_learning_rate(options, 110) == doctest::Approx(0.1));
}

TEST_CASE("SFT lowers the answer loss of a small model") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::env::ArithmeticConfig task_config;
  task_config.max_digits = 1;
  task_config.test_size = 10;
  sao::env::ArithmeticEnvironment environment(task_config);
  sao::model::CausalLM policy(small_config());
  sao::model::init_weights(*policy, 1);
  sao::config::SftSection options;
  options.steps = 60;
  options.batch_size = 32;
  options.log_every = 1000;
  std::vector<sao::env::SftEpisode> heldout;
  for (int64_t i = 0; i < environment.heldout_size(); ++i) {
    const auto prompt = environment.reset_heldout(i).observation;
    heldout.push_back(one_turn(prompt, environment.task().test_set()[static_cast<size_t>(i)].answer()));
  }
  const auto batch = sao::train::make_episode_sft_batch(tokenizer, heldout);
  double before = 0;
  {
    torch::NoGradGuard no_grad;
    before = sao::train::sft_loss(policy->forward(batch.input_ids), batch).item<double>();
  }
  sao::train::run_episode_sft(policy, environment, tokenizer, options, 3, nullptr);
  torch::NoGradGuard no_grad;
  const double after = sao::train::sft_loss(policy->forward(batch.input_ids), batch).item<double>();
  MESSAGE("held-out answer loss " << before << " -> " << after);
  CHECK(before > 5.0);  // ~log(264) for an untrained model
  CHECK(after < 0.5 * before);
}

TEST_CASE("policy checkpoints round-trip bit-exactly and keep their info") {
  const auto dir = fresh_dir("ckpt");
  sao::model::CausalLM policy(small_config());
  sao::model::init_weights(*policy, 5);
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"step", 12}});
  nlohmann::json info;
  auto loaded = sao::model::load_policy_checkpoint(dir.string(), &info);
  CHECK(info["step"] == 12);
  CHECK(info["tokenizer"] == "byte");
  auto loaded_params = loaded->named_parameters(true);
  for (const auto& item : policy->named_parameters(true)) CHECK(torch::equal(item.value(), loaded_params[item.key()]));
  // Saving again replaces the directory, keeps the one before as .previous
  // and leaves no staging directories behind.
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"step", 13}});
  std::set<std::string> entries;
  for (const auto& entry : fs::directory_iterator(dir.parent_path())) {
    const auto name = entry.path().filename().string();
    if (name.rfind(dir.filename().string(), 0) == 0) entries.insert(name);
  }
  CHECK(entries == std::set<std::string>{dir.filename().string(), dir.filename().string() + ".previous"});
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".previous");
}

TEST_CASE("bad checkpoints name the file and the problem, and a failed save keeps the last good one") {
  const auto dir = fresh_dir("badckpt");
  sao::model::CausalLM policy(small_config());
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"step", 1}});
  // Edited by hand below: without its manifest each content check is reached
  // (with it, the checksum stops the load first: test_checkpoint_integrity).
  fs::remove(dir / "MANIFEST.json");
  CHECK_THROWS_WITH(sao::model::load_policy_checkpoint((dir / "missing").string()),
                    doctest::Contains("no such directory"));
  // A model.safetensors written for a different shape.
  auto other = small_config();
  other.intermediate_size = 48;
  sao::model::CausalLM wrong(other);
  sao::model::save_safetensors((dir / "model.safetensors").string(), sao::model::named_tensors_of(*wrong));
  CHECK_THROWS_WITH(sao::model::load_policy_checkpoint(dir.string()),
                    doctest::Contains("model.layers.0.mlp.gate_proj.weight"));
  // config.json that is not JSON.
  std::ofstream(dir / "config.json") << "{oops";
  CHECK_THROWS_WITH(sao::model::load_policy_checkpoint(dir.string()),
                    doctest::Contains(((dir / "config.json").string() + ": not valid JSON").c_str()));
  // A save that throws midway leaves the previous directory untouched.
  sao::model::write_directory_atomically(dir.string() + "_atomic", [](const std::string& staging) {
    std::ofstream(fs::path(staging) / "marker") << "good";
  });
  CHECK_THROWS(sao::model::write_directory_atomically(dir.string() + "_atomic", [](const std::string& staging) {
    std::ofstream(fs::path(staging) / "marker") << "bad";
    throw sao::Error("disk full");
  }));
  std::ifstream marker(dir.string() + "_atomic/marker");
  std::string content;
  marker >> content;
  CHECK(content == "good");
  fs::remove_all(dir);
  fs::remove_all(dir.string() + "_atomic");
}

TEST_CASE("checkpoint manifests: a changed, missing or extra file is refused by name") {
  const auto dir = fresh_dir("manifest");
  sao::model::write_directory_atomically(dir.string(), [](const std::string& staging) {
    std::ofstream(fs::path(staging) / "a.bin") << "0123456789";
    fs::create_directories(fs::path(staging) / "sub");
    std::ofstream(fs::path(staging) / "sub" / "b.json") << "{}";
  });
  REQUIRE(fs::exists(dir / "MANIFEST.json"));
  CHECK_NOTHROW(sao::model::verify_directory(dir.string()));
  std::ofstream(dir / "a.bin") << "0123456788";  // same size, one byte changed
  CHECK_THROWS_WITH(sao::model::verify_directory(dir.string()), doctest::Contains("a.bin does not match its checksum"));
  std::ofstream(dir / "a.bin") << "012";
  CHECK_THROWS_WITH(sao::model::verify_directory(dir.string()),
                    doctest::Contains("a.bin has 3 bytes, the manifest says 10"));
  std::ofstream(dir / "a.bin") << "0123456789";
  std::ofstream(dir / "extra.txt") << "x";
  CHECK_THROWS_WITH(sao::model::verify_directory(dir.string()), doctest::Contains("extra.txt is not in the manifest"));
  fs::remove(dir / "extra.txt");
  fs::remove(dir / "sub" / "b.json");
  CHECK_THROWS_WITH(sao::model::verify_directory(dir.string()), doctest::Contains("sub/b.json is missing"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint swap: every kill point leaves one complete copy that recovery finds") {
  const auto dir = fresh_dir("swap");
  const auto write = [&](const std::string& content) {
    sao::model::write_directory_atomically(
        dir.string(), [&](const std::string& staging) { std::ofstream(fs::path(staging) / "v") << content; });
  };
  const auto content_of = [](const fs::path& file) {
    std::ifstream in(file);
    std::string text;
    in >> text;
    return text;
  };
  write("one");
  write("two");
  CHECK(content_of(dir / "v") == "two");
  CHECK(content_of(fs::path(dir.string() + ".previous") / "v") == "one");  // the one before is kept
  // Killed while writing: an unfinished staging copy is removed, nothing else changes.
  fs::create_directories(dir.string() + ".partial-99");
  CHECK(sao::model::recover_directory_swap(dir.string()).empty());
  CHECK_FALSE(fs::exists(dir.string() + ".partial-99"));
  // Killed after "final -> previous", before "complete -> final".
  fs::remove_all(dir.string() + ".previous");
  fs::rename(dir, dir.string() + ".previous");
  fs::create_directories(dir.string() + ".complete-5");
  std::ofstream(fs::path(dir.string() + ".complete-5") / "v") << "three";
  CHECK(sao::model::recover_directory_swap(dir.string()).find("finished the interrupted swap") != std::string::npos);
  CHECK(content_of(dir / "v") == "three");
  CHECK(content_of(fs::path(dir.string() + ".previous") / "v") == "two");
  // Killed with the final copy gone and only the previous one left.
  fs::remove_all(dir);
  CHECK(sao::model::recover_directory_swap(dir.string()).find("restored") != std::string::npos);
  CHECK(content_of(dir / "v") == "two");
  // resolve_checkpoint falls back to the previous copy when the latest is corrupt.
  write("four");
  std::ofstream(dir / "v") << "fout";
  std::string notice;
  CHECK(sao::model::resolve_checkpoint(dir.string(), &notice) == dir.string() + ".previous");
  CHECK(notice.find("does not match its checksum") != std::string::npos);
  std::ofstream(fs::path(dir.string() + ".previous") / "v") << "twx";
  CHECK_THROWS_WITH(sao::model::resolve_checkpoint(dir.string()),
                    doctest::Contains("the previous checkpoint is no better"));
  fs::remove_all(dir);
  fs::remove_all(dir.string() + ".previous");
}

TEST_CASE("pass@k estimator: exact values of 1 - C(n-c,k)/C(n,k) and refused arguments") {
  using sao::train::pass_at_k_estimate;
  CHECK(pass_at_k_estimate(8, 2, 1) == doctest::Approx(0.25).epsilon(1e-15));
  CHECK(pass_at_k_estimate(8, 2, 2) == doctest::Approx(13.0 / 28.0).epsilon(1e-15));  // 1 - 15/28
  CHECK(pass_at_k_estimate(10, 3, 4) == doctest::Approx(1.0 - 35.0 / 210.0).epsilon(1e-15));
  CHECK(pass_at_k_estimate(8, 0, 8) == 0.0);
  CHECK(pass_at_k_estimate(8, 1, 8) == 1.0);
  CHECK(pass_at_k_estimate(8, 5, 4) == 1.0);  // only 3 wrong samples: any 4 hold a correct one
  CHECK(pass_at_k_estimate(1, 1, 1) == 1.0);
  CHECK_THROWS_WITH_AS(pass_at_k_estimate(8, 9, 1),
                       "pass_at_k_estimate: need 0 <= correct <= samples and 1 <= k <= samples, got samples 8, "
                       "correct 9, k 1",
                       sao::Error);
  CHECK_THROWS_AS(pass_at_k_estimate(8, 2, 9), sao::Error);
  CHECK_THROWS_AS(pass_at_k_estimate(8, 2, 0), sao::Error);
}

TEST_CASE("pass@k on the arithmetic held-out split: counts per problem, deterministic, and bad arguments refused") {
  auto config = sao::config::load_run_config(
      "", {"task.max_digits=1", "task.test_size=10", "eval.batch_size=4", "model.hidden_size=32",
           "model.intermediate_size=64", "model.num_hidden_layers=2", "sft.steps=40", "sft.batch_size=32",
           "sft.log_every=1000", "sft.curriculum=[]"});
  sao::model::CausalLM policy(config.model);
  sao::model::init_weights(*policy, 1);
  // A little SFT so that some sampled answers are right and some wrong.
  sao::train::run_warm_start(policy, config, nullptr);

  const auto result = sao::train::evaluate_pass_at_k(policy, config, 3, 1.0, 0);
  CHECK(result.problems == 10);
  CHECK(result.samples_per_problem == 3);
  REQUIRE(result.correct_per_problem.size() == 10);
  int64_t total_correct = 0, solved = 0;
  for (const auto c : result.correct_per_problem) {
    CHECK(c >= 0);
    CHECK(c <= 3);
    total_correct += c;
    solved += c > 0 ? 1 : 0;
  }
  REQUIRE(result.pass_at.size() == 3);  // k = 1, 2, 3
  CHECK(result.pass_at.at(1) == doctest::Approx(static_cast<double>(total_correct) / 30.0).epsilon(1e-12));
  CHECK(result.pass_at.at(3) == doctest::Approx(static_cast<double>(solved) / 10.0).epsilon(1e-12));
  CHECK(result.pass_at.at(1) <= result.pass_at.at(2));
  CHECK(result.pass_at.at(2) <= result.pass_at.at(3));
  const auto greedy = sao::train::evaluate_heldout(policy, config, 0);
  CHECK(result.greedy_accuracy == greedy.accuracy);

  const auto again = sao::train::evaluate_pass_at_k(policy, config, 3, 1.0, 0);
  CHECK(again.correct_per_problem == result.correct_per_problem);

  CHECK_THROWS_WITH_AS(sao::train::evaluate_pass_at_k(policy, config, 0, 1.0, 0),
                       "pass@k: the number of samples must be >= 1, got 0", sao::Error);
  CHECK_THROWS_WITH_AS(sao::train::evaluate_pass_at_k(policy, config, 2, 0.0, 0),
                       "pass@k: the sampling temperature must be a finite number > 0, got 0.000000", sao::Error);
}

TEST_CASE("an SFT curriculum draws each phase's demonstrations from that phase's task") {
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::env::ArithmeticConfig worked_config;
  worked_config.demonstration_worked_rate = 1.0;
  const sao::env::ArithmeticEnvironment worked(worked_config);
  const sao::env::ArithmeticEnvironment plain(sao::env::ArithmeticConfig{});
  const std::vector<const sao::env::Environment*> phase_environments{&worked, &plain};
  sao::config::SftSection options;
  options.steps = 5;
  options.batch_size = 16;
  options.curriculum = {{0.4, nlohmann::json::object()}};  // 2 of 5 steps
  const auto next_batch = sao::train::episode_batch_maker(phase_environments, tokenizer, options, 7, 0);
  for (int64_t step = 0; step < options.steps; ++step) {
    const auto batch = next_batch(step);
    int64_t worked_answers = 0;
    for (int64_t row = 0; row < batch.input_ids.size(0); ++row) {
      const auto ids = batch.input_ids[row];
      const auto text =
          tokenizer.decode(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()),
                           /*skip_special=*/true);
      const auto answer = text.substr(text.find('=') + 1);
      REQUIRE(!answer.empty());
      if (answer[0] == 'w') ++worked_answers;
    }
    INFO("step " << step);
    CHECK(worked_answers == (step < 2 ? options.batch_size : 0));
  }
  const std::vector<const sao::env::Environment*> one{&worked};
  CHECK_THROWS_WITH(sao::train::episode_batch_maker(one, tokenizer, options, 7, 0),
                    "sft: 1 environments for a curriculum of 1 phases; expected one per phase and one for the "
                    "run's task");
}

TEST_CASE("the warm start runs a config's curriculum and labels each logged step with its phase") {
  auto document = sao::config::default_config_document();
  document["task"]["demonstration_worked_rate"] = 0.5;
  document["sft"]["steps"] = 5;
  document["sft"]["batch_size"] = 4;
  document["sft"]["log_every"] = 1;
  document["sft"]["curriculum"] =
      nlohmann::json::parse(R"([{"fraction": 0.4, "task": {"demonstration_worked_rate": 1.0}}, {"fraction": 0.2}])");
  const auto config = sao::config::parse_run_config(document, "curriculum.json");
  const auto dir = fresh_dir("curriculum");
  sao::model::CausalLM policy(config.model);
  sao::model::init_weights(*policy, 1);
  {
    sao::report::JsonlWriter metrics((dir / "metrics.jsonl").string());
    const auto result = sao::train::run_warm_start(policy, config, &metrics);
    CHECK(result.steps == 5);
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<int64_t> phases;
  for (std::string line; std::getline(in, line);) phases.push_back(nlohmann::json::parse(line).at("curriculum_phase"));
  CHECK(phases == std::vector<int64_t>{1, 1, 2, 3, 3});
}

namespace {
// An environment that cannot show an answer, as an external program or an
// OpenEnv server usually cannot.
class NoDemonstrations final : public sao::env::Environment {
 public:
  sao::env::EnvStep reset(uint64_t) override { return {}; }
  sao::env::EnvStep step(const std::string&) override { return {}; }
  std::string name() const override { return "external"; }
};
}  // namespace

TEST_CASE("a warm start without demonstrations names the three ways on") {
  sao::model::CausalLM policy(small_config());
  const sao::tokenizer::ByteTokenizer tokenizer;
  sao::config::SftSection options;
  options.steps = 3;
  options.log_every = 0;
  const NoDemonstrations environment;
  CHECK_THROWS_WITH_AS(sao::train::run_episode_sft(policy, environment, tokenizer, options, 1, nullptr),
                       "sft: environment 'external' has no demonstrations; give a file of them with sft.data=FILE (or "
                       "sao sft --data FILE), start from a trained policy with train.init_checkpoint=DIR, or skip the "
                       "warm start with sft.steps=0",
                       sao::Error);
}
