// Whether two byte ranges share a byte (empty ranges share none): argument checks and copies that
// must choose between memcpy-like and memmove-like paths.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

inline bool overlaps(const void* a, size_t abytes, const void* b, size_t bbytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return abytes > 0 && bbytes > 0 && x < y + bbytes && y < x + abytes;
}

}  // namespace braid
