// The vocabulary every layer shares: the collectives and the algorithms that can run them, with
// their names. Plain enums and tables, no behaviour: the plans (src/plan.h), the algorithms
// (algorithms/), the cost model and the selector (topology/) all speak it, and none of them has to
// include another to do so.
#pragma once

#include <cstdint>

namespace braid {

enum class Coll : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kBarrier,
  kGather,  // after the others: the values travel in call headers (BRAID_CHECK_MISMATCH)
  kScatter,
};
constexpr int kNumColls = 10;
const char* collName(Coll c);  // "AllReduce", ...
// Whether the collective combines its inputs with an op, and whether it names a root.
constexpr bool collReduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }
constexpr bool collRooted(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

// The algorithms a caller can choose (BRAID_ALGO, `-A`, braid-topo). Not every collective has every
// algorithm: algoAvailable() says which pairs exist. AllToAll's pairwise exchange and Barrier's
// dissemination go under the name kRing (AllToAll's Bruck under kRecursiveDoubling). Gather and Scatter have
// kLinear and kTree (a binomial tree); AllGather has kRing, kLinear and kRecursiveDoubling.
enum class Algo : uint8_t {
  kRing,               // ring (AllReduce/AllGather/ReduceScatter), pipelined chain (Broadcast/Reduce)
  kTree,               // double binary tree, pipelined (AllReduce/Broadcast/Reduce; small: binomial)
  kRabenseifner,       // recursive-halving reduce-scatter + recursive-doubling all-gather (AllReduce)
  kRecursiveDoubling,  // log2(n) full-buffer exchanges (AllReduce); AllGather: held blocks doubling (Bruck's)
  kHierarchical,       // intra-host reduce-scatter, inter-host allreduce of shards, intra-host all-gather
  kGossip,             // K rounds of one-peer exponential averaging (AllReduce avg, approximate comms)
  kLinear,             // the root (AllGather: every rank) exchanges with every rank directly
};
constexpr int kNumAlgos = 7;
const char* algoName(Algo a);                 // "ring", "tree", ...
const char* algoNameFor(Coll c, Algo a);      // as algoName, but "pairwise"/"dissemination" for AllToAll/Barrier
bool parseAlgo(const char* name, Algo* out);  // exact lower-case names above
bool algoAvailable(Coll coll, Algo a);        // whether a builder exists for the pair

}  // namespace braid
