// Reading the small text files of a model directory (tokenizer.json,
// tokenizer_config.json, generation_config.json, chat_template.jinja). A
// FIFO or device in a file's place would block or never end, so only a
// regular file is read, and only up to the JSON size limit; a link that
// leads out of the file's directory is refused (directory_boundary.hpp).
#pragma once

#include <filesystem>
#include <string>

namespace sao::base {

// The whole file. Throws sao::Error "PATH: not a regular file", "PATH: N
// bytes, over the limit of M", "PATH: is a link to ..., outside the model
// directory ..." or "cannot read PATH".
std::string read_small_file(const std::filesystem::path& path);

}  // namespace sao::base
