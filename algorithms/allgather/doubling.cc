// AllGather by doubling (Bruck's): the blocks a rank holds double every round, so the gather takes
// ceil(log2 n) rounds of messages where the ring takes n - 1 and the linear plan sends n - 1 messages
// from every rank at once. For small blocks, where a message costs its handling and not its bytes.
//
// Rank r starts with its own block r. In the round of distance d (1, 2, 4, ...) it holds blocks
// [r, r + d) (mod n): it sends the first min(d, n - d) of them to rank r - d and receives as many,
// [r + d, r + d + min(d, n - d)), from rank r + d, which holds them. After the round it holds
// [r, r + min(2d, n)). Every block lands straight in its place in the receive buffer (block j at
// j x block bytes), so unlike Bruck's original no final rotation is needed: a run of blocks that
// wraps past the last rank goes as two messages, split alike on both ends (they name the same blocks).
//
// Steps: ceil(log2 n) rounds of one or two sends and receives (more where a message exceeds the
// chunk size); bytes on the wire per rank: (n - 1) x block, as the ring and the linear plan. A send
// waits for the receives that brought its blocks (and, out of place, for the own block's copy: from
// the second round on it goes with the blocks after it). Receives land on blocks no send reads yet.
// Valid for any n >= 1 and count >= 0.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace braid {

namespace {

// Blocks [first, first + count) mod n as at most two runs of consecutive ranks.
struct BlockRun {
  int first = 0;
  int count = 0;
};
int blockRuns(int first, int count, int n, BlockRun out[2]) {
  const int head = std::min(count, n - first);
  out[0] = {first, head};
  if (head == count) return 1;
  out[1] = {0, count - head};
  return 2;
}

}  // namespace

void buildDoublingAllGather(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, block = a.count * es;
  plan->coll = Coll::kAllGather;
  plan->algorithm = "recursive_doubling";
  if (block == 0) return;
  const int32_t own = plan->selfCopy(a.inPlace, block, r * block);
  if (n == 1) return;
  // By block: the steps that wrote it into the receive buffer (its receives; the own block's copy).
  std::vector<std::vector<int32_t>> writers(n);
  writers[r].push_back(own);
  std::vector<int32_t> deps;
  // Calls piece(offset, bytes) for each chunk of the blocks of runs[0 .. nruns), in order.
  auto eachChunk = [&](const BlockRun* runs, int nruns, auto&& piece) {
    for (int i = 0; i < nruns; ++i) {
      const uint64_t base = runs[i].first * block, elems = runs[i].count * a.count;
      const uint64_t chunks = chunksFor(elems, es, a.chunkBytes);
      for (uint64_t c = 0; c < chunks; ++c) {
        const Range ch = partition(elems, chunks, c);
        if (ch.count != 0) piece(base + ch.offset * es, ch.count * es);
      }
    }
  };
  for (int d = 1; d < n; d *= 2) {
    const int count = std::min(d, n - d);
    const int to = ringPeer(r, -d, n), from = ringPeer(r, d, n);
    BlockRun runs[2];
    // Sends first, then receives: a receive of this round must not count as a send's writer.
    eachChunk(runs, blockRuns(r, count, n, runs), [&](uint64_t off, uint64_t bytes) {
      // The first round sends the own block alone: from the send buffer out of place, so that it
      // need not wait for the copy.
      if (d == 1 && !a.inPlace) {
        plan->send(to, sendBuf(off - r * block), bytes);
        return;
      }
      deps.clear();
      for (uint64_t b = off / block; b <= (off + bytes - 1) / block; ++b)
        deps.insert(deps.end(), writers[b].begin(), writers[b].end());
      plan->send(to, recvBuf(off), bytes, deps);
    });
    eachChunk(runs, blockRuns(ringPeer(r, d, n), count, n, runs), [&](uint64_t off, uint64_t bytes) {
      const int32_t got = plan->recv(from, recvBuf(off), bytes);
      for (uint64_t b = off / block; b <= (off + bytes - 1) / block; ++b) writers[b].push_back(got);
    });
  }
}

}  // namespace braid
