// Pipelined chain Broadcast: root -> root+1 -> ... -> root-1, chunk by chunk, so every link is
// busy at once after the pipeline fills.
//
// Steps: one receive and one send per chunk on inner ranks. Bytes on the wire per rank: S (inner
// ranks forward everything once). Time ~ (n - 2 + chunks) * chunk time. Valid for any n >= 1.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildChainBroadcast(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, total = a.count * es;
  plan->coll = Coll::kBroadcast;
  plan->algorithm = "ring";  // a pipelined chain: the ring without its closing link
  if (total == 0) return;
  const int pos = ringPeer(r, -a.root, n);  // distance from the root along the chain
  const int next = pos + 1 < n ? ringPeer(r, 1, n) : -1;
  const int prev = pos > 0 ? ringPeer(r, -1, n) : -1;
  if (pos == 0) plan->selfCopy(a.inPlace, total);
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  for (uint64_t c = 0; c < chunks; ++c) {
    Range ch = partition(a.count, chunks, c);
    uint64_t off = ch.offset * es, bytes = ch.count * es;
    if (bytes == 0) continue;
    int32_t got = -1;
    if (prev >= 0) got = plan->recv(prev, recvBuf(off), bytes);
    if (next >= 0) {
      BufRef src = pos == 0 ? sendBuf(off) : recvBuf(off);
      plan->send(next, src, bytes, got);
    }
  }
}

}  // namespace braid
