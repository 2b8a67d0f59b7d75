// Symbolic links in a model directory: one that leads out of the directory
// is refused by every reader (weights, config, tokenizer, template,
// generation settings, `sao doctor --model`, export's copies), naming the
// link, where it leads and the directory; links inside it, and the Hugging
// Face cache's snapshots/REV/NAME -> ../../blobs/SHA, load. The check is made
// on the opened descriptor, not on the path a second time.
#include "base/directory_boundary.hpp"
#include "config/model_directory.hpp"
#include "model/checkpoint.hpp"
#include "model/hf_export.hpp"
#include "test_checkpoint_fixtures.hpp"
#include "test_process_helpers.hpp"
#include "test_tiny_tokenizer.hpp"
#include "tokenizer/chat_template/chat_template.hpp"
#include "tokenizer/hf_tokenizer.hpp"
#include "tokenizer/load_tokenizer.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace fs = std::filesystem;
using sao_test::error_of;

namespace {

// A model directory as the Hub has it (no MANIFEST.json): a small Llama, the
// tiny byte-level tokenizer.json, a template and generation settings.
void write_model_directory(const fs::path& dir) {
  auto config = sao_test::small_config();
  config.vocab_size = 320;  // the tiny tokenizer's 302 ids fit
  sao::model::CausalLM policy(config);
  sao::model::init_weights(*policy, 5);
  sao::model::save_policy_checkpoint(dir.string(), policy, {{"stage", "sft"}});
  fs::remove(dir / "MANIFEST.json");
  std::ofstream(dir / "tokenizer.json") << sao_test::byte_level_json().dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|special|>"})";
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 300})";
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}{{ m.role }}: {{ m.content }}<|special|>"
                                                "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";
}

std::string outside_error(const std::string& prefix, const fs::path& link, const fs::path& target,
                          const fs::path& boundary) {
  return prefix + link.string() + ": is a link to " + fs::canonical(target).string() +
         ", outside the model directory " + fs::canonical(boundary).string() +
         " (links are followed only inside it, or inside the repository folder of a Hugging Face cache snapshot)";
}

bool part_has_error(const sao::config::ModelDirectoryReport& report, const std::string& part_name,
                    const std::string& error) {
  for (const auto& part : report.parts) {
    if (part.name != part_name) continue;
    return !part.usable && std::find(part.lines.begin(), part.lines.end(), "error: " + error) != part.lines.end();
  }
  return false;
}

}  // namespace

TEST_CASE("a file that links out of its model directory is refused by every reader, naming link and target") {
  const auto base = sao_test::fresh_dir("links_", "escape");
  const auto dir = base / "model";
  const auto outside = base / "elsewhere";
  write_model_directory(dir);
  fs::create_directories(outside);
  const auto model_dir = dir.string();
  struct Reader {
    std::string file;
    std::string prefix;  // the reader's error prefix: checkpoint files say "checkpoint "
    std::string doctor_part;
    std::function<void()> read;
  };
  const std::vector<Reader> readers = {
      {"config.json", "checkpoint ", "config.json", [&] { sao::model::load_checkpoint_config(model_dir); }},
      {"model.safetensors", "checkpoint ", "weights", [&] { sao::model::load_policy_checkpoint(model_dir); }},
      {"tokenizer.json", "", "tokenizer", [&] { sao::tokenizer::HfTokenizer::load(model_dir); }},
      {"tokenizer_config.json", "", "tokenizer", [&] { sao::tokenizer::load_tokenizer(model_dir); }},
      {"generation_config.json", "", "tokenizer", [&] { sao::tokenizer::HfTokenizer::load(model_dir); }},
      {"chat_template.jinja", "", "chat template", [&] { sao::tokenizer::load_chat_template(model_dir); }},
  };
  for (const auto& reader : readers) {
    CAPTURE(reader.file);
    const auto link = dir / reader.file;
    const auto target = outside / reader.file;
    fs::rename(link, target);
    // Absolute and relative links alike: where they lead decides.
    for (const fs::path& points_to : {fs::path(target), fs::path("../elsewhere") / reader.file}) {
      CAPTURE(points_to);
      fs::create_symlink(points_to, link);
      const auto expected = outside_error(reader.prefix, link, target, dir);
      CHECK(error_of(reader.read) == expected);
      CHECK(part_has_error(sao::config::inspect_model_directory(model_dir), reader.doctor_part, expected));
      fs::remove(link);
    }
    fs::rename(target, link);
  }
  // Export copies tokenizer files through the same opener.
  fs::rename(dir / "tokenizer.json", outside / "tokenizer.json");
  fs::create_symlink(outside / "tokenizer.json", dir / "tokenizer.json");
  sao::model::HfExportOptions options;
  options.copy_files = {(dir / "tokenizer.json").string()};
  CHECK(error_of([&] {
          sao::model::export_hf_directory(sao::model::load_policy_checkpoint(model_dir), (base / "out").string(),
                                          options);
        }) == outside_error("checkpoint ", dir / "tokenizer.json", outside / "tokenizer.json", dir));
  fs::remove_all(base);
}

TEST_CASE("links that stay inside the model directory are followed") {
  const auto base = sao_test::fresh_dir("links_", "inside");
  const auto dir = base / "model";
  write_model_directory(dir);
  fs::create_directories(dir / "store");
  for (const char* name : {"model.safetensors", "tokenizer.json", "chat_template.jinja"}) {
    fs::rename(dir / name, dir / "store" / name);
    fs::create_symlink(fs::path("store") / name, dir / name);
  }
  CHECK(error_of([&] { sao::model::load_policy_checkpoint(dir.string()); }) == "(no error)");
  CHECK(sao::tokenizer::load_tokenizer(dir.string())->vocab_size() == 302);
  CHECK(sao::config::inspect_model_directory(dir.string()).usable());
  fs::remove_all(base);
}

TEST_CASE("the Hugging Face cache layout loads: snapshot links into ../../blobs stay in the repository folder") {
  // HF_HOME/hub/models--ORG--NAME/{blobs/SHA, snapshots/REV/NAME -> ../../blobs/SHA, refs/main}
  const auto base = sao_test::fresh_dir("links_", "hub");
  const auto repo = base / "hub" / "models--sao--tiny";
  const auto snapshot = repo / "snapshots" / "0123abcd";
  write_model_directory(snapshot);
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "0123abcd";
  int blob = 0;
  for (const auto& entry : std::vector<fs::path>(fs::directory_iterator(snapshot), fs::directory_iterator())) {
    const auto blob_name = "blob" + std::to_string(blob++);
    fs::rename(entry, repo / "blobs" / blob_name);
    fs::create_symlink(fs::path("../../blobs") / blob_name, entry);
  }
  CHECK(sao::base::directory_boundary(snapshot) == fs::canonical(repo));
  CHECK(error_of([&] { sao::model::load_policy_checkpoint(snapshot.string()); }) == "(no error)");
  CHECK(sao::tokenizer::load_tokenizer(snapshot.string())->vocab_size() == 302);
  CHECK(sao::config::inspect_model_directory(snapshot.string()).usable());

  // Out of the repository folder is out, even from a snapshot.
  const auto stray = base / "stray.json";
  fs::rename(repo / "blobs" / fs::read_symlink(snapshot / "tokenizer.json").filename(), stray);
  fs::remove(snapshot / "tokenizer.json");
  fs::create_symlink(fs::path("../../../../stray.json"), snapshot / "tokenizer.json");
  CHECK(error_of([&] { sao::tokenizer::HfTokenizer::load(snapshot.string()); }) ==
        outside_error("", snapshot / "tokenizer.json", stray, repo));

  // Without blobs/ beside snapshots/ the folder is not a cache repository:
  // the boundary is the directory itself.
  fs::rename(repo / "blobs", repo / "blobs-moved");
  CHECK(sao::base::directory_boundary(snapshot) == fs::canonical(snapshot));
  fs::remove_all(base);
}

TEST_CASE("the check is made on the opened descriptor, not on the path again") {
  const auto base = sao_test::fresh_dir("links_", "descriptor");
  fs::create_directories(base / "model");
  std::ofstream(base / "model" / "config.json") << "{}";
  std::ofstream(base / "outside.json") << "{}";
  // The path names a plain file inside the directory, but the descriptor is
  // of a file outside, as after a swap between the path check and the open.
  const int fd = ::open((base / "outside.json").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const auto path = (base / "model" / "config.json").string();
  CHECK(error_of([&] { sao::base::require_path_inside_directory(path, "checkpoint "); }) == "(no error)");
  CHECK(error_of([&] { sao::base::require_descriptor_inside_directory(fd, path, "checkpoint "); }) ==
        "checkpoint " + path + ": is a link to " + fs::canonical(base / "outside.json").string() +
            ", outside the model directory " + fs::canonical(base / "model").string() +
            " (links are followed only inside it, or inside the repository folder of a Hugging Face cache "
            "snapshot)");
  ::close(fd);
  fs::remove_all(base);
}
