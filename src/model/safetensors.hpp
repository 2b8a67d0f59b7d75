// Checkpoints are stored as safetensors so they interoperate with the Hugging
// Face ecosystem (a policy trained here loads in any HF tool and vice versa)
// and can be read without executing code, unlike pickled torch checkpoints.
// Every malformed input is reported as sao::Error naming the file, the tensor
// and the problem, because a bad checkpoint is usually found hours into a run.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sao::model {

// Ordered because the on-disk data layout follows the caller's order, which
// keeps files byte-identical across saves of the same module.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
  std::map<std::string, torch::Tensor> tensors;  // CPU, contiguous
  std::map<std::string, std::string> metadata;   // the "__metadata__" entry
};

// What to do with NaN and infinite values in floating tensors. Weights with
// them are a diverged run or a corrupt file, so loading refuses them unless
// a caller reading arbitrary tensors (e.g. masks holding -inf) says so.
enum class NonFiniteValues { kReject, kAllow };

// Reads the whole file into CPU tensors. Validates the complete header
// (types, dtypes, sizes, offsets) before reading any data: every tensor's
// data_offsets span exactly its dtype and shape, and together they cover the
// data section exactly (no gaps, no overlaps, no trailing bytes). Anything
// but a regular file is refused before it is read. With kReject (the
// default) a floating tensor holding NaN or infinity is an error naming it.
SafetensorsFile load_safetensors(const std::string& path, NonFiniteValues non_finite = NonFiniteValues::kReject);

struct TensorInfo {
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
};
struct SafetensorsHeader {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};
// The header alone, validated exactly as load_safetensors does, without
// reading tensor data: lets a loader check names and shapes against what it
// expects before allocating anything.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Throws sao::Error "checkpoint PATH: tensor 'NAME': K of N values are not
// finite (first: ...)" when a floating `tensor` holds NaN or infinity.
void check_finite(const std::string& path, const std::string& name, const torch::Tensor& tensor);

// Validates the header exactly as read_safetensors_header does, then maps
// the file read-only and calls `visit(name, view)` for every tensor in data
// order. `view` is a CPU tensor over the mapped bytes in the file's dtype:
// valid only during the call and never to be written. Loading a large
// checkpoint this way converts one tensor at a time, so memory peaks near
// the destination's size rather than the destination plus the file.
void visit_safetensors_mapped(const std::string& path,
                              const std::function<void(const std::string&, const torch::Tensor&)>& visit);

// Writes to `path + ".tmp"`, fsyncs, then renames over `path`, so a crash
// leaves either the old file or the new one, never a torn one.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct LoadReport {
  std::vector<std::string> loaded;      // module tensors overwritten from the file
  std::vector<std::string> unexpected;  // file tensors the module lacks (strict=false only)
  std::vector<std::string> skipped;     // module tensors under skip_prefixes absent from the file
};

// Copies file tensors into the module's parameters and buffers, matched by
// the names named_parameters(/*recurse=*/true) / named_buffers report.
// Floating file tensors are converted to the parameter's floating dtype; any
// other dtype difference is an error. Names under `skip_prefixes` are not
// required: loaded if the file has them, otherwise left as they are (e.g. a
// fresh value head on a policy checkpoint). Everything is validated before
// anything is copied, so on error the module is unchanged. NaN or infinite
// values in the file are an error (NonFiniteValues::kReject).
LoadReport load_into_module(torch::nn::Module& module, const std::string& path, bool strict = true,
                            const std::vector<std::string>& skip_prefixes = {});

// Parameters first, then buffers, each in registration order.
NamedTensors named_tensors_of(const torch::nn::Module& module);

// Safetensors dtype names ("F32", "BF16", ...) for torch scalar types, and back.
std::string safetensors_dtype_name(torch::ScalarType type);
std::optional<torch::ScalarType> scalar_type_from_safetensors_name(const std::string& name);

}  // namespace sao::model
