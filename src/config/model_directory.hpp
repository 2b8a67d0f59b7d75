// What a Hugging Face model directory holds, as far as sao is concerned:
// the architecture (config.json), the weights (model.safetensors or shards
// listed by model.safetensors.index.json, headers only), the tokenizer
// (tokenizer.json, tokenizer_config.json), the chat template and the
// generation settings, and MANIFEST.json where sao wrote the directory.
// `sao doctor --model DIR` prints it; each part says
// whether sao can use it and, where not, exactly which key stops it.
#pragma once

#include <string>
#include <vector>

namespace sao::config {

struct ModelDirectoryPart {
  std::string name;                // "config.json", "weights", "tokenizer", ...
  bool usable = true;              // false when something stops sao from using this part
  std::vector<std::string> lines;  // what was found, then each problem ("error: ...")
};

struct ModelDirectoryReport {
  std::string directory;
  std::vector<ModelDirectoryPart> parts;
  bool usable() const;
};

// Reads only headers and small JSON files, whatever the model's size, except
// that a directory sao wrote (with a MANIFEST.json) has each listed file read
// whole to check its checksum, as every load does. Never throws for what it finds in the directory; every
// problem becomes an "error: ..." line of its part.
ModelDirectoryReport inspect_model_directory(const std::string& directory);

}  // namespace sao::config
