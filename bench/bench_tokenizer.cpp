// Tokenizer speed: sao's HfTokenizer against Hugging Face's JavaScript
// tokenizers (the parity test's reference) on the same text, one core each,
// in the same run. The text is this repository's own Markdown and C++
// sources (prose and code), cut into ~4 KB documents and repeated to the
// requested size.
//
//   bench_tokenizer TOKENIZER_DIR [--mb N] [--npm NPM_DIR]
//
// NPM_DIR holds node_modules/@huggingface/tokenizers (the parity test
// installs it in BUILD/npm-parity); without it only sao is timed.
#include "base/error.hpp"
#include "tokenizer/hf_tokenizer.hpp"

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<std::string> corpus(double megabytes) {
  std::string text;
  for (const auto& entry : fs::recursive_directory_iterator(SAO_SOURCE_DIR)) {
    const auto path = entry.path().string();
    if (path.find("/build") != std::string::npos || path.find("/.git") != std::string::npos) continue;
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".md" && ext != ".cpp" && ext != ".hpp")) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream content;
    content << in.rdbuf();
    text += content.str();
  }
  if (text.empty()) throw sao::Error("no .md/.cpp/.hpp files under " + std::string(SAO_SOURCE_DIR));
  const auto want = static_cast<std::size_t>(megabytes * 1e6);
  std::vector<std::string> documents;
  std::size_t total = 0;
  std::size_t at = 0;
  while (total < want) {
    std::size_t end = std::min(text.size(), at + 4096);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;  // whole characters
    documents.push_back(text.substr(at, end - at));
    total += documents.back().size();
    at = end >= text.size() ? 0 : end;
  }
  return documents;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_tokenizer TOKENIZER_DIR [--mb N] [--npm NPM_DIR]\n");
    return 2;
  }
  const std::string dir = argv[1];
  double megabytes = 4;
  std::string npm;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb") megabytes = std::atof(argv[i + 1]);
    if (flag == "--npm") npm = argv[i + 1];
  }
  try {
    const auto tokenizer = sao::tokenizer::HfTokenizer::load(dir);
    const auto documents = corpus(megabytes);
    std::size_t bytes = 0;
    for (const auto& d : documents) bytes += d.size();
    std::vector<std::vector<int64_t>> encoded;
    encoded.reserve(documents.size());
    auto start = std::chrono::steady_clock::now();
    std::size_t tokens = 0;
    for (const auto& d : documents) {
      encoded.push_back(tokenizer.encode(d));
      tokens += encoded.back().size();
    }
    const double encode_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    std::size_t decoded_bytes = 0;
    for (const auto& ids : encoded) decoded_bytes += tokenizer.decode(ids).size();
    const double decode_s = seconds_since(start);
    std::printf("tokenizer %s\ntext %.2f MB in %zu documents, %zu tokens (%.2f bytes/token)\n", dir.c_str(),
                bytes / 1e6, documents.size(), tokens, static_cast<double>(bytes) / static_cast<double>(tokens));
    std::printf("sao encode %.2f MB/s, decode %.2f MB/s (one thread)\n", bytes / 1e6 / encode_s,
                decoded_bytes / 1e6 / decode_s);
    if (!npm.empty()) {
      const auto input = fs::temp_directory_path() / ("sao_bench_tokenizer_" + std::to_string(::getpid()) + ".json");
      std::ofstream(input) << nlohmann::json(documents).dump();
      const std::string command = "node " + std::string(SAO_SOURCE_DIR) + "/bench/tokenizer_reference_speed.cjs '" +
                                  npm + "' '" + dir + "' '" + input.string() + "'";
      FILE* pipe = ::popen(command.c_str(), "r");
      char line[256] = {0};
      const bool got = pipe != nullptr && std::fgets(line, sizeof(line), pipe) != nullptr;
      const int status = pipe ? ::pclose(pipe) : -1;
      fs::remove(input);
      if (!got || status != 0) throw sao::Error("the reference timing failed: " + command);
      const double reference_s = std::atof(line);
      std::printf("HF tokenizers.js encode %.2f MB/s; sao / HF %.2fx\n", bytes / 1e6 / reference_s,
                  reference_s / encode_s);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", error.what());
    return 1;
  }
  return 0;
}
