// Double binary tree Reduce, the mirror of the tree Broadcast: each of two complementary binary trees
// over the n - 1 ranks other than the root (rooted variant in algorithms/patterns/tree.h) reduces one
// half of the buffer up to the root, pipelined in chunks of at most a.chunkBytes.
//
// Steps per chunk of each half: a leaf sends one; an interior rank (in one tree only) receives and
// reduces one per child (at most two) and sends one; the root receives one per tree and scales it
// (avg). Bytes on the wire per rank: the root receives S; the others send S and receive at most S.
// Time ~ (chunks + log2 n) chunk times. Valid for any n >= 1, any root and any count (zero-byte chunks
// are skipped on every rank).
//
// Only the root's receive buffer is significant, so interior ranks keep partial sums in a scratch
// ring of kSlots chunks per tree where they are interior; a slot is reused once its previous chunk
// was sent, which is the first receive's dependency. Chunks are emitted in (chunk, tree) order on
// every rank, so both ends of a link see its messages in the same order; every dependency points to
// an earlier step of the same chunk or to an earlier chunk.
//
// Up to kBinomialMaxBytes the buffer goes whole up one binomial tree instead
// (algorithms/patterns/binomial.h): a rank folds its children's sums into one scratch buffer (the
// root into its receive buffer), the smallest subtree first since it is ready first, then sends.
#include "algorithms/patterns/tree.h"

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"

namespace braid {

namespace {

constexpr uint64_t kSlots = 4;

void binomialReduce(const CollArgs& a, uint64_t total, Plan* plan) {
  const BinomialLinks l = binomialLinks(a.rank, a.nranks, a.root);
  const bool isRoot = l.parent < 0;
  if (l.numChildren == 0) {  // a leaf (never the root: n > 1)
    plan->send(l.parent, sendBuf(0), total);
    return;
  }
  if (!isRoot) plan->scratchBytes = total;
  const BufRef acc = isRoot ? recvBuf(0) : scratchBuf(0);
  int32_t got = -1;
  for (int k = l.numChildren - 1; k >= 0; --k) {
    const BufRef local = k == l.numChildren - 1 ? sendBuf(0) : acc;
    got = plan->recvReduce(binomialAbs(l.children[k], a.nranks, a.root), acc, local, total, got);
  }
  if (!isRoot) {
    plan->send(l.parent, acc, total, got);
  } else if (a.avg) {
    plan->scale(recvBuf(0), total, got);
  }
}

}  // namespace

void buildTreeReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, total = a.count * es;
  plan->coll = Coll::kReduce;
  plan->algorithm = "tree";
  if (total == 0) return;
  const bool isRoot = r == a.root;
  if (n == 1) {  // dividing by one rank changes nothing: no scale step
    plan->selfCopy(a.inPlace, total);
    return;
  }
  if (binomialTreeFits(total, a.chunkBytes)) return binomialReduce(a, total, plan);
  const uint64_t chunks = chunksFor(partition(a.count, 2, 0).count, es, a.chunkBytes);
  const uint64_t perChunk = partition(partition(a.count, 2, 0).count, chunks, 0).count * es;  // the largest
  TreeLinks links[2] = {rootedDtreeLinks(r, n, a.root, 0), rootedDtreeLinks(r, n, a.root, 1)};
  uint64_t slotBase[2] = {0, 0};  // where each tree's scratch ring starts
  if (!isRoot) {
    for (int t = 0; t < 2; ++t) {
      slotBase[t] = plan->scratchBytes;
      if (links[t].numChildren > 0) plan->scratchBytes += std::min<uint64_t>(chunks, kSlots) * perChunk;
    }
  }
  std::vector<int32_t> sent[2] = {std::vector<int32_t>(chunks, -1), std::vector<int32_t>(chunks, -1)};
  for (uint64_t c = 0; c < chunks; ++c) {
    for (int t = 0; t < 2; ++t) {
      const TreeLinks& l = links[t];
      Range half = partition(a.count, 2, t);
      Range ch = partition(half.count, chunks, c);
      const uint64_t off = (half.offset + ch.offset) * es, bytes = ch.count * es;
      if (bytes == 0) continue;
      if (isRoot) {  // one child per tree: the root of the tree below
        int32_t got = plan->recvReduce(l.children[0], recvBuf(off), sendBuf(off), bytes);
        if (a.avg) plan->scale(recvBuf(off), bytes, got);
        continue;
      }
      if (l.numChildren == 0) {  // a leaf: send the contribution as is
        sent[t][c] = plan->send(l.parent, sendBuf(off), bytes);
        continue;
      }
      BufRef slot = scratchBuf(slotBase[t] + (c % kSlots) * perChunk);
      int32_t acc = c >= kSlots ? sent[t][c - kSlots] : -1;  // the slot's previous chunk is out
      for (int k = 0; k < l.numChildren; ++k) {
        BufRef src = k == 0 ? sendBuf(off) : slot;
        acc = plan->recvReduce(l.children[k], slot, src, bytes, acc);
      }
      sent[t][c] = plan->send(l.parent, slot, bytes, acc);
    }
  }
}

}  // namespace braid
