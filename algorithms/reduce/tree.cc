// STUB (being written this session): falls back to the existing algorithm until replaced.
#include "algorithms/algorithms.h"

namespace braid {

void buildTreeReduce(const CollArgs& a, Plan* plan) { buildChainReduce(a, plan); }

}  // namespace braid
