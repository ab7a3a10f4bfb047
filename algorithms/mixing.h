// Weighted neighbour mixing: the plans of gossip (decentralized averaging). One round computes
//   recv = selfWeight * x + sum_j w_j * x_j
// where x is this rank's current value and x_j the in-neighbours' (received into scratch). Round 0
// reads the send buffer, later rounds the receive buffer; the result is in the receive buffer.
// The neighbour AllReduce (braidNeighborAllReduce, src/api_gossip.cc) is one round over a graph;
// the gossip AllReduce (algorithms/allreduce/gossip.cc) is log2 n one-peer rounds. Both are built
// in algorithms/allreduce/gossip.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/patterns/graph.h"
#include "src/plan.h"

namespace braid {

struct MixRound {
  double selfWeight = 1;
  std::vector<graph::InEdge> in;  // ranks received from, with their weights
  std::vector<int> out;           // ranks sent to
};

struct MixArgs {
  int rank = 0;
  int nranks = 1;
  uint64_t count = 0;  // elements
  size_t elemSize = 1;
  bool inPlace = false;
  uint64_t chunkBytes = 1 << 18;  // pipelining granularity
};

// Receive slots per in-neighbour, each one chunk: how many chunks of one neighbour may be in flight
// before its oldest must be folded in. Bounds scratch at (in-degree x 4 x chunk), not x buffer size.
constexpr uint64_t kMixSlots = 4;

// Appends the steps of `rounds` (in order) to `plan` and sets its scratch size. Does not finalize.
void appendMixRounds(const MixArgs& a, const std::vector<MixRound>& rounds, Plan* plan);

// The plan of one neighbour AllReduce over rank a.rank's side of a graph, finalized. Peers must be
// distinct per direction and differ from a.rank (src/api_gossip.cc checks this).
void buildNeighborAllReduce(const MixArgs& a, const graph::Topology& g, Plan* plan);

}  // namespace braid
