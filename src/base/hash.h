// FNV-1a, for deriving or comparing agreed values (ids, lists, checksums of test messages); not a
// cryptographic hash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace braid {

inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t seed = 0) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}
inline uint64_t fnv1a(const std::string& s, uint64_t seed) { return fnv1a(s.data(), s.size(), seed); }

}  // namespace braid
