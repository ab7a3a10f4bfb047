// Algorithm names and the dispatch from (collective, algorithm) to a builder. Which algorithm a call
// gets is decided by the selector (topology/select.cc) from the cost model, or by BRAID_ALGO.
#include <cstring>

#include "algorithms/algorithms.h"

namespace braid {

namespace {
constexpr const char* kAlgoNames[kNumAlgos] = {"ring",         "tree",  "rabenseifner", "recursive_doubling",
                                               "hierarchical", "gossip"};
}

const char* algoName(Algo a) {
  int i = static_cast<int>(a);
  return i >= 0 && i < kNumAlgos ? kAlgoNames[i] : "?";
}

const char* algoNameFor(Coll c, Algo a) {
  if (c == Coll::kAllToAll) return "pairwise";
  if (c == Coll::kBarrier) return "dissemination";
  return algoName(a);
}

bool parseAlgo(const char* name, Algo* out) {
  for (int i = 0; i < kNumAlgos; ++i) {
    if (strcmp(name, kAlgoNames[i]) == 0) {
      *out = static_cast<Algo>(i);
      return true;
    }
  }
  return false;
}

bool algoAvailable(Coll coll, Algo a) {
  switch (coll) {
    case Coll::kAllReduce:
      return true;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return a == Algo::kRing || a == Algo::kTree;
    case Coll::kAllGather:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
    case Coll::kBarrier:
    case Coll::kSendRecv:
      return a == Algo::kRing;
  }
  return false;
}

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
      buildRingAllGather(a, plan);
      break;
    case Coll::kReduceScatter:
      buildRingReduceScatter(a, plan);
      break;
    case Coll::kAllToAll:
      buildPairwiseAllToAll(a, plan);
      break;
    case Coll::kBarrier:
      buildDisseminationBarrier(a, plan);
      break;
    case Coll::kSendRecv:
      break;  // built per call from the group's records (src/api_coll.cc)
  }
  plan->finalize();
}

}  // namespace braid
