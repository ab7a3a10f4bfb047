// The recursive-doubling, Rabenseifner and hierarchical AllReduce: their rank math
// (algorithms/patterns/recursive.h, hosts.h) checked alone, and their plans checked without a network
// by the simulator (plan_sim.h): a byte reduced twice, a size mismatch, a race, a deadlock or a wrong
// final buffer fails the test.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/cell_chain.h"
#include "algorithms/patterns/hosts.h"
#include "algorithms/patterns/recursive.h"
#include "tests/unit/plan_order.h"
#include "tests/unit/plan_sim.h"

using namespace braid;
using namespace braid::sim;

namespace {

constexpr uint64_t kCounts[] = {0, 1, 2, 3, 7, 16, 33, 100};
constexpr uint64_t kChunks[] = {1, 3, uint64_t(1) << 20};

// Runs every rank's plan and checks each receive buffer holds every contribution once (and the scale
// once, with avg).
void requireAllReduce(Algo algo, int n, uint64_t count, bool inPlace, bool avg, uint64_t chunk,
                      const int* hostOf = nullptr) {
  Sim sim = simulate(Coll::kAllReduce, n, count, inPlace, avg, 0, chunk, algo, hostOf);
  INFO(algoName(algo) << " n=" << n << " count=" << count << " inPlace=" << inPlace << " avg=" << avg
                      << " chunk=" << chunk);
  bool ok = sim.run();
  INFO(sim.error);
  REQUIRE(ok);
  const Cell want = fullMask(n) | (avg && n > 1 ? kScaled : 0);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(std::string(sim.ranks[r].plan.algorithm) == algoName(algo));
    requireOrdered(sim.ranks[r].plan, inPlace);
    for (uint64_t i = 0; i < count; ++i) REQUIRE(sim.ranks[r].recv[i] == want);
    // Out of place, the send buffer is input only.
    if (!inPlace)
      for (Cell c : sim.ranks[r].send) REQUIRE(c == (Cell(1) << r));
  }
}

void sweep(Algo algo, int n, const int* hostOf = nullptr) {
  for (uint64_t count : kCounts)
    for (uint64_t chunk : kChunks)
      for (bool inPlace : {false, true})
        for (bool avg : {false, true}) requireAllReduce(algo, n, count, inPlace, avg, chunk, hostOf);
}

// Host layouts for n ranks, each a rank -> host table, named for failure messages.
struct Layout {
  std::string name;
  std::vector<int> hostOf;
};
std::vector<Layout> layouts(int n) {
  std::vector<Layout> out;
  auto add = [&](std::string name, auto f) {
    Layout l{std::move(name), {}};
    for (int r = 0; r < n; ++r) l.hostOf.push_back(f(r));
    out.push_back(std::move(l));
  };
  add("one host", [](int) { return 0; });
  add("one rank per host", [](int r) { return r; });
  for (int h : {2, 3}) {
    const int block = (n + h - 1) / h;
    add("blocks of " + std::to_string(block), [block](int r) { return r / block; });
  }
  add("big host first", [n](int r) { return r < n / 2 + 1 ? 0 : 1; });
  add("one rank, then the rest", [](int r) { return r == 0 ? 0 : 1; });
  add("interleaved by 2", [](int r) { return r % 2; });
  add("interleaved by 3", [](int r) { return r % 3; });
  add("sparse host ids", [](int r) { return (r % 2) * 7 + 2; });
  return out;
}

// Every step's bytes and offsets are whole elements, every message within the chunk size, and every
// dependency points backwards.
void requireWellFormed(const Plan& p, uint64_t elemSize, uint64_t chunkBytes) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    const bool whole = s.bytes % elemSize == 0 && s.dst.offset % elemSize == 0 && s.src.offset % elemSize == 0;
    const bool small = chunkBytes < elemSize || s.peer < 0 || s.bytes <= chunkBytes;
    const bool backwards = s.deps[0] < static_cast<int>(i) && s.deps[1] < static_cast<int>(i);
    if (!whole || !small || !backwards) FAIL("step " << i << " is malformed\n" << p.describe());
  }
}

Plan planFor(Algo algo, int n, int r, uint64_t count, uint64_t elemSize, uint64_t chunk, const int* hostOf = nullptr,
             bool avg = false) {
  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.algo = algo;
  a.nranks = n;
  a.rank = r;
  a.count = count;
  a.elemSize = elemSize;
  a.chunkBytes = chunk;
  a.hostOf = hostOf;
  a.avg = avg;
  Plan p;
  buildPlan(a, &p);
  return p;
}

uint64_t sentBytes(const Plan& p) {
  uint64_t total = 0;
  for (const Step& s : p.steps)
    if (s.kind == StepKind::kSend) total += s.bytes;
  return total;
}

}  // namespace

TEST_CASE("folding pairs every extra rank once and numbers the rest 0..p-1", "[unit][pattern]") {
  for (int n = 1; n <= 70; ++n) {
    INFO("n=" << n);
    const int p = pow2Floor(n);
    REQUIRE((p & (p - 1)) == 0);
    REQUIRE(p <= n);
    REQUIRE(2 * p > n);
    REQUIRE((1 << log2Floor(n)) == p);
    std::vector<int> seen(p, 0);
    int out = 0;
    for (int r = 0; r < n; ++r) {
      const int v = foldVrank(r, n), partner = foldPartner(r, n);
      if (v < 0) {
        ++out;
        REQUIRE(partner >= 0);
        REQUIRE(foldVrank(partner, n) >= 0);  // hands its data to a rank that stays in
        REQUIRE(foldPartner(partner, n) == r);
      } else {
        REQUIRE(v < p);
        REQUIRE(foldRank(v, n) == r);
        ++seen[v];
        if (partner >= 0) REQUIRE(foldVrank(partner, n) < 0);  // a partner that stays in serves one extra
      }
    }
    REQUIRE(out == foldExtra(n));
    for (int v = 0; v < p; ++v) REQUIRE(seen[v] == 1);
  }
}

TEST_CASE("recursive halving gives each virtual rank one piece, swapping halves with its partner", "[unit][pattern]") {
  for (bool top : {false, true})
    for (int p = 1; p <= 64; p *= 2) {
      const int rounds = log2Floor(p);
      std::set<int> finals;
      for (int v = 0; v < p; ++v) {
        INFO("p=" << p << " v=" << v << (top ? " from the top" : ""));
        REQUIRE(halvingKept(v, p, -1, top).begin == 0);
        REQUIRE(halvingKept(v, p, -1, top).end == p);
        for (int k = 0; k < rounds; ++k) {
          const PieceSpan before = halvingKept(v, p, k - 1, top), kept = halvingKept(v, p, k, top),
                          given = halvingGiven(v, p, k, top);
          REQUIRE(kept.end - kept.begin == (before.end - before.begin) / 2);
          REQUIRE(given.end - given.begin == kept.end - kept.begin);
          // kept and given split the span held before the round, and the partner keeps what v gives.
          REQUIRE(std::min(kept.begin, given.begin) == before.begin);
          REQUIRE(std::max(kept.end, given.end) == before.end);
          REQUIRE((kept.end == given.begin || given.end == kept.begin));
          const int partner = v ^ (1 << (top ? rounds - 1 - k : k));
          REQUIRE(halvingKept(partner, p, k - 1, top).begin == before.begin);
          REQUIRE(halvingKept(partner, p, k, top).begin == given.begin);
          REQUIRE(halvingGiven(partner, p, k, top).begin == kept.begin);
        }
        const PieceSpan last = halvingKept(v, p, rounds - 1, top);
        REQUIRE(last.end == last.begin + 1);
        if (top) REQUIRE(last.begin == v);  // the blocks stay in rank order
        finals.insert(last.begin);
      }
      REQUIRE(static_cast<int>(finals.size()) == p);
    }
}

TEST_CASE("piece spans cover the elements of their pieces contiguously", "[unit][pattern]") {
  for (uint64_t count : {0, 1, 3, 7, 16, 100}) {
    for (int parts : {1, 2, 4, 8, 16}) {
      for (int b = 0; b <= parts; ++b) {
        for (int e = b; e <= parts; ++e) {
          const Range r = pieceElems(count, parts, PieceSpan{b, e});
          uint64_t sum = 0;
          for (int i = b; i < e; ++i) sum += partition(count, parts, i).count;
          REQUIRE(r.count == sum);
          if (b < e) REQUIRE(r.offset == partition(count, parts, b).offset);
        }
      }
    }
  }
}

TEST_CASE("host groups: owners, extras and shard groups cover every rank and byte once", "[unit][pattern]") {
  for (int n = 1; n <= 16; ++n) {
    for (const Layout& l : layouts(n)) {
      INFO("n=" << n << " " << l.name);
      const HostGroups g = hostGroups(l.hostOf.data(), n);
      const int m = g.owners();
      REQUIRE(m >= 1);
      std::vector<int> served(n, 0);  // times each rank is an owner or some owner's extra
      for (int h = 0; h < g.numGroups(); ++h) {
        const std::vector<int>& mem = g.members[h];
        REQUIRE(static_cast<int>(mem.size()) >= m);
        for (size_t i = 0; i < mem.size(); ++i) {
          REQUIRE(g.groupOf[mem[i]] == h);
          REQUIRE(g.localOf[mem[i]] == static_cast<int>(i));
          REQUIRE(l.hostOf[mem[i]] == l.hostOf[mem[0]]);
          if (i > 0) REQUIRE(mem[i] > mem[i - 1]);
        }
        for (int j = 0; j < m; ++j) {
          ++served[mem[j]];
          for (int e : extrasOf(j, m, static_cast<int>(mem.size()))) {
            REQUIRE(e >= m);
            REQUIRE(ownerLocal(e, m) == j);
            ++served[mem[e]];
          }
        }
      }
      for (int r = 0; r < n; ++r) REQUIRE(served[r] == 1);
      // Shard j's inter-host group: owner j of every host, one per host, in host order.
      for (int j = 0; j < m; ++j) {
        const std::vector<int> grp = shardGroup(g, j);
        REQUIRE(static_cast<int>(grp.size()) == g.numGroups());
        for (int h = 0; h < g.numGroups(); ++h) {
          REQUIRE(g.groupOf[grp[h]] == h);
          REQUIRE(g.localOf[grp[h]] == j);
        }
      }
      // The shards partition every buffer: each element owned by exactly one shard.
      for (uint64_t count : kCounts) {
        std::vector<int> owned(count, 0);
        for (int j = 0; j < m; ++j) {
          const Range s = shardOf(count, m, j);
          REQUIRE(s.offset + s.count <= count);
          for (uint64_t i = s.offset; i < s.offset + s.count; ++i) ++owned[i];
        }
        for (uint64_t i = 0; i < count; ++i) REQUIRE(owned[i] == 1);
      }
    }
  }
  const HostGroups none = hostGroups(nullptr, 5);
  CHECK(none.numGroups() == 1);
  CHECK(none.owners() == 5);
}

TEST_CASE("recursive doubling allreduce plans reduce every byte once and deliver it everywhere", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) sweep(Algo::kRecursiveDoubling, n);
}

TEST_CASE("rabenseifner allreduce plans reduce every byte once and deliver it everywhere", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) sweep(Algo::kRabenseifner, n);
}

TEST_CASE("hierarchical allreduce plans are right for every host layout", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    requireAllReduce(Algo::kHierarchical, n, 33, false, true, 3, nullptr);
    for (const Layout& l : layouts(n)) {
      INFO(l.name);
      sweep(Algo::kHierarchical, n, l.hostOf.data());
    }
  }
}

TEST_CASE("the three plans cut whole elements, respect the chunk size and depend backwards", "[unit][plan]") {
  for (int n = 1; n <= 12; ++n) {
    const std::vector<Layout> ls = layouts(n);
    for (uint64_t es : {1, 2, 4, 8}) {
      for (uint64_t chunk : {1, 10, 64, 1 << 20}) {
        INFO("n=" << n << " es=" << es << " chunk=" << chunk);
        for (int r = 0; r < n; ++r) {
          for (uint64_t count : {5, 37}) {
            requireWellFormed(planFor(Algo::kRecursiveDoubling, n, r, count, es, chunk, nullptr, true), es, chunk);
            requireWellFormed(planFor(Algo::kRabenseifner, n, r, count, es, chunk, nullptr, true), es, chunk);
            for (const Layout& l : ls)
              requireWellFormed(planFor(Algo::kHierarchical, n, r, count, es, chunk, l.hostOf.data(), true), es, chunk);
          }
        }
      }
    }
  }
}

TEST_CASE("a write over bytes that several sends still read waits for all of them", "[unit][plan]") {
  // Not needed by the three algorithms (each write overlaps one send at most), but CellChain is shared.
  Plan p;
  CellChain cells(&p, 8, 8);
  cells.send(1, Buf::kRecv, Range{0, 3});
  cells.send(2, Buf::kRecv, Range{3, 3});
  cells.send(3, Buf::kRecv, Range{6, 2});
  cells.recv(4, Range{0, 8});
  CHECK(cells.sends().size() == 3u);
  REQUIRE(p.steps.size() == 6u);  // three sends, two zero-byte joins, the receive
  CHECK(p.steps.back().kind == StepKind::kRecv);
  requireOrdered(p, true);
  // The writes that follow chain on the receive, with no join.
  cells.scale(Range{0, 8});
  CHECK(p.steps.size() == 7u);
  requireOrdered(p, true);
}

TEST_CASE("bytes on the wire follow the documented formulas", "[unit][plan]") {
  const uint64_t s = 1024;  // buffer bytes, divisible by every group size below
  const uint64_t big = 1 << 20;
  SECTION("recursive doubling: L*S per rank; a fold moves S more each way") {
    for (int r = 0; r < 8; ++r) {
      const Plan p = planFor(Algo::kRecursiveDoubling, 8, r, s, 1, big);
      CHECK(sentBytes(p) == 3 * s);
      CHECK(p.steps.size() == 6u);  // 3 rounds of one send and one receive
      CHECK(p.scratchBytes == s);
    }
    for (int r = 0; r < 6; ++r) {  // n = 6: ranks 0..3 fold in pairs onto p = 4
      const Plan p = planFor(Algo::kRecursiveDoubling, 6, r, s, 1, big);
      CHECK(sentBytes(p) == (r % 2 == 1 && r < 4 ? s : r < 4 ? 3 * s : 2 * s));
    }
  }
  SECTION("rabenseifner: 2(p-1)/p * S per rank") {
    for (int r = 0; r < 8; ++r) {
      const Plan p = planFor(Algo::kRabenseifner, 8, r, s, 1, big);
      CHECK(sentBytes(p) == 2 * 7 * s / 8);
      CHECK(p.steps.size() == 12u);  // 2 log2(8) rounds of one send and one receive
      CHECK(p.scratchBytes == 0);
    }
    // Chunked: the same bytes, in messages of at most the chunk size.
    const Plan p = planFor(Algo::kRabenseifner, 8, 3, s, 1, 100);
    CHECK(sentBytes(p) == 2 * 7 * s / 8);
  }
  SECTION("hierarchical: 2(m-1)/m * S + 2(H-1)/H * S/m per owner, S each way per extra") {
    const std::vector<int> blocks = {0, 0, 0, 0, 1, 1, 1, 1};  // m = 4, H = 2
    for (int r = 0; r < 8; ++r)
      CHECK(sentBytes(planFor(Algo::kHierarchical, 8, r, s, 1, big, blocks.data())) == 2 * 3 * s / 4 + s / 4);
    const std::vector<int> uneven = {0, 0, 0, 1, 1};  // m = 2: rank 2 is an extra of rank 0
    CHECK(sentBytes(planFor(Algo::kHierarchical, 5, 2, s, 1, big, uneven.data())) == s);
    CHECK(sentBytes(planFor(Algo::kHierarchical, 5, 0, s, 1, big, uneven.data())) == s / 2 + s / 2 + s / 2 + s);
    CHECK(sentBytes(planFor(Algo::kHierarchical, 5, 1, s, 1, big, uneven.data())) == s / 2 + s / 2 + s / 2);
  }
}
