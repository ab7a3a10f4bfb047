// Dissemination barrier: in round k rank r signals r + 2^k and waits for r - 2^k. After
// ceil(log2 n) rounds every rank has heard, transitively, from every other.
//
// Steps: ceil(log2 n) zero-byte sends and receives. Valid for any n >= 1 (no steps for n = 1).
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildDisseminationBarrier(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  plan->coll = Coll::kBarrier;
  plan->algorithm = "dissemination";
  int32_t heard = -1;
  for (int dist = 1; dist < n; dist *= 2) {
    plan->send(ringPeer(r, dist, n), sendBuf(0), 0, heard);
    heard = plan->recv(ringPeer(r, -dist, n), recvBuf(0), 0);
  }
}

}  // namespace braid
