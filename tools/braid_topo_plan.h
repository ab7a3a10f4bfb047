// braid-topo's --plan and --config (tools/braid_topo_plan.cc).
#pragma once

#include <string>

#include "topology/cost.h"

namespace braid::tools {

// For each size from 8 B to 1 GiB: the selector's choice, its predicted time, algbw and busbw, and
// the runner-up. Returns the exit status (2 on a bad collective or BRAID_ALGO).
int printPlan(const topo::ClusterShape& cluster, const topo::CostParams& cost, const std::string& coll,
              const std::string& algoSpec, bool approximate);

// Every BRAID_* variable: default, current value, help.
int printConfig();

}  // namespace braid::tools
