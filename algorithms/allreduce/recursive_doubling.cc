// Recursive-doubling AllReduce: log2(p) rounds in which every rank exchanges its whole partial result
// with the rank whose virtual rank differs in bit k, for the small-message regime.
//
// Steps, with p = the largest power of two <= n, L = log2(p) and C = chunks of the buffer (at most
// chunkBytes each): a power of two n: L sends and L receives per chunk. Otherwise the first 2(n-p)
// ranks fold in pairs (algorithms/patterns/recursive.h): the odd rank of a pair sends its buffer to the
// even one before the rounds and receives the result after them (1 send, 1 receive per chunk); the
// even one adds 1 receive and 1 send per chunk to its rounds. Bytes on the wire per rank: L * S sent
// and received (S = buffer bytes); folded pairs move S more each way. Valid for any n >= 1 and count
// >= 0.
//
// Both partners of a round combine the same two values, and both put first the one that covers the
// lower virtual ranks (FoldOrder): the ops are commutative in value but not in bits (min and max of
// -0 and +0, two NaNs' payloads), and so every rank ends with bitwise the same result. The folded
// pairs' fold needs no order: only the even rank computes it.
//
// Buffers: a round sends the buffer written by the previous round and writes the other, alternating
// between the receive buffer and scratch (S bytes) so that an incoming message never lands on bytes a
// posted send still reads; the alternation is arranged to end in the receive buffer. Only in place
// with no fold and odd L is that impossible (round 0 would write the buffer it sends); the result
// then lands in scratch and one local copy moves it. Chunks are independent chains, so round k+1 of
// a chunk starts as soon as round k of that chunk is done.
#include <algorithm>
#include <array>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/patterns/subring.h"

namespace braid {

namespace {

// Per chunk: the step that last wrote it, and per buffer the send that last read it.
struct ChunkState {
  int32_t writer = -1;
  std::array<int32_t, 3> reader{-1, -1, -1};  // indexed by Buf (send, recv, scratch)
};

int bufIndex(Buf b) { return static_cast<int>(b); }

}  // namespace

void buildRecursiveDoublingAllReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t bytes = a.count * a.elemSize;
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "recursive_doubling";
  if (n == 1 || bytes == 0) {
    plan->selfCopy(a.inPlace, bytes);
    return;
  }
  const Buf input = a.inPlace ? Buf::kRecv : Buf::kSend;
  const uint64_t cell = cellBytesFor(a.elemSize, a.chunkBytes), chunks = (bytes + cell - 1) / cell;
  auto chunk = [&](uint64_t c) { return Range{c * cell, std::min(bytes, (c + 1) * cell) - c * cell}; };
  const int partner = foldPartner(r, n), v = foldVrank(r, n);
  auto at = [&](Buf b, uint64_t c) { return BufRef{b, chunk(c).offset}; };
  if (v < 0) {  // folded away: hand the buffer over, get the result back
    std::vector<int32_t> sent(chunks);
    for (uint64_t c = 0; c < chunks; ++c) sent[c] = plan->send(partner, at(input, c), chunk(c).count);
    for (uint64_t c = 0; c < chunks; ++c) plan->recv(partner, at(Buf::kRecv, c), chunk(c).count, sent[c]);
    return;
  }

  // The buffers written, in order: the fold (if paired), then one per round. The last is the receive
  // buffer and they alternate backwards from it, unless the first round would write what it sends.
  const int rounds = log2Floor(n);
  const bool folded = partner >= 0;
  const int writes = rounds + (folded ? 1 : 0);
  const bool viaScratch = !folded && a.inPlace && rounds % 2 == 1;
  auto target = [&](int w) {  // w = 0 .. writes-1
    const bool recvLast = (writes - 1 - w) % 2 == 0;
    return recvLast != viaScratch ? Buf::kRecv : Buf::kScratch;
  };
  if (writes > 1 || viaScratch) plan->scratchBytes = bytes;

  std::vector<ChunkState> st(chunks);
  Buf cur = input;
  int w = 0;
  if (folded) {
    const Buf dst = target(w++);
    for (uint64_t c = 0; c < chunks; ++c)
      st[c].writer = plan->recvReduce(partner, at(dst, c), at(input, c), chunk(c).count);
    cur = dst;
  }
  for (int k = 0; k < rounds; ++k, ++w) {
    const int peer = foldRank(v ^ (1 << k), n);
    const FoldOrder order = (v & (1 << k)) != 0 ? FoldOrder::kIncomingFirst : FoldOrder::kLocalFirst;
    const Buf dst = target(w);
    for (uint64_t c = 0; c < chunks; ++c) {
      ChunkState& s = st[c];
      const int32_t send = plan->send(peer, at(cur, c), chunk(c).count, s.writer);
      // dst was written two rounds ago and, in the previous round, sent (reader) and read as the
      // source of the write (writer): waiting for those two covers all three.
      s.writer =
          plan->recvReduce(peer, at(dst, c), at(cur, c), chunk(c).count, {s.writer, s.reader[bufIndex(dst)]}, order);
      s.reader[bufIndex(cur)] = send;
    }
    cur = dst;
  }
  for (uint64_t c = 0; c < chunks; ++c) {
    ChunkState& s = st[c];
    if (viaScratch)
      s.writer = plan->copy(at(Buf::kRecv, c), at(Buf::kScratch, c), chunk(c).count,
                            {s.writer, s.reader[bufIndex(Buf::kRecv)]});
    if (a.avg) s.writer = plan->scale(at(Buf::kRecv, c), chunk(c).count, s.writer);
  }
  if (folded) {
    for (uint64_t c = 0; c < chunks; ++c) plan->send(partner, at(Buf::kRecv, c), chunk(c).count, st[c].writer);
  }
}

}  // namespace braid
