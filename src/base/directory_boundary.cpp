// Links out of a model directory are refused; see directory_boundary.hpp.
#include "base/directory_boundary.hpp"

#include "base/error.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sao::base {

namespace {

namespace fs = std::filesystem;

fs::path folder_of(const std::string& path) {
  const auto parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Whether `resolved` is `boundary` itself or lies below it, component by
// component (so /models/a-b is not inside /models/a).
bool lies_inside(const fs::path& resolved, const fs::path& boundary) {
  auto inner = resolved.begin();
  for (auto outer = boundary.begin(); outer != boundary.end(); ++outer, ++inner) {
    if (inner == resolved.end() || *inner != *outer) return false;
  }
  return true;
}

[[noreturn]] void fail_outside(const std::string& path, const fs::path& target, const fs::path& boundary,
                               const std::string& where) {
  throw Error(where + path + ": is a link to " + target.string() + ", outside the model directory " +
              boundary.string() +
              " (links are followed only inside it, or inside the repository folder of a Hugging Face cache "
              "snapshot)");
}

}  // namespace

fs::path directory_boundary(const fs::path& dir) {
  std::error_code error;
  const auto real = fs::canonical(dir.empty() ? fs::path(".") : dir, error);
  if (error) throw Error((dir.empty() ? std::string(".") : dir.string()) + ": cannot resolve: " + error.message());
  const auto snapshots = real.parent_path();
  if (snapshots.filename() == "snapshots" && fs::is_directory(snapshots.parent_path() / "blobs", error))
    return snapshots.parent_path();
  return real;
}

void require_path_inside_directory(const std::string& path, const std::string& where) {
  std::error_code error;
  const auto resolved = fs::canonical(path, error);
  if (error) throw Error(where + path + ": cannot resolve: " + error.message());
  const auto boundary = directory_boundary(folder_of(path));
  if (!lies_inside(resolved, boundary)) fail_outside(path, resolved, boundary, where);
}

void require_descriptor_inside_directory(int fd, const std::string& path, const std::string& where) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::string target(4096, '\0');
  const auto length = ::readlink(link.c_str(), target.data(), target.size());
  if (length < 0 || static_cast<std::size_t>(length) >= target.size())
    throw Error(where + path + ": cannot tell which file was opened (" + link + ": " +
                (length < 0 ? std::strerror(errno) : "name too long") + ")");
  target.resize(static_cast<std::size_t>(length));
  const auto boundary = directory_boundary(folder_of(path));
  if (!lies_inside(fs::path(target), boundary)) fail_outside(path, target, boundary, where);
}

}  // namespace sao::base
