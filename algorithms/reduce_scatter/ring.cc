// Ring ReduceScatter, pipelined in chunks.
//
// Steps: n-1 sends and receives per chunk; bytes on the wire per rank: (n-1) * S/n where S is the
// send buffer size. Valid for any n >= 1 and count >= 0. Partial sums travel through the scratch
// buffer (one block per segment); the last fold writes the receive buffer directly. Rank r's block
// starts at the left of r-1 and travels n-1 hops to arrive complete at r.
#include "algorithms/patterns/ring.h"

#include "algorithms/algorithms.h"

namespace braid {

void buildRingReduceScatter(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, block = a.count * es;
  plan->coll = Coll::kReduceScatter;
  plan->algorithm = "ring";
  if (block == 0) return;
  if (n == 1) {
    plan->selfCopy(a.inPlace, block);
    return;
  }
  plan->scratchBytes = static_cast<uint64_t>(n) * block;
  const int right = ringPeer(r, 1, n), left = ringPeer(r, -1, n);
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  std::vector<int32_t> last(static_cast<size_t>(n) * chunks, -1);
  std::vector<int32_t> finals;
  for (int s = 0; s < n - 1; ++s) {
    const int sendSeg = ringPeer(r, -1 - s, n), recvSeg = ringPeer(r, -2 - s, n);
    const bool lastStep = s == n - 2;
    for (uint64_t c = 0; c < chunks; ++c) {
      Range ch = partition(a.count, chunks, c);
      if (ch.count == 0) continue;
      uint64_t off = ch.offset * es, bytes = ch.count * es;
      BufRef src = s == 0 ? sendBuf(sendSeg * block + off) : scratchBuf(sendSeg * block + off);
      plan->send(right, src, bytes, last[sendSeg * chunks + c]);
      BufRef dst = lastStep ? recvBuf(off) : scratchBuf(recvSeg * block + off);
      int32_t idx = plan->recvReduce(left, dst, sendBuf(recvSeg * block + off), bytes);
      last[recvSeg * chunks + c] = idx;
      if (lastStep && a.avg) plan->scale(recvBuf(off), bytes, idx);
    }
  }
}

}  // namespace braid
