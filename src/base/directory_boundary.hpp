// Files of a model or checkpoint directory stay inside it. A symbolic link
// is followed only when what it leads to lies inside the directory's
// boundary: the directory's own real path, or, when the directory is a
// snapshot of the Hugging Face cache (REPO/snapshots/REV, with REPO/blobs
// beside it), the repository folder REPO, where the cache's relative links
// `snapshots/REV/model.safetensors -> ../../blobs/SHA` lead. Every opener of
// such files (the checkpoint loader, the tokenizer and chat template
// readers, `sao doctor --model`) asks here, and checks the descriptor it
// opened, not the path again, so a link swapped in after the check cannot
// lead elsewhere.
#pragma once

#include <filesystem>
#include <string>

namespace sao::base {

// The boundary of the files in directory `dir` (see above). `dir` "" is ".".
// Throws sao::Error when the directory cannot be resolved.
std::filesystem::path directory_boundary(const std::filesystem::path& dir);

// Before opening: throws sao::Error "<where>PATH: is a link to TARGET,
// outside the model directory BOUNDARY (...)" when `path` resolves outside
// the boundary of its own directory. Nothing outside is then even opened
// (a device's open can have effects).
void require_path_inside_directory(const std::string& path, const std::string& where);

// After opening: the same check on the open descriptor `fd` (what was
// actually opened, read from /proc/self/fd), so the answer cannot change
// between the check and the read.
void require_descriptor_inside_directory(int fd, const std::string& path, const std::string& where);

}  // namespace sao::base
