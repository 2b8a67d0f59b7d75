// The weights of a checkpoint directory: one `model.safetensors`, or the
// shards that `model.safetensors.index.json` lists (Hugging Face writes
// models above a few GB that way). Reading, checking and loading them is
// one place so `sao doctor --model`, the checkpoint loader and the tests
// agree on what a directory holds.
#pragma once

#include "model/safetensors.hpp"

#include <torch/nn/module.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace sao::model {

struct WeightFiles {
  std::string directory;
  bool sharded = false;
  std::vector<std::string> files;                     // paths of the files, sorted
  std::map<std::string, std::string> file_of_tensor;  // tensor name -> path
  SafetensorsHeader header;                           // every file's tensors together
  std::uint64_t bytes_on_disk = 0;
};

// Reads the index (when present) and every file's header; no tensor data.
// Throws sao::Error naming the file for: no weights at all, an index
// without an object "weight_map", a shard name that leaves the directory,
// a tensor the index places in another file (or in none), a tensor in two
// files, and anything read_safetensors_header refuses.
WeightFiles read_weight_files(const std::string& directory);

// Copies every tensor of `files` into the module's tensor of the same name
// (floating types converted to the module's, e.g. bf16 -> fp32), one tensor
// at a time from the memory-mapped files. The names and shapes must match
// named_tensors_of(module) exactly. Meant for a freshly built module: on an
// error (a missing or extra tensor, a shape, a NaN) part of it may already
// be overwritten, so the caller drops it. Tensors named in `ignored` are
// skipped (a tied model's redundant lm_head.weight).
void load_weight_files(torch::nn::Module& module, const WeightFiles& files, const std::set<std::string>& ignored = {});

}  // namespace sao::model
