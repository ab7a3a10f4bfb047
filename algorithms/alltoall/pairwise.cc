// Pairwise AllToAll: in step s (1..n-1) rank r sends block r+s to rank r+s and receives block r-s
// from rank r-s. All steps are posted at once (nothing depends on anything), so the transports
// overlap them; the order spreads the load so no rank is everyone's first target.
//
// Steps: n-1 sends and receives. Bytes on the wire per rank: (n-1)/n * S. Valid for any n >= 1.
// In-place stages the send buffer in scratch first, since blocks arrive where others depart.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildPairwiseAllToAll(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kAllToAll;
  plan->algorithm = "pairwise";
  if (block == 0) return;
  int32_t staged = -1;
  Buf from = Buf::kSend;
  if (a.inPlace && n > 1) {
    plan->scratchBytes = static_cast<uint64_t>(n) * block;
    staged = plan->copy(scratchBuf(0), sendBuf(0), n * block);
    from = Buf::kScratch;
  } else {
    plan->selfCopy(a.inPlace, block, r * block, r * block);
  }
  for (int s = 1; s < n; ++s) {
    const int to = ringPeer(r, s, n), fromRank = ringPeer(r, -s, n);
    plan->send(to, BufRef{from, to * block}, block, staged);
    plan->recv(fromRank, recvBuf(fromRank * block), block, staged);
  }
}

}  // namespace braid
