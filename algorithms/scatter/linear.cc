// Linear Scatter: the root sends block j of its send buffer straight to rank j, all n - 1 sends
// posted at once, and copies its own block locally; the others receive one block.
//
// Steps: the root n - 1 sends (and a copy out of place); the others one receive. Bytes on the wire:
// the root sends (n - 1) * S/n, where S is the root's whole send buffer; the others receive S/n.
// Valid for any n >= 1, any root and any count. Nothing depends on anything.
#include "algorithms/algorithms.h"

namespace braid {

void buildLinearScatter(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kScatter;
  plan->algorithm = "linear";
  if (block == 0) return;
  if (r != a.root) {
    plan->recv(a.root, recvBuf(0), block);
    return;
  }
  plan->selfCopy(a.inPlace, block, 0, r * block);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n;
    plan->send(to, sendBuf(to * block), block);
  }
}

}  // namespace braid
