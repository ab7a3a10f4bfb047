// Double binary tree Broadcast: the root sends one half of the buffer down each of two complementary
// binary trees over the other n - 1 ranks (rooted variant in algorithms/patterns/tree.h), pipelined
// in chunks of at most a.chunkBytes.
//
// Steps per chunk of each half: the root sends one; another rank receives one and sends one per
// child (at most two, and in one tree only). Bytes on the wire per rank: the root sends S; the others
// receive S and send at most S. Time ~ (chunks + log2 n) chunk times, against (chunks + n) for the
// chain. Valid for any n >= 1, any root and any count (zero-byte chunks are skipped on every rank).
//
// Chunks are emitted in (chunk, tree) order on every rank, so both ends of a link see its messages
// in the same order; every dependency points to an earlier step of the same chunk. No link carries
// both trees except the root's when n = 2, where the order is the same on both sides.
#include "algorithms/patterns/tree.h"

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/ring.h"

namespace braid {

namespace {

void binomialBroadcast(const CollArgs& a, uint64_t total, Plan* plan) {
  const BinomialLinks l = binomialLinks(a.rank, a.nranks, a.root);
  int32_t got = -1;
  if (l.parent >= 0) got = plan->recv(l.parent, recvBuf(0), total);
  const BufRef src = l.parent < 0 ? sendBuf(0) : recvBuf(0);
  for (int k = 0; k < l.numChildren; ++k) plan->send(binomialAbs(l.children[k], a.nranks, a.root), src, total, got);
}

}  // namespace

void buildTreeBroadcast(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, total = a.count * es;
  plan->coll = Coll::kBroadcast;
  plan->algorithm = "tree";
  if (total == 0) return;
  const bool isRoot = r == a.root;
  if (isRoot) plan->selfCopy(a.inPlace, total);
  if (n == 1) return;
  if (binomialTreeFits(total, a.chunkBytes)) return binomialBroadcast(a, total, plan);
  const uint64_t chunks = chunksFor(partition(a.count, 2, 0).count, es, a.chunkBytes);
  TreeLinks links[2] = {rootedDtreeLinks(r, n, a.root, 0), rootedDtreeLinks(r, n, a.root, 1)};
  for (uint64_t c = 0; c < chunks; ++c) {
    for (int t = 0; t < 2; ++t) {
      const TreeLinks& l = links[t];
      Range half = partition(a.count, 2, t);
      Range ch = partition(half.count, chunks, c);
      const uint64_t off = (half.offset + ch.offset) * es, bytes = ch.count * es;
      if (bytes == 0) continue;
      int32_t got = -1;
      if (l.parent >= 0) got = plan->recv(l.parent, recvBuf(off), bytes);
      // The root sends from its send buffer: its copy to the receive buffer may still be running.
      BufRef src = isRoot ? sendBuf(off) : recvBuf(off);
      for (int k = 0; k < l.numChildren; ++k) plan->send(l.children[k], src, bytes, got);
    }
  }
}

}  // namespace braid
