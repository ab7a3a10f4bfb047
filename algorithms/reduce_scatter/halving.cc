// Recursive-halving ReduceScatter (the first half of Rabenseifner's AllReduce; BRAID_ALGO name
// "rabenseifner"): log2 rounds where the ring takes n - 1, for calls that latency decides.
//
// Steps, with p = the largest power of two <= n and L = log2(p): L rounds of one send and one
// receive-reduce, the first moving half of the buffer S (n blocks), each later one half of the one
// before: (p - 1)/p * S out and in, the ring's volume, in L messages instead of n - 1. Round k pairs
// virtual rank v with v ^ 2^(L-1-k) (the farthest partner first) and v keeps the half of its span that
// holds its own piece, so after L rounds v holds piece v: blocks stay in rank order and nothing is
// permuted. Non-powers of two fold the first 2(n - p) ranks in pairs (algorithms/patterns/recursive.h):
// the odd rank of a pair sends its whole buffer to the even one first, which reduces it in, owns both
// blocks (piece v spans them) and sends the odd rank its block at the end. Valid for any n >= 1 and
// count >= 0; in place too (the own block of the input is read in the first round, before the result
// lands on it). Partial sums live in scratch (n blocks); the own block is copied out at the end.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive.h"

namespace braid {

void buildHalvingReduceScatter(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t block = a.count * a.elemSize, all = static_cast<uint64_t>(n) * block;
  plan->coll = Coll::kReduceScatter;
  plan->algorithm = "rabenseifner";
  if (block == 0) return;
  if (n == 1) {
    plan->selfCopy(a.inPlace, block);
    return;
  }
  const int partner = foldPartner(r, n), v = foldVrank(r, n);
  if (v < 0) {  // folded away: hand the buffer over, get the own block back (after the send read it)
    const int32_t sent = plan->send(partner, sendBuf(0), all);
    const int32_t got = plan->recv(partner, recvBuf(0), block, sent);
    if (a.avg) plan->scale(recvBuf(0), block, got);
    return;
  }
  plan->scratchBytes = all;
  const int p = pow2Floor(n), rounds = log2Floor(n);
  // Piece u: the blocks of the ranks virtual rank u stands for, from foldRank(u) on.
  auto bytesOf = [&](PieceSpan s) {
    const uint64_t from = static_cast<uint64_t>(foldRank(s.begin, n)) * block;
    const uint64_t to = s.end == p ? all : static_cast<uint64_t>(foldRank(s.end, n)) * block;
    return Range{from, to - from};
  };
  int32_t last = -1;
  Buf cur = Buf::kSend;
  if (partner >= 0) {
    last = plan->recvReduce(partner, scratchBuf(0), sendBuf(0), all);
    cur = Buf::kScratch;
  }
  for (int k = 0; k < rounds; ++k) {
    const int peer = foldRank(v ^ (1 << (rounds - 1 - k)), n);
    const Range g = bytesOf(halvingGiven(v, p, k, true)), keep = bytesOf(halvingKept(v, p, k, true));
    plan->send(peer, BufRef{cur, g.offset}, g.count, last);
    last = plan->recvReduce(peer, scratchBuf(keep.offset), BufRef{cur, keep.offset}, keep.count, last);
    cur = Buf::kScratch;
  }
  const int32_t mine = plan->copy(recvBuf(0), scratchBuf(static_cast<uint64_t>(r) * block), block, last);
  if (partner >= 0) plan->send(partner, scratchBuf(static_cast<uint64_t>(partner) * block), block, last);
  if (a.avg) plan->scale(recvBuf(0), block, mine);
}

}  // namespace braid
