// Pure rank and index math shared by the ring and chain algorithms. No I/O, unit-tested alone.
#pragma once

#include <algorithm>
#include <cstdint>

namespace braid {

// Rank r's neighbour at distance d around a ring of n (d may be negative).
inline int ringPeer(int r, int d, int n) { return static_cast<int>(((static_cast<int64_t>(r) + d) % n + n) % n); }

// Piece i of `count` items split into `parts` near-equal pieces (the first count % parts get one
// more), as {offset, count}.
struct Range {
  uint64_t offset = 0;
  uint64_t count = 0;
};
inline Range partition(uint64_t count, uint64_t parts, uint64_t i) {
  uint64_t base = count / parts, rem = count % parts;
  return Range{i * base + std::min<uint64_t>(i, rem), base + (i < rem ? 1 : 0)};
}

// How many pipelining chunks a piece of `count` elements needs so no chunk exceeds chunkBytes.
inline uint64_t chunksFor(uint64_t count, uint64_t elemSize, uint64_t chunkBytes) {
  uint64_t perChunk = std::max<uint64_t>(1, chunkBytes / elemSize);
  return std::max<uint64_t>(1, (count + perChunk - 1) / perChunk);
}

}  // namespace braid
