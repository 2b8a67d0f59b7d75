// Safetensors reader/writer. The reader trusts nothing in the file: every
// header field is type-checked and every offset bounds-checked against the
// real file size before a single data byte is read, so a truncated or
// hand-edited checkpoint fails with a message instead of reading garbage.
// Tensor bytes are copied verbatim; safetensors data is little-endian, and
// this code assumes a little-endian host (x86-64, aarch64), checked below.
#include "model/safetensors.hpp"

#include "base/atomic_file.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"
#include "model/regular_file.hpp"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O copies raw little-endian bytes; big-endian hosts need byte swapping");
#endif

namespace sao::model {
namespace {

// A header bigger than this is not a real checkpoint header; refusing it
// avoids allocating gigabytes because of one corrupt length field.
constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// The format nests three levels ({name: {"shape": [...]}}); a deeper header
// is not safetensors, and refusing it early keeps recursion in later steps
// (printing a value for an error message) shallow.
constexpr std::size_t kMaxHeaderDepth = 8;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16}, {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
};

std::string where(const std::string& path) {
  return "checkpoint " + path + ": ";
}

std::string where(const std::string& path, const std::string& tensor) {
  return where(path) + "tensor '" + tensor + "': ";
}

[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

std::string shape_string(torch::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

std::string dtype_name(torch::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return d.name;
  return c10::toString(type);
}

// The entry as validated from the header; data is read only after every
// entry has passed, so errors never leave half-loaded state behind.
struct TensorEntry {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

torch::ScalarType parse_dtype(const std::string& path, const std::string& name, const nlohmann::json& value) {
  if (!value.is_string()) fail(where(path, name) + "\"dtype\" must be a string, got " + base::dump_json(value));
  const auto text = value.get<std::string>();
  for (const auto& d : kDtypes)
    if (text == d.name) return d.type;
  fail(where(path, name) + "unknown dtype \"" + text +
       "\" (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
}

std::vector<int64_t> parse_shape(const std::string& path, const std::string& name, const nlohmann::json& value) {
  if (!value.is_array()) fail(where(path, name) + "\"shape\" must be an array, got " + base::dump_json(value));
  std::vector<int64_t> shape;
  for (const auto& dim : value) {
    if (!dim.is_number_unsigned() ||
        dim.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(where(path, name) + "\"shape\" must hold non-negative integers, got " + base::dump_json(value));
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

std::pair<std::uint64_t, std::uint64_t> parse_offsets(const std::string& path, const std::string& name,
                                                      const nlohmann::json& value) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() || !value[1].is_number_unsigned())
    fail(where(path, name) + "\"data_offsets\" must be [begin, end] of non-negative integers, got " +
         base::dump_json(value));
  const auto begin = value[0].get<std::uint64_t>();
  const auto end = value[1].get<std::uint64_t>();
  if (begin > end) fail(where(path, name) + "data_offsets " + base::dump_json(value) + " has begin > end");
  return {begin, end};
}

// numel * itemsize with overflow detection: a hostile shape must not wrap
// around into a size that happens to match the offsets.
std::optional<std::uint64_t> byte_size(const std::vector<int64_t>& shape, torch::ScalarType dtype) {
  std::uint64_t bytes = c10::elementSize(dtype);
  for (const auto dim : shape) {
    const auto d = static_cast<std::uint64_t>(dim);
    if (d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / d) return std::nullopt;
    bytes *= d;
  }
  return bytes;
}

const nlohmann::json& required_field(const std::string& path, const std::string& name, const nlohmann::json& entry,
                                     const char* field) {
  const auto it = entry.find(field);
  if (it == entry.end())
    fail(where(path, name) + "missing \"" + field + "\" in header entry " + base::dump_json(entry));
  return *it;
}

TensorEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                        std::uint64_t data_bytes) {
  if (!entry.is_object()) fail(where(path, name) + "header entry must be a JSON object, got " + base::dump_json(entry));
  TensorEntry parsed{name, parse_dtype(path, name, required_field(path, name, entry, "dtype")),
                     parse_shape(path, name, required_field(path, name, entry, "shape")), 0, 0};
  std::tie(parsed.begin, parsed.end) = parse_offsets(path, name, required_field(path, name, entry, "data_offsets"));
  if (parsed.end > data_bytes)
    fail(where(path, name) + "data_offsets end " + std::to_string(parsed.end) + " is beyond the data section of " +
         std::to_string(data_bytes) + " bytes (file truncated or offsets corrupt)");
  const auto expected = byte_size(parsed.shape, parsed.dtype);
  const auto actual = parsed.end - parsed.begin;
  if (!expected || *expected != actual)
    fail(where(path, name) + "shape " + shape_string(parsed.shape) + " of " + dtype_name(parsed.dtype) + " needs " +
         (expected ? std::to_string(*expected) : std::string("an overflowing number of")) +
         " bytes but data_offsets span " + std::to_string(actual) + " bytes");
  return parsed;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const nlohmann::json& value) {
  if (!value.is_object()) fail(where(path) + "\"__metadata__\" must be an object, got " + base::dump_json(value));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      fail(where(path) + "\"__metadata__\" value for '" + key + "' must be a string, got " + base::dump_json(item));
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// The data section must be exactly the tensors' bytes, back to back, as the
// reference implementation requires. A gap or trailing bytes mean header
// and data disagree; the classic case is a header length off by one, which
// keeps the JSON valid (it ends in padding spaces) but shifts every tensor
// by a byte, so without this check the file loads as plausible garbage.
// Sorting by (begin, end) makes it one linear pass; a zero-sized tensor
// must sit at the current position like any other.
void check_exact_coverage(const std::string& path, std::vector<const TensorEntry*> entries, std::uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  std::uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const auto* entry : entries) {
    if (entry->begin < covered)
      fail(where(path, entry->name) + "data_offsets [" + std::to_string(entry->begin) + ", " +
           std::to_string(entry->end) + "] overlap tensor '" + previous->name + "' [" +
           std::to_string(previous->begin) + ", " + std::to_string(previous->end) + "]");
    if (entry->begin > covered)
      fail(where(path, entry->name) + "data_offsets [" + std::to_string(entry->begin) + ", " +
           std::to_string(entry->end) + "] leave data bytes [" + std::to_string(covered) + ", " +
           std::to_string(entry->begin) + ") in no tensor (the header does not describe the data)");
    covered = entry->end;
    previous = entry;
  }
  if (covered != data_bytes)
    fail(where(path) + "the data section is " + std::to_string(data_bytes) +
         " bytes but the tensors' data_offsets end at " + std::to_string(covered) +
         " (trailing bytes in no tensor: a wrong header length, or data appended)");
}

std::uint64_t read_u64_le(const unsigned char* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

std::string read_header(const RegularFile& file) {
  const auto& path = file.path();
  const auto file_bytes = file.size();
  if (file_bytes < 8)
    fail(where(path) + "file is " + std::to_string(file_bytes) +
         " bytes, shorter than the 8-byte header length (not a safetensors file?)");
  unsigned char length_bytes[8];
  file.read_at(0, length_bytes, 8);
  const auto header_bytes = read_u64_le(length_bytes);
  if (header_bytes > file_bytes - 8)
    fail(where(path) + "header length " + std::to_string(header_bytes) + " exceeds the " +
         std::to_string(file_bytes - 8) + " bytes after the length field (truncated or not safetensors)");
  if (header_bytes > kMaxHeaderBytes)
    fail(where(path) + "header length " + std::to_string(header_bytes) + " exceeds the 100 MB limit");
  std::string header(header_bytes, '\0');
  file.read_at(8, header.data(), header.size());
  return header;
}

nlohmann::json parse_header_json(const std::string& path, const std::string& header) {
  auto json = base::parse_json_limited(header, "checkpoint " + path + ": header", kMaxHeaderDepth, kMaxHeaderBytes);
  if (!json.is_object()) fail(where(path) + "header must be a JSON object, got " + json.type_name());
  return json;
}

// The header with every entry validated against the file, before any data
// is read, so errors never leave half-loaded state behind.
struct ValidatedHeader {
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;
};

ValidatedHeader validate_header(const RegularFile& file) {
  const auto& path = file.path();
  const auto header_text = read_header(file);
  const auto header = parse_header_json(path, header_text);
  ValidatedHeader result;
  result.data_start = 8 + static_cast<std::uint64_t>(header_text.size());
  const auto data_bytes = file.size() - result.data_start;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey)
      result.metadata = parse_metadata(path, value);
    else
      result.entries.push_back(parse_entry(path, name, value, data_bytes));
  }
  std::vector<const TensorEntry*> views;
  for (const auto& entry : result.entries) views.push_back(&entry);
  check_exact_coverage(path, views, data_bytes);
  return result;
}

torch::Tensor read_tensor_data(const RegularFile& file, std::uint64_t data_start, const TensorEntry& entry) {
  auto tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype));
  const auto bytes = entry.end - entry.begin;
  if (bytes != 0) file.read_at(data_start + entry.begin, tensor.data_ptr(), static_cast<size_t>(bytes));
  return tensor;
}

std::string value_text(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}

// NaN or infinite weights mean a diverged run or a corrupt file; loading
// them would only show up later as a policy that emits garbage.
}  // namespace

void check_finite(const std::string& path, const std::string& name, const torch::Tensor& tensor) {
  if (!c10::isFloatingType(tensor.scalar_type()) || tensor.numel() == 0) return;
  const auto not_finite = torch::logical_not(torch::isfinite(tensor)).flatten();
  const auto count = not_finite.sum().item<int64_t>();
  if (count == 0) return;
  const auto first = not_finite.nonzero()[0][0].item<int64_t>();
  fail(where(path, name) + std::to_string(count) + " of " + std::to_string(tensor.numel()) +
       " values are not finite (first: element " + std::to_string(first) + " is " +
       value_text(tensor.flatten()[first].item<double>()) + "); the weights are corrupt or from a diverged run");
}

namespace {

// --- writing ---------------------------------------------------------------

void append_u64_le(std::string& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::string dtype_tag(const std::string& path, const std::string& name, torch::ScalarType type) {
  for (const auto& d : kDtypes)
    if (d.type == type) return d.name;
  fail(where(path, name) + "dtype " + c10::toString(type) + " cannot be stored in safetensors");
}

// Builds the length-prefixed header; padded with spaces to a multiple of 8
// as the reference writer does, so data stays aligned for mmap readers.
std::string encode_header(const std::string& path, const NamedTensors& tensors,
                          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const auto bytes = static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", dtype_tag(path, name, tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = base::dump_json(header);
  } catch (const nlohmann::json::exception& e) {
    fail(where(path) + "cannot encode header (tensor names and metadata must be UTF-8): " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  append_u64_le(out, text.size());
  return out + text;
}

void check_names(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == kMetadataKey) fail(where(path) + "a tensor cannot be named \"__metadata__\"");
    if (!tensor.defined()) fail(where(path, name) + "tensor is undefined");
    if (!seen.insert(name).second) fail(where(path, name) + "name appears twice in the tensors to save");
  }
}

void write_all(const std::string& tmp_path, std::FILE* file, const void* data, size_t bytes) {
  if (bytes != 0 && std::fwrite(data, 1, bytes, file) != bytes)
    fail(where(tmp_path) + "write failed: " + std::strerror(errno));
}

void write_file_synced(const std::string& tmp_path, const std::string& header,
                       const std::vector<torch::Tensor>& cpu_tensors) {
  std::FILE* file = std::fopen(tmp_path.c_str(), "wb");
  if (!file) fail(where(tmp_path) + "cannot open for writing: " + std::strerror(errno));
  try {
    write_all(tmp_path, file, header.data(), header.size());
    for (const auto& tensor : cpu_tensors)
      write_all(tmp_path, file, tensor.data_ptr(), tensor.numel() * tensor.element_size());
    // fsync before rename: otherwise a power loss can persist the rename but
    // not the data, leaving an empty file under the final name.
    if (std::fflush(file) != 0 || ::fsync(::fileno(file)) != 0)
      fail(where(tmp_path) + "flush failed: " + std::strerror(errno));
  } catch (...) {
    std::fclose(file);
    throw;
  }
  if (std::fclose(file) != 0) fail(where(tmp_path) + "close failed: " + std::strerror(errno));
}

// --- loading into a module -------------------------------------------------

bool has_any_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return name.compare(0, p.size(), p) == 0; });
}

void check_assignable(const std::string& path, const std::string& name, const torch::Tensor& target,
                      const torch::Tensor& source) {
  if (!target.sizes().equals(source.sizes()))
    fail(where(path, name) + "expected shape " + shape_string(target.sizes()) + " but file has " +
         shape_string(source.sizes()));
  const bool both_floating = c10::isFloatingType(target.scalar_type()) && c10::isFloatingType(source.scalar_type());
  if (!both_floating && target.scalar_type() != source.scalar_type())
    fail(where(path, name) + "wrong dtype: module expects " + dtype_name(target.scalar_type()) + " but file has " +
         dtype_name(source.scalar_type()) + " (only floating types are converted into each other)");
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path, NonFiniteValues non_finite) {
  const RegularFile file(path);
  const auto header = validate_header(file);
  SafetensorsFile result;
  result.metadata = header.metadata;
  for (const auto& entry : header.entries) {
    auto tensor = read_tensor_data(file, header.data_start, entry);
    if (non_finite == NonFiniteValues::kReject) check_finite(path, entry.name, tensor);
    result.tensors[entry.name] = std::move(tensor);
  }
  return result;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  const RegularFile file(path);
  const auto header = validate_header(file);
  SafetensorsHeader result;
  result.metadata = header.metadata;
  for (const auto& entry : header.entries) result.tensors[entry.name] = {entry.dtype, entry.shape};
  return result;
}

namespace {
// Unmaps on every exit path, exceptions from `visit` included.
class ReadOnlyMapping {
 public:
  explicit ReadOnlyMapping(const RegularFile& file) : bytes_(static_cast<size_t>(file.size())) {
    if (bytes_ == 0) return;
    void* address = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, file.descriptor(), 0);
    if (address == MAP_FAILED) fail(where(file.path()) + "cannot map the file: " + std::strerror(errno));
    address_ = static_cast<const unsigned char*>(address);
    ::madvise(address, bytes_, MADV_SEQUENTIAL);
  }
  ~ReadOnlyMapping() {
    if (address_ != nullptr) ::munmap(const_cast<unsigned char*>(address_), bytes_);
  }
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ReadOnlyMapping& operator=(const ReadOnlyMapping&) = delete;
  const unsigned char* data() const { return address_; }

 private:
  const unsigned char* address_ = nullptr;
  size_t bytes_;
};
}  // namespace

void visit_safetensors_mapped(const std::string& path,
                              const std::function<void(const std::string&, const torch::Tensor&)>& visit) {
  const RegularFile file(path);
  auto header = validate_header(file);
  std::sort(header.entries.begin(), header.entries.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  const ReadOnlyMapping mapping(file);
  for (const auto& entry : header.entries) {
    if (entry.end == entry.begin) {
      visit(entry.name, torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype)));
      continue;
    }
    // from_blob never frees or writes the memory; the view is read only.
    auto* data = const_cast<unsigned char*>(mapping.data() + header.data_start + entry.begin);
    const auto view = torch::from_blob(data, entry.shape, torch::TensorOptions().dtype(entry.dtype));
    visit(entry.name, view);
  }
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  check_names(path, tensors);
  NamedTensors cpu;
  std::vector<torch::Tensor> data;
  for (const auto& [name, tensor] : tensors) {
    cpu.emplace_back(name, tensor.detach().to(torch::kCPU).contiguous());
    data.push_back(cpu.back().second);
  }
  const auto header = encode_header(path, cpu, metadata);
  base::replace_file_atomically(path, [&](const std::string& tmp_path) { write_file_synced(tmp_path, header, data); });
}

LoadReport load_into_module(torch::nn::Module& module, const std::string& path, bool strict,
                            const std::vector<std::string>& skip_prefixes) {
  auto file = load_safetensors(path);
  const auto targets = named_tensors_of(module);

  // Pass 1: validate every pairing; nothing is modified until all pass.
  LoadReport report;
  std::set<std::string> claimed;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  for (const auto& [name, target] : targets) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      if (has_any_prefix(name, skip_prefixes)) {
        report.skipped.push_back(name);
        continue;
      }
      fail(where(path, name) +
           "missing tensor: the module has it but the checkpoint does not"
           " (wrong checkpoint, or pass its prefix in skip_prefixes if it is meant to stay fresh)");
    }
    check_assignable(path, name, target, it->second);
    claimed.insert(name);
    copies.emplace_back(target, it->second);
    report.loaded.push_back(name);
  }
  for (const auto& [name, tensor] : file.tensors) {
    if (claimed.count(name)) continue;
    if (strict)
      fail(where(path, name) +
           "unexpected tensor: the checkpoint has it but the module does not"
           " (architecture mismatch? load with strict=false to ignore)");
    report.unexpected.push_back(name);
  }

  // Pass 2: copy. copy_ converts floating dtypes and moves to the target device.
  torch::NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(source);
  return report;
}

NamedTensors named_tensors_of(const torch::nn::Module& module) {
  NamedTensors result;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    if (item.value().defined()) result.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    if (item.value().defined()) result.emplace_back(item.key(), item.value());
  return result;
}

std::string safetensors_dtype_name(torch::ScalarType type) {
  return dtype_name(type);
}

std::optional<torch::ScalarType> scalar_type_from_safetensors_name(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  return std::nullopt;
}

}  // namespace sao::model
