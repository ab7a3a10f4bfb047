// The lowering pass (src/lower.h) checked by the plan simulator: every algorithm's plans, lowered as
// BRAID_FORCE_LOWERING=1 lowers them, still deliver exactly what the fused plans deliver, without
// races or deadlocks, and lowering leaves no receive-reduce behind. Also the step builders' joins.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/lower.h"
#include "tests/unit/plan_sim.h"

using namespace braid;
using namespace braid::sim;

namespace {

int countKind(const Plan& p, StepKind k) {
  int n = 0;
  for (const Step& s : p.steps) n += s.kind == k;
  return n;
}

}  // namespace

TEST_CASE("lowered plans of every algorithm deliver what the fused plans deliver", "[unit][plan][lower]") {
  const Coll colls[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather, Coll::kReduceScatter,
                        Coll::kAllToAll,  Coll::kBarrier,   Coll::kGather, Coll::kScatter};
  int hostOf[9];
  for (int i = 0; i < 9; ++i) hostOf[i] = i / 3;  // three hosts of three ranks (hierarchical)
  int lowered = 0;
  for (Coll coll : colls) {
    for (int ai = 0; ai < kNumAlgos; ++ai) {
      const Algo algo = static_cast<Algo>(ai);
      if (!algoAvailable(coll, algo) || algo == Algo::kGossip) continue;  // gossip: test_graph.cc
      for (int n = 1; n <= 9; ++n) {
        for (uint64_t count : {0, 1, 7, 33}) {
          for (bool inPlace : {false, true}) {
            for (bool avg : {false, true}) {
              CollArgs a;
              a.coll = coll;
              a.algo = algo;
              a.nranks = n;
              a.count = coll == Coll::kBarrier ? 0 : count;
              a.elemSize = 1;
              a.root = n - 1;
              a.inPlace = inPlace;
              a.avg = avg;
              a.chunkBytes = 3;
              a.hostOf = algo == Algo::kHierarchical ? hostOf : nullptr;
              INFO(collName(coll) << "/" << algoName(algo) << " n=" << n << " count=" << count << " inPlace=" << inPlace
                                  << " avg=" << avg);
              Sim fused = simulate(a), low = simulate(a, true);
              bool ok = fused.run();
              INFO(fused.error);
              REQUIRE(ok);
              ok = low.run();
              INFO(low.error);
              REQUIRE(ok);
              for (int r = 0; r < n; ++r) {
                INFO("rank " << r);
                REQUIRE(countKind(low.ranks[r].plan, StepKind::kRecvReduce) == 0);
                const int reduces = countKind(fused.ranks[r].plan, StepKind::kRecvReduce);
                REQUIRE(countKind(low.ranks[r].plan, StepKind::kReduce) == reduces);
                lowered += reduces;
                REQUIRE(low.ranks[r].recv == fused.ranks[r].recv);
                REQUIRE(low.ranks[r].send == fused.ranks[r].send);
              }
            }
          }
        }
      }
    }
  }
  CHECK(lowered > 1000);  // the sweep did lower something
}

TEST_CASE("lowering leaves a plan alone when every link reduces on receive", "[unit][plan][lower]") {
  CollArgs a;
  a.nranks = 4;
  a.rank = 1;
  a.count = 1000;
  a.elemSize = 4;
  a.chunkBytes = 1024;
  Plan p;
  buildPlan(a, &p);
  const std::string before = p.describe();
  LowerTarget t;
  t.peerCaps.assign(4, TransportCaps{memTypeBit(MemType::kHost), true, false, false, 0});
  CHECK_FALSE(lowerPlan(t, &p));
  CHECK(p.describe() == before);
  // One peer whose link cannot reduce: only its receive-reduces are lowered.
  t.peerCaps[0].reduceOnRecv = false;
  REQUIRE(lowerPlan(t, &p));
  for (const Step& s : p.steps) CHECK_FALSE((s.kind == StepKind::kRecvReduce && s.peer == 0));
  CHECK(countKind(p, StepKind::kReduce) > 0);
  CHECK(p.scratchBytes > 0);
}

TEST_CASE("lowered receive-reduces reuse a few scratch slots per peer", "[unit][plan][lower]") {
  // 4 ranks, 64 chunks per segment: 192 receive-reduces of 1 KiB from the left neighbour, in 8 slots.
  CollArgs a;
  a.nranks = 4;
  a.rank = 1;
  a.count = 1 << 16;
  a.elemSize = 4;
  a.chunkBytes = 1024;
  Plan p;
  buildPlan(a, &p);
  REQUIRE(countKind(p, StepKind::kRecvReduce) == 192);
  REQUIRE(p.scratchBytes == 0);
  lowerForced(&p);
  CHECK(countKind(p, StepKind::kReduce) == 192);
  CHECK(p.scratchBytes == 8 * 1024);
  // And the reuse is safe: the whole call simulated, lowered, with slots reused many times over.
  a.elemSize = 1;
  a.count = 4000;
  a.chunkBytes = 16;
  Sim sim = simulate(a, true);
  bool ok = sim.run();
  INFO(sim.error);
  REQUIRE(ok);
  for (int r = 0; r < 4; ++r)
    for (Cell c : sim.ranks[r].recv) REQUIRE(c == fullMask(4));
}

TEST_CASE("step builders join more than two dependencies", "[unit][plan]") {
  Plan p;
  std::vector<int32_t> sends;
  for (int i = 0; i < 5; ++i) sends.push_back(p.send(i + 1, sendBuf(0), 8));
  const int32_t w = p.copy(recvBuf(0), sendBuf(0), 8, sends);
  // Five dependencies: three joins, chained, then the copy on the last join and the fifth send.
  REQUIRE(w == 8);
  CHECK(countKind(p, StepKind::kJoin) == 3);
  CHECK(p.steps[w].deps[0] == 7);
  CHECK(p.steps[w].deps[1] == sends[4]);
  CHECK(p.steps[5].deps[0] == sends[0]);
  CHECK(p.steps[5].deps[1] == sends[1]);
  // "None" entries are skipped in long lists and kept in short ones.
  CHECK(p.join({-1, sends[2]}) == sends[2]);
  const int32_t two = p.scale(recvBuf(0), 8, {-1, sends[3]});
  CHECK(p.steps[two].deps[0] == -1);
  CHECK(p.steps[two].deps[1] == sends[3]);
  p.finalize();
  CHECK(p.locals.size() == 5);  // three joins, the copy, the scale
}
