// The base helpers every layer shares: the fixed hashes (their values are
// behaviour: seeds, held-out splits, the cluster fingerprint), HOST:PORT
// parsing, the constant-time secret compare and atomic file replacement.
// Expected hash values were computed independently (Python, from the
// published algorithms); splitmix64(0) and the FNV-1a vectors match the
// reference outputs.
#include "base/allocator.hpp"
#include "base/atomic_file.hpp"
#include "base/constant_time.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/host_port.hpp"
#include "base/json_parse.hpp"
#include "base/utf8.hpp"

#include <doctest/doctest.h>
#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace fs = std::filesystem;
using sao::base::constant_time_equal;
using sao::base::parse_host_port;

namespace {
std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path fresh_dir(const std::string& stem) {
  const auto dir = fs::temp_directory_path() / ("sao_test_base_" + stem + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}
}  // namespace

TEST_CASE("splitmix64 gives the reference values") {
  static_assert(sao::base::splitmix64(0) == 0xe220a8397b1dcdafULL, "usable at compile time");
  CHECK(sao::base::splitmix64(0) == 0xe220a8397b1dcdafULL);
  CHECK(sao::base::splitmix64(1) == 0x910a2dec89025cc1ULL);
  CHECK(sao::base::splitmix64(3) == 0x1d0b14e4db018fedULL);
  CHECK(sao::base::splitmix64(0xffffffffffffffffULL) == 0xe4d971771b652c20ULL);
}

TEST_CASE("fnv1a64 gives the reference values") {
  CHECK(sao::base::fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(sao::base::fnv1a64("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(sao::base::fnv1a64("foobar") == 0x85944171f73967e8ULL);
  CHECK(sao::base::fnv1a64("0123456789") == 0x50c0aafd8b4330b2ULL);
  // Bytes, not chars: a byte above 0x7f hashes as unsigned.
  CHECK(sao::base::fnv1a64("\xff") == ((0xcbf29ce484222325ULL ^ 0xffULL) * 0x100000001b3ULL));
}

TEST_CASE("hash_unit maps the top 53 bits onto [0, 1)") {
  CHECK(sao::base::hash_unit(0) == 0.0);
  CHECK(sao::base::hash_unit(0xffffffffffffffffULL) == 1.0 - 0x1.0p-53);
  CHECK(sao::base::hash_unit(uint64_t{1} << 63) == 0.5);
  CHECK(sao::base::hash_unit(0x7ff) == 0.0);  // the low 11 bits do not count
}

TEST_CASE("HOST:PORT: the forms accepted") {
  auto parsed = parse_host_port("10.0.0.7:7420", "--join");
  CHECK(parsed.host == "10.0.0.7");
  CHECK(parsed.port == 7420);
  parsed = parse_host_port("localhost:0", "--listen");
  CHECK(parsed.host == "localhost");
  CHECK(parsed.port == 0);
  parsed = parse_host_port("node-3.example:65535", "--join");
  CHECK(parsed.host == "node-3.example");
  CHECK(parsed.port == 65535);
  parsed = parse_host_port("[::1]:8470", "--connect");  // brackets come off an IPv6 host
  CHECK(parsed.host == "::1");
  CHECK(parsed.port == 8470);
}

TEST_CASE("HOST:PORT: bad text is refused, naming the flag, the text and what was expected") {
  const std::string expected = "': expected HOST:PORT, e.g. 127.0.0.1:7420";
  CHECK_THROWS_WITH_AS(parse_host_port("10.0.0.7", "--join"), ("--join '10.0.0.7" + expected).c_str(), sao::Error);
  CHECK_THROWS_WITH_AS(parse_host_port(":7420", "--join"), ("--join ':7420" + expected).c_str(), sao::Error);
  CHECK_THROWS_WITH_AS(parse_host_port("h:", "--join"), ("--join 'h:" + expected).c_str(), sao::Error);
  CHECK_THROWS_WITH_AS(parse_host_port("[]:80", "--join"), ("--join '[]:80" + expected).c_str(), sao::Error);
  CHECK_THROWS_WITH_AS(parse_host_port("", "task.address"), ("task.address '" + expected).c_str(), sao::Error);

  const std::string range = "': port must be a number in 0..65535";
  for (const std::string text :
       {"h:70000", "h:65536", "h:+80", "h: 80", "h:-1", "h:8o", "h:80 ", "h:99999999999999999999"}) {
    CHECK_THROWS_WITH_AS(parse_host_port(text, "--listen"), ("--listen '" + text + range).c_str(), sao::Error);
  }
}

TEST_CASE("constant-time compare: equal only at equal length and content") {
  CHECK(constant_time_equal("correct horse", "correct horse"));
  CHECK_FALSE(constant_time_equal("correct horsf", "correct horse"));               // last character differs
  CHECK_FALSE(constant_time_equal("xorrect horse", "correct horse"));               // first character differs
  CHECK_FALSE(constant_time_equal("correct", "correct horse"));                     // a prefix of the secret
  CHECK_FALSE(constant_time_equal("correct horse battery", "correct horse"));       // the secret is a prefix of it
  CHECK_FALSE(constant_time_equal("correct horsecorrect horse", "correct horse"));  // the secret repeated
  CHECK(constant_time_equal("", ""));
  CHECK_FALSE(constant_time_equal("", "secret"));
  CHECK_FALSE(constant_time_equal("x", ""));
  CHECK_FALSE(constant_time_equal(std::string_view("\0", 1), ""));  // an empty secret is not a NUL
  CHECK(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0b", 3)));
  CHECK_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST_CASE("atomic file writes replace the content and leave no temporary file") {
  const auto dir = fresh_dir("atomic");
  const auto path = (dir / "status.json").string();
  sao::base::write_text_file_atomically(path, "first\n");
  CHECK(read_file(path) == "first\n");
  sao::base::write_text_file_atomically(path, "second, longer\n");
  CHECK(read_file(path) == "second, longer\n");
  sao::base::write_text_file_atomically(path, "3");
  CHECK(read_file(path) == "3");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 1);

  // A writer that fails leaves the old content and no temporary file.
  CHECK_THROWS_WITH_AS(sao::base::replace_file_atomically(path,
                                                          [](const std::string& temporary) {
                                                            std::ofstream(temporary) << "half";
                                                            throw std::runtime_error("disk full");
                                                          }),
                       "disk full", std::runtime_error);
  CHECK(read_file(path) == "3");
  CHECK_FALSE(fs::exists(path + ".tmp"));

  // A rename that fails (the target is a non-empty directory) names both
  // paths, and the temporary file is gone.
  const auto blocked = dir / "blocked";
  fs::create_directories(blocked / "inside");
  CHECK_THROWS_WITH_AS(
      sao::base::write_text_file_atomically(blocked.string(), "x"),
      doctest::Contains(("cannot rename " + blocked.string() + ".tmp over " + blocked.string() + ": ").c_str()),
      sao::Error);
  CHECK_FALSE(fs::exists(blocked.string() + ".tmp"));

  // A file in a directory that does not exist cannot be written.
  const auto missing = (dir / "no-such-dir" / "f").string();
  CHECK_THROWS_WITH_AS(sao::base::write_text_file_atomically(missing, "x"),
                       doctest::Contains(("cannot write " + missing + ".tmp").c_str()), sao::Error);
  fs::remove_all(dir);
}

TEST_CASE("UTF-8: truncation never splits a character") {
  using sao::base::truncate_utf8;
  const std::string euro = "\xE2\x82\xAC";  // U+20AC, three bytes
  const std::string text = "ab" + euro + "cd";
  CHECK(truncate_utf8(text, 100) == text);  // short enough: unchanged, no ellipsis
  CHECK(truncate_utf8(text, 2) == "ab...");
  CHECK(truncate_utf8(text, 3) == "ab...");  // would end inside the euro sign
  CHECK(truncate_utf8(text, 4) == "ab...");
  CHECK(truncate_utf8(text, 5) == "ab" + euro + "...");
  CHECK(truncate_utf8(text, 6, "") == "ab" + euro + "c");
  const std::string four = "\xF0\x9F\x98\x80";  // U+1F600
  CHECK(truncate_utf8(four + four, 7, "") == four);
  CHECK(sao::base::is_valid_utf8(truncate_utf8(std::string(199, 'x') + euro, 200)));
  // An invalid byte counts as one character; it is kept (replaced later), not split.
  CHECK(truncate_utf8("a\xFF"
                      "bc",
                      2, "") == "a\xFF");
}

TEST_CASE("an error message quotes a printable byte and shows any other by its value") {
  CHECK(sao::base::quoted_byte('x') == "'x'");
  CHECK(sao::base::quoted_byte(' ') == "' '");
  CHECK(sao::base::quoted_byte('~') == "'~'");
  CHECK(sao::base::quoted_byte('\n') == "byte 0x0A");
  CHECK(sao::base::quoted_byte('\x7f') == "byte 0x7F");
  CHECK(sao::base::quoted_byte('\xC3') == "byte 0xC3");  // the first byte of a two-byte character
}

TEST_CASE("UTF-8: invalid bytes become U+FFFD, valid text is unchanged") {
  using sao::base::is_valid_utf8;
  using sao::base::replace_invalid_utf8;
  const std::string fffd = "\xEF\xBF\xBD";
  const std::string valid = "plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  CHECK(is_valid_utf8(valid));
  CHECK(replace_invalid_utf8(valid) == valid);
  CHECK(replace_invalid_utf8("a\xE2\x82") == "a" + fffd);                        // cut mid-character: one
  CHECK(replace_invalid_utf8("\xF0\x9F\x98x") == fffd + "x");                    // a 4-byte one cut after 3
  CHECK(replace_invalid_utf8("\xE0\x80\x80") == fffd + fffd + fffd);             // overlong: E0 80 is no prefix
  CHECK(replace_invalid_utf8("\xC0\xAF") == fffd + fffd);                        // overlong '/'
  CHECK(replace_invalid_utf8("\xED\xA0\x80") == fffd + fffd + fffd);             // UTF-16 surrogate
  CHECK(replace_invalid_utf8("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // above U+10FFFF
  CHECK(replace_invalid_utf8("\x80x") == fffd + "x");                            // lone continuation byte
  CHECK_FALSE(is_valid_utf8("\xFF"));
  CHECK(is_valid_utf8(replace_invalid_utf8("\xFF\xFE\xE2")));
}

TEST_CASE("dump_json writes invalid UTF-8 as U+FFFD where nlohmann's dump throws") {
  const nlohmann::json value = {{"last_error", "env-0: reply 'caf\xC3"}};
  CHECK_THROWS(value.dump());  // what the console did before: the request failed
  CHECK(sao::base::dump_json(value) == "{\"last_error\":\"env-0: reply 'caf\xEF\xBF\xBD\"}");
  CHECK(sao::base::dump_json(nlohmann::json{{"a", 1}}, 2) == "{\n  \"a\": 1\n}");
}

namespace {
void* volatile g_block_sink = nullptr;  // keeps the compiler from eliding the malloc/free pair
}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer replaces malloc: glibc's settings and counters do not apply.
TEST_CASE("freed memory stays in the heap for reuse (no fresh mmap, no trim)" * doctest::skip()) {}
#else
TEST_CASE("freed memory stays in the heap for reuse (no fresh mmap, no trim)") {
  CHECK(sao::base::keep_freed_memory_for_reuse() ==
        "malloc: freed blocks up to 32 MiB reused from the heap, trimmed past 1 GiB");
  constexpr size_t kBlock = 16 << 20;  // above glibc's default mmap threshold, below the new one
  const auto before = mallinfo2();
  g_block_sink = std::malloc(kBlock);
  REQUIRE(g_block_sink != nullptr);
  std::memset(g_block_sink, 1, kBlock);
  const auto during = mallinfo2();
  CHECK(during.hblkhd == before.hblkhd);  // served from the heap, not a fresh mmap
  CHECK(during.arena >= before.arena);
  std::free(g_block_sink);
  g_block_sink = nullptr;
  const auto after = mallinfo2();
  CHECK(after.arena == during.arena);  // the heap kept the freed block for the next allocation
  CHECK(after.fordblks >= kBlock);
}
#endif

namespace {
// The VmFlags line of the mapping in /proc/self/smaps that holds `address`.
std::string vm_flags_of(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(':') > line.find(' ')) {
      inside = begin <= target && target < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}
}  // namespace

TEST_CASE("make_bulk_buffer gives a zeroed buffer, advised to huge pages when large") {
  CHECK(sao::base::make_bulk_buffer(0).empty());
  const auto small = sao::base::make_bulk_buffer(100);
  CHECK(small.size() == 100);
  CHECK(std::all_of(small.begin(), small.end(), [](char c) { return c == 0; }));
  constexpr size_t kLarge = 64 << 20;
  const auto large = sao::base::make_bulk_buffer(kLarge);
  REQUIRE(large.size() == kLarge);
  CHECK(std::all_of(large.begin(), large.end(), [](char c) { return c == 0; }));
  // madvise(MADV_HUGEPAGE) marks the mapping "hg" (man 5 proc), whatever the
  // system's THP mode; the middle of the buffer lies past its first page.
  const auto flags = vm_flags_of(large.data() + kLarge / 2);
  CHECK_MESSAGE(flags.find(" hg") != std::string::npos, flags);
}
