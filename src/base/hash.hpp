// Fixed 64-bit hashes for seeds, held-out splits and the cluster's build
// fingerprint. Their values are behaviour: a changed constant reshuffles
// every train/test split and makes nodes of one build refuse another, so
// each exists once, here, and tests/test_base.cpp pins them. std::hash is
// not used because its values differ between standard libraries.
#pragma once

#include <cstdint>
#include <string_view>

namespace sao::base {

// The splitmix64 finaliser (Steele, Lea, Flood 2014): adds the golden-ratio
// increment, then mixes so that every input bit affects every output bit.
// A bijection on 64 bits, so distinct seeds stay distinct.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a, 64-bit, over the bytes of `text`. Not mixed: its low bits are
// weak, so a split hash passes it through splitmix64 first. Pieces chain:
// fnv1a64(b, fnv1a64(a)) == fnv1a64(a + b).
constexpr uint64_t kFnv1a64Start = 0xcbf29ce484222325ULL;
constexpr uint64_t fnv1a64(std::string_view text, uint64_t hash = kFnv1a64Start) {
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The top 53 bits of a hash as a double exactly uniform on [0, 1);
// `hash_unit(h) < fraction` picks a held-out split of that fraction.
constexpr double hash_unit(uint64_t hash) {
  return static_cast<double>(hash >> 11) * 0x1.0p-53;
}

}  // namespace sao::base
