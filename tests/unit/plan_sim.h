// A simulator for Plans, shared by the plan unit tests: every rank's plan of one call runs against
// the others with no network. It follows the transport contract (the k-th send on a link matches
// the k-th receive) under the strictest timing a transport may show: a send is posted when its
// dependencies are done and completes only when the receiver takes its bytes (rendezvous). So a
// plan that passes here cannot deadlock on a transport that buffers less. Races are reported:
//  - bytes landing (a receive completing, a local step writing) where a posted send of the same
//    rank still reads: a real transport may read the source at any time until the send completes;
//  - a local step touching bytes that a posted receive may still write.
//
// Data is symbolic: each cell holds the set of ranks whose contributions it carries (a bit each),
// so a contribution reduced twice or missing is seen exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"

namespace braid::sim {

using Cell = uint32_t;                   // bit i = rank i's contribution (low 16 bits); AllToAll tags the target above
constexpr Cell kScaled = Cell(1) << 31;  // set by a scale step (avg); never part of an AllToAll tag

inline Cell fullMask(int n) { return n >= 32 ? ~Cell(0) : (Cell(1) << n) - 1; }

struct RankState {
  Plan plan;
  std::vector<Cell> send, recv, scratch;
  uint64_t sendAlias = UINT64_MAX;  // in-place: send buffer = recv + this offset
  uint64_t recvAlias = UINT64_MAX;  // in-place ReduceScatter: recv buffer = send + this offset
  std::vector<char> done, posted;
  size_t localNext = 0;
  std::map<int, size_t> sendNext, recvNext;    // per peer: next step to post
  std::map<int, size_t> sendMatch, recvMatch;  // per peer: next posted step to match
};

struct Sim {
  int n = 0;
  std::vector<RankState> ranks;
  std::string error;

  // Runs every plan to the end. False (with `error` set) on a size mismatch, a race, a deadlock,
  // out-of-range bytes or an unreceived message.
  bool run();

 private:
  struct Span {
    const std::vector<Cell>* vec = nullptr;
    uint64_t begin = 0, end = 0;
  };
  Span span(RankState& s, BufRef ref, uint64_t bytes);
  Cell* at(RankState& s, BufRef ref, uint64_t bytes);
  bool depsDone(const RankState& s, const Step& st) const;
  // Reports a race if `sp` overlaps the source of a posted, unfinished send of rank r or, with
  // againstRecvs, the destination of a posted, unfinished receive.
  bool checkRace(int r, int self, Span sp, bool againstRecvs, const char* what);
  bool postRank(int r);
  bool matchRank(int r);
  bool runLocals(int r);
};

// Builds every rank's plan for `proto` (its rank field is ignored), fills the buffers with each
// rank's contribution (in place: the input lives in the receive buffer) and returns the simulator,
// not yet run.
Sim simulate(const CollArgs& proto);

// Shorthand for the common case.
Sim simulate(Coll coll, int n, uint64_t count, bool inPlace, bool avg, int root = 0, uint64_t chunk = 3,
             Algo algo = Algo::kRing, const int* hostOf = nullptr);

}  // namespace braid::sim
