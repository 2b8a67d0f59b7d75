// Checkpoint I/O is where silent corruption would cost the most (a bad load
// trains from garbage for hours), so these tests pin bit-exact round trips,
// interop with files written independently of our writer, and that every
// malformed file fails loudly with the file and tensor named.
#include "base/error.hpp"
#include "model/safetensors.hpp"
#include "model/tensor_blob.hpp"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <string>

namespace fs = std::filesystem;
using sao::model::load_into_module;
using sao::model::load_safetensors;
using sao::model::NamedTensors;
using sao::model::save_safetensors;

namespace {

// Unique per process and call so parallel ctest runs never collide.
std::string temp_path(const std::string& stem) {
  static std::atomic<int> counter{0};
  const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
  return (fs::temp_directory_path() / ("sao_st_" + stem + "_" + std::to_string(::getpid()) + "_" +
                                       std::to_string(stamp) + "_" + std::to_string(counter++) + ".safetensors"))
      .string();
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& stem) : path(temp_path(stem)) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
    fs::remove(path + ".tmp", ec);
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string raw_bytes(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

std::string u64_le(std::uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

// Assembles a file per the spec by hand, independent of save_safetensors.
std::string hand_file(const std::string& header_json, const std::string& data) {
  return u64_le(header_json.size()) + header_json + data;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const sao::Error& e) {
    return e.what();
  }
  FAIL("expected sao::Error");
  return {};
}

struct TinyNetImpl : torch::nn::Module {
  torch::nn::Linear proj{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  TinyNetImpl() {
    proj = register_module("proj", torch::nn::Linear(4, 3));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({3})));
  }
};
TORCH_MODULE(TinyNet);

NamedTensors clone_all(const torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& [name, t] : sao::model::named_tensors_of(m)) out.emplace_back(name, t.detach().clone());
  return out;
}

void check_unchanged(const torch::nn::Module& m, const NamedTensors& before) {
  const auto now = sao::model::named_tensors_of(m);
  REQUIRE(now.size() == before.size());
  for (size_t i = 0; i < now.size(); ++i) CHECK(torch::equal(now[i].second, before[i].second));
}

}  // namespace

TEST_CASE("round trip is bit-exact for every dtype") {
  TempFile file("roundtrip");
  torch::manual_seed(7);
  const NamedTensors tensors = {
      {"f32", torch::randn({3, 5})},
      {"f64", torch::randn({2, 2, 2}, torch::kFloat64)},
      {"f16", torch::randn({7}).to(torch::kHalf)},
      {"bf16", torch::randn({4, 3}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000000, 1000000, {6}, torch::kInt64)},
      {"bool", torch::randint(0, 2, {9}).to(torch::kBool)},
      {"i32", torch::randint(-100, 100, {2, 3}, torch::kInt32)},
      {"u8", torch::randint(0, 255, {5}, torch::kUInt8)},
      {"scalar", torch::tensor(3.5)},
      {"empty", torch::empty({0, 4})},
      {"strided", torch::arange(12, torch::kFloat32).reshape({3, 4}).t()},
  };
  save_safetensors(file.path, tensors);
  const auto loaded = load_safetensors(file.path);
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& [name, original] : tensors) {
    CAPTURE(name);
    const auto& got = loaded.tensors.at(name);
    CHECK((got.scalar_type() == original.scalar_type()));
    CHECK(got.sizes().vec() == original.sizes().vec());
    CHECK(torch::equal(got, original));
    CHECK(raw_bytes(got) == raw_bytes(original));
  }
  CHECK(loaded.metadata.empty());
}

TEST_CASE("metadata round trips and the header is 8-byte aligned") {
  TempFile file("meta");
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "1200"}, {"note", "ünï"}};
  save_safetensors(file.path, {{"w", torch::ones({2})}}, metadata);
  CHECK(load_safetensors(file.path).metadata == metadata);
  const auto bytes = read_bytes(file.path);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  CHECK(header_len % 8 == 0);
}

TEST_CASE("writer keeps the caller's order in the data section") {
  TempFile file("order");
  save_safetensors(file.path, {{"zeta", torch::full({1}, 1.0f)}, {"alpha", torch::full({1}, 2.0f)}});
  const auto bytes = read_bytes(file.path);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + header_len, 4);
  CHECK(first == 1.0f);
}

TEST_CASE("reads a file written by hand per the spec") {
  TempFile file("hand");
  const float floats[] = {1.5f, -2.0f, 0.25f, 8.0f};
  const std::int64_t ints[] = {-3, 42};
  const std::uint8_t flags[] = {1, 0, 1};
  std::string data(reinterpret_cast<const char*>(ints), sizeof(ints));  // ints first: offsets unsorted by name
  data.append(reinterpret_cast<const char*>(floats), sizeof(floats));
  data.append(reinterpret_cast<const char*>(flags), sizeof(flags));
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("b.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[16,32]},)"
      R"("a.ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("c.mask":{"dtype":"BOOL","shape":[3],"data_offsets":[32,35]}}      )";  // trailing-space padding
  write_bytes(file.path, hand_file(header, data));

  const auto loaded = load_safetensors(file.path);
  CHECK(loaded.metadata.at("format") == "pt");
  CHECK(torch::equal(loaded.tensors.at("b.weight"), torch::tensor({1.5f, -2.0f, 0.25f, 8.0f}).reshape({2, 2})));
  CHECK(torch::equal(loaded.tensors.at("a.ids"), torch::tensor({-3, 42}, torch::kInt64)));
  CHECK(torch::equal(loaded.tensors.at("c.mask"), torch::tensor({true, false, true})));
}

TEST_CASE("malformed files fail with the file and the problem named") {
  TempFile file("bad");
  const std::string good_data(8, '\0');
  auto header_for = [](const std::string& entry) { return "{\"t.w\":" + entry + "}"; };
  const auto good_entry = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  SUBCASE("missing file") {
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("does not exist") != std::string::npos);
  }
  SUBCASE("shorter than 8 bytes") {
    write_bytes(file.path, "abc");
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("shorter than") != std::string::npos);
  }
  SUBCASE("truncated file") {
    save_safetensors(file.path, {{"t.w", torch::randn({16})}});
    auto bytes = read_bytes(file.path);
    bytes.resize(bytes.size() - 5);
    write_bytes(file.path, bytes);
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("'t.w'") != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("header length beyond the file") {
    write_bytes(file.path, u64_le(1000) + "{}");
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("header length 1000") != std::string::npos);
  }
  SUBCASE("garbage JSON") {
    write_bytes(file.path, hand_file("{not json!", good_data));
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("not valid JSON") != std::string::npos);
  }
  SUBCASE("unknown dtype") {
    write_bytes(file.path, hand_file(header_for(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"), good_data));
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("'t.w'") != std::string::npos);
    CHECK(msg.find("unknown dtype \"F8_E4M3\"") != std::string::npos);
  }
  SUBCASE("missing data_offsets") {
    write_bytes(file.path, hand_file(header_for(R"({"dtype":"F32","shape":[2]})"), good_data));
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find("'t.w'") != std::string::npos);
    CHECK(msg.find("missing \"data_offsets\"") != std::string::npos);
  }
  SUBCASE("wrong JSON type for shape") {
    write_bytes(file.path, hand_file(header_for(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"), good_data));
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find("'t.w'") != std::string::npos);
    CHECK(msg.find("\"shape\" must be an array") != std::string::npos);
  }
  SUBCASE("byte size does not match shape") {
    write_bytes(file.path, hand_file(header_for(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), good_data));
    const auto msg = error_of([&] { load_safetensors(file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("'t.w'") != std::string::npos);
    CHECK(msg.find("needs 12 bytes but data_offsets span 8") != std::string::npos);
  }
  SUBCASE("overlapping offsets") {
    const std::string header =
        std::string("{\"a\":") + good_entry + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    write_bytes(file.path, hand_file(header, good_data));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path + ": tensor 'b': data_offsets [4, 8] overlap tensor 'a' [0, 8]");
  }
  SUBCASE("sanity: the good entry itself loads") {
    write_bytes(file.path, hand_file(header_for(good_entry), good_data));
    CHECK(load_safetensors(file.path).tensors.at("t.w").numel() == 2);
  }
}

TEST_CASE("save writes atomically and leaves no .tmp behind") {
  TempFile file("atomic");
  save_safetensors(file.path, {{"a", torch::ones({3})}});
  save_safetensors(file.path, {{"a", torch::zeros({3})}});  // overwrite via rename
  CHECK(fs::exists(file.path));
  CHECK_FALSE(fs::exists(file.path + ".tmp"));
  CHECK(torch::equal(load_safetensors(file.path).tensors.at("a"), torch::zeros({3})));

  SUBCASE("failed save leaves the previous file intact") {
    const auto msg = error_of([&] { save_safetensors(file.path, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}); });
    CHECK(msg.find("twice") != std::string::npos);
    CHECK(torch::equal(load_safetensors(file.path).tensors.at("a"), torch::zeros({3})));
    CHECK_FALSE(fs::exists(file.path + ".tmp"));
  }
  SUBCASE("unwritable directory names the path") {
    const auto bad = (fs::temp_directory_path() / "sao_no_such_dir_xyz" / "m.safetensors").string();
    const auto msg = error_of([&] { save_safetensors(bad, {{"a", torch::ones({1})}}); });
    CHECK(msg.find(bad) != std::string::npos);
  }
}

TEST_CASE("load_into_module") {
  torch::manual_seed(1);
  TinyNet source;
  TinyNet target;
  TempFile file("module");

  SUBCASE("full load copies every parameter") {
    save_safetensors(file.path, sao::model::named_tensors_of(*source));
    const auto report = load_into_module(*target, file.path);
    CHECK(report.loaded.size() == 4);  // proj.weight, proj.bias, norm.weight, norm.bias
    CHECK(report.unexpected.empty());
    CHECK(torch::equal(target->proj->weight, source->proj->weight));
    CHECK(torch::equal(target->norm->bias, source->norm->bias));
    CHECK(target->proj->weight.requires_grad());
  }
  SUBCASE("floating dtypes are converted to the parameter dtype") {
    NamedTensors halves;
    for (const auto& [name, t] : sao::model::named_tensors_of(*source))
      halves.emplace_back(name, t.to(torch::kBFloat16));
    save_safetensors(file.path, halves);
    load_into_module(*target, file.path);
    CHECK((target->proj->weight.scalar_type() == torch::kFloat32));
    CHECK(torch::equal(target->proj->weight, source->proj->weight.to(torch::kBFloat16).to(torch::kFloat32)));
  }

  const auto before = clone_all(*target);
  auto tensors = sao::model::named_tensors_of(*source);

  SUBCASE("missing tensor") {
    tensors.erase(tensors.begin() + 1);  // proj.bias
    save_safetensors(file.path, tensors);
    const auto msg = error_of([&] { load_into_module(*target, file.path); });
    CHECK(msg.find(file.path) != std::string::npos);
    CHECK(msg.find("'proj.bias'") != std::string::npos);
    CHECK(msg.find("missing tensor") != std::string::npos);
    check_unchanged(*target, before);
  }
  SUBCASE("shape mismatch names both shapes") {
    tensors.back().second = torch::zeros({5});  // norm.bias is [3]
    save_safetensors(file.path, tensors);
    const auto msg = error_of([&] { load_into_module(*target, file.path); });
    CHECK(msg.find("'norm.bias'") != std::string::npos);
    CHECK(msg.find("expected shape [3] but file has [5]") != std::string::npos);
    check_unchanged(*target, before);
  }
  SUBCASE("integer data into a float parameter is a wrong dtype") {
    tensors.back().second = torch::zeros({3}, torch::kInt64);
    save_safetensors(file.path, tensors);
    const auto msg = error_of([&] { load_into_module(*target, file.path); });
    CHECK(msg.find("'norm.bias'") != std::string::npos);
    CHECK(msg.find("wrong dtype") != std::string::npos);
    check_unchanged(*target, before);
  }
  SUBCASE("unexpected tensor: strict errors, non-strict reports") {
    tensors.emplace_back("extra.weight", torch::ones({2}));
    save_safetensors(file.path, tensors);
    const auto msg = error_of([&] { load_into_module(*target, file.path); });
    CHECK(msg.find("'extra.weight'") != std::string::npos);
    CHECK(msg.find("unexpected tensor") != std::string::npos);
    check_unchanged(*target, before);

    const auto report = load_into_module(*target, file.path, /*strict=*/false);
    CHECK(report.unexpected == std::vector<std::string>{"extra.weight"});
    CHECK(torch::equal(target->proj->weight, source->proj->weight));
  }
  SUBCASE("skip_prefixes makes a fresh head optional") {
    NamedTensors without_norm;
    for (auto& [name, t] : tensors)
      if (name.rfind("norm.", 0) != 0) without_norm.emplace_back(name, t);
    save_safetensors(file.path, without_norm);
    const auto report = load_into_module(*target, file.path, true, {"norm."});
    CHECK(report.skipped == std::vector<std::string>{"norm.weight", "norm.bias"});
    CHECK(report.loaded == std::vector<std::string>{"proj.weight", "proj.bias"});
    CHECK(torch::equal(target->proj->weight, source->proj->weight));
    CHECK(torch::equal(target->norm->weight, before[2].second));
  }
}

TEST_CASE("the tensors must cover the data section exactly") {
  TempFile file("coverage");
  const float floats[] = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::string data(reinterpret_cast<const char*>(floats), sizeof(floats));
  const std::string two_entries =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";

  SUBCASE("a header length one short shifts the data by a byte and is refused") {
    // Padding spaces keep the shortened header valid JSON, so only the
    // coverage check can tell that the data section now starts a byte early.
    const std::string header = two_entries + "   ";
    write_bytes(file.path, u64_le(header.size() - 1) + header + data);
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path +
              ": the data section is 17 bytes but the tensors' data_offsets end at 16 (trailing bytes in no tensor: a "
              "wrong header length, or data appended)");
  }
  SUBCASE("trailing bytes after the last tensor are refused") {
    write_bytes(file.path, hand_file(two_entries, data + "junk"));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path +
              ": the data section is 20 bytes but the tensors' data_offsets end at 16 (trailing bytes in no tensor: a "
              "wrong header length, or data appended)");
  }
  SUBCASE("a gap between tensors is refused") {
    const std::string header =
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    write_bytes(file.path, hand_file(header, data));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path +
              ": tensor 'b': data_offsets [8, 16] leave data bytes [4, 8) in no tensor (the header does not describe "
              "the data)");
  }
  SUBCASE("a gap before the first tensor is refused") {
    const std::string header = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[4,16]}})";
    write_bytes(file.path, hand_file(header, data));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path +
              ": tensor 'a': data_offsets [4, 16] leave data bytes [0, 4) in no tensor (the header does not describe "
              "the data)");
  }
  SUBCASE("offsets that disagree with dtype and shape are refused") {
    const std::string header =
        R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    write_bytes(file.path, hand_file(header, data));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path + ": tensor 'a': shape [2] of F64 needs 16 bytes but data_offsets span 8 bytes");
  }
  SUBCASE("a zero-sized tensor sits at the current position; anywhere else it overlaps") {
    const std::string placed = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
    write_bytes(file.path, hand_file(placed, data));
    CHECK(load_safetensors(file.path).tensors.at("e").numel() == 0);
    const std::string inside = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                               R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})";
    write_bytes(file.path, hand_file(inside, data));
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path + ": tensor 'e': data_offsets [4, 4] overlap tensor 'a' [0, 16]");
  }
  SUBCASE("exact coverage loads the right bytes") {
    write_bytes(file.path, hand_file(two_entries, data));
    const auto loaded = load_safetensors(file.path);
    CHECK(torch::equal(loaded.tensors.at("b"), torch::tensor({3.0f, 4.0f})));
  }
}

TEST_CASE("NaN and infinite weights are refused by name unless asked for") {
  TempFile file("nonfinite");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  save_safetensors(file.path, {{"ok", torch::ones({2})},
                               {"w", torch::tensor({0.0f, 1.0f, nan, inf})},
                               {"ids", torch::tensor({1, 2}, torch::kInt64)}});
  CHECK(error_of([&] { load_safetensors(file.path); }) ==
        "checkpoint " + file.path +
            ": tensor 'w': 2 of 4 values are not finite (first: element 2 is nan); the weights are corrupt or from a "
            "diverged run");
  const auto allowed = load_safetensors(file.path, sao::model::NonFiniteValues::kAllow);
  CHECK(std::isnan(allowed.tensors.at("w")[2].item<float>()));
  CHECK(std::isinf(allowed.tensors.at("w")[3].item<float>()));

  SUBCASE("half precision, negative infinity") {
    save_safetensors(file.path, {{"h", torch::tensor({-inf, 2.0f}).to(torch::kHalf)}});
    CHECK(error_of([&] { load_safetensors(file.path); }) ==
          "checkpoint " + file.path +
              ": tensor 'h': 1 of 2 values are not finite (first: element 0 is -inf); the weights are corrupt or from "
              "a diverged run");
  }
  SUBCASE("load_into_module refuses them and leaves the module unchanged") {
    torch::manual_seed(3);
    TinyNet source;
    TinyNet target;
    const auto before = clone_all(*target);
    auto tensors = sao::model::named_tensors_of(*source);
    tensors[0].second = tensors[0].second.detach().clone();
    tensors[0].second[1][2] = inf;  // proj.weight, element 1 * 4 + 2
    save_safetensors(file.path, tensors);
    CHECK(error_of([&] { load_into_module(*target, file.path); }) ==
          "checkpoint " + file.path +
              ": tensor 'proj.weight': 1 of 12 values are not finite (first: element 6 is inf); the weights are "
              "corrupt or from a diverged run");
    check_unchanged(*target, before);
  }
}

TEST_CASE("a header nested far too deep is refused without recursing") {
  TempFile file("deep");
  // 10^5 nested objects overflowed the stack when the header was printed
  // into an error message.
  const size_t levels = 100000;
  std::string header;
  for (size_t i = 0; i < levels; ++i) header += R"({"t":)";
  header += "{}";
  header.append(levels, '}');
  write_bytes(file.path, hand_file(header, ""));
  CHECK(error_of([&] { load_safetensors(file.path); }) ==
        "checkpoint " + file.path + ": header: JSON nested deeper than 8 levels at byte 41");
}

TEST_CASE("anything but a regular file is refused by name without blocking") {
  const auto fifo = temp_path("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Before the fix the open blocked until a writer appeared; if it still
  // does, a writer is opened so the test fails instead of hanging.
  auto result = std::async(std::launch::async, [&] { return error_of([&] { load_safetensors(fifo); }); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    FAIL_CHECK("load_safetensors blocked on a FIFO");
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  CHECK(result.get() == "checkpoint " + fifo + ": is a FIFO (named pipe), not a regular file");
  fs::remove(fifo);

  const auto directory = fs::temp_directory_path().string();
  CHECK(error_of([&] { load_safetensors(directory); }) ==
        "checkpoint " + directory + ": is a directory, not a regular file");
  CHECK(error_of([&] { load_safetensors("/dev/zero"); }) ==
        "checkpoint /dev/zero: is a character device, not a regular file");
}

TEST_CASE("read_safetensors_header lists names, dtypes and shapes without the data") {
  TempFile file("header");
  save_safetensors(file.path, {{"a", torch::ones({2, 3})}, {"b", torch::zeros({4}, torch::kInt32)}}, {{"k", "v"}});
  const auto header = sao::model::read_safetensors_header(file.path);
  REQUIRE(header.tensors.size() == 2);
  CHECK((header.tensors.at("a").dtype == torch::kFloat32));
  CHECK(header.tensors.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK((header.tensors.at("b").dtype == torch::kInt32));
  CHECK(header.metadata.at("k") == "v");
}

// Weight sync packs a module into one buffer; the receiver must get exactly
// the sender's bits, in its own storage, or a named error and no change.
TEST_CASE("packed tensors load bit-exact into the receiver's own storage") {
  torch::manual_seed(1);
  TinyNet sender;
  TinyNet receiver;
  const auto packed = sao::model::pack_module(*sender);
  REQUIRE(packed.index.size() == 4);
  uint64_t end = 0;
  for (const auto& entry : packed.index) {
    CHECK(entry.offset % sao::model::kPackedAlignment == 0);
    CHECK(entry.offset >= end);
    end = entry.offset + entry.size;
  }
  CHECK(packed.bytes.size() == end);
  CHECK(packed.index[0].name == "proj.weight");
  CHECK(packed.index[0].dtype == "F32");
  CHECK(packed.index[0].shape == std::vector<int64_t>{3, 4});
  CHECK(packed.index[0].size == 48);
  CHECK(packed.index[1].offset == 64);  // 48 bytes, then aligned

  std::vector<const void*> storage;
  for (const auto& [name, tensor] : sao::model::named_tensors_of(*receiver)) storage.push_back(tensor.data_ptr());
  sao::model::load_packed_into_module(*receiver, packed, "test");
  const auto sent = sao::model::named_tensors_of(*sender);
  const auto got = sao::model::named_tensors_of(*receiver);
  REQUIRE(got.size() == sent.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].first == sent[i].first);
    CHECK(std::memcmp(got[i].second.data_ptr(), sent[i].second.data_ptr(),
                      static_cast<size_t>(sent[i].second.numel()) * sent[i].second.element_size()) == 0);
    CHECK(got[i].second.data_ptr() == storage[i]);  // copied in place, not replaced
  }
  CHECK(torch::equal(sao::model::unpack_tensor(packed, 0), sender->proj->weight));
  CHECK_THROWS_WITH(sao::model::unpack_tensor(packed, 4), "packed tensors: no entry 4 among 4");
}

TEST_CASE("a bad packed index is refused by name and leaves the module unchanged") {
  torch::manual_seed(2);
  TinyNet sender;
  TinyNet receiver;
  const auto good = sao::model::pack_module(*sender);
  const auto before = clone_all(*receiver);
  using Packed = sao::model::PackedTensors;
  const auto& last = good.index[3];
  // Each case spoils the last entry, so a loader that copied as it went
  // would already have changed the first three.
  const std::vector<std::pair<std::function<void(Packed&)>, std::string>> cases = {
      {[](Packed& p) { p.index[3].name = "head.bias"; }, "tensor 'head.bias' is not a parameter of this model"},
      {[](Packed& p) { p.index[3].name = "proj.weight"; }, "tensor 'proj.weight' appears twice"},
      {[](Packed& p) { p.index.pop_back(); }, "tensor 'norm.bias' is missing"},
      {[](Packed& p) {
         p.index[3].shape = {1, 3};
       },
       "tensor 'norm.bias' has shape/dtype that does not match the model"},
      {[](Packed& p) { p.index[3].dtype = "F16"; }, "tensor 'norm.bias': 12 bytes for a shape that needs 6"},
      {[](Packed& p) { p.index[3].dtype = "Q4"; }, "tensor 'norm.bias': unknown dtype \"Q4\""},
      {[](Packed& p) { p.index[3].shape = {-3}; }, "tensor 'norm.bias': negative extent -3"},
      {[](Packed& p) {
         p.index[3].shape = {int64_t{1} << 62, int64_t{1} << 62};
       },
       "tensor 'norm.bias': shape overflows"},
      {[](Packed& p) { p.bytes.pop_back(); }, "tensor 'norm.bias': bytes " + std::to_string(last.offset) +
                                                  "+12 lie outside the " + std::to_string(good.bytes.size() - 1) +
                                                  "-byte buffer"},
      // offset + size would wrap around
      {[](Packed& p) { p.index[3].offset = UINT64_MAX - 4; },
       "tensor 'norm.bias': bytes " + std::to_string(UINT64_MAX - 4) + "+12 lie outside the " +
           std::to_string(good.bytes.size()) + "-byte buffer"},
  };
  for (const auto& [spoil, message] : cases) {
    auto packed = good;
    spoil(packed);
    const auto expected = "rollout-0: weights v3: " + message;
    CHECK_THROWS_WITH(sao::model::load_packed_into_module(*receiver, packed, "rollout-0: weights v3"),
                      expected.c_str());
    check_unchanged(*receiver, before);
  }
  // And the untouched message still loads.
  sao::model::load_packed_into_module(*receiver, good, "test");
  CHECK(torch::equal(receiver->norm->bias, sender->norm->bias));
}
