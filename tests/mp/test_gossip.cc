// Gossip on real processes: braidNeighborAllReduce over every named graph and explicit ones
// (asymmetric, negative weights, isolated ranks), every floating type, in place and out, blocking
// and nonblocking; onepeer_exp2's rotation; the gossip AllReduce; and every invalid argument.
// Inputs are small integers (exact in every type); results are weighted sums, compared with a
// tolerance of a few roundings of the type.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/patterns/graph.h"
#include "tests/mp/harness.h"

using namespace braidtest;
namespace graph = braid::graph;

namespace {

constexpr braidDataType_t kFloatTypes[] = {braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
constexpr const char* kGraphNames[] = {"ring", "exp2", "hypercube", "onepeer_exp2"};
constexpr size_t kCounts[] = {0, 1, 7, 1023, (1u << 17) + 5};  // the last spans several 256 KiB chunks
constexpr double kSentinel = 99;
constexpr size_t kPad = 4;  // sentinel elements after the output, to catch writes past it

double valueOf(int rank, size_t i, int salt) { return static_cast<double>((rank * 3 + i * 7 + salt) % 10); }

// Relative tolerance: a few roundings of the type (fp16/bf16 round once per weighted term).
double tolerance(braidDataType_t dt) {
  switch (dt) {
    case braidFloat16:
      return 4e-3;
    case braidBfloat16:
      return 2.5e-2;
    case braidFloat32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

bool near(braidDataType_t dt, double got, double want) {
  return std::fabs(got - want) <= tolerance(dt) * std::max(1.0, std::fabs(want));
}

// A rank's side of a graph: weights of itself and of the ranks it receives from.
struct Side {
  double self = 1;
  std::vector<int> peers;
  std::vector<double> weights;
};

Side sideOf(const graph::Topology& t) {
  Side s;
  s.self = t.selfWeight;
  for (const auto& e : t.in) {
    s.peers.push_back(e.peer);
    s.weights.push_back(e.weight);
  }
  return s;
}

// Runs one neighbour allreduce with `graph` and checks rank's result against `side`. `salt` varies
// the inputs from call to call.
int runCase(braidComm_t comm, braidGraph_t g, int rank, braidDataType_t dt, size_t count, bool inPlace,
            bool nonblocking, const Side& side, int salt, const char* what) {
  const size_t es = elemSize(dt);
  std::vector<char> send((count + kPad) * es), recv((count + kPad) * es);
  for (size_t i = 0; i < count + kPad; ++i) {
    storeElem(dt, send.data(), i, i < count ? valueOf(rank, i, salt) : kSentinel);
    storeElem(dt, recv.data(), i, kSentinel);
  }
  if (inPlace) recv = send;
  const void* sp = inPlace ? recv.data() : send.data();
  braidResult_t r;
  if (nonblocking) {
    braidRequest_t req = nullptr;
    r = braidINeighborAllReduce(sp, recv.data(), count, dt, g, comm, nullptr, &req);
    if (r == braidSuccess) r = braidWait(req);
  } else {
    r = braidNeighborAllReduce(sp, recv.data(), count, dt, g, comm, nullptr);
  }
  if (r != braidSuccess)
    return fail(rank, "%s %s count %zu: %s: %s", what, typeName(dt), count, braidGetErrorString(r),
                braidGetLastError());
  for (size_t i = 0; i < count; ++i) {
    double want = side.self * valueOf(rank, i, salt);
    for (size_t k = 0; k < side.peers.size(); ++k) want += side.weights[k] * valueOf(side.peers[k], i, salt);
    const double got = loadElem(dt, recv.data(), i);
    if (!near(dt, got, want))
      return fail(rank, "%s %s count %zu %s: element %zu is %g, expected %g", what, typeName(dt), count,
                  inPlace ? "in place" : "out of place", i, got, want);
  }
  for (size_t i = count; i < count + kPad; ++i)
    if (loadElem(dt, recv.data(), i) != kSentinel) return fail(rank, "%s wrote past its output at %zu", what, i);
  if (!inPlace)
    for (size_t i = 0; i < count; ++i)
      if (loadElem(dt, send.data(), i) != valueOf(rank, i, salt)) return fail(rank, "%s changed sendbuff", what);
  return 0;
}

int sweepNamed(braidComm_t comm, int rank, int n) {
  for (const char* name : kGraphNames) {
    graph::Named kind = graph::Named::kRing;
    if (!graph::parseNamed(name, &kind)) return fail(rank, "test bug: unknown graph %s", name);
    braidGraph_t g = nullptr;
    braidResult_t r = braidGraphCreateNamed(comm, name, &g);
    if (!graph::namedValid(kind, n)) {
      if (r != braidInvalidArgument || g != nullptr) return fail(rank, "%s on %d ranks was accepted", name, n);
      continue;
    }
    CHECK_BRAID(rank, r);
    uint64_t calls = 0;  // onepeer_exp2 rotates once per call
    int salt = 0;
    for (braidDataType_t dt : kFloatTypes) {
      for (size_t count : kCounts) {
        for (bool inPlace : {false, true}) {
          const bool nonblocking = (salt % 3) == 1;
          const Side side = sideOf(graph::named(kind, rank, n, calls));
          if (runCase(comm, g, rank, dt, count, inPlace, nonblocking, side, salt++, name) != 0) return 1;
          ++calls;
        }
      }
    }
    CHECK_BRAID(rank, braidGraphDestroy(g));
  }
  return 0;
}

// Explicit graphs, every rank's in-list built from (rank, n, variant). Variants: 0 the ring given by
// hand; 1 a one-way ring (receive from r+1 only); 2 a star (everyone hears rank 0, which hears
// nobody); 3 negative weights over two peers; 4 complete graph with unequal weights.
Side explicitSide(int r, int n, int variant) {
  Side s;
  auto add = [&](int peer, double w) {
    if (peer == r) return;
    for (int p : s.peers)
      if (p == peer) return;
    s.peers.push_back(peer);
    s.weights.push_back(w);
  };
  switch (variant) {
    case 0:
      add((r + n - 1) % n, 0.25);
      add((r + 1) % n, 0.25);
      break;
    case 1:
      add((r + 1) % n, 0.5);
      break;
    case 2:
      add(0, 0.75);
      break;
    case 3:
      add((r + 1) % n, 0.75);
      add((r + 2) % n, -0.25);
      break;
    default:
      for (int q = 0; q < n; ++q) add(q, 0.5 / n + 0.01 * q);
      break;
  }
  double sum = 0;
  for (double w : s.weights) sum += w;
  s.self = 1 - sum;
  return s;
}

int sweepExplicit(braidComm_t comm, int rank, int n) {
  int salt = 0;
  for (int variant = 0; variant < 5; ++variant) {
    const Side side = explicitSide(rank, n, variant);
    braidGraph_t g = nullptr;
    CHECK_BRAID(rank, braidGraphCreate(comm, static_cast<int>(side.peers.size()), side.peers.data(),
                                       side.weights.data(), side.self, &g));
    for (braidDataType_t dt : kFloatTypes)
      for (size_t count : {size_t{0}, size_t{5}, size_t{70000}})
        for (bool inPlace : {false, true}) {
          const std::string what = "explicit variant " + std::to_string(variant);
          if (runCase(comm, g, rank, dt, count, inPlace, salt % 2 == 1, side, salt, what.c_str()) != 0) return 1;
          ++salt;
        }
    CHECK_BRAID(rank, braidGraphDestroy(g));
  }
  return 0;
}

void runOn(const char* transport, int n, int (*body)(braidComm_t, int, int)) {
  Env env{{"BRAID_TIMEOUT", "60"}};
  if (transport != nullptr) env["BRAID_TRANSPORTS"] = transport;
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) { return body(comm, rank, size); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace

TEST_CASE("neighbour allreduce over every named graph, float type, count and placement", "[mp][gossip]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 6);
  INFO("shm, nranks " << n);
  if (underTest("shm")) runOn("shm", n, sweepNamed);
}

TEST_CASE("neighbour allreduce over tcp", "[mp][gossip]") {
  const int n = GENERATE(3, 4);
  INFO("tcp, nranks " << n);
  if (underTest("tcp")) runOn("tcp", n, sweepNamed);
}

TEST_CASE("neighbour allreduce over explicit graphs: asymmetric, star, negative weights", "[mp][gossip]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 6);
  INFO("nranks " << n);
  runOn(nullptr, n, sweepExplicit);
}

TEST_CASE("onepeer_exp2 on 4 ranks gives the exact average after 2 calls", "[mp][gossip]") {
  runOn(nullptr, 4, [](braidComm_t comm, int rank, int n) {
    braidGraph_t g = nullptr;
    CHECK_BRAID(rank, braidGraphCreateNamed(comm, "onepeer_exp2", &g));
    for (braidDataType_t dt : {braidFloat32, braidFloat64, braidBfloat16, braidFloat16}) {
      const size_t count = 1000, es = elemSize(dt);
      std::vector<char> buf(count * es);
      for (size_t i = 0; i < count; ++i) storeElem(dt, buf.data(), i, valueOf(rank, i, 0) * 4);
      CHECK_BRAID(rank, braidNeighborAllReduce(buf.data(), buf.data(), count, dt, g, comm, nullptr));
      CHECK_BRAID(rank, braidNeighborAllReduce(buf.data(), buf.data(), count, dt, g, comm, nullptr));
      for (size_t i = 0; i < count; ++i) {
        double mean = 0;
        for (int r = 0; r < n; ++r) mean += valueOf(r, i, 0) * 4 / n;
        // Inputs are multiples of 4: every half-sum is exact, in every type.
        if (loadElem(dt, buf.data(), i) != mean)
          return fail(rank, "%s element %zu is %g after 2 calls, not the average %g", typeName(dt), i,
                      loadElem(dt, buf.data(), i), mean);
      }
    }
    CHECK_BRAID(rank, braidGraphDestroy(g));
    return 0;
  });
}

TEST_CASE(
    "nonblocking neighbour allreduces on several graphs in flight with other collectives, graphs destroyed meanwhile",
    "[mp][gossip]") {
  const int n = GENERATE(2, 3, 5);
  INFO("nranks " << n);
  runOn(nullptr, n, [](braidComm_t comm, int rank, int size) {
    braidGraph_t ring = nullptr, exp2 = nullptr;
    CHECK_BRAID(rank, braidGraphCreateNamed(comm, "ring", &ring));
    CHECK_BRAID(rank, braidGraphCreateNamed(comm, "exp2", &exp2));
    constexpr int kOps = 8;
    constexpr size_t kCount = 50000;
    std::vector<std::vector<float>> in(kOps), out(kOps);
    std::vector<braidRequest_t> reqs(kOps + 1);
    std::vector<float> sum(16, 1.0f);
    for (int k = 0; k < kOps; ++k) {
      in[k].resize(kCount);
      out[k].assign(kCount, -1);
      for (size_t i = 0; i < kCount; ++i) in[k][i] = static_cast<float>(valueOf(rank, i, k));
      braidGraph_t g = k % 2 ? exp2 : ring;
      CHECK_BRAID(
          rank, braidINeighborAllReduce(in[k].data(), out[k].data(), kCount, braidFloat32, g, comm, nullptr, &reqs[k]));
      if (k == kOps / 2)
        CHECK_BRAID(rank,
                    braidIAllReduce(sum.data(), sum.data(), 16, braidFloat32, braidSum, comm, nullptr, &reqs[kOps]));
    }
    // The graphs may go while their calls run: the calls keep their plans.
    CHECK_BRAID(rank, braidGraphDestroy(ring));
    CHECK_BRAID(rank, braidGraphDestroy(exp2));
    CHECK_BRAID(rank, braidWaitAll(kOps + 1, reqs.data()));
    for (int k = 0; k < kOps; ++k) {
      const Side side = sideOf(graph::named(k % 2 ? graph::Named::kExp2 : graph::Named::kRing, rank, size));
      for (size_t i = 0; i < kCount; ++i) {
        double want = side.self * valueOf(rank, i, k);
        for (size_t j = 0; j < side.peers.size(); ++j) want += side.weights[j] * valueOf(side.peers[j], i, k);
        if (!near(braidFloat32, out[k][i], want))
          return fail(rank, "op %d element %zu = %g, want %g", k, i, out[k][i], want);
      }
    }
    for (float v : sum)
      if (v != static_cast<float>(size)) return fail(rank, "the AllReduce among them gave %g", v);
    return 0;
  });
}

TEST_CASE("gossip AllReduce: exact average for powers of two, sum preserved otherwise", "[mp][gossip]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 6, 8);
  INFO("nranks " << n);
  Env env{{"BRAID_TIMEOUT", "60"}, {"BRAID_ALGO", "gossip"}, {"BRAID_APPROXIMATE", "1"}};
  auto res = runComm(n, env, [](braidComm_t comm, int rank, int size) {
    for (braidDataType_t dt : {braidFloat32, braidFloat64}) {
      for (size_t count : {size_t{1}, size_t{999}, size_t{200000}}) {
        for (bool inPlace : {false, true}) {
          const size_t es = elemSize(dt);
          std::vector<char> send(count * es), recv(count * es);
          for (size_t i = 0; i < count; ++i) storeElem(dt, send.data(), i, valueOf(rank, i, 1));
          if (inPlace) recv = send;
          CHECK_BRAID(rank, braidAllReduce(inPlace ? recv.data() : send.data(), recv.data(), count, dt, braidAvg, comm,
                                           nullptr));
          // The sum over ranks of the results, by an exact (sum) AllReduce.
          std::vector<double> got(count), total(count);
          for (size_t i = 0; i < count; ++i) got[i] = total[i] = loadElem(dt, recv.data(), i);
          CHECK_BRAID(rank, braidAllReduce(total.data(), total.data(), count, braidFloat64, braidSum, comm, nullptr));
          for (size_t i = 0; i < count; ++i) {
            double mean = 0, lo = 1e300, hi = -1e300;
            for (int r = 0; r < size; ++r) {
              mean += valueOf(r, i, 1) / size;
              lo = std::min(lo, valueOf(r, i, 1));
              hi = std::max(hi, valueOf(r, i, 1));
            }
            const bool exact = graph::isPowerOfTwo(size);
            if (exact && !near(dt, got[i], mean))
              return fail(rank, "%s count %zu: element %zu is %g, average %g", typeName(dt), count, i, got[i], mean);
            if (got[i] < lo - 1e-6 || got[i] > hi + 1e-6)
              return fail(rank, "element %zu = %g outside the inputs' range [%g, %g]", i, got[i], lo, hi);
            if (!near(dt, total[i] / size, mean))
              return fail(rank, "element %zu: the ranks' results average %g, not %g", i, total[i] / size, mean);
          }
        }
      }
    }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("gossip calls refuse invalid arguments and write nothing", "[mp][gossip]") {
  const int n = GENERATE(3, 4);
  INFO("nranks " << n);
  runOn(nullptr, n, [](braidComm_t comm, int rank, int size) {
    std::vector<float> in(16, 1.0f), out(16, 7.0f);
    auto untouched = [&] {
      for (float v : out)
        if (v != 7.0f) return false;
      for (float v : in)
        if (v != 1.0f) return false;
      return true;
    };
    braidGraph_t g = nullptr;
    CHECK_BRAID(rank, braidGraphCreateNamed(comm, "ring", &g));
    // A graph of another communicator: a one-rank communicator of this process alone.
    braidUniqueId id;
    CHECK_BRAID(rank, braidGetUniqueId(&id));
    braidComm_t solo = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&solo, 1, id, 0));
    braidGraph_t soloGraph = nullptr;
    CHECK_BRAID(rank, braidGraphCreateNamed(solo, "ring", &soloGraph));
    braidRequest_t req = nullptr;
    int stream = 0;
    const size_t huge = SIZE_MAX / 2;
    struct Case {
      const char* what;
      braidResult_t got;
      braidResult_t want;
    };
    const braidResult_t kArg = braidInvalidArgument;
    Case cases[] = {
        {"NULL comm", braidNeighborAllReduce(in.data(), out.data(), 16, braidFloat32, g, nullptr, nullptr), kArg},
        {"bad dtype",
         braidNeighborAllReduce(in.data(), out.data(), 16, static_cast<braidDataType_t>(42), g, comm, nullptr), kArg},
        {"int32", braidNeighborAllReduce(in.data(), out.data(), 16, braidInt32, g, comm, nullptr), kArg},
        {"uint8", braidNeighborAllReduce(in.data(), out.data(), 16, braidUint8, g, comm, nullptr), kArg},
        {"NULL graph", braidNeighborAllReduce(in.data(), out.data(), 16, braidFloat32, nullptr, comm, nullptr), kArg},
        {"graph of another comm",
         braidNeighborAllReduce(in.data(), out.data(), 16, braidFloat32, soloGraph, comm, nullptr), kArg},
        {"stream", braidNeighborAllReduce(in.data(), out.data(), 16, braidFloat32, g, comm, &stream),
         braidInvalidUsage},
        {"NULL sendbuff", braidNeighborAllReduce(nullptr, out.data(), 16, braidFloat32, g, comm, nullptr), kArg},
        {"NULL recvbuff", braidNeighborAllReduce(in.data(), nullptr, 16, braidFloat32, g, comm, nullptr), kArg},
        {"count overflow", braidNeighborAllReduce(in.data(), out.data(), huge, braidFloat32, g, comm, nullptr), kArg},
        {"partial overlap", braidNeighborAllReduce(out.data(), out.data() + 1, 8, braidFloat32, g, comm, nullptr),
         kArg},
        {"NULL request", braidINeighborAllReduce(in.data(), out.data(), 16, braidFloat32, g, comm, nullptr, nullptr),
         kArg},
        {"nonblocking bad dtype",
         braidINeighborAllReduce(in.data(), out.data(), 16, braidInt64, g, comm, nullptr, &req), kArg},
        {"destroy NULL", braidGraphDestroy(nullptr), kArg},
    };
    for (const Case& c : cases) {
      if (c.got != c.want)
        return fail(rank, "%s: got %s instead of %s", c.what, braidGetErrorString(c.got), braidGetErrorString(c.want));
      if (!untouched()) return fail(rank, "%s: a buffer was written", c.what);
    }
    if (req != nullptr) return fail(rank, "a refused nonblocking call set its request");
    if (strlen(braidGetLastError()) == 0) return fail(rank, "no last-error text");
    CHECK_BRAID(rank, braidGraphDestroy(soloGraph));
    CHECK_BRAID(rank, braidCommDestroy(solo));

    // Named graphs: refused without touching the output.
    braidGraph_t untouchedGraph = reinterpret_cast<braidGraph_t>(&stream);
    braidGraph_t out1 = untouchedGraph;
    struct NamedCase {
      const char* what;
      braidResult_t got;
    };
    NamedCase named[] = {
        {"unknown name", braidGraphCreateNamed(comm, "torus", &out1)},
        {"NULL name", braidGraphCreateNamed(comm, nullptr, &out1)},
        {"NULL comm", braidGraphCreateNamed(nullptr, "ring", &out1)},
        {"NULL graph", braidGraphCreateNamed(comm, "ring", nullptr)},
        {"hypercube", size == 3 ? braidGraphCreateNamed(comm, "hypercube", &out1) : braidInvalidArgument},
    };
    for (const NamedCase& c : named) {
      if (c.got != braidInvalidArgument) return fail(rank, "named %s: got %s", c.what, braidGetErrorString(c.got));
      if (out1 != untouchedGraph) return fail(rank, "named %s: the graph was written", c.what);
    }
    if (braidGraphCreateNamed(comm, "torus", &out1) == braidInvalidArgument &&
        std::string(braidGetLastError()).find("onepeer_exp2") == std::string::npos)
      return fail(rank, "unknown name: the error does not list the valid names: %s", braidGetLastError());

    // Explicit graphs: one rank (the last) passes a bad list; every rank must refuse, nothing is
    // created, and the others' error names the rank at fault.
    const int bad = size - 1;
    const int left = (rank + size - 1) % size;
    const double nan = std::nan("");
    struct Bad {
      const char* what;
      int nNeighbors;
      std::vector<int> peers;
      std::vector<double> weights;
      double self;
      bool nullGraph;
    };
    const Bad bads[] = {
        {"out of range", 1, {size}, {0.5}, 0.5, false},
        {"negative rank", 1, {-1}, {0.5}, 0.5, false},
        {"self", 1, {bad}, {0.5}, 0.5, false},
        {"duplicate", 2, {0, 0}, {0.25, 0.25}, 0.5, false},
        {"NaN weight", 1, {0}, {nan}, 0.5, false},
        {"infinite weight", 1, {0}, {INFINITY}, 0.5, false},
        {"infinite self", 1, {0}, {0.5}, INFINITY, false},
        {"sum not 1", 1, {0}, {0.5}, 0.4, false},
        {"negative count", -1, {0}, {0.5}, 0.5, false},
        {"too many", size, std::vector<int>(size, 0), std::vector<double>(size, 0.0), 1.0, false},
        {"NULL lists", 1, {}, {}, 0.5, false},
        {"NULL graph", 1, {0}, {0.5}, 0.5, true},
    };
    for (const Bad& b : bads) {
      braidGraph_t out2 = untouchedGraph;
      braidResult_t r;
      if (rank == bad) {
        r = braidGraphCreate(comm, b.nNeighbors, b.peers.empty() ? nullptr : b.peers.data(),
                             b.weights.empty() ? nullptr : b.weights.data(), b.self, b.nullGraph ? nullptr : &out2);
      } else {
        const int peer = left;
        const double w = 0.5;
        r = braidGraphCreate(comm, 1, &peer, &w, 0.5, &out2);
      }
      if (r != braidInvalidArgument)
        return fail(rank, "explicit %s: got %s: %s", b.what, braidGetErrorString(r), braidGetLastError());
      if (out2 != untouchedGraph) return fail(rank, "explicit %s: a graph was set", b.what);
      const std::string msg = braidGetLastError();
      if (rank != bad && msg.find("rank " + std::to_string(bad)) == std::string::npos)
        return fail(rank, "explicit %s: the error does not name rank %d: %s", b.what, bad, msg.c_str());
    }
    // The communicator and a graph still work after all that.
    const int peer = left;
    const double w = 0.5;
    braidGraph_t ok = nullptr;
    CHECK_BRAID(rank, braidGraphCreate(comm, 1, &peer, &w, 0.5, &ok));
    Side side;
    side.self = 0.5;
    side.peers = {left};
    side.weights = {0.5};
    if (runCase(comm, ok, rank, braidFloat32, 33, false, false, side, 3, "after errors") != 0) return 1;
    CHECK_BRAID(rank, braidGraphDestroy(ok));
    CHECK_BRAID(rank, braidGraphDestroy(g));
    return 0;
  });
}
