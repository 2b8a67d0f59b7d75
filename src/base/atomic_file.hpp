// Replacing a file so that a reader, or a crash, sees the old content or the
// new, never half a file: the new content goes to `path + ".tmp"`, which is
// then renamed over `path` (rename within one directory is atomic on POSIX).
// Status files polled by scripts, learner state and tensor files all rely on
// this. (Whole checkpoint directories are swapped by
// model::write_directory_atomically, which needs a second rename because a
// directory cannot be renamed over a non-empty one.)
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace sao::base {

// Calls `write(temporary_path)` to write the new content, then renames it over
// `path`. When `write` throws or the rename fails, the temporary file is
// removed and `path` is left as it was; a failed rename throws sao::Error
// naming both paths and the reason. No fsync here: callers whose data must
// survive a power loss (save_safetensors) sync inside `write`.
void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& write);

// replace_file_atomically with `text` as the whole content. Throws sao::Error
// naming the file when it cannot be written.
void write_text_file_atomically(const std::string& path, std::string_view text);

}  // namespace sao::base
