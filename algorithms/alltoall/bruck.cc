// Bruck's AllToAll: ceil(log2 n) rounds of one message each way, where the pairwise exchange sends
// n - 1. For small blocks, where a message costs its handling and not its bytes; in exchange a
// block travels up to log2 n times and is copied around each trip.
//
// Index i (0 .. n-1) names the block rank r sends to rank r + i. In the round of distance d = 2^k a
// rank sends every block it holds whose index has bit k set to rank r + d, and receives as many
// from rank r - d, which take the same indices: a block of index i moves from its source s one
// power of two of i at a time and reaches s + i = its target in the round of i's top bit. After the
// last round rank r holds, at index i, the block rank r - i sent it.
//
// A round's blocks are not contiguous: they are packed into scratch (a copy each) and sent as one
// message, which lands in scratch of its own; a block is copied from wherever it last landed, and
// copied into the receive buffer at the end (its own block first, from the send buffer). Scratch
// per round: two areas of the round's block count. In place, the final copies overwrite blocks
// that packs read: local steps run in plan order, and every pack comes before every final copy.
//
// Steps: ceil(log2 n) sends and receives (more where a message exceeds the chunk size), about
// n/2 packing copies a round and n - 1 final copies. Bytes on the wire per rank: about
// (n/2) x log2 n blocks, against the pairwise exchange's n - 1. Valid for any n >= 1 and count >= 0.
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void buildBruckAllToAll(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, block = a.count * es;
  plan->coll = Coll::kAllToAll;
  plan->algorithm = "bruck";
  if (block == 0) return;
  plan->selfCopy(a.inPlace, block, r * block, r * block);
  if (n == 1) return;
  // Where index i's block lies now, and the step that put it there (-1: the send buffer, as given).
  std::vector<BufRef> at(n);
  std::vector<int32_t> writer(n, -1);
  for (int i = 0; i < n; ++i)
    at[i] = a.inPlace ? recvBuf(ringPeer(r, i, n) * block) : sendBuf(ringPeer(r, i, n) * block);
  std::vector<int32_t> packs;
  uint64_t scratch = 0;
  for (int d = 1; d < n; d *= 2) {
    std::vector<int> moving;
    for (int i = 1; i < n; ++i)
      if (i & d) moving.push_back(i);
    const uint64_t bytes = moving.size() * block, packAt = scratch, landAt = scratch + bytes;
    scratch += 2 * bytes;
    packs.clear();
    for (size_t j = 0; j < moving.size(); ++j)
      packs.push_back(plan->copy(scratchBuf(packAt + j * block), at[moving[j]], block, writer[moving[j]]));
    const int32_t packed = plan->join(packs);
    const int to = ringPeer(r, d, n), from = ringPeer(r, -d, n);
    const uint64_t elems = bytes / es, chunks = chunksFor(elems, es, a.chunkBytes);
    std::vector<int32_t> got;
    for (uint64_t c = 0; c < chunks; ++c) {
      const Range ch = partition(elems, chunks, c);
      if (ch.count == 0) continue;
      plan->send(to, scratchBuf(packAt + ch.offset * es), ch.count * es, packed);
      got.push_back(plan->recv(from, scratchBuf(landAt + ch.offset * es), ch.count * es));
    }
    const int32_t landed = plan->join(got);
    for (size_t j = 0; j < moving.size(); ++j) {
      at[moving[j]] = scratchBuf(landAt + j * block);
      writer[moving[j]] = landed;
    }
  }
  plan->scratchBytes = scratch;
  // Index i now holds what rank r - i sent to r.
  for (int i = 1; i < n; ++i) plan->copy(recvBuf(ringPeer(r, -i, n) * block), at[i], block, writer[i]);
}

}  // namespace braid
