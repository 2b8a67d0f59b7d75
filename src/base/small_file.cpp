// Bounded reads of regular files; see small_file.hpp.
#include "base/small_file.hpp"

#include "base/error.hpp"
#include "base/json_parse.hpp"

#include <fstream>
#include <sstream>

namespace sao::base {

std::string read_small_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw Error(path.string() + ": not a regular file");
  const auto size = std::filesystem::file_size(path, error);
  if (error || size > kDefaultJsonMaxBytes)
    throw Error(path.string() + ": " +
                (error ? "cannot read its size"
                       : std::to_string(size) + " bytes, over the limit of " + std::to_string(kDefaultJsonMaxBytes)));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("cannot read " + path.string());
  return text.str();
}

}  // namespace sao::base
