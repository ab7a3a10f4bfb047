// The cost model and the selector: BRAID_ALGO parsing and its errors, the table lookup, and the
// model's orderings that the table depends on.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "topology/select.h"

using namespace braid;
using namespace braid::topo;

namespace {

Selector make(const ClusterShape& c, const std::string& spec = "", bool approximate = false) {
  Selector s;
  Status st = s.init(c, CostParams::defaults(), spec, approximate);
  INFO(st.message());
  REQUIRE(st.ok());
  return s;
}

}  // namespace

TEST_CASE("BRAID_ALGO: a global name, per-collective entries, and clear errors", "[unit][select]") {
  std::array<Algo, kNumColls> algo{};
  std::array<bool, kNumColls> set{};
  const int ar = static_cast<int>(Coll::kAllReduce), bc = static_cast<int>(Coll::kBroadcast),
            ag = static_cast<int>(Coll::kAllGather), rd = static_cast<int>(Coll::kReduce);

  REQUIRE(parseAlgoSpec("ring", &algo, &set).ok());
  CHECK(set[ar]);
  CHECK(set[bc]);
  CHECK(set[ag]);
  CHECK(algo[bc] == Algo::kRing);

  REQUIRE(parseAlgoSpec(" allreduce : tree ; broadcast:ring", &algo, &set).ok());
  CHECK(algo[ar] == Algo::kTree);
  CHECK(algo[bc] == Algo::kRing);
  CHECK_FALSE(set[ag]);

  // A global name applies only where it exists; per-collective entries win wherever written.
  REQUIRE(parseAlgoSpec("allreduce:rabenseifner,tree", &algo, &set).ok());
  CHECK(algo[ar] == Algo::kRabenseifner);
  CHECK(algo[rd] == Algo::kTree);
  CHECK_FALSE(set[ag]);

  Status s = parseAlgoSpec("allreduce:fastest", &algo, &set);
  CHECK(s.code() == braidInvalidArgument);
  CHECK(s.message().find("unknown algorithm 'fastest'") != std::string::npos);
  CHECK(s.message().find("recursive_doubling") != std::string::npos);  // lists the known names
  s = parseAlgoSpec("allreduse:ring", &algo, &set);
  CHECK(s.message().find("unknown collective 'allreduse'") != std::string::npos);
  s = parseAlgoSpec("broadcast:rabenseifner", &algo, &set);
  CHECK(s.message().find("broadcast has no algorithm 'rabenseifner' (it has: ring, tree)") != std::string::npos);
  CHECK(parseAlgoSpec("", &algo, &set).ok());
  CHECK_FALSE(set[ar]);
}

TEST_CASE("the selector honours BRAID_ALGO, refuses gossip on exact comms, and looks up by size", "[unit][select]") {
  const ClusterShape one = ClusterShape::single(8, 8);
  Selector forced = make(one, "allreduce:tree");
  for (uint64_t bytes : {0ull, 1ull, 8ull, 4096ull, 1ull << 30, 1ull << 50})
    CHECK(forced.pick(Coll::kAllReduce, bytes) == Algo::kTree);
  CHECK(forced.overridden(Coll::kAllReduce));
  CHECK_FALSE(forced.overridden(Coll::kBroadcast));
  CHECK(forced.describe().find("[BRAID_ALGO]") != std::string::npos);

  Selector bad;
  Status st = bad.init(one, CostParams::defaults(), "allreduce:gossip", false);
  CHECK(st.code() == braidInvalidArgument);
  CHECK(st.message().find("BRAID_APPROXIMATE") != std::string::npos);

  // Gossip serves avg on floats only; every other call keeps an exact algorithm.
  Selector approx = make(one, "allreduce:gossip", true);
  CHECK(approx.pick(Coll::kAllReduce, 1 << 20, true) == Algo::kGossip);
  CHECK(approx.pick(Coll::kAllReduce, 1 << 20, false) != Algo::kGossip);

  // Buckets: (2^(b-1), 2^b].
  CHECK(Selector::bucket(0) == 0);
  CHECK(Selector::bucket(1) == 0);
  CHECK(Selector::bucket(2) == 1);
  CHECK(Selector::bucket(3) == 2);
  CHECK(Selector::bucket(4096) == 12);
  CHECK(Selector::bucket(4097) == 13);
  CHECK(Selector::bucket(~0ull) == Selector::kMaxLog2);
}

TEST_CASE("the model: latency-bound algorithms win small calls, bandwidth-bound ones large calls", "[unit][select]") {
  const CostParams p = CostParams::defaults();
  const ClusterShape c = ClusterShape::single(8, 8);
  // Recursive doubling takes log2(8) = 3 steps, the ring 14: small calls go to recursive doubling.
  CHECK(predictUs(Coll::kAllReduce, Algo::kRecursiveDoubling, 8, c, p) <
        predictUs(Coll::kAllReduce, Algo::kRing, 8, c, p));
  // At 1 GiB recursive doubling moves the whole buffer three times; the ring moves it 2 * 7/8 times.
  CHECK(predictUs(Coll::kAllReduce, Algo::kRing, 1ull << 30, c, p) <
        predictUs(Coll::kAllReduce, Algo::kRecursiveDoubling, 1ull << 30, c, p));
  Selector s = make(c);
  CHECK(s.pick(Coll::kAllReduce, 8) == Algo::kRecursiveDoubling);
  CHECK(s.pick(Coll::kAllReduce, 1ull << 30) != Algo::kRecursiveDoubling);
  // Not applicable: infinite. Hierarchical on one host, and pairs that have no builder.
  CHECK(std::isinf(predictUs(Coll::kAllReduce, Algo::kHierarchical, 1 << 20, c, p)));
  CHECK(std::isinf(predictUs(Coll::kBroadcast, Algo::kRabenseifner, 1 << 20, c, p)));
  // Time grows with size for every algorithm.
  for (int a = 0; a < kNumAlgos; ++a)
    for (uint64_t b = 1; b < (1ull << 34); b <<= 4) {
      double t0 = predictUs(Coll::kAllReduce, static_cast<Algo>(a), b, c, p),
             t1 = predictUs(Coll::kAllReduce, static_cast<Algo>(a), b << 4, c, p);
      if (!std::isinf(t0)) CHECK(t1 >= t0);
    }
}

TEST_CASE("across hosts with a slow network, hierarchical keeps most bytes on the fast links", "[unit][select]") {
  CostParams p = CostParams::defaults();
  p.interGbps = p.intraGbps / 10;
  const ClusterShape c = ClusterShape::blocks(16, 2, 16);  // 2 hosts x 8 ranks
  CHECK(c.nhosts == 2);
  CHECK(c.hostSize[0] == 8);
  CHECK(predictUs(Coll::kAllReduce, Algo::kHierarchical, 1ull << 28, c, p) <
        predictUs(Coll::kAllReduce, Algo::kRing, 1ull << 28, c, p));
  // Uneven blocks: 5 ranks on 2 hosts -> 3 + 2.
  const ClusterShape u = ClusterShape::blocks(5, 2, 4);
  CHECK(u.hostSize[0] == 3);
  CHECK(u.hostSize[1] == 2);
  CHECK_FALSE(u.oversubscribed());
  CHECK(ClusterShape::single(8, 2).oversubscribed());
}

// perf/results/2026-12-01-netns.md: 4 namespaces x 2 ranks on 1 Gbit/s links measured hierarchical and tree
// 2-3x slower than per-rank links predicted, because a host's two ranks cross its one link at once.
TEST_CASE("ranks that cross hosts at once share their host's links (BRAID_COST_INTER_LINKS)", "[unit][select]") {
  CostParams own = CostParams::defaults();
  own.interGbps = 0.125;
  own.interAlphaUs = 0;  // bandwidth terms only: the ratios below are then exact
  own.interLinks = 0;
  CostParams one = own;
  one.interLinks = 1;
  CostParams two = own;
  two.interLinks = 2;
  const ClusterShape c = ClusterShape::blocks(8, 4, 8);  // 4 hosts x 2 ranks, in blocks
  const uint64_t S = 1ull << 30;
  auto t = [&](Algo a, const CostParams& p, const ClusterShape& cl = ClusterShape{}) {
    return predictUs(Coll::kAllReduce, a, S, cl.nranks > 1 ? cl : c, p);
  };
  // The block ring leaves each host over one edge: one link is enough, nothing changes.
  CHECK(t(Algo::kRing, one) == Approx(t(Algo::kRing, own)));
  // Hierarchical: both local ranks run a ring across hosts, so its inter-host part costs twice as much on
  // one link, and as before on two.
  const double hierOwn = t(Algo::kHierarchical, own), hierOne = t(Algo::kHierarchical, one);
  CHECK(hierOne > 1.8 * hierOwn);
  CHECK(t(Algo::kHierarchical, two) == Approx(hierOwn));
  // Trees and recursive halving: every rank of a host crosses at once.
  CHECK(t(Algo::kTree, one) > 1.8 * t(Algo::kTree, own));
  CHECK(t(Algo::kRabenseifner, one) > t(Algo::kRabenseifner, own));
  // A ring whose ranks alternate between hosts sends every edge across: both ranks share the link.
  ClusterShape alt = c;
  for (int r = 0; r < 8; ++r) alt.hostOf[r] = r % 4;
  CHECK(t(Algo::kRing, one, alt) == Approx(2 * t(Algo::kRing, own, alt)).epsilon(0.01));
  // One host: no inter-host link to share.
  const ClusterShape single = ClusterShape::single(8, 8);
  CHECK(t(Algo::kTree, one, single) == Approx(t(Algo::kTree, own, single)));
  // The knob is read by applyEnv, range-checked by the table.
  CostParams p = CostParams::defaults();
  CHECK(p.interLinks == 0);
  setenv("BRAID_COST_INTER_LINKS", "1", 1);
  REQUIRE(p.applyEnv().ok());
  CHECK(p.interLinks == 1);
  setenv("BRAID_COST_INTER_LINKS", "-1", 1);
  CostParams q = CostParams::defaults();
  CHECK_FALSE(q.applyEnv().ok());
  unsetenv("BRAID_COST_INTER_LINKS");
}

TEST_CASE("cost overrides from the environment are validated", "[unit][select]") {
  CostParams p = CostParams::defaults();
  setenv("BRAID_COST_INTER_GBPS", "0", 1);
  Status st = p.applyEnv();
  CHECK(st.code() == braidInvalidArgument);
  CHECK(st.message().find("BRAID_COST_INTER_GBPS") != std::string::npos);
  CHECK(p.interGbps == CostParams::defaults().interGbps);  // unchanged on failure
  setenv("BRAID_COST_INTER_GBPS", "fast", 1);
  CHECK_FALSE(p.applyEnv().ok());
  setenv("BRAID_COST_INTER_GBPS", "25.5", 1);
  REQUIRE(p.applyEnv().ok());
  CHECK(p.interGbps == 25.5);
  unsetenv("BRAID_COST_INTER_GBPS");
}

TEST_CASE("cost defaults are the table's; the chunk and gossip rounds of the environment come from applyEnv only",
          "[unit][select]") {
  // A topology file's cost line starts from defaults(): were the environment read there, a set
  // BRAID_CHUNK_SIZE would reach the file's constants by two paths.
  setenv("BRAID_CHUNK_SIZE", "4K", 1);
  setenv("BRAID_GOSSIP_ROUNDS", "3", 1);
  CostParams p = CostParams::defaults();
  CHECK(p.chunkBytes == 256 * 1024);
  CHECK(p.gossipRounds == 0);
  p.chunkBytes = 12345;  // as a file would set it
  REQUIRE(p.applyEnv().ok());
  CHECK(p.chunkBytes == 4096);
  CHECK(p.gossipRounds == 3);
  unsetenv("BRAID_CHUNK_SIZE");
  unsetenv("BRAID_GOSSIP_ROUNDS");
  p.chunkBytes = 12345;
  REQUIRE(p.applyEnv().ok());
  CHECK(p.chunkBytes == 12345);  // unset variables leave the file's value
}

TEST_CASE("more ranks than cores: a fold's steps wait on its pairs only, so small AllReduces double",
          "[unit][select]") {
  // Recursive doubling and Rabenseifner fold n down to a power of two p in two steps that only the
  // first 2(n - p) ranks work in. On 3-7 ranks of 2 cores over tcp the doubling beat the double
  // tree 1.15-1.9x up to 32 KiB (perf/results/2026-12-07-allreduce-fold.md); priced as steps of
  // every rank, the fold had made the tree the pick there.
  const CostParams p = CostParams::defaults();
  for (int n : {3, 5, 6, 7}) {
    const Selector s = make(ClusterShape::single(n, 2));
    for (uint64_t bytes : {8, 1024, 16384}) {
      INFO(n << " ranks on 2 cores, " << bytes << " B");
      CHECK(s.pick(Coll::kAllReduce, bytes) == Algo::kRecursiveDoubling);
    }
    // Where every rank has a core the fold costs what it did.
    const ClusterShape roomy = ClusterShape::single(n, n);
    INFO(n << " ranks on " << n << " cores");
    CHECK(predictUs(Coll::kAllReduce, Algo::kRecursiveDoubling, 1024, roomy, p) ==
          predictUs(Coll::kAllReduce, Algo::kRecursiveDoubling, 1024, ClusterShape::single(n, 64), p));
  }
  // The fold's bytes keep the host's share: a large call stays where it was (the ring on 9 ranks at
  // 1 MiB, which beat Rabenseifner 1.15-1.4x).
  CHECK(make(ClusterShape::single(9, 2)).pick(Coll::kAllReduce, 1 << 20) == Algo::kRing);
}

TEST_CASE("a crowded host whose ranks talk through shared memory waits less a step than one on sockets",
          "[unit][select]") {
  // A rank waiting on shared memory spins, then yields its core to the rank it waits for; one on a
  // socket waits for a wakeup. Over the shm FIFOs the step's wait per extra rank a core measured
  // about 2 us against 12-16 over tcp (perf/results/2026-12-07-oversub-shm.md), and with it the
  // algorithms with more, smaller steps won: on 2 cores Rabenseifner 1.5-2.1x the doubling at 128
  // KiB on 4 ranks, the ring 1.5-1.6x on 5, the AllGather's ring 1.2-1.6x the linear plan at 1-2 MiB
  // on 5-12 ranks (from two ranks a core).
  const auto fifo = [](ClusterShape c) {
    c.hostTwoCopiesFrom.assign(c.nhosts, 0);
    return c;
  };
  const ClusterShape four = ClusterShape::single(4, 2), five = ClusterShape::single(5, 2);
  const ClusterShape eight = ClusterShape::single(8, 2);
  CHECK(make(four).pick(Coll::kAllReduce, 128 << 10) == Algo::kRecursiveDoubling);  // sockets
  CHECK(make(fifo(four)).pick(Coll::kAllReduce, 128 << 10) == Algo::kRabenseifner);
  CHECK(make(five).pick(Coll::kAllReduce, 128 << 10) == Algo::kRecursiveDoubling);
  CHECK(make(fifo(five)).pick(Coll::kAllReduce, 128 << 10) == Algo::kRing);
  CHECK(make(eight).pick(Coll::kAllGather, 1 << 20) == Algo::kLinear);
  CHECK(make(fifo(eight)).pick(Coll::kAllGather, 1 << 20) == Algo::kRing);
  const CostParams p = CostParams::defaults();
  for (int n : {3, 4, 5, 6, 8}) {
    INFO(n << " ranks");
    // Broadcast and Reduce keep the socket's wait (their chain runs ahead from call to call), and
    // so do communicators across hosts (not measured).
    for (uint64_t bytes = 8; bytes <= (uint64_t{1} << 26); bytes <<= 1) {
      INFO(bytes << " B");
      for (Coll coll : {Coll::kBroadcast, Coll::kReduce})
        for (Algo a : {Algo::kRing, Algo::kTree})
          CHECK(predictUs(coll, a, bytes, fifo(ClusterShape::single(n, 2)), p) ==
                predictUs(coll, a, bytes, ClusterShape::single(n, 2), p));
      const ClusterShape across = ClusterShape::blocks(3 * n, 3, 2);
      for (Algo a : {Algo::kRing, Algo::kRecursiveDoubling, Algo::kHierarchical})
        CHECK(predictUs(Coll::kAllReduce, a, bytes, fifo(across), p) ==
              predictUs(Coll::kAllReduce, a, bytes, across, p));
      // Where every rank has a core there is no wait to price.
      CHECK(predictUs(Coll::kAllReduce, Algo::kRing, bytes, fifo(ClusterShape::single(n, n)), p) ==
            predictUs(Coll::kAllReduce, Algo::kRing, bytes, ClusterShape::single(n, n), p));
    }
  }
  // Fewer than two ranks a core (3 on 2 cores: the shorter wait lost there) keep the sockets' wait.
  for (Algo a : {Algo::kRing, Algo::kTree, Algo::kRecursiveDoubling})
    CHECK(predictUs(Coll::kAllReduce, a, 128 << 10, fifo(ClusterShape::single(3, 2)), p) ==
          predictUs(Coll::kAllReduce, a, 128 << 10, ClusterShape::single(3, 2), p));
  // BRAID_COST_OVERSUB_SHM_US is the wait: at the sockets' 12 the picks are theirs.
  setenv("BRAID_COST_OVERSUB_SHM_US", "12", 1);
  CostParams same = CostParams::defaults();
  REQUIRE(same.applyEnv().ok());
  unsetenv("BRAID_COST_OVERSUB_SHM_US");
  CHECK(same.oversubShmUs == 12);
  Selector s;
  REQUIRE(s.init(fifo(four), same, "", false).ok());
  CHECK(s.pick(Coll::kAllReduce, 128 << 10) == Algo::kRecursiveDoubling);
  setenv("BRAID_COST_OVERSUB_SHM_US", "-1", 1);
  CostParams bad = CostParams::defaults();
  const Status st = bad.applyEnv();
  unsetenv("BRAID_COST_OVERSUB_SHM_US");
  CHECK(st.code() == braidInvalidArgument);
  CHECK(st.message().find("BRAID_COST_OVERSUB_SHM_US") != std::string::npos);
}

TEST_CASE("AllGather: doubling for small calls from 4 ranks, linear on one host and ring across hosts beyond",
          "[unit][select]") {
  // A small gather is its messages' handling: the doubling takes ceil(log2 n) rounds of one message
  // where the linear plan has every rank send and take n - 1 and the ring runs n - 1 rounds. On 3
  // ranks the linear plan's two messages at once stay ahead. Large gathers are bytes: one round of
  // messages beats n - 1 rounds of the ring wherever every pair shares memory; across hosts the
  // linear gather's messages would all hit the network at once.
  const uint64_t small[] = {16, 4096, 512 << 10}, large[] = {1 << 20, uint64_t{1} << 28};
  for (int n : {3, 4, 8}) {
    const Selector one = make(ClusterShape::single(n, 2));
    for (uint64_t bytes : small) {
      INFO("n=" << n << " bytes=" << bytes);
      CHECK(one.pick(Coll::kAllGather, bytes) == (n == 3 ? Algo::kLinear : Algo::kRecursiveDoubling));
    }
    for (uint64_t bytes : large) {
      INFO("n=" << n << " bytes=" << bytes);
      CHECK(one.pick(Coll::kAllGather, bytes) == Algo::kLinear);
      CHECK(std::isinf(predictUs(Coll::kAllGather, Algo::kRecursiveDoubling, bytes, ClusterShape::single(n, 2),
                                 CostParams::defaults())));
    }
  }
  CHECK(predictUs(Coll::kAllGather, Algo::kLinear, 1 << 20, ClusterShape::blocks(8, 2, 4), CostParams::defaults()) ==
        std::numeric_limits<double>::infinity());
  for (const ClusterShape& c : {ClusterShape::blocks(8, 2, 4), ClusterShape::blocks(64, 8, 8)}) {
    const Selector across = make(c);
    INFO(c.nranks << " ranks on " << c.nhosts << " hosts");
    CHECK(across.pick(Coll::kAllGather, 1024) == Algo::kRecursiveDoubling);
    CHECK(across.pick(Coll::kAllGather, 1 << 20) == Algo::kRing);
  }
}

TEST_CASE("AllToAll: Bruck for small calls from 4 ranks, the pairwise exchange beyond", "[unit][select]") {
  // A small AllToAll is its messages' handling: Bruck sends ceil(log2 n) where the pairwise
  // exchange sends n - 1, at the price of about (n / 2) log2 n blocks on the wire and copies. Over
  // tcp on 2 cores: 1.17-1.28x the pairwise exchange at 64 B-64 KiB on 4 ranks, 1.44-1.79x on 8,
  // 0.91-0.94x on 3, 0.72-0.84x at 256-512 KiB on 4.
  const CostParams p = CostParams::defaults();
  CHECK(make(ClusterShape::single(3, 2)).pick(Coll::kAllToAll, 1024) == Algo::kRing);
  for (int n : {4, 8, 16}) {
    const Selector one = make(ClusterShape::single(n, 2));
    INFO(n << " ranks");
    CHECK(one.pick(Coll::kAllToAll, 64) == Algo::kRecursiveDoubling);
    CHECK(one.pick(Coll::kAllToAll, 16 << 10) == Algo::kRecursiveDoubling);
    CHECK(one.pick(Coll::kAllToAll, 512 << 10) == Algo::kRing);
    CHECK(std::isinf(predictUs(Coll::kAllToAll, Algo::kRecursiveDoubling, 1 << 20, ClusterShape::single(n, 2), p)));
  }
  const Selector across = make(ClusterShape::blocks(16, 2, 8));
  CHECK(across.pick(Coll::kAllToAll, 1024) == Algo::kRecursiveDoubling);
  CHECK(across.pick(Coll::kAllToAll, 4 << 20) == Algo::kRing);
  CHECK(std::string(algoNameFor(Coll::kAllToAll, Algo::kRecursiveDoubling)) == "bruck");
}

TEST_CASE("AllGather through two-copy FIFOs: linear for small calls, the ring for large ones", "[unit][select]") {
  // A host whose ranks receive through the shm FIFOs (single copy off) pays 4n - 4 passes over a
  // block in the linear gather's (and the doubling's) transfers against the ring's 3n - 2; the
  // ring's extra message steps win it the small calls back. Two ranks: the same passes either way.
  for (int n : {3, 4, 8}) {
    ClusterShape c = ClusterShape::single(n, 2);
    c.hostTwoCopiesFrom = {0};
    const Selector fifo = make(c);
    INFO("n=" << n);
    const Algo small = n == 3 ? Algo::kLinear : Algo::kRecursiveDoubling;
    CHECK(fifo.pick(Coll::kAllGather, 16) == small);
    CHECK(fifo.pick(Coll::kAllGather, 64 << 10) == small);
    CHECK(fifo.pick(Coll::kAllGather, uint64_t{1} << 26) == Algo::kRing);
    CHECK(predictUs(Coll::kAllGather, Algo::kLinear, 1 << 26, c, CostParams::defaults()) >
          predictUs(Coll::kAllGather, Algo::kLinear, 1 << 26, ClusterShape::single(n, 2), CostParams::defaults()));
    // A large AllReduce keeps its pick (the FIFOs change only a crowded host's wait a step).
    CHECK(fifo.pick(Coll::kAllReduce, uint64_t{1} << 26) ==
          make(ClusterShape::single(n, 2)).pick(Coll::kAllReduce, uint64_t{1} << 26));
  }
  ClusterShape two = ClusterShape::single(2, 2);
  two.hostTwoCopiesFrom = {0};
  CHECK(make(two).describe() == make(ClusterShape::single(2, 2)).describe());
  // BRAID_ALGO still wins, and reshape keeps it.
  ClusterShape four = ClusterShape::single(4, 2);
  Selector forced = make(four, "allgather:linear");
  four.hostTwoCopiesFrom = {0};
  REQUIRE(forced.reshape(four).ok());
  CHECK(forced.pick(Coll::kAllGather, uint64_t{1} << 26) == Algo::kLinear);
  Selector model = make(ClusterShape::single(4, 2));
  REQUIRE(model.reshape(four).ok());
  CHECK(model.pick(Coll::kAllGather, uint64_t{1} << 26) == Algo::kRing);
  // With single copy on, the FIFOs take only the calls whose buffers on the host pass the cut
  // (S / n + S on each rank: 5 S for 4 ranks): under 32 MiB the linear plan reads each block once.
  four.hostTwoCopiesFrom = {uint64_t{32} << 20};
  REQUIRE(model.reshape(four).ok());
  CHECK(model.pick(Coll::kAllGather, uint64_t{4} << 20) == Algo::kLinear);  // 20 MiB on the host
  CHECK(model.pick(Coll::kAllGather, uint64_t{16} << 20) == Algo::kRing);   // 80 MiB
  four.hostTwoCopiesFrom = {ClusterShape::kNever};
  REQUIRE(model.reshape(four).ok());
  CHECK(model.describe() == make(ClusterShape::single(4, 2)).describe());
}

TEST_CASE("two ranks on one host: recursive doubling up to 512 KiB, the ring from 1 MiB", "[unit][select]") {
  // The ring's reduce-scatter and all-gather wait on each other a chunk each way (topology/cost.cc);
  // recursive doubling, one exchange, does not. Measured on 2 ranks over shm, recursive doubling was
  // 1.4-1.8x faster out of place at 128-512 KiB, even at 1 MiB out of place and slower in place there.
  const Selector one = make(ClusterShape::single(2, 2));
  for (uint64_t kib : {64, 128, 256, 512}) {
    INFO(kib << " KiB");
    CHECK(one.pick(Coll::kAllReduce, kib << 10) == Algo::kRecursiveDoubling);
  }
  for (uint64_t mib : {1, 4, 64, 1024}) {
    INFO(mib << " MiB");
    CHECK(one.pick(Coll::kAllReduce, mib << 20) == Algo::kRing);
  }
  // Rabenseifner's chunks are no smaller than the ring's: it waits no less, and stays behind.
  const CostParams p = CostParams::defaults();
  for (uint64_t bytes = 1 << 10; bytes <= (uint64_t{1} << 30); bytes <<= 2)
    CHECK(predictUs(Coll::kAllReduce, Algo::kRabenseifner, bytes, ClusterShape::single(2, 2), p) >=
          predictUs(Coll::kAllReduce, Algo::kRing, bytes, ClusterShape::single(2, 2), p));
}

TEST_CASE("Broadcast and Reduce: the chain for a few ranks past the binomial sizes, the trees for many",
          "[unit][select]") {
  // The double binary trees hang under the root (one level more than the trees over n - 1 ranks),
  // and each level is two messages in a row. On 3 ranks that is two levels of two messages against
  // the chain's two hops; the model used to price one level of one, and picked the trees at every
  // size on 3 and 4 ranks, which the chain beat by 1.3-2.8x at 16-64 KiB over tcp.
  const CostParams p = CostParams::defaults();
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce}) {
    INFO(collName(coll));
    const ClusterShape three = ClusterShape::single(3, 3);
    for (uint64_t bytes = 8 << 10; bytes <= (uint64_t{1} << 30); bytes <<= 1) {
      INFO(bytes << " B on 3 ranks");
      CHECK(predictUs(coll, Algo::kRing, bytes, three, p) < predictUs(coll, Algo::kTree, bytes, three, p));
    }
    // 4 ranks where a message step is dear against its bytes (here: on 2 cores, as measured).
    for (const ClusterShape& c : {three, ClusterShape::single(4, 2)}) {
      const Selector s = make(c);
      for (uint64_t kib : {8, 16, 32}) {
        INFO(c.nranks << " ranks, " << kib << " KiB");
        CHECK(s.pick(coll, kib << 10) == Algo::kRing);
      }
    }
    // A small Reduce still goes down the binomial tree on 4 ranks (2 hops against 3; for a small
    // Broadcast see the next test), and on many ranks the trees' log2 n fill beats the chain's
    // n - 2 at every size.
    if (coll == Coll::kReduce) CHECK(make(ClusterShape::single(4, 4)).pick(coll, 1024) == Algo::kTree);
    const Selector many = make(ClusterShape::single(16, 16));
    for (uint64_t bytes = 8; bytes <= (uint64_t{1} << 30); bytes <<= 3) {
      INFO(bytes << " B on 16 ranks");
      CHECK(many.pick(coll, bytes) == Algo::kTree);
    }
  }
}

TEST_CASE("a small Broadcast on one host is priced in a stream: the chain on a few ranks, the tree on many",
          "[unit][select]") {
  // Back-to-back Broadcasts overlap, and on one host the rank that sends most sets their pace: the
  // binomial root sends ceil(log2 n) messages a call, every rank of the chain one. Over tcp on 2
  // cores the chain streamed 1.75-1.86x faster on 3 ranks (16 B, 1 KiB) and 0.97-1.45x on 4 (16 B-
  // 2 KiB), and the table picked the tree (2 hops against 3, the call alone).
  for (int n : {3, 4, 7}) {
    for (int cores : {2, n}) {
      const Selector s = make(ClusterShape::single(n, cores));
      for (uint64_t bytes : {8, 1024, 4096}) {
        INFO(n << " ranks on " << cores << " cores, " << bytes << " B");
        CHECK(s.pick(Coll::kBroadcast, bytes) == Algo::kRing);
        // A Reduce's binomial ranks send at once and its root receives, the cheap end: the tree
        // (on 3 ranks one step of sends against the chain's two; measured 1.01-1.30x over tcp).
        CHECK(s.pick(Coll::kReduce, bytes) == Algo::kTree);
      }
    }
  }
  // Many ranks: the chain's n - 1 hops outweigh its pace.
  for (int n : {12, 16, 64}) {
    INFO(n << " ranks");
    CHECK(make(ClusterShape::single(n, n)).pick(Coll::kBroadcast, 1024) == Algo::kTree);
  }
  // Across hosts a step's alpha is mostly the wire's: the call alone, as before.
  const ClusterShape twoHosts = ClusterShape::blocks(4, 2, 2);
  CHECK(make(twoHosts).pick(Coll::kBroadcast, 1024) == Algo::kTree);
  // A small Reduce over three hosts: both leaves send at once, one wire latency against the
  // chain's two.
  const CostParams p = CostParams::defaults();
  const ClusterShape threeHosts = ClusterShape::blocks(3, 3, 4);
  CHECK(predictUs(Coll::kReduce, Algo::kTree, 1024, threeHosts, p) <
        predictUs(Coll::kReduce, Algo::kRing, 1024, threeHosts, p));
  CHECK(make(threeHosts).pick(Coll::kReduce, 1024) == Algo::kTree);
  // Two ranks: one message either way, a tie.
  CHECK(predictUs(Coll::kReduce, Algo::kTree, 1024, ClusterShape::single(2, 2), p) ==
        predictUs(Coll::kReduce, Algo::kRing, 1024, ClusterShape::single(2, 2), p));
}

TEST_CASE("the table does not flip between algorithms that the model prices alike", "[unit][select]") {
  // On 4 ranks a large Broadcast or Reduce costs the chain and the trees the same number of chunk
  // steps (n - 2 + K against 2 x the rooted depth - 2 + K): their sums differ in the last bits only,
  // and the table took turns between them from one size to the next. A tie keeps what the size
  // below chose: the trees, which the model prefers at 128-256 KiB (2 levels of half the buffer
  // against 3 hops of all of it, unpipelined).
  const ClusterShape four = ClusterShape::single(4, 4);
  const Selector s = make(four);
  const CostParams p = CostParams::defaults();
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce}) {
    INFO(collName(coll));
    CHECK(s.pick(coll, 256 << 10) == Algo::kTree);
    for (uint64_t bytes = uint64_t{1} << 20; bytes <= (uint64_t{1} << 34); bytes <<= 1) {
      INFO(bytes << " B");
      const double ring = predictUs(coll, Algo::kRing, bytes, four, p),
                   tree = predictUs(coll, Algo::kTree, bytes, four, p);
      REQUIRE(std::abs(ring - tree) <= 1e-9 * ring);
      CHECK(s.pick(coll, bytes) == Algo::kTree);
    }
  }
}
