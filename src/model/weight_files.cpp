// Single-file and sharded safetensors weights; see weight_files.hpp.
#include "model/weight_files.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/regular_file.hpp"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

namespace sao::model {

namespace {
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
// transformers' index of a 405B model is ~100 KB; far above that is not an index.
constexpr std::uint64_t kMaxIndexBytes = 64ull * 1024 * 1024;

bool exists_no_follow(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

// weight_map of the index: tensor -> file name inside the directory.
std::map<std::string, std::string> read_index(const fs::path& index_path) {
  const std::string where = "checkpoint " + index_path.string() + ": ";
  const auto json = base::parse_json_limited(read_regular_file(index_path.string(), kMaxIndexBytes),
                                             "checkpoint " + index_path.string());
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object())
    throw Error(where + "missing object \"weight_map\"");
  std::map<std::string, std::string> index;
  for (const auto& [tensor, file] : json["weight_map"].items()) {
    if (!file.is_string())
      throw Error(where + "weight_map[\"" + tensor + "\"] must be a file name, got " + base::dump_json(file));
    const auto name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw Error(where + "weight_map[\"" + tensor + "\"]: \"" + name + "\" is not a file in the directory");
    index[tensor] = name;
  }
  if (index.empty()) throw Error(where + "\"weight_map\" lists no tensor");
  return index;
}
}  // namespace

WeightFiles read_weight_files(const std::string& directory) {
  const fs::path dir(directory);
  WeightFiles result;
  result.directory = directory;
  std::map<std::string, std::string> index;
  if (exists_no_follow(dir / kIndexFile)) {
    result.sharded = true;
    index = read_index(dir / kIndexFile);
    std::set<std::string> names;
    for (const auto& [tensor, file] : index) names.insert((dir / file).string());
    result.files.assign(names.begin(), names.end());
  } else if (exists_no_follow(dir / kSingleFile)) {
    result.files.push_back((dir / kSingleFile).string());
  } else {
    throw Error("checkpoint " + directory + ": neither " + kSingleFile + " nor " + kIndexFile);
  }
  for (const auto& path : result.files) {
    const auto header = read_safetensors_header(path);
    result.bytes_on_disk += fs::file_size(path);
    for (const auto& [name, info] : header.tensors) {
      if (result.sharded) {
        const auto listed = index.find(name);
        if (listed == index.end() || (dir / listed->second).string() != path)
          throw Error("checkpoint " + path + ": tensor '" + name + "' is not listed for this file in the index (" +
                      kIndexFile + ")");
        index.erase(listed);
      }
      if (!result.header.tensors.emplace(name, info).second)
        throw Error("checkpoint " + path + ": tensor '" + name + "' is also in " + result.file_of_tensor.at(name));
      result.file_of_tensor[name] = path;
    }
    for (const auto& [key, value] : header.metadata) result.header.metadata[key] = value;
  }
  if (!index.empty())
    throw Error("checkpoint " + (dir / kIndexFile).string() + ": lists '" + index.begin()->first + "' in " +
                index.begin()->second + ", which does not hold it (" + std::to_string(index.size()) + " such tensors)");
  return result;
}

void load_weight_files(torch::nn::Module& module, const WeightFiles& files, const std::set<std::string>& ignored) {
  std::map<std::string, torch::Tensor> targets;
  for (auto& [name, tensor] : named_tensors_of(module)) targets.emplace(name, tensor);
  for (const auto& [name, target] : targets) {
    if (files.header.tensors.count(name) == 0)
      throw Error("checkpoint " + files.directory + ": tensor '" + name + "' is missing from the weights");
  }
  torch::NoGradGuard no_grad;
  for (const auto& path : files.files) {
    visit_safetensors_mapped(path, [&](const std::string& name, const torch::Tensor& source) {
      if (ignored.count(name) != 0) return;
      const std::string where = "checkpoint " + path + ": tensor '" + name + "': ";
      const auto it = targets.find(name);
      if (it == targets.end()) throw Error(where + "the model has no such tensor");
      auto& target = it->second;
      if (!target.sizes().equals(source.sizes()))
        throw Error(where + "expected shape " + c10::str(target.sizes()) + " but the file has " +
                    c10::str(source.sizes()));
      if (!c10::isFloatingType(source.scalar_type()) || !c10::isFloatingType(target.scalar_type()))
        throw Error(where + "dtype " + safetensors_dtype_name(source.scalar_type()) +
                    " is not a floating type (weights are F32, F16 or BF16)");
      target.copy_(source);  // converts bf16/fp16 into the module's fp32
      check_finite(path, name, target);
    });
  }
}

}  // namespace sao::model
