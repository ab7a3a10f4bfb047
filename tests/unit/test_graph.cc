// Gossip without a network: the named graphs' rank math (algorithms/patterns/graph.h), and the
// mixing plans (algorithms/mixing.h) run by the plan simulator (tests/unit/plan_sim.h) with numeric
// values, since a weighted mean is not a set of contributions.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/mixing.h"
#include "algorithms/patterns/graph.h"
#include "src/reduce.h"
#include "tests/unit/plan_sim.h"

using namespace braid;
using graph::Named;
using graph::Topology;

namespace {

constexpr Named kAllNamed[] = {Named::kRing, Named::kExp2, Named::kHypercube, Named::kOnePeerExp2};

using sim::NumSim;

double inputOf(int r, size_t i) { return static_cast<double>((r * 37 + i * 11) % 101) + 0.25 * r; }

// Fills each rank's input (in place: in recv).
void fillInputs(NumSim& sim, uint64_t count, bool inPlace) {
  for (size_t r = 0; r < sim.ranks.size(); ++r) {
    auto& s = sim.ranks[r];
    s.sendAlias = inPlace ? 0 : UINT64_MAX;  // in place, the send buffer is the receive buffer
    s.send.assign(count, 0);
    s.recv.assign(count, -1);
    for (uint64_t i = 0; i < count; ++i) (inPlace ? s.recv : s.send)[i] = inputOf(static_cast<int>(r), i);
  }
}

NumSim gossipSim(int n, uint64_t count, bool inPlace, int rounds, uint64_t chunkBytes) {
  NumSim sim;
  sim.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    CollArgs a;
    a.coll = Coll::kAllReduce;
    a.algo = Algo::kGossip;
    a.rank = r;
    a.nranks = n;
    a.count = count;
    a.elemSize = sizeof(double);
    a.inPlace = inPlace;
    a.avg = true;
    a.chunkBytes = chunkBytes;
    a.gossipRounds = rounds;
    buildPlan(a, &sim.ranks[r].plan);
  }
  fillInputs(sim, count, inPlace);
  return sim;
}

NumSim neighborSim(int n, uint64_t count, bool inPlace, uint64_t chunkBytes, const std::function<Topology(int)>& side) {
  NumSim sim;
  sim.ranks.resize(n);
  for (int r = 0; r < n; ++r)
    buildNeighborAllReduce(MixArgs{r, n, count, sizeof(double), inPlace, chunkBytes}, side(r), &sim.ranks[r].plan);
  fillInputs(sim, count, inPlace);
  return sim;
}

bool close(double got, double want) { return std::fabs(got - want) <= 1e-12 * std::max(1.0, std::fabs(want)); }

// A graph's sides over every rank, with the out-lists derived from the in-lists (as the explicit
// graph creation does).
std::vector<Topology> withOutLists(std::vector<Topology> sides) {
  for (auto& s : sides) s.out.clear();
  for (size_t r = 0; r < sides.size(); ++r)
    for (const auto& e : sides[r].in) sides[e.peer].out.push_back(static_cast<int>(r));
  return sides;
}

}  // namespace

// ---- Named graphs ------------------------------------------------------------------------------

TEST_CASE("named graphs: rows and columns sum to 1, in- and out-lists agree, no self or duplicate", "[unit][pattern]") {
  for (Named kind : kAllNamed) {
    for (int n = 1; n <= 16; ++n) {
      if (!graph::namedValid(kind, n)) {
        CHECK(kind == Named::kHypercube);
        CHECK_FALSE(graph::isPowerOfTwo(n));
        continue;
      }
      for (int t = 0; t < graph::rotationPeriod(kind, n); ++t) {
        INFO("graph " << static_cast<int>(kind) << " n=" << n << " t=" << t);
        std::vector<Topology> g;
        for (int r = 0; r < n; ++r) g.push_back(graph::named(kind, r, n, t));
        std::vector<double> column(n, 0);
        for (int r = 0; r < n; ++r) {
          double row = g[r].selfWeight;
          column[r] += g[r].selfWeight;
          std::set<int> seen;
          for (const auto& e : g[r].in) {
            REQUIRE(e.peer >= 0);
            REQUIRE(e.peer < n);
            REQUIRE(e.peer != r);
            REQUIRE(seen.insert(e.peer).second);
            REQUIRE(e.weight > 0);
            row += e.weight;
            column[e.peer] += e.weight;
            // r receives from e.peer exactly when e.peer sends to r.
            REQUIRE(std::count(g[e.peer].out.begin(), g[e.peer].out.end(), r) == 1);
          }
          CHECK(row == Approx(1.0).epsilon(1e-12));
          size_t outs = 0;
          for (int q = 0; q < n; ++q)
            for (const auto& e : g[q].in) outs += e.peer == r;
          REQUIRE(outs == g[r].out.size());
        }
        for (int r = 0; r < n; ++r) CHECK(column[r] == Approx(1.0).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("ring and hypercube are symmetric; exp2 receives from r - 2^k", "[unit][pattern]") {
  for (int n = 1; n <= 16; ++n) {
    const int levels = graph::ceilLog2(n);
    for (int r = 0; r < n; ++r) {
      for (Named kind : {Named::kRing, Named::kHypercube}) {
        if (!graph::namedValid(kind, n)) continue;
        Topology g = graph::named(kind, r, n);
        std::set<int> in, out(g.out.begin(), g.out.end());
        for (const auto& e : g.in) {
          in.insert(e.peer);
          // Symmetric weights: the peer gives r the weight r gives it.
          for (const auto& back : graph::named(kind, e.peer, n).in)
            if (back.peer == r) CHECK(back.weight == e.weight);
        }
        CHECK(in == out);
      }
      Topology ring = graph::named(Named::kRing, r, n);
      CHECK(ring.in.size() == static_cast<size_t>(std::min(n - 1, 2)));
      if (n >= 3) CHECK(ring.selfWeight == Approx(1.0 / 3));
      if (n == 2) CHECK(ring.selfWeight == 0.5);
      Topology e = graph::named(Named::kExp2, r, n);
      REQUIRE(e.in.size() == static_cast<size_t>(levels));
      for (int k = 0; k < levels; ++k) {
        CHECK(e.in[k].peer == ((r - (1 << k)) % n + n) % n);
        CHECK(e.out[k] == (r + (1 << k)) % n);
        CHECK(e.in[k].weight == Approx(1.0 / (levels + 1)));
      }
      if (graph::isPowerOfTwo(n)) {
        Topology h = graph::named(Named::kHypercube, r, n);
        for (size_t k = 0; k < h.in.size(); ++k) CHECK(h.in[k].peer == (r ^ (1 << k)));
      }
    }
  }
  Named kind;
  CHECK(graph::parseNamed("onepeer_exp2", &kind));
  CHECK(kind == Named::kOnePeerExp2);
  CHECK_FALSE(graph::parseNamed("torus", &kind));
  CHECK(graph::ceilLog2(1) == 0);
  CHECK(graph::ceilLog2(2) == 1);
  CHECK(graph::ceilLog2(5) == 3);
  CHECK(graph::ceilLog2(16) == 4);
}

TEST_CASE("onepeer_exp2 rotates through every distance 2^k; log2 n calls average exactly", "[unit][pattern]") {
  for (int n = 2; n <= 16; ++n) {
    const int period = graph::rotationPeriod(Named::kOnePeerExp2, n);
    REQUIRE(period == graph::ceilLog2(n));
    std::set<int> distances;
    for (int t = 0; t < period; ++t) {
      Topology g = graph::named(Named::kOnePeerExp2, 0, n, t);
      REQUIRE(g.in.size() == 1);
      CHECK(g.in[0].weight == 0.5);
      CHECK(g.selfWeight == 0.5);
      distances.insert((n - g.in[0].peer) % n);
      CHECK(graph::named(Named::kOnePeerExp2, 0, n, t + period).in[0].peer == g.in[0].peer);  // periodic
    }
    for (int k = 0; k < period; ++k) CHECK(distances.count(1 << k) == 1);
    // Mixing with the matrices of `period` consecutive calls, from any start: for powers of two
    // every rank ends with the exact average.
    for (int start = 0; start < period; ++start) {
      std::vector<double> x(n);
      for (int r = 0; r < n; ++r) x[r] = inputOf(r, 3);
      double mean = 0;
      for (double v : x) mean += v / n;
      for (int t = start; t < start + period; ++t) {
        std::vector<double> next(n);
        for (int r = 0; r < n; ++r) {
          Topology g = graph::named(Named::kOnePeerExp2, r, n, t);
          next[r] = g.selfWeight * x[r] + g.in[0].weight * x[g.in[0].peer];
        }
        x = next;
      }
      double sum = 0;
      for (int r = 0; r < n; ++r) {
        sum += x[r];
        if (graph::isPowerOfTwo(n)) CHECK(close(x[r], mean));
      }
      CHECK(sum / n == Approx(mean).epsilon(1e-12));  // the sum is preserved for every n
    }
  }
}

TEST_CASE("gossip rounds pair ranks consistently", "[unit][pattern]") {
  for (int n = 2; n <= 16; ++n) {
    for (int t = 0; t < 2 * graph::ceilLog2(n); ++t) {
      for (int r = 0; r < n; ++r) {
        graph::GossipRound g = graph::gossipRound(r, n, t);
        CHECK(g.sendTo != r);
        CHECK(graph::gossipRound(g.sendTo, n, t).recvFrom == r);
        if (graph::isPowerOfTwo(n)) CHECK(g.sendTo == (r ^ (1 << (t % graph::ceilLog2(n)))));
      }
    }
  }
}

// ---- Mixing plans ------------------------------------------------------------------------------

TEST_CASE("gossip allreduce plans average exactly for powers of two and preserve the sum otherwise",
          "[unit][pattern]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 2, 7, 33, 100}) {
      for (bool inPlace : {false, true}) {
        for (uint64_t chunk : {uint64_t{24}, uint64_t{1} << 18}) {
          INFO("n=" << n << " count=" << count << " inPlace=" << inPlace << " chunk=" << chunk);
          NumSim sim = gossipSim(n, count, inPlace, 0, chunk);
          const bool ok = sim.run();
          INFO(sim.error);
          REQUIRE(ok);
          for (uint64_t i = 0; i < count; ++i) {
            double mean = 0, sum = 0, lo = 1e300, hi = -1e300;
            for (int r = 0; r < n; ++r) {
              mean += inputOf(r, i) / n;
              lo = std::min(lo, inputOf(r, i));
              hi = std::max(hi, inputOf(r, i));
            }
            for (int r = 0; r < n; ++r) {
              const double got = sim.ranks[r].recv[i];
              sum += got;
              if (graph::isPowerOfTwo(n)) REQUIRE(close(got, mean));
              REQUIRE(got >= lo - 1e-9);  // a mean of means stays inside the inputs' range
              REQUIRE(got <= hi + 1e-9);
            }
            REQUIRE(sum / n == Approx(mean).epsilon(1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("more gossip rounds get closer to the average when n is not a power of two", "[unit][pattern]") {
  for (int n : {3, 5, 6, 7, 12}) {
    const int levels = graph::ceilLog2(n);
    double prev = 1e300;
    for (int rounds : {levels, 4 * levels, 16 * levels}) {
      NumSim sim = gossipSim(n, 5, false, rounds, 16);
      REQUIRE(sim.run());
      double worst = 0;
      for (uint64_t i = 0; i < 5; ++i) {
        double mean = 0;
        for (int r = 0; r < n; ++r) mean += inputOf(r, i) / n;
        for (int r = 0; r < n; ++r) worst = std::max(worst, std::fabs(sim.ranks[r].recv[i] - mean));
      }
      INFO("n=" << n << " rounds=" << rounds << " worst error " << worst);
      CHECK(worst < prev);
      prev = worst;
    }
    CHECK(prev < 1e-6);
  }
}

TEST_CASE("neighbour allreduce plans compute the weighted sum over every named graph", "[unit][pattern]") {
  for (Named kind : kAllNamed) {
    for (int n = 1; n <= 16; ++n) {
      if (!graph::namedValid(kind, n)) continue;
      for (int t = 0; t < graph::rotationPeriod(kind, n); ++t) {
        for (uint64_t count : {0, 1, 9, 40}) {
          for (bool inPlace : {false, true}) {
            INFO("graph " << static_cast<int>(kind) << " n=" << n << " t=" << t << " count=" << count
                          << " inPlace=" << inPlace);
            auto side = [&](int r) { return graph::named(kind, r, n, t); };
            NumSim sim = neighborSim(n, count, inPlace, 16, side);
            const bool ok = sim.run();
            INFO(sim.error);
            REQUIRE(ok);
            for (int r = 0; r < n; ++r) {
              const Topology g = side(r);
              for (uint64_t i = 0; i < count; ++i) {
                double want = g.selfWeight * inputOf(r, i);
                for (const auto& e : g.in) want += e.weight * inputOf(e.peer, i);
                REQUIRE(close(sim.ranks[r].recv[i], want));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("neighbour allreduce plans on explicit asymmetric graphs, negative weights, isolated ranks",
          "[unit][pattern]") {
  // Rank r receives from ranks (r*a + b) % n with weights that may be negative; some ranks have no
  // in-neighbours and some are nobody's; a rank may send to many (joins of more than two sends).
  for (int n = 1; n <= 9; ++n) {
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<Topology> sides(n);
      for (int r = 0; r < n; ++r) {
        std::set<int> peers;
        if (variant == 0 && r != 0) peers.insert(0);  // a star: 0 sends to everyone
        if (variant == 1) peers.insert((r + 1) % n);  // a one-way ring
        if (variant == 2 && r % 2 == 0)
          for (int q = 0; q < n; q += 3) peers.insert(q);  // some ranks hear many
        if (variant == 3)
          for (int q = 0; q < n; ++q) peers.insert(q);  // complete
        peers.erase(r);
        double rest = 1;
        int i = 0;
        for (int q : peers) {
          const double w = (i++ % 2 == 0 ? 0.375 : -0.125);
          sides[r].in.push_back({q, w});
          rest -= w;
        }
        sides[r].selfWeight = rest;
      }
      sides = withOutLists(sides);
      for (uint64_t count : {1, 10, 31}) {
        for (bool inPlace : {false, true}) {
          INFO("n=" << n << " variant=" << variant << " count=" << count << " inPlace=" << inPlace);
          NumSim sim = neighborSim(n, count, inPlace, 24, [&](int r) { return sides[r]; });
          const bool ok = sim.run();
          INFO(sim.error);
          REQUIRE(ok);
          for (int r = 0; r < n; ++r)
            for (uint64_t i = 0; i < count; ++i) {
              double want = sides[r].selfWeight * inputOf(r, i);
              for (const auto& e : sides[r].in) want += e.weight * inputOf(e.peer, i);
              REQUIRE(close(sim.ranks[r].recv[i], want));
            }
        }
      }
    }
  }
}

TEST_CASE("mixing plans bound their scratch and name their steps", "[unit][pattern]") {
  // 1 MiB of doubles in 64 KiB chunks over exp2 on 16 ranks: 4 in-neighbours, 4 slots of one chunk.
  const uint64_t count = (1 << 20) / sizeof(double), chunk = 1 << 16;
  Plan p;
  buildNeighborAllReduce(MixArgs{5, 16, count, sizeof(double), true, chunk}, graph::named(Named::kExp2, 5, 16), &p);
  CHECK(p.scratchBytes == 4 * kMixSlots * chunk);
  CHECK(std::string(p.algorithm) == "neighbor");
  const std::string text = p.describe();
  CHECK(text.find("scale_by") != std::string::npos);
  CHECK(text.find("axpy") != std::string::npos);
  CHECK(text.find("0.2 * send+0") != std::string::npos);
  for (const Step& s : p.steps) CHECK(s.bytes <= chunk);

  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.algo = Algo::kGossip;
  a.nranks = 8;
  a.rank = 3;
  a.count = 1000;
  a.elemSize = 4;
  Plan g;
  buildPlan(a, &g);
  CHECK(std::string(g.algorithm) == "gossip");
  size_t sends = 0;
  for (const Step& s : g.steps) sends += s.kind == StepKind::kSend;
  CHECK(sends == 3);  // log2 8 rounds of one message (the buffer fits one chunk)
  a.gossipRounds = 5;
  Plan g5;
  buildPlan(a, &g5);
  sends = 0;
  for (const Step& s : g5.steps) sends += s.kind == StepKind::kSend;
  CHECK(sends == 5);
}

// ---- Weighted steps ----------------------------------------------------------------------------

TEST_CASE("weighted steps: fp16 and bf16 round once per element, bit for bit, at every length", "[unit][pattern]") {
  // Special values among ordinary ones: zeros, subnormals, the largest finite, infinities, NaNs;
  // weights that overflow, underflow, and negate. Lengths cover the vector body and the tail.
  const uint16_t halfSpecials[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0x3c00};
  const uint16_t bf16Specials[] = {0x0000, 0x8000, 0x0001, 0x007f, 0x7f7f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x3f80};
  for (braidDataType_t dt : {braidFloat16, braidBfloat16}) {
    const bool isHalf = dt == braidFloat16;
    auto widen = [&](uint16_t v) { return isHalf ? halfToFloat(v) : bf16ToFloat(v); };
    auto narrow = [&](float f) { return isHalf ? floatToHalf(f) : floatToBf16(f); };
    for (size_t count : {0, 1, 7, 8, 9, 31, 100}) {
      for (double weight : {0.5, 1.0 / 3, -0.25, 3000.0, 1e-6}) {
        std::vector<uint16_t> src(count), dst(count);
        for (size_t i = 0; i < count; ++i) {
          const uint16_t* sp = isHalf ? halfSpecials : bf16Specials;
          src[i] = i % 3 == 0 ? sp[i % 10] : narrow(static_cast<float>(i) * 0.37f - 11.0f);
          dst[i] = i % 4 == 1 ? sp[(i + 3) % 10] : narrow(static_cast<float>(i % 17) * -1.3f);
        }
        std::vector<uint16_t> scaled(count), summed = dst;
        scaleBy(dt, scaled.data(), src.data(), count, weight);
        axpy(dt, summed.data(), src.data(), count, weight);
        const float w = static_cast<float>(weight);
        for (size_t i = 0; i < count; ++i) {
          INFO(dtypeName(dt) << " count " << count << " weight " << weight << " element " << i);
          const float x = w * widen(src[i]);
          const uint16_t wantScaled = narrow(x), wantSum = narrow(widen(dst[i]) + x);
          const bool nanScaled = std::isnan(widen(wantScaled)), nanSum = std::isnan(widen(wantSum));
          // NaN results compare by being NaN (payload propagation differs between instructions).
          if (nanScaled) CHECK(std::isnan(widen(scaled[i])));
          if (!nanScaled) CHECK(scaled[i] == wantScaled);
          if (nanSum) CHECK(std::isnan(widen(summed[i])));
          if (!nanSum) CHECK(summed[i] == wantSum);
        }
      }
    }
  }
}

TEST_CASE("weighted steps: float, double, in place, and integers saturate", "[unit][pattern]") {
  std::vector<float> f = {1, 2, 3, -4, 5, 6, 7, 8, 9};
  std::vector<float> g = f;
  scaleBy(braidFloat32, f.data(), f.data(), f.size(), 0.5);  // in place
  axpy(braidFloat32, g.data(), f.data(), g.size(), 2.0);
  for (size_t i = 0; i < f.size(); ++i) {
    CHECK(f[i] == 0.5f * (i == 3 ? -4.0f : static_cast<float>(i + 1)));
    CHECK(g[i] == 2.0f * (i == 3 ? -4.0f : static_cast<float>(i + 1)));
  }
  const std::vector<double> d0 = {0.1, 0.2, 0.3};
  std::vector<double> d = d0;
  axpy(braidFloat64, d.data(), d.data(), d.size(), 1.0 / 3);
  for (size_t i = 0; i < d.size(); ++i) CHECK(d[i] == d0[i] + (1.0 / 3) * d0[i]);
  std::vector<int8_t> i8 = {100, -100, 3, -3};
  scaleBy(braidInt8, i8.data(), i8.data(), i8.size(), 2.0);
  CHECK(i8 == std::vector<int8_t>{127, -128, 6, -6});
  std::vector<uint64_t> u64 = {UINT64_MAX, 1, 10};
  axpy(braidUint64, u64.data(), u64.data(), u64.size(), -2.5);  // x - 2.5x = -1.5x: saturates at 0
  CHECK(u64 == std::vector<uint64_t>{0, 0, 0});
  std::vector<int32_t> i32 = {7, -7};
  axpy(braidInt32, i32.data(), i32.data(), i32.size(), 0.5);  // 10.5 rounds to even
  CHECK(i32 == std::vector<int32_t>{10, -10});
}
