// Binomial-tree Gather (algorithms/patterns/binomial.h): each rank collects the blocks of its
// subtree, a run of ranks relative to the root, and sends the run to its parent in one message (two
// where the run wraps past rank n - 1). The root receives each child's run straight into its place
// in the receive buffer.
//
// Steps: ceil(log2 n) message rounds on the critical path; a rank receives one message per child
// (at most ceil(log2 n)) and sends one to its parent. Bytes on the wire: the root receives
// (n - 1) * S/n, where S is the gathered size; a rank at relative rank v sends its subtree's
// lowbit(v) blocks (fewer at the end). Valid for any n >= 1, any root and any count.
//
// An interior rank stages its run in scratch, its own block first: the send to the parent waits for
// that copy and for every child's run. A leaf sends its send buffer as it is.
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"

namespace braid {

void buildTreeGather(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank, root = a.root;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kGather;
  plan->algorithm = "tree";
  if (block == 0) return;
  const BinomialLinks l = binomialLinks(r, n, root);
  if (l.rel == 0) {
    plan->selfCopy(a.inPlace, block, r * block);
    forEachChildPiece(l, n, root, [&](int peer, int begin, int end) {
      plan->recv(peer, recvBuf(binomialAbs(begin, n, root) * block), (end - begin) * block);
    });
    return;
  }
  if (l.numChildren == 0) {
    plan->send(l.parent, sendBuf(0), block);
    return;
  }
  plan->scratchBytes = static_cast<uint64_t>(l.end - l.rel) * block;
  std::vector<int32_t> staged{plan->copy(scratchBuf(0), sendBuf(0), block)};
  forEachChildPiece(l, n, root, [&](int peer, int begin, int end) {
    staged.push_back(plan->recv(peer, scratchBuf((begin - l.rel) * block), (end - begin) * block));
  });
  const int32_t all = plan->join(staged);
  const RunPieces up = splitRun(l.rel, l.end, n, root);
  for (int i = 0; i < up.count; ++i)
    plan->send(l.parent, scratchBuf((up.begin[i] - l.rel) * block), (up.end[i] - up.begin[i]) * block, all);
}

}  // namespace braid
