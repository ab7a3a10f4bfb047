// Ring AllGather, pipelined in chunks.
//
// Steps: n-1 sends and receives per chunk; bytes on the wire per rank: (n-1) * S/n where S is the
// gathered size. Valid for any n >= 1 and count >= 0. Out-of-place first copies the own block into
// place (a local step nothing waits on: the first send reads the send buffer directly).
#include "algorithms/patterns/ring.h"

#include "algorithms/algorithms.h"

namespace braid {

void buildRingAllGather(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, block = a.count * es;
  plan->coll = Coll::kAllGather;
  plan->algorithm = "ring";
  if (block == 0) return;
  plan->selfCopy(a.inPlace, block, r * block);
  if (n == 1) return;
  const int right = ringPeer(r, 1, n), left = ringPeer(r, -1, n);
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  std::vector<int32_t> last(static_cast<size_t>(n) * chunks, -1);
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = ringPeer(r, -s, n), recvBlock = ringPeer(r, -s - 1, n);
    for (uint64_t c = 0; c < chunks; ++c) {
      Range ch = partition(a.count, chunks, c);
      if (ch.count == 0) continue;
      uint64_t off = ch.offset * es, bytes = ch.count * es;
      BufRef src = s == 0 ? sendBuf(off) : recvBuf(sendBlock * block + off);
      plan->send(right, src, bytes, last[sendBlock * chunks + c]);
      last[recvBlock * chunks + c] = plan->recv(left, recvBuf(recvBlock * block + off), bytes);
    }
  }
}

}  // namespace braid
