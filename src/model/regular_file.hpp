// Checkpoint files are opened so that nothing put in a file's place can hang
// or flood the loader: opening a FIFO for reading blocks until a writer
// appears and reading /dev/zero never ends, so anything but a regular file
// (FIFO, device, socket, directory) is refused by name before a byte is read.
// The open is non-blocking and the type is checked on the descriptor itself,
// so swapping a FIFO in after the check cannot hang the load either, and the
// size every bounds check uses is that of the file actually opened. A link
// that leads out of the file's directory is refused, also checked on the
// descriptor (base/directory_boundary.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sao::model {

class RegularFile {
 public:
  // Throws sao::Error "checkpoint PATH: ..." for a missing, unreadable or
  // non-regular file.
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return size_; }
  // The open descriptor (for mmap); owned by this object.
  int descriptor() const { return fd_; }
  // Reads exactly `bytes` at `offset`; throws sao::Error naming the file
  // when it is shorter than that (changed while being read).
  void read_at(std::uint64_t offset, void* out, std::size_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The whole file as text. Throws sao::Error naming the file when it is not a
// regular file or is larger than `max_bytes` (checked before reading).
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes);

}  // namespace sao::model
