// Gossip: weighted neighbour mixing (algorithms/mixing.h), and the gossip AllReduce built from it.
//
// Gossip AllReduce (op avg on floating types only; the selector enforces it). K rounds, K =
// CollArgs::gossipRounds or, when 0, ceil(log2 n). In round t every rank sends its current value to
// one peer at distance 2^(t mod ceil(log2 n)), receives one, and keeps the mean of the two
// (algorithms/patterns/graph.h, gossipRound).
// - n a power of two: the peer is r XOR 2^t, and after log2 n rounds every rank holds the exact
//   average (up to rounding in the datatype: one rounding per weighted step).
// - Otherwise it is APPROXIMATE: the rounds send to r + 2^t and receive from r - 2^t. Each round
//   preserves the global sum (the mixing matrix is doubly stochastic), so the values contract
//   toward the average, but K rounds do not reach it exactly. More rounds get closer.
// Steps per rank: K x chunks x (1 send, 1 receive, 2 local weighted steps). Bytes on the wire per
// rank: K x S (K x S received), against 2(n-1)/n x S for the ring; latency K steps, not 2(n-1).
// Valid for any n >= 1 and any count; n == 1 is a copy (or nothing, in place). The result is the
// average whatever CollArgs::avg says: that is the only reduction this algorithm computes.
//
// Mixing rounds, as built here. Per round and chunk: sends of the round's input chunk to every
// out-neighbour, receives from every in-neighbour into a scratch slot, then the local steps
//   recv[k] = selfWeight * input[k]        (kScaleBy; with no in-neighbours, a kCopy or nothing)
//   recv[k] += w_j * slot_j                (kAxpy, one per in-neighbour, after its receive)
// Dependencies, beyond the executor running local steps in plan order:
// - a round's send of chunk k waits for the previous round's last write of chunk k;
// - when the input is the receive buffer (in place, or any round after the first) the first write
//   of chunk k waits for every send of chunk k of the round to finish, since a transport may read
//   the source until then. More than two sends are joined by kJoin steps (a step has two
//   dependency slots);
// - a receive into a slot waits for the axpy that read the slot's previous contents.
// Every dependency points to an earlier chunk of the same link or to sends of the same chunk, whose
// receives depend only on earlier chunks, so the rounds cannot deadlock on a rendezvous transport
// (tests/unit/test_graph.cc simulates them).
#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/mixing.h"
#include "algorithms/patterns/graph.h"
#include "algorithms/patterns/ring.h"

namespace braid {

void appendMixRounds(const MixArgs& a, const std::vector<MixRound>& rounds, Plan* plan) {
  const uint64_t es = a.elemSize;
  if (a.count == 0 || rounds.empty()) return;
  const uint64_t chunks = chunksFor(a.count, es, a.chunkBytes);
  size_t maxIn = 0;
  for (const MixRound& m : rounds) maxIn = std::max(maxIn, m.in.size());
  const uint64_t slotBytes = partition(a.count, chunks, 0).count * es;  // the first piece is the largest
  const uint64_t slots = std::min<uint64_t>(kMixSlots, chunks * rounds.size());
  plan->scratchBytes = std::max<uint64_t>(plan->scratchBytes, maxIn * slots * slotBytes);

  std::vector<int32_t> lastWrite(chunks, -1);          // the last local step that wrote recv chunk k
  std::vector<int32_t> slotReader(maxIn * slots, -1);  // the axpy that last read each slot
  std::vector<uint64_t> filled(maxIn, 0);              // receives into each in-position so far
  std::vector<int32_t> sends, recvs;
  std::vector<uint64_t> recvSlot;
  for (size_t t = 0; t < rounds.size(); ++t) {
    const MixRound& m = rounds[t];
    const bool inputIsOutput = t > 0 || a.inPlace;
    for (uint64_t k = 0; k < chunks; ++k) {
      const Range piece = partition(a.count, chunks, k);
      const uint64_t off = piece.offset * es, bytes = piece.count * es;
      const BufRef input = t == 0 ? sendBuf(off) : recvBuf(off);
      sends.clear();
      for (int peer : m.out) sends.push_back(plan->send(peer, input, bytes, lastWrite[k]));
      recvs.clear();
      recvSlot.clear();
      for (size_t i = 0; i < m.in.size(); ++i) {
        const uint64_t slot = i * slots + filled[i]++ % slots;
        recvSlot.push_back(slot);
        recvs.push_back(plan->recv(m.in[i].peer, scratchBuf(slot * slotBytes), bytes, slotReader[slot]));
      }
      if (m.in.empty() && m.selfWeight == 1) {
        if (!inputIsOutput) lastWrite[k] = plan->copy(recvBuf(off), input, bytes);
      } else {
        // In place, the first write waits for every send of the chunk (joined when more than two).
        lastWrite[k] = plan->scaleBy(recvBuf(off), input, bytes, m.selfWeight, inputIsOutput ? Deps(sends) : Deps());
      }
      for (size_t i = 0; i < m.in.size(); ++i) {
        lastWrite[k] = slotReader[recvSlot[i]] =
            plan->axpy(recvBuf(off), scratchBuf(recvSlot[i] * slotBytes), bytes, m.in[i].weight, recvs[i]);
      }
    }
  }
}

void buildNeighborAllReduce(const MixArgs& a, const graph::Topology& g, Plan* plan) {
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "neighbor";
  plan->rank = a.rank;
  plan->nranks = a.nranks;
  appendMixRounds(a, {MixRound{g.selfWeight, g.in, g.out}}, plan);
  plan->finalize();
}

void buildGossipAllReduce(const CollArgs& a, Plan* plan) {
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "gossip";
  const int n = a.nranks;
  if (n == 1) {
    plan->selfCopy(a.inPlace, a.count * a.elemSize);
    return;
  }
  const int k = a.gossipRounds > 0 ? a.gossipRounds : graph::gossipDefaultRounds(n);
  std::vector<MixRound> rounds;
  rounds.reserve(k);
  for (int t = 0; t < k; ++t) {
    const graph::GossipRound g = graph::gossipRound(a.rank, n, t);
    rounds.push_back(MixRound{0.5, {{g.recvFrom, 0.5}}, {g.sendTo}});
  }
  appendMixRounds(MixArgs{a.rank, n, a.count, a.elemSize, a.inPlace, a.chunkBytes}, rounds, plan);
}

}  // namespace braid
