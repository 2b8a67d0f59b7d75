// Atomic file replacement; see atomic_file.hpp.
#include "base/atomic_file.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace sao::base {

void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& write) {
  const std::string temporary = path + ".tmp";
  try {
    write(temporary);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    throw Error("cannot rename " + temporary + " over " + path + ": " + reason);
  }
}

void write_text_file_atomically(const std::string& path, std::string_view text) {
  replace_file_atomically(path, [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + temporary + ": " + std::strerror(errno));
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) throw Error("error writing " + temporary);
  });
}

}  // namespace sao::base
