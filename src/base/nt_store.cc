#include "src/base/nt_store.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace braid {

namespace {

size_t cacheBytes(int index) {
  char path[64];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
  size_t kib = 0;
  if (FILE* f = fopen(path, "r")) {
    if (fscanf(f, "%zuK", &kib) != 1) kib = 0;
    fclose(f);
  }
  return kib << 10;
}

}  // namespace

#if defined(__x86_64__)
namespace {

// One 64-byte line: four unaligned loads, four non-temporal stores (dst 16-byte aligned).
inline void streamLine(char* dst, const char* src) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
  _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
}

constexpr size_t kPage = 4096;

}  // namespace
#endif

// Blocks of four pages go line by line across the four at once: four streams of reads and writes
// in flight instead of one. Measured on the 2-core VM (best of 4, one thread): 13-15 GB/s at
// 16 MiB against 12-14 line after line and 8 for memcpy; 9.7-10.7 at 64 MiB against 8.4-9.4 and
// 5.7-6.9; 10.4-10.5 at 256 MiB against 8.5-8.8 and 9.4-10.5 (glibc's own non-temporal copy).
// Software prefetch on top made it slower.
void copyStreaming(char* dst, const char* src, size_t len) {
#if defined(__x86_64__)
  const size_t head = std::min(len, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  memcpy(dst, src, head);
  size_t i = head;
  for (; i + 4 * kPage <= len; i += 4 * kPage)
    for (size_t o = i; o < i + kPage; o += 64) {
      streamLine(dst + o, src + o);
      streamLine(dst + o + kPage, src + o + kPage);
      streamLine(dst + o + 2 * kPage, src + o + 2 * kPage);
      streamLine(dst + o + 3 * kPage, src + o + 3 * kPage);
    }
  for (; i + 64 <= len; i += 64) streamLine(dst + i, src + i);
  memcpy(dst + i, src + i, len - i);
#else
  memcpy(dst, src, len);
#endif
}

void storeFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Measured, 2-rank AllReduce out of place on a VM whose sysfs says 2 MiB L2 and 480 MiB L3 (so the
// L3 a VM reports says little): non-temporal stores were even at 16 MiB calls on the FIFOs and 12%
// slower on the in-place path (braidMemAlloc memory; 64 MiB of buffers on the host), and 25-35%
// faster on both at 64 MiB calls (256 MiB of buffers). On a VM whose sysfs said 32 MiB L3 (the
// in-place path, session 12), plain stores won at 4 MiB calls and streaming ones at 64 MiB.
size_t defaultStreamBytes() {
  static const size_t bytes = [] {
    const size_t l2 = cacheBytes(2), l3 = cacheBytes(3);
    size_t b = l2 > 0 ? 32 * l2 : size_t{64} << 20;
    if (l3 > 0) b = std::min(b, l3);
    return b;
  }();
  return bytes;
}

}  // namespace braid
