// Linear AllGather: every rank sends its block straight to every other rank, all at once, in chunks.
//
// Steps: n - 1 sends and n - 1 receives per chunk, none waiting on another, so the whole gather is one
// round of messages where the ring takes n - 1 rounds, each waiting on the last. Bytes on the wire
// per rank are the ring's, (n - 1) * S / n of the gathered size S, but every rank's link to every
// other carries them at once: on one host that is the same memory traffic, across hosts it piles onto
// the network the way AllToAll does (the cost model prices it so). Valid for any n >= 1 and
// count >= 0; out of place the own block is copied into place first (nothing waits on it).
//
// Rank r sends to r + d and receives from r - d for d = 1 .. n - 1: both ends of every link see its
// chunks in the same (chunk) order.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildLinearAllGather(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, block = a.count * es;
  plan->coll = Coll::kAllGather;
  plan->algorithm = "linear";
  if (block == 0) return;
  plan->selfCopy(a.inPlace, block, r * block);
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  for (int d = 1; d < n; ++d) {
    const int to = ringPeer(r, d, n), from = ringPeer(r, -d, n);
    for (uint64_t c = 0; c < chunks; ++c) {
      Range ch = partition(a.count, chunks, c);
      if (ch.count == 0) continue;
      const uint64_t off = ch.offset * es, bytes = ch.count * es;
      plan->send(to, sendBuf(off), bytes);
      plan->recv(from, recvBuf(from * block + off), bytes);
    }
  }
}

}  // namespace braid
