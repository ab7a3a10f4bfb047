// The selector: at communicator init, the cost model (cost.h) is evaluated for every collective and
// message size into a table of size ranges -> algorithm; per call the choice is a lookup. BRAID_ALGO
// overrides it globally ("ring") or per collective ("allreduce:tree;broadcast:ring").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "topology/cost.h"

namespace braid::topo {

class Selector {
 public:
  // Sizes up to 2^kMaxLog2 bytes have their own bucket; larger calls use the last one.
  static constexpr int kMaxLog2 = 40;

  // Builds the table. `algoSpec` is BRAID_ALGO's value ("" = none); an unknown name, an unknown
  // collective or an algorithm the collective lacks is braidInvalidArgument. `approximate` allows
  // gossip for AllReduce with op avg.
  Status init(const ClusterShape& cluster, const CostParams& cost, const std::string& algoSpec, bool approximate);
  // Builds the table again for `cluster` with init's costs, BRAID_ALGO and approximation.
  Status reshape(const ClusterShape& cluster) {
    const CostParams cost = cost_;
    const std::string spec = spec_;
    return init(cluster, cost, spec, approximate_);
  }

  // The algorithm for a call of `bytes` (as predictUs counts them). `avgFloat`: op avg on a
  // floating-point type (only then may an approximate comm use gossip).
  Algo pick(Coll coll, uint64_t bytes, bool avgFloat = false) const {
    const int b = bucket(bytes);
    const Entry& e = table_[static_cast<int>(coll)][b];
    return avgFloat ? e.avgFloat : e.exact;
  }

  // The table as printed by BRAID_DEBUG_SUBSYS=TUNE and braid-topo --plan: one line per size range.
  std::string describe() const;
  // Whether BRAID_ALGO fixed the choice for `coll`.
  bool overridden(Coll coll) const { return forced_[static_cast<int>(coll)]; }

  static int bucket(uint64_t bytes) {
    if (bytes <= 1) return 0;
    int lg = 64 - __builtin_clzll(bytes - 1);  // ceil(log2(bytes))
    return lg > kMaxLog2 ? kMaxLog2 : lg;
  }

 private:
  struct Entry {
    Algo exact = Algo::kRing;
    Algo avgFloat = Algo::kRing;
  };
  static constexpr int kColls = kNumColls;
  std::array<std::array<Entry, kMaxLog2 + 1>, kColls> table_{};
  std::array<bool, kColls> forced_{};
  ClusterShape cluster_;
  CostParams cost_;
  std::string spec_;
  bool approximate_ = false;
};

// Parses BRAID_ALGO into per-collective choices (index = Coll); `set` says which were given.
Status parseAlgoSpec(const std::string& spec, std::array<Algo, kNumColls>* algo, std::array<bool, kNumColls>* set);

}  // namespace braid::topo
