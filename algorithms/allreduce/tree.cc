// STUB (being written this session): falls back to the existing algorithm until replaced.
#include "algorithms/algorithms.h"

namespace braid {

void buildTreeAllReduce(const CollArgs& a, Plan* plan) { buildRingAllReduce(a, plan); }

}  // namespace braid
