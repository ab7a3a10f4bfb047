// Pairwise AllToAll: in step s (1..n-1) rank r sends block r+s to rank r+s and receives block r-s
// from rank r-s. All steps are posted at once (nothing depends on anything), so the transports
// overlap them; the order spreads the load so no rank is everyone's first target.
//
// Steps: n-1 sends and receives. Bytes on the wire per rank: (n-1)/n * S. Valid for any n >= 1.
// In place, block p arrives where the block for p departs: the sends leave from the buffer itself,
// each receive lands in scratch, and is copied into place once the send from that place is done
// too. That is n-1 block copies, none of them before the first send (staging the whole buffer
// first held every send back behind a copy of all n blocks: 2 ranks, 1-4 MiB, 25% slower than out
// of place).
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildPairwiseAllToAll(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kAllToAll;
  plan->algorithm = "pairwise";
  if (block == 0) return;
  const bool staged = a.inPlace && n > 1;
  if (!staged) {
    plan->selfCopy(a.inPlace, block, r * block, r * block);
    for (int s = 1; s < n; ++s) {
      const int to = ringPeer(r, s, n), from = ringPeer(r, -s, n);
      plan->send(to, sendBuf(to * block), block);
      plan->recv(from, recvBuf(from * block), block);
    }
    return;
  }
  plan->scratchBytes = static_cast<uint64_t>(n) * block;  // indexed by peer (r's own stays unused)
  std::vector<int32_t> sentFrom(n, -1), landed(n, -1);    // by peer
  for (int s = 1; s < n; ++s) {
    const int to = ringPeer(r, s, n), from = ringPeer(r, -s, n);
    sentFrom[to] = plan->send(to, recvBuf(to * block), block);  // from where to's block will land
    landed[from] = plan->recv(from, scratchBuf(from * block), block);
  }
  for (int p = 0; p < n; ++p)
    if (p != r) plan->copy(recvBuf(p * block), scratchBuf(p * block), block, {sentFrom[p], landed[p]});
}

}  // namespace braid
