// Pipelined chain Reduce: root+1 -> root+2 -> ... -> root, each inner rank folding its own
// contribution into the partial result chunk by chunk.
//
// Steps: one receive-reduce and one send per chunk on inner ranks. Bytes on the wire per rank: S.
// Valid for any n >= 1. Inner ranks keep partial sums in a small scratch ring of kSlots chunks (the
// receive buffer is only significant at the root); a slot is reused once its previous chunk was
// sent, which is the dependency on the receive.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

namespace {
constexpr uint64_t kSlots = 4;
}

void buildChainReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, total = a.count * es;
  plan->coll = Coll::kReduce;
  plan->algorithm = "ring";  // a pipelined chain: the ring without its closing link
  if (total == 0) return;
  const bool isRoot = r == a.root;
  if (n == 1) {  // dividing by one rank changes nothing: no scale step
    plan->selfCopy(a.inPlace, total);
    return;
  }
  const int pos = ringPeer(r, -a.root - 1, n);  // 0 = first in the chain, n-1 = root
  const int next = pos < n - 1 ? ringPeer(r, 1, n) : -1;
  const int prev = pos > 0 ? ringPeer(r, -1, n) : -1;
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  const uint64_t perChunk = partition(a.count, chunks, 0).count * es;
  if (prev >= 0 && !isRoot) plan->scratchBytes = std::min<uint64_t>(chunks, kSlots) * perChunk;
  std::vector<int32_t> sent(chunks, -1);
  for (uint64_t c = 0; c < chunks; ++c) {
    Range ch = partition(a.count, chunks, c);
    uint64_t off = ch.offset * es, bytes = ch.count * es;
    if (bytes == 0) continue;
    if (prev < 0) {  // first in the chain: send the contribution as is
      plan->send(next, sendBuf(off), bytes);
      continue;
    }
    if (isRoot) {
      int32_t got = plan->recvReduce(prev, recvBuf(off), sendBuf(off), bytes);
      if (a.avg) plan->scale(recvBuf(off), bytes, got);
      continue;
    }
    BufRef slot = scratchBuf((c % kSlots) * perChunk);
    int32_t reuse = c >= kSlots ? sent[c - kSlots] : -1;
    int32_t got = plan->recvReduce(prev, slot, sendBuf(off), bytes, reuse);
    sent[c] = plan->send(next, slot, bytes, got);
  }
}

}  // namespace braid
