// Non-blocking, type-checked opening of checkpoint files; see regular_file.hpp.
#include "model/regular_file.hpp"

#include "base/directory_boundary.hpp"
#include "base/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sao::model {
namespace {

std::string file_where(const std::string& path) {
  return "checkpoint " + path + ": ";
}

// What a non-regular file is, for the message; empty for a regular file.
std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void fail_not_regular(const std::string& path, mode_t mode) {
  throw Error(file_where(path) + "is " + kind_of(mode) + ", not a regular file");
}

}  // namespace

RegularFile::RegularFile(const std::string& path) : path_(path) {
  // stat first: opening a socket fails with an unhelpful ENXIO, and a
  // directory or device is better named than opened.
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0) {
    if (errno == ENOENT) throw Error(file_where(path) + "file does not exist");
    throw Error(file_where(path) + "cannot access: " + std::strerror(errno));
  }
  if (!S_ISREG(before.st_mode)) fail_not_regular(path, before.st_mode);
  base::require_path_inside_directory(path, "checkpoint ");
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) throw Error(file_where(path) + "cannot open for reading: " + std::strerror(errno));
  struct stat opened {};
  if (::fstat(fd_, &opened) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    throw Error(file_where(path) + "cannot stat: " + reason);
  }
  if (!S_ISREG(opened.st_mode)) {
    ::close(fd_);
    fail_not_regular(path, opened.st_mode);
  }
  try {
    base::require_descriptor_inside_directory(fd_, path, "checkpoint ");
  } catch (...) {
    ::close(fd_);
    throw;
  }
  size_ = static_cast<std::uint64_t>(opened.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read_at(std::uint64_t offset, void* out, std::size_t bytes) const {
  auto* cursor = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < bytes) {
    const auto got = ::pread(fd_, cursor + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw Error(file_where(path_) + "read of " + std::to_string(bytes) + " bytes at offset " +
                  std::to_string(offset) + " failed: " + std::strerror(errno));
    if (got == 0)
      throw Error(file_where(path_) + "file ended " + std::to_string(done) + " bytes into a read of " +
                  std::to_string(bytes) + " at offset " + std::to_string(offset) + " (changed while being read?)");
    done += static_cast<std::size_t>(got);
  }
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes) {
  const RegularFile file(path);
  if (file.size() > max_bytes)
    throw Error(file_where(path) + "file is " + std::to_string(file.size()) + " bytes, over the limit of " +
                std::to_string(max_bytes));
  std::string text(file.size(), '\0');
  file.read_at(0, text.data(), text.size());
  return text;
}

}  // namespace sao::model
