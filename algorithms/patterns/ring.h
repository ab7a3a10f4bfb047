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

// How many chunks a ring takes through all of its steps before it starts the next ones (a window).
// On one host (hostOf null or all equal) one: each chunk goes around the ring while it is in cache,
// and the shm FIFOs forward it (a received chunk folded straight into the slot that sends it on,
// src/plan.h fedBy). Across hosts all of them, step by step: no link waits for a neighbour's chunk
// while it has others to send, which hides a network's latency. Two ranks whose link forwards
// (shm) also all of them: there a chunk's forward goes back to the rank it came from, on the one
// link, so one chunk at a time puts the next chunk's send behind this chunk's fold on that link, and
// each rank's folds wait on the other's; all chunks step by step let one rank's folds overlap the
// other's sends (2 ranks on the AMD VM of perf/results/2026-12-05-small-calls.md, 5 interleaved
// rounds: 1 MiB 104 -> 86 us, 4 MiB 437 -> 272, 16 MiB in place 1668 -> 950; 4 ranks on its 2 cores
// were slower so, 227 -> 286 at 1 MiB, and so were 2 ranks over tcp on one host, 16 MiB 4.8 ->
// 6.3 ms). The same on every rank (the order of messages on each link depends on it).
inline bool ringOnOneHost(const int* hostOf, int n) {
  if (hostOf == nullptr) return true;
  for (int i = 1; i < n; ++i)
    if (hostOf[i] != hostOf[0]) return false;
  return true;
}
inline uint64_t ringWindow(const int* hostOf, int n, bool linksForward, uint64_t chunks) {
  return (n == 2 && linksForward) || !ringOnOneHost(hostOf, n) ? chunks : 1;
}

// The chunk of a 2-rank ring AllReduce on one host over forwarding links (algorithms/allreduce/
// ring.cc), for halves of `halfBytes`: every chunk goes through a step at once (ringWindow), so the
// folds overlap the other rank's sends only with a few chunks a half: at least 8, down to 64 KiB
// (shm, 3 interleaved rounds: 1 MiB 92 -> 66 us; 256 KiB and 4-64 MiB even; 32 KiB chunks no
// better), never past `chunkBytes`. The cost model prices the ring's fill with it (topology/cost.cc).
inline uint64_t twoRankRingChunk(uint64_t halfBytes, uint64_t chunkBytes) {
  constexpr uint64_t kChunks = 8, kMinChunk = 64 << 10;
  return std::min(chunkBytes, std::max(kMinChunk, halfBytes / kChunks));
}

}  // namespace braid
