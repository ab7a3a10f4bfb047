// The algorithm for each call. One algorithm per collective today; the topology-aware selector
// (topology/select.cc, cost model + table) replaces this switch.
#include "algorithms/algorithms.h"

namespace braid {

void buildPlan(const CollArgs& a, Plan* plan) {
  plan->rank = a.rank;
  plan->nranks = a.nranks;
  switch (a.coll) {
    case Coll::kAllReduce: buildRingAllReduce(a, plan); break;
    case Coll::kAllGather: buildRingAllGather(a, plan); break;
    case Coll::kReduceScatter: buildRingReduceScatter(a, plan); break;
    case Coll::kBroadcast: buildChainBroadcast(a, plan); break;
    case Coll::kReduce: buildChainReduce(a, plan); break;
    case Coll::kAllToAll: buildPairwiseAllToAll(a, plan); break;
    case Coll::kBarrier: buildDisseminationBarrier(a, plan); break;
    case Coll::kSendRecv: break;  // built per call from the group's records (src/api.cc)
  }
  plan->finalize();
}

}  // namespace braid
