// One flipped bit in a checkpoint sao wrote stops every reader of it, with
// the same error naming the file: the loader checks MANIFEST.json (sizes and
// FNV-1a checksums) before a byte is used, and every command loads through
// it (`sao eval`, `eval --pass-k`, `export`, the warm start of `train` from
// RUN_DIR/sft and from train.init_checkpoint, `--model DIR` in `sft` and
// `train`, `doctor --model`). Commands run as the real binary.
#include "model/checkpoint.hpp"
#include "model/transformer.hpp"

#include "test_checkpoint_fixtures.hpp"
#include "test_process_helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// FNV-1a 64 of the file, as hex: the test's own, not the loader's.
std::string fnv1a64_of(const fs::path& path) {
  const auto bytes = sao_test::read_text(path);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// Flips the lowest bit of the byte 4 from the end: the low mantissa byte of
// the last float32 weight, so the value stays finite and every content check
// (shapes, names, NaN) still passes; only the checksum can tell.
void flip_one_bit(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(file);
  const auto offset = static_cast<std::streamoff>(fs::file_size(path)) - 4;
  file.seekg(offset);
  char byte = 0;
  file.get(byte);
  byte = static_cast<char>(byte ^ 1);
  file.seekp(offset);
  file.put(byte);
  REQUIRE(file.good());
}

// The loader's error for a changed `name` in `dir`.
std::string checksum_error(const fs::path& dir, const std::string& name) {
  const auto manifest = nlohmann::json::parse(sao_test::read_text(dir / "MANIFEST.json"));
  return "checkpoint " + dir.string() + ": " + name + " does not match its checksum (file " + fnv1a64_of(dir / name) +
         ", manifest " + manifest["files"][name]["fnv1a64"].get<std::string>() + "): corrupted";
}

struct CorruptedCheckpoints {
  fs::path base = sao_test::fresh_dir("integrity_", "cli");
  fs::path run_dir = base / "run";
  fs::path sft = base / "run" / "sft";    // a policy checkpoint as `sao sft` writes it
  fs::path exported = base / "exported";  // `sao export` of it: a --model directory
  CorruptedCheckpoints() {
    sao_test::save_and_export_byte_run(sft, exported, 7);
    flip_one_bit(sft / "model.safetensors");
    flip_one_bit(exported / "model.safetensors");
  }
  ~CorruptedCheckpoints() { fs::remove_all(base); }
};

}  // namespace

TEST_CASE("the loader refuses a checkpoint with one flipped bit, naming the file and both checksums") {
  const CorruptedCheckpoints checkpoints;
  const auto expected = checksum_error(checkpoints.sft, "model.safetensors");
  CHECK(sao_test::error_of([&] { sao::model::load_policy_checkpoint(checkpoints.sft.string()); }) == expected);
  CHECK(sao_test::error_of([&] { sao::model::verify_checkpoint_files(checkpoints.sft.string()); }) == expected);
  // config.json alone is still intact, so the config (which reads only it) loads.
  CHECK(sao::model::verify_checkpoint_files(checkpoints.sft.string(), "config.json") == 1);
  CHECK(sao::model::load_checkpoint_config(checkpoints.sft.string()).hidden_size ==
        sao::model::ModelConfig{}.hidden_size);
  flip_one_bit(checkpoints.sft / "config.json");
  CHECK(sao_test::error_of([&] { sao::model::load_checkpoint_config(checkpoints.sft.string()); }) ==
        checksum_error(checkpoints.sft, "config.json"));
}

TEST_CASE("every sao command that reads a checkpoint refuses one with a flipped bit") {
  const CorruptedCheckpoints checkpoints;
  const std::string sao = SAO_BINARY;
  const auto sft_error = checksum_error(checkpoints.sft, "model.safetensors");
  const auto exported_error = checksum_error(checkpoints.exported, "model.safetensors");
  const auto run_dir = [&](const std::string& name) { return sao_test::quoted((checkpoints.base / name).string()); };
  struct Command {
    std::string line;
    std::string error;
  };
  const std::vector<Command> commands = {
      {sao + " eval --checkpoint " + sao_test::quoted(checkpoints.sft.string()), sft_error},
      {sao + " eval --checkpoint " + sao_test::quoted(checkpoints.sft.string()) + " --pass-k 2", sft_error},
      {sao + " export " + sao_test::quoted(checkpoints.sft.string()) + " --out " + run_dir("re-exported"), sft_error},
      // The warm start of a run: RUN_DIR/sft ...
      {sao + " train --steps 1 --run-dir " + sao_test::quoted(checkpoints.run_dir.string()), sft_error},
      // ... or train.init_checkpoint.
      {sao + " train --steps 1 --run-dir " + run_dir("init") +
           " --set train.init_checkpoint=" + sao_test::quoted(checkpoints.sft.string()),
       sft_error},
      // A model directory brought with --model (here sao's own export).
      {sao + " sft --steps 1 --model " + sao_test::quoted(checkpoints.exported.string()) + " --run-dir " +
           run_dir("model-sft"),
       exported_error},
      {sao + " train --steps 1 --model " + sao_test::quoted(checkpoints.exported.string()) + " --run-dir " +
           run_dir("model-train"),
       exported_error},
  };
  for (const auto& command : commands) {
    CAPTURE(command.line);
    const auto result = sao_test::run_command(command.line);
    INFO(result.output);
    CHECK(result.exit_code == 1);
    CHECK(result.output.find("error: " + command.error + "\n") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(checkpoints.base / "re-exported"));
  // doctor reports it as the manifest part's error and exits 1.
  const auto doctor = sao_test::run_command(sao + " doctor --model " + sao_test::quoted(checkpoints.exported.string()));
  INFO(doctor.output);
  CHECK(doctor.exit_code == 1);
  CHECK(doctor.output.find("MANIFEST.json          NOT USABLE\n  error: " + exported_error + "\n") !=
        std::string::npos);
}
