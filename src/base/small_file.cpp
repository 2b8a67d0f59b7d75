// Bounded reads of regular files; see small_file.hpp.
#include "base/small_file.hpp"

#include "base/directory_boundary.hpp"
#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace sao::base {

namespace {
// Closes the descriptor however the read ends.
struct SmallFileDescriptor {
  int fd;
  ~SmallFileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

std::string read_small_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw Error(path.string() + ": not a regular file");
  require_path_inside_directory(path.string(), "");
  // Opened once, non-blocking; what is checked from here on is the open
  // descriptor, so a FIFO or a link swapped in after the checks above is caught.
  const SmallFileDescriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (file.fd < 0) throw Error("cannot read " + path.string());
  struct stat opened {};
  if (::fstat(file.fd, &opened) != 0) throw Error("cannot read " + path.string());
  if (!S_ISREG(opened.st_mode)) throw Error(path.string() + ": not a regular file");
  const auto size = static_cast<std::uint64_t>(opened.st_size);
  if (size > kDefaultJsonMaxBytes)
    throw Error(path.string() + ": " + std::to_string(size) + " bytes, over the limit of " +
                std::to_string(kDefaultJsonMaxBytes));
  require_descriptor_inside_directory(file.fd, path.string(), "");
  std::string text(size, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const auto got = ::read(file.fd, text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error("cannot read " + path.string());
    if (got == 0) break;  // shortened while being read: what is there is the file
    done += static_cast<std::size_t>(got);
  }
  text.resize(done);
  return text;
}

}  // namespace sao::base
