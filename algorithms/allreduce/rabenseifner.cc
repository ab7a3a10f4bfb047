// Rabenseifner AllReduce: recursive-halving reduce-scatter, then recursive-doubling all-gather.
//
// Steps, with p = the largest power of two <= n and L = log2(p): 2L rounds, each a send and a receive
// per chunk (chunks cut at multiples of chunkBytes). Bytes on the wire per rank: 2(p-1)/p * S sent
// and received (S = buffer bytes), halved each reduce-scatter round and doubled back. Non-powers of
// two fold the first 2(n-p) ranks in pairs (algorithms/patterns/recursive.h): the odd rank of a pair
// sends S to the even one before and receives S after; the even one moves S more each way. Valid for
// any n >= 1 and count >= 0; pieces of zero bytes (count < p) produce no step on either side.
//
// Virtual rank v ends the reduce-scatter owning piece bitreverse(v) of p (patterns/recursive.h),
// scales it (avg) and the all-gather spreads it, so each element is reduced and scaled on one rank and
// every rank ends with bitwise the same result. Everything stays in the receive buffer: a round
// receives into the half it keeps while sending the half it gives, so no scratch is needed; the
// all-gather later receives into halves sent earlier, after those sends (CellChain, cell_chain.h).
#include "algorithms/algorithms.h"
#include "algorithms/cell_chain.h"
#include "algorithms/patterns/recursive.h"

namespace braid {

void buildRabenseifnerAllReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, bytes = a.count * es;
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "rabenseifner";
  if (n == 1 || bytes == 0) {
    plan->selfCopy(a.inPlace, bytes);
    return;
  }
  const Buf input = a.inPlace ? Buf::kRecv : Buf::kSend;
  const Range whole{0, bytes};
  const int partner = foldPartner(r, n), v = foldVrank(r, n);
  CellChain cells(plan, bytes, cellBytesFor(es, a.chunkBytes));
  if (v < 0) {  // folded away: hand the buffer over, get the result back
    cells.send(partner, input, whole);
    cells.recv(partner, whole);
    return;
  }
  Buf cur = input;
  if (partner >= 0) {
    cells.recvReduce(partner, input, whole);
    cur = Buf::kRecv;
  }
  const int p = pow2Floor(n), rounds = log2Floor(n);
  auto piecesBytes = [&](PieceSpan s) {
    const Range e = pieceElems(a.count, p, s);
    return Range{e.offset * es, e.count * es};
  };
  for (int k = 0; k < rounds; ++k) {
    const int peer = foldRank(v ^ (1 << k), n);
    cells.send(peer, cur, piecesBytes(halvingGiven(v, p, k)));
    cells.recvReduce(peer, cur, piecesBytes(halvingKept(v, p, k)));
    cur = Buf::kRecv;
  }
  if (a.avg) cells.scale(piecesBytes(halvingKept(v, p, rounds - 1)));
  for (int k = rounds - 1; k >= 0; --k) {
    const int peer = foldRank(v ^ (1 << k), n);
    cells.send(peer, Buf::kRecv, piecesBytes(halvingKept(v, p, k)));
    cells.recv(peer, piecesBytes(halvingGiven(v, p, k)));
  }
  if (partner >= 0) cells.send(partner, Buf::kRecv, whole);
}

}  // namespace braid
