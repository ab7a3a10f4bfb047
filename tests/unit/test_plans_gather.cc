// Gather and Scatter: the binomial tree's rank math alone, then every plan (linear and tree) run by
// the simulator (plan_sim.h) against the others, and the selector's choice between the two.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"
#include "tests/unit/plan_sim.h"
#include "topology/select.h"

using namespace braid;
using namespace braid::sim;

TEST_CASE("binomial trees: every rank is its parent's child, subtrees are runs that tile the ranks",
          "[unit][plan][gather]") {
  for (int n = 1; n <= 40; ++n) {
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    for (int root = 0; root < n; ++root) {
      INFO("n=" << n << " root=" << root);
      std::vector<BinomialLinks> links;
      for (int r = 0; r < n; ++r) links.push_back(binomialLinks(r, n, root));
      REQUIRE(links[root].rel == 0);
      REQUIRE(links[root].parent == -1);
      REQUIRE(links[root].end == n);
      for (int r = 0; r < n; ++r) {
        const BinomialLinks& l = links[r];
        REQUIRE(binomialAbs(l.rel, n, root) == r);
        REQUIRE(__builtin_popcount(static_cast<unsigned>(l.rel)) <= log2n);  // the depth
        // The children's subtrees tile (rel, end), the largest first.
        int next = l.end;
        for (int k = 0; k < l.numChildren; ++k) {
          const int c = l.children[k];
          REQUIRE(binomialSubtreeEnd(c, n) == next);
          next = c;
          const BinomialLinks& cl = links[binomialAbs(c, n, root)];
          REQUIRE(cl.parent == r);
          REQUIRE(cl.end == binomialSubtreeEnd(c, n));
        }
        REQUIRE(next == l.rel + 1);
        // A run's pieces are contiguous in absolute ranks and cover it.
        const RunPieces p = splitRun(l.rel, l.end, n, root);
        int covered = 0;
        for (int i = 0; i < p.count; ++i) {
          const int a0 = binomialAbs(p.begin[i], n, root);
          REQUIRE(binomialAbs(p.end[i] - 1, n, root) == a0 + (p.end[i] - 1 - p.begin[i]));
          covered += p.end[i] - p.begin[i];
        }
        REQUIRE(covered == l.end - l.rel);
      }
    }
  }
}

TEST_CASE("gather and scatter plans deliver every block to its place, linear and tree", "[unit][plan][gather]") {
  for (Algo algo : {Algo::kLinear, Algo::kTree}) {
    for (int n = 1; n <= 17; ++n) {
      for (uint64_t count : {0, 1, 5, 13}) {
        for (int root : {0, n - 1, n / 2}) {
          for (bool inPlace : {false, true}) {
            for (uint64_t chunk : {uint64_t(3), uint64_t(1) << 18}) {
              INFO(algoName(algo) << " n=" << n << " count=" << count << " root=" << root << " inPlace=" << inPlace);
              Sim g = simulate(Coll::kGather, n, count, inPlace, false, root, chunk, algo);
              bool ok = g.run();
              INFO(g.error);
              REQUIRE(ok);
              for (int j = 0; j < n; ++j)
                for (uint64_t i = 0; i < count; ++i) REQUIRE(g.ranks[root].recv[j * count + i] == (Cell(1) << j));
              for (int r = 0; r < n; ++r)
                if (r != root) REQUIRE(g.ranks[r].recv.empty());
              Sim s = simulate(Coll::kScatter, n, count, inPlace, false, root, chunk, algo);
              ok = s.run();
              INFO(s.error);
              REQUIRE(ok);
              for (int r = 0; r < n; ++r) {
                // In place on the root, its receive buffer is its block of the send buffer.
                const bool alias = inPlace && r == root;
                const std::vector<Cell>& out = alias ? s.ranks[r].send : s.ranks[r].recv;
                const uint64_t base = alias ? r * count : 0;
                for (uint64_t i = 0; i < count; ++i) {
                  REQUIRE(out[base + i] == (rankBit(root) | tag(r)));
                  // The tag is a bit of its own: not a rank's, not kScaled (with 32-bit cells rank 15's
                  // tag was kScaled, and rank 16's shifted past the word).
                  REQUIRE(__builtin_popcountll(out[base + i]) == 2);
                  REQUIRE((out[base + i] & kScaled) == 0);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("gather and scatter plans name their algorithm and keep scratch off the root and the leaves",
          "[unit][plan][gather]") {
  CollArgs a;
  a.nranks = 8;
  a.count = 10;
  a.elemSize = 4;
  a.root = 3;
  for (Coll coll : {Coll::kGather, Coll::kScatter}) {
    for (Algo algo : {Algo::kLinear, Algo::kTree}) {
      a.coll = coll;
      a.algo = algo;
      for (int r = 0; r < a.nranks; ++r) {
        a.rank = r;
        Plan p;
        buildPlan(a, &p);
        INFO(collName(coll) << " " << algoName(algo) << " rank " << r << "\n" << p.describe());
        CHECK(std::string(p.algorithm) == algoName(algo));
        const BinomialLinks l = binomialLinks(r, a.nranks, a.root);
        const bool interior = algo == Algo::kTree && r != a.root && l.numChildren > 0;
        CHECK(p.scratchBytes == (interior ? uint64_t(l.end - l.rel) * a.count * a.elemSize : 0));
        // The root talks to every rank (linear) or to its log2(8) = 3 children (tree).
        if (r == a.root) CHECK(p.peers.size() == (algo == Algo::kLinear ? 7u : 3u));
      }
    }
  }
}

TEST_CASE("the selector takes the binomial tree for small gathers and scatters, linear for large",
          "[unit][select][gather]") {
  using namespace braid::topo;
  const CostParams p = CostParams::defaults();
  for (int n : {8, 16}) {
    const ClusterShape c = ClusterShape::single(n, n);
    Selector s;
    REQUIRE(s.init(c, p, "", false).ok());
    for (Coll coll : {Coll::kGather, Coll::kScatter}) {
      INFO(collName(coll) << " n=" << n);
      CHECK(s.pick(coll, 64) == Algo::kTree);
      CHECK(s.pick(coll, uint64_t(1) << 30) == Algo::kLinear);
      CHECK(predictUs(coll, Algo::kTree, 64, c, p) < predictUs(coll, Algo::kLinear, 64, c, p));
      CHECK(std::isinf(predictUs(coll, Algo::kRing, 64, c, p)));
      CHECK(std::isinf(predictUs(Coll::kAllReduce, Algo::kLinear, 64, c, p)));
    }
    Selector forced;
    REQUIRE(forced.init(c, p, "gather:linear;scatter:tree", false).ok());
    CHECK(forced.pick(Coll::kGather, 64) == Algo::kLinear);
    CHECK(forced.pick(Coll::kScatter, uint64_t(1) << 30) == Algo::kTree);
    CHECK(forced.overridden(Coll::kGather));
    Selector bad;
    CHECK_FALSE(bad.init(c, p, "gather:ring", false).ok());
    CHECK_FALSE(bad.init(c, p, "allreduce:linear", false).ok());
  }
}
