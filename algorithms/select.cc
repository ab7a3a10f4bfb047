// The dispatch from (collective, algorithm) to a builder (the names are in src/coll.cc). Which algorithm a call
// gets is decided by the selector (topology/select.cc) from the cost model, or by BRAID_ALGO.
#include "algorithms/algorithms.h"

namespace braid {

void buildPlan(const CollArgs& a, Plan* plan) {
  plan->rank = a.rank;
  plan->nranks = a.nranks;
  switch (a.coll) {
    case Coll::kAllReduce:
      switch (a.algo) {
        case Algo::kRing:
          buildRingAllReduce(a, plan);
          break;
        case Algo::kTree:
          buildTreeAllReduce(a, plan);
          break;
        case Algo::kRabenseifner:
          buildRabenseifnerAllReduce(a, plan);
          break;
        case Algo::kRecursiveDoubling:
          buildRecursiveDoublingAllReduce(a, plan);
          break;
        case Algo::kHierarchical:
          buildHierarchicalAllReduce(a, plan);
          break;
        case Algo::kGossip:
          buildGossipAllReduce(a, plan);
          break;
        case Algo::kLinear:
          break;  // not available (algoAvailable)
      }
      break;
    case Coll::kBroadcast:
      if (a.algo == Algo::kTree)
        buildTreeBroadcast(a, plan);
      else
        buildChainBroadcast(a, plan);
      break;
    case Coll::kReduce:
      if (a.algo == Algo::kTree)
        buildTreeReduce(a, plan);
      else
        buildChainReduce(a, plan);
      break;
    case Coll::kAllGather:
      if (a.algo == Algo::kLinear)
        buildLinearAllGather(a, plan);
      else if (a.algo == Algo::kRecursiveDoubling)
        buildDoublingAllGather(a, plan);
      else
        buildRingAllGather(a, plan);
      break;
    case Coll::kReduceScatter:
      if (a.algo == Algo::kRabenseifner)
        buildHalvingReduceScatter(a, plan);
      else
        buildRingReduceScatter(a, plan);
      break;
    case Coll::kAllToAll:
      if (a.algo == Algo::kRecursiveDoubling)
        buildBruckAllToAll(a, plan);
      else
        buildPairwiseAllToAll(a, plan);
      break;
    case Coll::kBarrier:
      buildDisseminationBarrier(a, plan);
      break;
    case Coll::kGather:
      if (a.algo == Algo::kTree)
        buildTreeGather(a, plan);
      else
        buildLinearGather(a, plan);
      break;
    case Coll::kScatter:
      if (a.algo == Algo::kTree)
        buildTreeScatter(a, plan);
      else
        buildLinearScatter(a, plan);
      break;
    case Coll::kSendRecv:
      break;  // built per call from the group's records (src/api_coll.cc)
  }
  plan->finalize();
}

}  // namespace braid
