// Plans of the ring-family algorithms checked without a network by the simulator (plan_sim.h): a
// byte reduced twice, a message whose size differs from its receive, a race, a deadlock or a wrong
// final buffer fails the test.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "tests/unit/plan_order.h"
#include "tests/unit/plan_sim.h"

using namespace braid;
using namespace braid::sim;

TEST_CASE("ring allreduce plans reduce every byte exactly once and deliver it everywhere", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 2, 7, 16, 33, 100}) {
      for (bool inPlace : {false, true}) {
        for (bool avg : {false, true}) {
          Sim sim = simulate(Coll::kAllReduce, n, count, inPlace, avg);
          INFO("n=" << n << " count=" << count << " inPlace=" << inPlace << " avg=" << avg);
          bool ok = sim.run();
          INFO(sim.error);
          REQUIRE(ok);
          for (int r = 0; r < n; ++r) {
            for (uint64_t i = 0; i < count; ++i)
              REQUIRE(sim.ranks[r].recv[i] == (fullMask(n) | (avg && n > 1 ? kScaled : 0)));
          }
        }
      }
    }
  }
}

TEST_CASE("ring and recursive-halving reduce-scatter plans give rank r the full reduction of block r", "[unit][plan]") {
  for (Algo algo : {Algo::kRing, Algo::kRabenseifner})
    for (int n = 1; n <= 16; ++n) {
      for (uint64_t count : {0, 1, 5, 17}) {
        for (bool inPlace : {false, true}) {
          Sim sim = simulate(Coll::kReduceScatter, n, count, inPlace, true, 0, 3, algo);
          INFO(algoName(algo) << " n=" << n << " count=" << count << " inPlace=" << inPlace);
          bool ok = sim.run();
          INFO(sim.error);
          REQUIRE(ok);
          for (int r = 0; r < n; ++r) {
            const std::vector<Cell>& out = inPlace ? sim.ranks[r].send : sim.ranks[r].recv;
            uint64_t base = inPlace ? r * count : 0;
            for (uint64_t i = 0; i < count; ++i) REQUIRE(out[base + i] == (fullMask(n) | (n > 1 ? kScaled : 0)));
          }
        }
      }
    }
}

TEST_CASE("ring, linear and doubling allgather, chain broadcast and reduce, pairwise and Bruck alltoall, barrier plans",
          "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 6, 13}) {
      for (bool inPlace : {false, true}) {
        INFO("n=" << n << " count=" << count << " inPlace=" << inPlace);
        for (Algo algo : {Algo::kRing, Algo::kLinear, Algo::kRecursiveDoubling}) {
          INFO("allgather " << algoName(algo));
          Sim ag = simulate(Coll::kAllGather, n, count, inPlace, false, 0, 3, algo);
          // In place the check takes the send buffer for the start of the receive buffer, where an
          // AllGather's is its own block: the doubling's plan in place names only the receive buffer.
          if (!inPlace || algo == Algo::kRecursiveDoubling)
            for (int r = 0; r < n; ++r) requireOrdered(ag.ranks[r].plan, inPlace);
          REQUIRE(ag.run());
          for (int r = 0; r < n; ++r)
            for (int j = 0; j < n; ++j)
              for (uint64_t i = 0; i < count; ++i) REQUIRE(ag.ranks[r].recv[j * count + i] == (Cell(1) << j));
        }
        for (int root : {0, n - 1, n / 2}) {
          Sim bc = simulate(Coll::kBroadcast, n, count, inPlace, false, root);
          REQUIRE(bc.run());
          for (int r = 0; r < n; ++r)
            for (uint64_t i = 0; i < count; ++i) REQUIRE(bc.ranks[r].recv[i] == (Cell(1) << root));
          Sim rd = simulate(Coll::kReduce, n, count, inPlace, true, root);
          REQUIRE(rd.run());
          for (uint64_t i = 0; i < count; ++i) REQUIRE(rd.ranks[root].recv[i] == (fullMask(n) | (n > 1 ? kScaled : 0)));
        }
        for (Algo algo : {Algo::kRing, Algo::kRecursiveDoubling}) {
          INFO("alltoall " << algoNameFor(Coll::kAllToAll, algo));
          Sim a2a = simulate(Coll::kAllToAll, n, count, inPlace, false, 0, 3, algo);
          INFO(a2a.error);
          for (int r = 0; r < n; ++r) requireOrdered(a2a.ranks[r].plan, inPlace);
          REQUIRE(a2a.run());
          for (int r = 0; r < n; ++r)
            for (int j = 0; j < n; ++j)
              for (uint64_t i = 0; i < count; ++i) REQUIRE(a2a.ranks[r].recv[j * count + i] == (rankBit(j) | tag(r)));
        }
      }
    }
    Sim b = simulate(Coll::kBarrier, n, 0, false, false);
    INFO(b.error);
    REQUIRE(b.run());
  }
}

TEST_CASE("chunking follows the chunk size and plans name their algorithm", "[unit][plan]") {
  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.nranks = 4;
  a.rank = 1;
  a.count = 1 << 20;
  a.elemSize = 4;
  a.chunkBytes = 1 << 18;
  Plan p;
  buildPlan(a, &p);
  CHECK(std::string(p.algorithm) == "ring");
  for (const Step& s : p.steps) CHECK(s.bytes <= a.chunkBytes);
  // 4 segments of 1 MiB, 4 chunks each, 2*(n-1) phases of a send and a receive.
  CHECK(p.steps.size() == 4u * 2 * 3 * 2);
}

TEST_CASE(
    "ring AllReduce on one host takes each chunk around the ring (two ranks over shm: every chunk of a step "
    "first); its forwarded sends and final outputs are marked",
    "[unit][plan]") {
  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.algo = Algo::kRing;
  a.nranks = 2;
  a.rank = 0;
  a.count = 1 << 20;  // 2 segments of 2 MiB: 8 chunks each
  a.elemSize = 4;
  a.chunkBytes = 1 << 18;
  auto order = [](const Plan& p) {  // (kind, offset) of the steps with a peer, in plan order
    std::vector<std::pair<int, uint64_t>> o;
    for (const Step& s : p.steps)
      if (s.peer >= 0)
        o.emplace_back(static_cast<int>(s.kind), s.kind == StepKind::kSend ? s.src.offset : s.dst.offset);
    return o;
  };
  const int kSend = static_cast<int>(StepKind::kSend), kFold = static_cast<int>(StepKind::kRecvReduce),
            kRecv = static_cast<int>(StepKind::kRecv);
  // Four ranks on one host: send chunk 0, fold chunk 0 of the next segment and send that on, ...,
  // receive its last copy; then chunk 1.
  a.nranks = 4;  // 4 segments of 1 MiB: 4 chunks each
  Plan four;
  buildPlan(a, &four);
  const std::vector<std::pair<int, uint64_t>> f = order(four);
  REQUIRE(f.size() == 4u * 12);
  CHECK(f[0] == std::make_pair(kSend, uint64_t{0}));
  CHECK(f[1] == std::make_pair(kFold, uint64_t{3} << 20));
  CHECK(f[2] == std::make_pair(kSend, uint64_t{3} << 20));
  CHECK(f[11] == std::make_pair(kRecv, uint64_t{2} << 20));
  CHECK(f[12] == std::make_pair(kSend, uint64_t{1} << 18));
  // Two ranks over forwarding links (shm): every chunk through the reduce-scatter, then every chunk
  // through the all-gather (a chunk's forward goes back on the link it came from: one chunk at a
  // time would hold the next chunk's send behind this one's fold).
  a.nranks = 2;
  Plan tcp;  // links that do not forward (tcp): one chunk at a time, as with more ranks
  buildPlan(a, &tcp);
  CHECK(order(tcp)[2] == std::make_pair(kSend, uint64_t{2} << 20));
  CHECK(order(tcp)[4] == std::make_pair(kSend, uint64_t{1} << 18));
  a.linksForward = true;
  Plan one;
  buildPlan(a, &one);
  const std::vector<std::pair<int, uint64_t>> o = order(one);
  REQUIRE(o.size() == 32);
  CHECK(o[0] == std::make_pair(kSend, uint64_t{0}));
  CHECK(o[1] == std::make_pair(kFold, uint64_t{2} << 20));
  CHECK(o[2] == std::make_pair(kSend, uint64_t{1} << 18));
  CHECK(o[16] == std::make_pair(kSend, uint64_t{2} << 20));
  CHECK(o[17] == std::make_pair(kRecv, uint64_t{0}));
  // Every all-gather send is fed by the fold of its chunk; only the receives of the all-gather and
  // the folds (read again by their forwarded send alone) are outputs nothing else reads.
  REQUIRE(one.fedBy.size() == one.steps.size());
  int fed = 0, outputs = 0;
  for (size_t i = 0; i < one.steps.size(); ++i) {
    const Step& s = one.steps[i];
    if (one.fedBy[i] >= 0) {
      ++fed;
      CHECK(one.steps[one.fedBy[i]].kind == StepKind::kRecvReduce);
      CHECK(one.steps[one.fedBy[i]].dst.offset == s.src.offset);
    }
    outputs += one.outputOnly[i];
    if (s.kind == StepKind::kSend) CHECK(one.outputOnly[i] == 0);
  }
  CHECK(fed == 8);
  CHECK(outputs == 16);
  // Two hosts: every chunk of a step before the next step, as before.
  const int hostOf[2] = {0, 1};
  a.hostOf = hostOf;
  Plan two;
  buildPlan(a, &two);
  const std::vector<std::pair<int, uint64_t>> t = order(two);
  REQUIRE(t.size() == 32);
  CHECK(t[2] == std::make_pair(static_cast<int>(StepKind::kSend), uint64_t{1} << 18));
  // In place the receive buffer is the send buffer: a fold's output is read by no later step
  // either, but out of place or in, a receive whose bytes a later step folds is no output.
  a.hostOf = nullptr;
  a.nranks = 3;
  Plan three;
  buildPlan(a, &three);
  for (size_t i = 0; i < three.steps.size(); ++i)
    if (three.steps[i].kind == StepKind::kRecvReduce && three.outputOnly[i] != 0) {
      // Only the last fold of each chunk: the one the all-gather sends on.
      bool readLater = false;
      for (size_t j = i + 1; j < three.steps.size(); ++j)
        if (three.steps[j].kind == StepKind::kRecvReduce && three.steps[j].src.offset == three.steps[i].dst.offset)
          readLater = true;
      CHECK_FALSE(readLater);
    }
}

TEST_CASE("ring AllReduce on two ranks of one host over shm cuts a segment into at least 8 chunks, down to 64 KiB",
          "[unit][plan]") {
  auto stepsWithPeer = [](const CollArgs& a, uint64_t* largest) {
    Plan p;
    buildPlan(a, &p);
    size_t k = 0;
    *largest = 0;
    for (const Step& s : p.steps)
      if (s.peer >= 0) {
        ++k;
        *largest = std::max<uint64_t>(*largest, s.bytes);
      }
    return k;
  };
  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.algo = Algo::kRing;
  a.nranks = 2;
  a.elemSize = 4;
  a.chunkBytes = 1 << 18;
  a.linksForward = true;  // shm
  uint64_t largest = 0;
  a.count = 1 << 18;  // 1 MiB: segments of 512 KiB, 8 chunks of 64 KiB
  CHECK(stepsWithPeer(a, &largest) == 2u * 8 * 2);
  CHECK(largest == 64u << 10);
  a.count = 1 << 16;  // 256 KiB: no chunk under 64 KiB, so 2 a segment
  CHECK(stepsWithPeer(a, &largest) == 2u * 2 * 2);
  CHECK(largest == 64u << 10);
  a.count = 1 << 22;  // 16 MiB: the usual 256 KiB chunks
  CHECK(stepsWithPeer(a, &largest) == 2u * 32 * 2);
  CHECK(largest == 256u << 10);
  // Over links that do not forward (tcp), across hosts, and with 3 ranks, the chunk is
  // BRAID_CHUNK_SIZE's.
  a.linksForward = false;
  a.count = 1 << 18;
  CHECK(stepsWithPeer(a, &largest) == 2u * 2 * 2);
  CHECK(largest == 256u << 10);
  a.linksForward = true;
  const int hostOf[2] = {0, 1};
  a.hostOf = hostOf;
  a.count = 1 << 18;
  CHECK(stepsWithPeer(a, &largest) == 2u * 2 * 2);
  CHECK(largest == 256u << 10);
  a.hostOf = nullptr;
  a.nranks = 3;
  a.count = 3 << 17;  // 1.5 MiB: segments of 512 KiB, 2 chunks each
  CHECK(stepsWithPeer(a, &largest) == 4u * 2 * 2);
  CHECK(largest == 256u << 10);
}

TEST_CASE("a receive feeds one send at most: a tree's receive that two children take feeds neither", "[unit][plan]") {
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce, Coll::kAllReduce})
    for (Algo algo : {Algo::kRing, Algo::kTree})
      for (int n : {2, 3, 7})
        for (int r = 0; r < n; ++r) {
          CollArgs a;
          a.coll = coll;
          a.algo = algo;
          a.nranks = n;
          a.rank = r;
          a.count = 1 << 19;
          a.elemSize = 4;
          a.chunkBytes = 1 << 18;
          Plan p;
          buildPlan(a, &p);
          INFO(collName(coll) << " " << algoName(algo) << " n " << n << " rank " << r);
          std::vector<int> feeds(p.steps.size(), 0);
          for (size_t i = 0; i < p.fedBy.size(); ++i)
            if (p.fedBy[i] >= 0) ++feeds[p.fedBy[i]];
          for (int f : feeds) CHECK(f <= 1);
        }
}

TEST_CASE("the simulator reports a receive landing on bytes a posted send still reads", "[unit][plan]") {
  // Each rank sends its buffer and receives the peer's into the same bytes, with no dependency:
  // on a transport that reads the source late, the incoming bytes may overwrite it first.
  Sim sim;
  sim.n = 2;
  sim.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    RankState& s = sim.ranks[r];
    s.plan.nranks = 2;
    s.plan.rank = r;
    s.plan.send(1 - r, recvBuf(0), 4);
    s.plan.recv(1 - r, recvBuf(0), 4);
    s.plan.finalize();
    s.recv.assign(4, Cell(1) << r);
    s.done.assign(2, 0);
    s.posted.assign(2, 0);
  }
  REQUIRE_FALSE(sim.run());
  CHECK(sim.error.find("still sends") != std::string::npos);
}
