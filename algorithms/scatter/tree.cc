// Binomial-tree Scatter (algorithms/patterns/binomial.h), the mirror of the tree Gather: the root
// sends each child the blocks of the child's subtree, a run of ranks relative to the root, in one
// message (two where the run wraps past rank n - 1); an interior rank receives its run into scratch,
// forwards its children's parts and keeps its own block. The largest subtree is served first.
//
// Steps: ceil(log2 n) message rounds on the critical path; a rank receives one message from its
// parent and sends one per child (at most ceil(log2 n)). Bytes on the wire: the root sends
// (n - 1) * S/n, where S is the root's whole send buffer; a rank at relative rank v receives its
// subtree's lowbit(v) blocks (fewer at the end). Valid for any n >= 1, any root and any count.
//
// A leaf receives straight into its receive buffer. An interior rank's sends and its copy of its
// own block wait for its whole run.
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"

namespace braid {

void buildTreeScatter(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank, root = a.root;
  const uint64_t block = a.count * a.elemSize;
  plan->coll = Coll::kScatter;
  plan->algorithm = "tree";
  if (block == 0) return;
  const BinomialLinks l = binomialLinks(r, n, root);
  if (l.rel == 0) {
    plan->selfCopy(a.inPlace, block, 0, r * block);
    forEachChildPiece(l, n, root, [&](int peer, int begin, int end) {
      plan->send(peer, sendBuf(binomialAbs(begin, n, root) * block), (end - begin) * block);
    });
    return;
  }
  if (l.numChildren == 0) {
    plan->recv(l.parent, recvBuf(0), block);
    return;
  }
  plan->scratchBytes = static_cast<uint64_t>(l.end - l.rel) * block;
  std::vector<int32_t> got;
  const RunPieces down = splitRun(l.rel, l.end, n, root);
  for (int i = 0; i < down.count; ++i)
    got.push_back(
        plan->recv(l.parent, scratchBuf((down.begin[i] - l.rel) * block), (down.end[i] - down.begin[i]) * block));
  const int32_t all = plan->join(got);
  forEachChildPiece(l, n, root, [&](int peer, int begin, int end) {
    plan->send(peer, scratchBuf((begin - l.rel) * block), (end - begin) * block, all);
  });
  plan->copy(recvBuf(0), scratchBuf(0), block, all);
}

}  // namespace braid
