// STUB (being written this session): falls back to the existing algorithm until replaced.
#include "algorithms/algorithms.h"

namespace braid {

void buildTreeBroadcast(const CollArgs& a, Plan* plan) { buildChainBroadcast(a, plan); }

}  // namespace braid
