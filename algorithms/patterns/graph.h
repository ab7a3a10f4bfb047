// Pure rank math of the gossip graphs (decentralized averaging): who a rank receives from, with
// which weight, and who it sends to. No I/O; unit-tested alone (tests/unit/test_graph.cc).
//
// A graph is given from one rank's side: its in-neighbours (ranks it receives from) with their
// weights, its own weight, and its out-neighbours (ranks that receive from it). One round of
// neighbour averaging computes  x_r <- selfWeight * x_r + sum_j w_j * x_j  over the in-neighbours j.
// Every named graph below has rows that sum to 1 (selfWeight + sum w_j == 1), and columns too
// (each rank's value is spread with total weight 1), so the global average is preserved.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace braid::graph {

struct InEdge {
  int peer = -1;
  double weight = 0;
};

struct Topology {
  double selfWeight = 1;
  std::vector<InEdge> in;  // ranks this rank receives from, in increasing distance
  std::vector<int> out;    // ranks this rank sends to, in increasing distance
};

enum class Named : uint8_t {
  kRing,         // left and right neighbour, 1/3 each (n == 2: the other rank, 1/2)
  kExp2,         // static exponential: receive from r - 2^k, send to r + 2^k, k < ceil(log2 n); uniform
  kHypercube,    // r XOR 2^k, k < log2 n (n a power of two); uniform
  kOnePeerExp2,  // one-peer exponential: at call t, receive from r - 2^(t mod L), send to r + 2^(t mod L), 1/2
};
constexpr const char* kNamedList = "ring, exp2, hypercube, onepeer_exp2";

inline bool parseNamed(const char* name, Named* out) {
  static constexpr struct {
    const char* name;
    Named kind;
  } kNames[] = {{"ring", Named::kRing},
                {"exp2", Named::kExp2},
                {"hypercube", Named::kHypercube},
                {"onepeer_exp2", Named::kOnePeerExp2}};
  for (const auto& e : kNames) {
    if (std::strcmp(name, e.name) == 0) {
      *out = e.kind;
      return true;
    }
  }
  return false;
}

inline bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// ceil(log2 n) for n >= 1: 1 -> 0, 2 -> 1, 3 -> 2, 4 -> 2, 5 -> 3.
inline int ceilLog2(int n) {
  int k = 0;
  while ((int64_t{1} << k) < n) ++k;
  return k;
}

// (r + d) mod n for any d, as a rank.
inline int wrap(int64_t r, int64_t d, int n) { return static_cast<int>(((r + d) % n + n) % n); }

// How many calls the dynamic graph of `kind` takes to come back to its start: ceil(log2 n) for
// onepeer_exp2 (at least 1), 1 for the static graphs.
inline int rotationPeriod(Named kind, int n) { return kind == Named::kOnePeerExp2 && n > 1 ? ceilLog2(n) : 1; }

// Whether `kind` exists for n ranks (hypercube needs a power of two).
inline bool namedValid(Named kind, int n) { return n >= 1 && (kind != Named::kHypercube || isPowerOfTwo(n)); }

// Rank r's side of the named graph on n ranks at rotation `t` (only onepeer_exp2 depends on it).
// Requires namedValid(kind, n) and 0 <= r < n.
inline Topology named(Named kind, int r, int n, uint64_t t = 0) {
  Topology g;
  if (n <= 1) return g;  // alone: selfWeight 1, no neighbours
  const int levels = ceilLog2(n);
  switch (kind) {
    case Named::kRing:
      if (n == 2) {
        g.selfWeight = 0.5;
        g.in.push_back({1 - r, 0.5});
        g.out.push_back(1 - r);
      } else {
        g.selfWeight = 1.0 / 3;
        g.in = {{wrap(r, -1, n), 1.0 / 3}, {wrap(r, 1, n), 1.0 / 3}};
        g.out = {wrap(r, 1, n), wrap(r, -1, n)};
      }
      break;
    case Named::kExp2:
    case Named::kHypercube: {
      // 2^k < n for k < levels, so the peers are distinct and differ from r.
      const double w = 1.0 / (levels + 1);
      g.selfWeight = w;
      for (int k = 0; k < levels; ++k) {
        const int d = 1 << k;
        if (kind == Named::kExp2) {
          g.in.push_back({wrap(r, -d, n), w});
          g.out.push_back(wrap(r, d, n));
        } else {
          g.in.push_back({r ^ d, w});
          g.out.push_back(r ^ d);
        }
      }
      break;
    }
    case Named::kOnePeerExp2: {
      const int d = 1 << static_cast<int>(t % static_cast<uint64_t>(levels));
      g.selfWeight = 0.5;
      g.in.push_back({wrap(r, -d, n), 0.5});
      g.out.push_back(wrap(r, d, n));
      break;
    }
  }
  return g;
}

// ---- Gossip AllReduce ---------------------------------------------------------------------------
// Round t of the one-peer exponential averaging used by the gossip AllReduce: rank r sends its
// value to `sendTo`, receives `recvFrom`'s, and keeps the mean of the two. For n a power of two
// the peer is r XOR 2^t (a pairwise exchange), and log2 n rounds give every rank the exact average.
// Otherwise it sends to r + 2^(t mod L) and receives from r - 2^(t mod L), L = ceil(log2 n): each
// round still preserves the sum, but L rounds only approximate the average.
struct GossipRound {
  int sendTo = -1;
  int recvFrom = -1;
};

// Rounds to run when none are asked for: log2 n (exact for powers of two), else ceil(log2 n).
inline int gossipDefaultRounds(int n) { return ceilLog2(n); }

inline GossipRound gossipRound(int r, int n, int t) {
  const int levels = ceilLog2(n);
  const int d = 1 << (t % levels);  // callers ensure n >= 2, hence levels >= 1
  if (isPowerOfTwo(n)) return {r ^ d, r ^ d};
  return {wrap(r, d, n), wrap(r, -d, n)};
}

}  // namespace braid::graph
