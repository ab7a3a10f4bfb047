// Linear Gather: every other rank sends its block straight to the root, which posts all n - 1
// receives at once (each into its place in the receive buffer) and copies its own block locally.
//
// Steps: the root n - 1 receives (and a copy out of place); the others one send. Bytes on the wire:
// the root receives (n - 1) * S/n, where S is the gathered size; the others send S/n. Valid for any
// n >= 1, any root and any count. Nothing depends on anything, so the transports overlap the messages.
#include "algorithms/algorithms.h"

namespace braid {

void buildLinearGather(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kGather;
  plan->algorithm = "linear";
  if (block == 0) return;
  if (r != a.root) {
    plan->send(a.root, sendBuf(0), block);
    return;
  }
  plan->selfCopy(a.inPlace, block, r * block);
  for (int s = 1; s < n; ++s) {  // from the root's right neighbour on, so no rank is everyone's first
    const int from = (r + s) % n;
    plan->recv(from, recvBuf(from * block), block);
  }
}

}  // namespace braid
