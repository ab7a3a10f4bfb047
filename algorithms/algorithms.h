// The algorithms: each turns one collective call into this rank's Plan (src/plan.h). One file per
// algorithm under algorithms/<collective>/; pure rank math in algorithms/patterns/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/plan.h"

namespace braid {

// The shape of a call, everything a plan depends on. Counts are in elements, as in the API:
// AllReduce/Broadcast/Reduce: the buffer; AllGather: per rank (sendcount); ReduceScatter: per rank
// (recvcount); AllToAll: per peer; Gather/Scatter: per rank (the root's buffer holds nranks blocks).
struct CollArgs {
  Coll coll = Coll::kAllReduce;
  Algo algo = Algo::kRing;
  int rank = 0;
  int nranks = 1;
  uint64_t count = 0;
  size_t elemSize = 1;
  int root = 0;
  bool inPlace = false;
  bool avg = false;               // append kScale steps (braidAvg)
  uint64_t chunkBytes = 1 << 18;  // pipelining granularity
  // The host of each rank, as dense indices 0..nhosts-1 (hierarchical). Owned by the communicator
  // and constant for its life; null means every rank on one host.
  const int* hostOf = nullptr;
  int gossipRounds = 0;  // kGossip: rounds to run; 0 = until exact where the graph allows it
  // Every link's transport forwards (TransportCaps::forwards: shm), set by the plan cache from the
  // links: the 2-rank ring orders its steps for it (algorithms/patterns/ring.h ringWindow).
  bool linksForward = false;
};

void buildRingAllReduce(const CollArgs& a, Plan* plan);
void buildTreeAllReduce(const CollArgs& a, Plan* plan);
void buildRabenseifnerAllReduce(const CollArgs& a, Plan* plan);
void buildRecursiveDoublingAllReduce(const CollArgs& a, Plan* plan);
void buildHierarchicalAllReduce(const CollArgs& a, Plan* plan);
void buildGossipAllReduce(const CollArgs& a, Plan* plan);
void buildRingAllGather(const CollArgs& a, Plan* plan);
void buildLinearAllGather(const CollArgs& a, Plan* plan);
void buildDoublingAllGather(const CollArgs& a, Plan* plan);
void buildRingReduceScatter(const CollArgs& a, Plan* plan);
void buildHalvingReduceScatter(const CollArgs& a, Plan* plan);
void buildChainBroadcast(const CollArgs& a, Plan* plan);
void buildTreeBroadcast(const CollArgs& a, Plan* plan);
void buildChainReduce(const CollArgs& a, Plan* plan);
void buildTreeReduce(const CollArgs& a, Plan* plan);
void buildPairwiseAllToAll(const CollArgs& a, Plan* plan);
void buildBruckAllToAll(const CollArgs& a, Plan* plan);
void buildDisseminationBarrier(const CollArgs& a, Plan* plan);
void buildLinearGather(const CollArgs& a, Plan* plan);
void buildTreeGather(const CollArgs& a, Plan* plan);
void buildLinearScatter(const CollArgs& a, Plan* plan);
void buildTreeScatter(const CollArgs& a, Plan* plan);

// Builds the plan of a.algo for a.coll (which must be available: algoAvailable) and finalizes it.
void buildPlan(const CollArgs& a, Plan* plan);

}  // namespace braid
