// Gather and Scatter on real processes: every datatype, every root, counts 0/1/odd/large, in place
// and out of place, blocking and nonblocking, over each transport; both algorithms forced on 1..8
// ranks on one and on emulated hosts; in groups; and the arguments they refuse (touching nothing).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

constexpr braidDataType_t kTypes[] = {braidInt8,   braidUint8,   braidInt32,    braidUint32,  braidInt64,
                                      braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
constexpr size_t kSmallCounts[] = {0, 1, 7, 1023};
constexpr size_t kLargeCount = (1u << 20) + 3;  // elements of the root's whole buffer
constexpr double kSentinel = 99;

// Block `to` of rank `from`'s data: distinct per (source, target, index), exact in int8.
double value(int from, int to, size_t i) { return static_cast<double>((from * 5 + to * 3 + i) % 60); }

struct Call {
  bool gather = true;
  braidDataType_t dt = braidInt32;
  size_t count = 0;
  int root = 0;
  // The root's in-place layout. For Gather the other ranks pass the same layout, which means nothing
  // there (their receive buffer is never written); for Scatter only the root uses it.
  bool inPlace = false;
  bool nonblocking = false;
};

std::string describeCall(const Call& c) {
  char buf[160];
  snprintf(buf, sizeof(buf), "%s %s count %zu root %d %s%s", c.gather ? "Gather" : "Scatter", typeName(c.dt), c.count,
           c.root, c.inPlace ? "in-place" : "out-of-place", c.nonblocking ? " nonblocking" : "");
  return buf;
}

// Runs one call on this rank and checks every byte it may and may not write. Returns 0 or 1.
int runCall(braidComm_t comm, int rank, int n, const Call& c, std::vector<char>& big, std::vector<char>& small) {
  const size_t es = elemSize(c.dt), blocks = static_cast<size_t>(n) * c.count;
  big.assign(std::max<size_t>(blocks, 1) * es, 0);
  small.assign(std::max<size_t>(c.count, 1) * es, 0);
  const bool isRoot = rank == c.root;
  // Gather: `big` is the gathered side, `small` this rank's block. Scatter: `big` is every rank's
  // whole send buffer (significant on the root only, so the others fill theirs with data of their
  // own that must not arrive anywhere), `small` the received block.
  for (size_t i = 0; i < blocks; ++i)
    storeElem(c.dt, big.data(), i, c.gather ? kSentinel : value(rank, i / c.count, i % c.count));
  for (size_t i = 0; i < c.count; ++i) storeElem(c.dt, small.data(), i, c.gather ? value(rank, 0, i) : kSentinel);
  char* own = big.data() + static_cast<size_t>(rank) * c.count * es;
  if (c.inPlace && c.gather)
    for (size_t i = 0; i < c.count; ++i) storeElem(c.dt, own, i, value(rank, 0, i));
  const void* sp = nullptr;
  void* rp = nullptr;
  if (c.gather) {
    sp = c.inPlace ? own : small.data();
    rp = isRoot || rank % 2 == 0 ? big.data() : nullptr;  // off the root recvbuff may be NULL
  } else {
    sp = isRoot || rank % 2 == 0 ? big.data() : nullptr;  // off the root sendbuff may be NULL
    rp = c.inPlace ? own : small.data();
  }
  braidResult_t r = braidSuccess;
  if (c.nonblocking) {
    braidRequest_t req = nullptr;
    r = c.gather ? braidIGather(sp, rp, c.count, c.dt, c.root, comm, nullptr, &req)
                 : braidIScatter(sp, rp, c.count, c.dt, c.root, comm, nullptr, &req);
    if (r == braidSuccess) r = braidWait(req);
  } else {
    r = c.gather ? braidGather(sp, rp, c.count, c.dt, c.root, comm, nullptr)
                 : braidScatter(sp, rp, c.count, c.dt, c.root, comm, nullptr);
  }
  if (r != braidSuccess)
    return fail(rank, "%s: %s: %s", describeCall(c).c_str(), braidGetErrorString(r), braidGetLastError());
  // What each element must hold now.
  for (size_t i = 0; i < blocks; ++i) {
    const size_t blk = i / c.count, k = i % c.count;
    double want = 0;
    if (c.gather) {
      const bool mine = c.inPlace && blk == static_cast<size_t>(rank);
      want = isRoot ? value(static_cast<int>(blk), 0, k) : mine ? value(rank, 0, k) : kSentinel;
    } else {
      want = value(rank, static_cast<int>(blk), k);  // a send buffer is never written
    }
    const double got = loadElem(c.dt, big.data(), i);
    if (got != want)
      return fail(rank, "%s: element %zu of the %s buffer is %g, expected %g", describeCall(c).c_str(), i,
                  c.gather ? "receive" : "send", got, want);
  }
  const bool smallIsOutput = !c.gather && !c.inPlace;
  for (size_t i = 0; i < c.count; ++i) {
    const double want = smallIsOutput ? value(c.root, rank, i) : c.gather ? value(rank, 0, i) : kSentinel;
    const double got = loadElem(c.dt, small.data(), i);
    if (got != want)
      return fail(rank, "%s: element %zu of the block is %g, expected %g", describeCall(c).c_str(), i, got, want);
  }
  return 0;
}

int sweep(braidComm_t comm, int rank, int n, bool large, const std::vector<braidDataType_t>& types) {
  std::vector<char> big, small;
  int pick = 0;
  for (bool gather : {true, false}) {
    for (braidDataType_t dt : types) {
      std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
      if (large) counts.push_back(kLargeCount / n);
      for (size_t count : counts) {
        const bool big1 = count > 1023;
        for (int root = 0; root < n; ++root) {
          for (bool inPlace : {false, true}) {
            Call c{gather, dt, count, root, inPlace && (gather || rank == root), (pick++ % 3) == 0};
            if (big1 && (pick % n) != 0) continue;  // large counts: one root in n, to stay in budget
            if (runCall(comm, rank, n, c, big, small) != 0) return 1;
          }
        }
      }
    }
  }
  return 0;
}

void sweepOn(const char* transport, int n, bool large) {
  Env env{{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  const std::vector<braidDataType_t> types(std::begin(kTypes), std::end(kTypes));
  auto res =
      runComm(n, env, [&](braidComm_t comm, int rank, int size) { return sweep(comm, rank, size, large, types); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace

TEST_CASE("gather and scatter over shm: every type, root, count and placement", "[mp][shm][gather]") {
  const int n = GENERATE(1, 2, 3, 4);
  INFO("nranks " << n);
  if (underTest("shm")) sweepOn("shm", n, true);
}

TEST_CASE("gather and scatter over tcp: every type, root, count and placement", "[mp][tcp][gather]") {
  const int n = GENERATE(1, 2, 3, 4);
  INFO("nranks " << n);
  if (underTest("tcp")) sweepOn("tcp", n, true);
}

TEST_CASE("gather and scatter: both algorithms on 1..8 ranks, one host and emulated hosts", "[mp][algos][gather]") {
  const std::pair<int, int> layouts[] = {{1, 1}, {2, 1}, {3, 1}, {5, 1}, {4, 2}, {6, 3}, {7, 3}, {8, 2}};
  const char* algo = GENERATE("linear", "tree");
  const std::vector<braidDataType_t> types{braidInt8, braidFloat16, braidFloat64};
  for (auto [n, hosts] : layouts) {
    INFO("BRAID_ALGO=" << algo << " ranks " << n << " hosts " << hosts);
    const std::string spec = std::string("gather:") + algo + ";scatter:" + algo;
    auto res = runComm(
        n, {{"BRAID_TIMEOUT", "120"}, {"BRAID_ALGO", spec}},
        [&](braidComm_t comm, int rank, int size) { return sweep(comm, rank, size, false, types); }, 240,
        [n = n, hosts = hosts](int rank) {
          setenv("BRAID_HOSTID", ("emuhost" + std::to_string(rank / ((n + hosts - 1) / hosts))).c_str(), 1);
        });
    INFO(describe(res));
    REQUIRE(allOk(res));
  }
}

TEST_CASE("gather and scatter refuse bad arguments and touch nothing; they run in groups", "[mp][errors][gather]") {
  auto res = runComm(3, {{"BRAID_TIMEOUT", "60"}}, [](braidComm_t comm, int rank, int n) {
    std::vector<int32_t> block(4, 7), all(12, -1), allCopy = all;
    auto refused = [&](braidResult_t r, const char* what, const char* words) {
      if (r != braidInvalidArgument)
        return fail(rank, "%s: got %s, expected braidInvalidArgument", what, braidGetErrorString(r));
      if (std::string(braidGetLastError()).find(words) == std::string::npos)
        return fail(rank, "%s: message '%s' lacks '%s'", what, braidGetLastError(), words);
      if (all != allCopy || block != std::vector<int32_t>(4, 7)) return fail(rank, "%s: a buffer was written", what);
      return 0;
    };
    int bad = 0;
    bad += refused(braidGather(block.data(), all.data(), 4, braidInt32, n, comm, nullptr), "gather root n", "root 3");
    bad +=
        refused(braidScatter(all.data(), block.data(), 4, braidInt32, -1, comm, nullptr), "scatter root -1", "root -1");
    bad +=
        refused(braidGather(nullptr, all.data(), 4, braidInt32, 0, comm, nullptr), "gather NULL sendbuff", "sendbuff");
    bad += refused(braidScatter(all.data(), nullptr, 4, braidInt32, 0, comm, nullptr), "scatter NULL recvbuff",
                   "recvbuff");
    bad += refused(braidGather(block.data(), all.data(), SIZE_MAX / 2, braidInt32, 0, comm, nullptr), "gather count",
                   "count");
    bad +=
        refused(braidIScatter(all.data(), block.data(), 4, static_cast<braidDataType_t>(99), 0, comm, nullptr, nullptr),
                "scatter bad type", "datatype");
    // On the root only: its gathered side must be there and must not overlap the other side
    // except in the in-place layout.
    if (rank == 1) {
      bad +=
          refused(braidGather(block.data(), nullptr, 4, braidInt32, 1, comm, nullptr), "gather root NULL", "recvbuff");
      bad += refused(braidScatter(nullptr, block.data(), 4, braidInt32, 1, comm, nullptr), "scatter root NULL",
                     "sendbuff");
      bad += refused(braidGather(all.data() + 2, all.data(), 4, braidInt32, 1, comm, nullptr), "gather overlap",
                     "overlap");
    }
    if (bad != 0) return 1;
    // A group: a Gather to rank 2, a Scatter from rank 0 and an AllReduce, issued together.
    std::vector<int32_t> gathered(12, -1), mine(4), got(4, -1), sum(1, rank);
    for (int i = 0; i < 4; ++i) mine[i] = rank * 10 + i;
    std::vector<int32_t> parts(12);
    for (int i = 0; i < 12; ++i) parts[i] = 100 + i;
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidGather(mine.data(), gathered.data(), 4, braidInt32, 2, comm, nullptr));
    CHECK_BRAID(rank, braidScatter(parts.data(), got.data(), 4, braidInt32, 0, comm, nullptr));
    CHECK_BRAID(rank, braidAllReduce(sum.data(), sum.data(), 1, braidInt32, braidSum, comm, nullptr));
    CHECK_BRAID(rank, braidGroupEnd());
    for (int i = 0; i < 12; ++i) {
      const int32_t want = rank == 2 ? (i / 4) * 10 + i % 4 : -1;
      if (gathered[i] != want) return fail(rank, "grouped gather: element %d is %d, expected %d", i, gathered[i], want);
    }
    for (int i = 0; i < 4; ++i)
      if (got[i] != 100 + rank * 4 + i) return fail(rank, "grouped scatter: element %d is %d", i, got[i]);
    if (sum[0] != 3) return fail(rank, "grouped allreduce: %d", sum[0]);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
