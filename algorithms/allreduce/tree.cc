// Double binary tree AllReduce: two complementary binary trees (algorithms/patterns/tree.h) each
// carry half of the buffer, reducing it up to their root and broadcasting the result back down,
// pipelined in chunks of at most a.chunkBytes.
//
// Steps per chunk of each half: a leaf sends its chunk up and receives the result (2); an interior
// rank with k children receives and reduces k chunks, sends one up, receives one down and sends k
// down (2k + 2; a root skips the up and down and scales once for avg). Every rank is interior in at
// most one tree, so at most 8 transfers per chunk pair. Bytes on the wire per rank: at most 2S sent
// and 2S received (S/2 each way as a leaf, 3S/2 each way as an interior rank with two children).
// Time ~ (2 chunks + 2 log2 n) chunk times, chunks counted per half (some links carry a chunk of each
// tree, one going up and the other down). Valid for any n >= 1 and any count (the halves differ by
// at most one element; zero-byte chunks are skipped identically on every rank).
//
// Partial sums accumulate in the receive buffer: the first child's chunk is reduced with the local
// contribution from the send buffer (in place they are the same bytes), the second child's with the
// first's result. The result coming down lands in the same bytes once the partial sum sent up is
// out (the receive depends on that send).
//
// Order: chunk c+1 must go up while chunk c comes down, so steps are not emitted chunk by chunk but by
// pipeline time T: a chunk c leaves a rank of subtree height h upwards at T = c + h, is scaled at
// the root at T = c + H (H = tree height) and arrives at a rank of depth d at T = c + H + d. Every
// step depends only on steps of smaller T (the second child's reduce on the first child's, which is
// the lower subtree and so comes at the same or a smaller T, emitted first). Every rank emits in
// (T, tree) order and a link carries at most one message per (T, tree), so both ends of a link see
// its messages in the same order and the earliest unfinished step can always proceed: no deadlock.
// A link that carries one tree's chunks up and the other's down interleaves them as they flow.
#include "algorithms/patterns/tree.h"

#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

namespace {

// One tree's half of the buffer, as seen by this rank, with the last step touching each chunk.
struct Half {
  TreeLinks links;
  int childHeight[2] = {0, 0};
  Range elems;                        // the half, in elements
  std::vector<int32_t> acc, up, fin;  // per chunk: last reduce, send up, final value (-1 = none)
};

}  // namespace

void buildTreeAllReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize;
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "tree";
  if (n == 1) {
    plan->selfCopy(a.inPlace, a.count * es);
    return;
  }
  const uint64_t chunks = chunksFor(partition(a.count, 2, 0).count, es, a.chunkBytes);
  const int64_t height = dtreeHeight(n), nchunks = static_cast<int64_t>(chunks);
  Half halves[2];
  for (int t = 0; t < 2; ++t) {
    Half& h = halves[t];
    h.links = dtreeLinks(r, n, t);
    for (int k = 0; k < h.links.numChildren; ++k) h.childHeight[k] = dtreeLinks(h.links.children[k], n, t).height;
    h.elems = partition(a.count, 2, t);
    h.acc.assign(chunks, -1);
    h.up.assign(chunks, -1);
    h.fin.assign(chunks, -1);
  }
  // Chunk c of half t in bytes; -1 is returned as empty, so callers may pass any T - offset.
  auto piece = [&](const Half& h, int64_t c) {
    if (c < 0 || c >= nchunks) return Range{};
    Range ch = partition(h.elems.count, chunks, static_cast<uint64_t>(c));
    return Range{(h.elems.offset + ch.offset) * es, ch.count * es};
  };
  const int64_t lastT = nchunks - 1 + 2 * height;
  for (int64_t T = 0; T <= lastT; ++T) {
    for (Half& h : halves) {
      const TreeLinks& l = h.links;
      // Up: children's partial sums, lower subtree first (it arrives first; see TreeLinks).
      for (int k = 0; k < l.numChildren; ++k) {
        const int64_t c = T - h.childHeight[k];
        Range p = piece(h, c);
        if (p.count == 0) continue;
        int32_t& acc = h.acc[c];
        BufRef src = acc < 0 ? sendBuf(p.offset) : recvBuf(p.offset);
        acc = plan->recvReduce(l.children[k], recvBuf(p.offset), src, p.count, acc);
      }
      if (l.parent >= 0) {
        const int64_t c = T - l.height;
        Range p = piece(h, c);
        if (p.count > 0) {
          BufRef src = h.acc[c] < 0 ? sendBuf(p.offset) : recvBuf(p.offset);
          h.up[c] = plan->send(l.parent, src, p.count, h.acc[c]);
        }
      } else {  // the root: the chunk is complete
        const int64_t c = T - height;
        Range p = piece(h, c);
        if (p.count > 0) h.fin[c] = a.avg ? plan->scale(recvBuf(p.offset), p.count, h.acc[c]) : h.acc[c];
      }
      // Down: the result from the parent, then on to the children.
      if (l.parent >= 0) {
        const int64_t c = T - height - l.depth;
        Range p = piece(h, c);
        if (p.count > 0) h.fin[c] = plan->recv(l.parent, recvBuf(p.offset), p.count, h.up[c]);
      }
      const int64_t c = T - height - l.depth - 1;
      Range p = piece(h, c);
      if (p.count == 0) continue;
      for (int k = 0; k < l.numChildren; ++k) plan->send(l.children[k], recvBuf(p.offset), p.count, h.fin[c]);
    }
  }
}

}  // namespace braid
