// Ring AllReduce = ring reduce-scatter, then ring all-gather, pipelined in chunks.
//
// Chunks go through all steps one window at a time (ringWindow: one chunk on one host of 3 or more).
// Steps: 2(n-1) sends and receives per chunk. Bytes on the wire per rank: 2(n-1)/n * S.
// Valid for any n >= 1 and any count (segments differ by at most one element; empty chunks are
// skipped identically on both sides of a link). In-place needs no extra copy: the first
// recv_reduce reads the local contribution from the send buffer and writes the receive buffer.
// Rank r ends the reduce-scatter owning segment r+1, which it scales (avg) and then circulates.
#include "algorithms/patterns/ring.h"

#include <algorithm>

#include "algorithms/algorithms.h"

namespace braid {

void buildRingAllReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize;
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "ring";
  if (n == 1) {
    plan->selfCopy(a.inPlace, a.count * es);
    return;
  }
  const int right = ringPeer(r, 1, n), left = ringPeer(r, -1, n);
  const uint64_t segCount = partition(a.count, n, 0).count;
  uint64_t chunkBytes = a.chunkBytes;
  // Two ranks on one host over forwarding links cut their halves finer (twoRankRingChunk). Across
  // hosts the chunk stays what the network wants.
  if (n == 2 && a.linksForward && ringOnOneHost(a.hostOf, n)) chunkBytes = twoRankRingChunk(segCount * es, chunkBytes);
  const uint64_t chunks = chunksFor(segCount, es, chunkBytes);
  // last[seg * chunks + c] = the step that last wrote that chunk of recvbuf (-1 = none yet).
  std::vector<int32_t> last(static_cast<size_t>(n) * chunks, -1);
  auto piece = [&](int seg, uint64_t c) {
    Range s = partition(a.count, n, seg);
    Range ch = partition(s.count, chunks, c);
    return Range{(s.offset + ch.offset) * es, ch.count * es};  // in bytes
  };
  // Chunks [c0, c1) through every step (a window, ringWindow).
  auto window = [&](uint64_t c0, uint64_t c1) {
    // Reduce-scatter: step s sends segment r-s and folds segment r-s-1 from the left.
    for (int s = 0; s < n - 1; ++s) {
      const int sendSeg = ringPeer(r, -s, n), recvSeg = ringPeer(r, -s - 1, n);
      for (uint64_t c = c0; c < c1; ++c) {
        Range out = piece(sendSeg, c), in = piece(recvSeg, c);
        if (out.count > 0) {
          int32_t dep = last[sendSeg * chunks + c];
          BufRef src = s == 0 ? sendBuf(out.offset) : recvBuf(out.offset);
          plan->send(right, src, out.count, dep);
        }
        if (in.count > 0)
          last[recvSeg * chunks + c] = plan->recvReduce(left, recvBuf(in.offset), sendBuf(in.offset), in.count);
      }
    }
    const int owned = ringPeer(r, 1, n);
    if (a.avg) {
      for (uint64_t c = c0; c < c1; ++c) {
        Range p = piece(owned, c);
        if (p.count == 0) continue;
        int32_t& l = last[owned * chunks + c];
        l = plan->scale(recvBuf(p.offset), p.count, l);
      }
    }
    // All-gather: step s sends segment r+1-s and receives segment r-s.
    for (int s = 0; s < n - 1; ++s) {
      const int sendSeg = ringPeer(r, 1 - s, n), recvSeg = ringPeer(r, -s, n);
      for (uint64_t c = c0; c < c1; ++c) {
        Range out = piece(sendSeg, c), in = piece(recvSeg, c);
        if (out.count > 0) plan->send(right, recvBuf(out.offset), out.count, last[sendSeg * chunks + c]);
        if (in.count > 0) last[recvSeg * chunks + c] = plan->recv(left, recvBuf(in.offset), in.count);
      }
    }
  };
  const uint64_t w = ringWindow(a.hostOf, n, a.linksForward, chunks);
  for (uint64_t c = 0; c < chunks; c += w) window(c, std::min(chunks, c + w));
}

}  // namespace braid
