// Every collective x datatype x op x count x placement, on real processes over each transport.
// Values are small integers, so every result is exact (avg of floats within rounding).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/dtype.h"
#include "tests/mp/collective_case.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace braidtest {

namespace {
constexpr double kSentinel = 99;
// Values for the data-moving collectives: distinct per (source, target, index), exact in int8.
double moveValue(int from, int to, size_t i) { return static_cast<double>((from * 5 + to * 3 + i) % 60); }
}  // namespace

const char* cname(C c) {
  static const char* k[] = {"AllReduce", "Reduce", "ReduceScatter", "AllGather", "Broadcast", "AllToAll"};
  return k[static_cast<int>(c)];
}

void caseSizes(const Case& k, int n, size_t* sendElems, size_t* recvElems) {
  size_t send = k.count, recv = k.count;
  if (k.c == C::kReduceScatter) send = k.count * n;
  if (k.c == C::kAllGather) recv = k.count * n;
  if (k.c == C::kAllToAll) send = recv = k.count * n;
  *sendElems = send;
  *recvElems = recv;
}

void fillCase(const Case& k, int rank, int n, char* send, char* recv, size_t recvAlloc) {
  size_t sendElems = 0, recvElems = 0;
  caseSizes(k, n, &sendElems, &recvElems);
  for (size_t i = 0; i < recvAlloc; ++i) storeElem(k.dt, recv, i, kSentinel);
  // Inputs, written where the call reads them.
  char* in = k.inPlace ? recv : send;
  const size_t inOffset = k.inPlace && k.c == C::kAllGather ? rank * k.count : 0;  // elements
  for (size_t i = 0; i < sendElems; ++i) {
    double v = 0;
    switch (k.c) {
      case C::kAllReduce:
      case C::kReduce:
      case C::kReduceScatter:
        v = inputValue(k.op, rank, i, n);
        break;
      case C::kAllGather:
      case C::kBroadcast:
        v = moveValue(rank, 0, i);
        break;
      case C::kAllToAll:
        v = moveValue(rank, static_cast<int>(i / k.count), i % k.count);
        break;
    }
    storeElem(k.dt, in, inOffset + i, v);
  }
}

braidResult_t postCase(const Case& k, int rank, braidComm_t comm, const char* sendBase, char* recvBase,
                       braidStream_t stream, braidRequest_t* req) {
  const size_t es = elemSize(k.dt);
  const size_t count = k.count;
  const void* sp = k.inPlace ? (k.c == C::kAllGather ? recvBase + rank * count * es : recvBase) : sendBase;
  void* rp = k.inPlace && k.c == C::kReduceScatter ? recvBase + rank * count * es : recvBase;
  const bool nb = req != nullptr;
  switch (k.c) {
    case C::kAllReduce:
      return nb ? braidIAllReduce(sp, rp, count, k.dt, k.op, comm, stream, req)
                : braidAllReduce(sp, rp, count, k.dt, k.op, comm, stream);
    case C::kReduce:
      return nb ? braidIReduce(sp, rp, count, k.dt, k.op, k.root, comm, stream, req)
                : braidReduce(sp, rp, count, k.dt, k.op, k.root, comm, stream);
    case C::kReduceScatter:
      return nb ? braidIReduceScatter(sp, rp, count, k.dt, k.op, comm, stream, req)
                : braidReduceScatter(sp, rp, count, k.dt, k.op, comm, stream);
    case C::kAllGather:
      return nb ? braidIAllGather(sp, rp, count, k.dt, comm, stream, req)
                : braidAllGather(sp, rp, count, k.dt, comm, stream);
    case C::kBroadcast:
      return nb ? braidIBroadcast(sp, rp, count, k.dt, k.root, comm, stream, req)
                : braidBroadcast(sp, rp, count, k.dt, k.root, comm, stream);
    case C::kAllToAll:
      return nb ? braidIAllToAll(sp, rp, count, k.dt, comm, stream, req)
                : braidAllToAll(sp, rp, count, k.dt, comm, stream);
  }
  return braidInternalError;
}

std::string describeCase(const Case& k) {
  char buf[160];
  snprintf(buf, sizeof(buf), "%s %s %s count %zu %s root %d", cname(k.c), typeName(k.dt), opName(k.op), k.count,
           k.inPlace ? "in-place" : "out-of-place", k.root);
  return buf;
}

int checkCase(const Case& k, int rank, int n, const char* out, size_t recvAlloc) {
  size_t sendElems = 0, recvElems = 0;
  caseSizes(k, n, &sendElems, &recvElems);
  const size_t count = k.count;
  // Expected output over the whole receive allocation (sentinels where nothing may be written).
  const size_t outBase = k.inPlace && k.c == C::kReduceScatter ? rank * count : 0;
  for (size_t i = 0; i < recvElems; ++i) {
    double want = 0;
    bool exactOp = true;
    switch (k.c) {
      case C::kAllReduce:
        want = expectedValue(k.dt, k.op, i, n);
        exactOp = false;
        break;
      case C::kReduce:
        if (rank != k.root) {
          want = k.inPlace ? inputValue(k.op, rank, i, n) : kSentinel;  // untouched off the root
        } else {
          want = expectedValue(k.dt, k.op, i, n);
          exactOp = false;
        }
        break;
      case C::kReduceScatter:
        want = expectedValue(k.dt, k.op, rank * count + i, n);
        exactOp = false;
        break;
      case C::kAllGather:
        want = moveValue(static_cast<int>(i / count), 0, i % count);
        break;
      case C::kBroadcast:
        want = moveValue(k.root, 0, i);
        break;
      case C::kAllToAll:
        want = moveValue(static_cast<int>(i / count), rank, i % count);
        break;
    }
    const double got = loadElem(k.dt, out, outBase + i);
    const bool ok = exactOp ? got == want : matches(k.dt, k.op, got, want);
    if (!ok) return fail(rank, "%s: element %zu is %g, expected %g", describeCase(k).c_str(), i, got, want);
  }
  // Out-of-place: nothing beyond the output was written.
  if (!k.inPlace)
    for (size_t i = recvElems; i < recvAlloc; ++i)
      if (loadElem(k.dt, out, i) != kSentinel)
        return fail(rank, "%s wrote past its output at %zu", describeCase(k).c_str(), i);
  return 0;
}

int runCase(braidComm_t comm, int rank, int n, C c, braidDataType_t dt, braidRedOp_t op, size_t count, bool inPlace,
            int root, Buffers& b, DeviceCopies* dev) {
  const Case k{c, dt, op, count, inPlace, root};
  const size_t es = elemSize(dt);
  size_t sendElems = 0, recvElems = 0;
  caseSizes(k, n, &sendElems, &recvElems);
  b.send.assign(std::max<size_t>(sendElems, 1) * es, 0);
  b.recv.assign(std::max<size_t>(std::max(sendElems, recvElems), 1) * es, 0);
  fillCase(k, rank, n, b.send.data(), b.recv.data(), b.recv.size() / es);
  // Where the call's buffers are: the host vectors, or their device copies on a stream.
  const char* sendBase = b.send.data();
  char* recvBase = b.recv.data();
  braidStream_t stream = nullptr;
  if (dev != nullptr && !dev->upload(b, &sendBase, &recvBase, &stream))
    return fail(rank, "%s: copying the buffers to the device failed", cname(c));
  const braidResult_t r = postCase(k, rank, comm, sendBase, recvBase, stream, nullptr);
  if (r != braidSuccess)
    return fail(rank, "%s: %s: %s", describeCase(k).c_str(), braidGetErrorString(r), braidGetLastError());
  if (dev != nullptr && !dev->download(&b))
    return fail(rank, "%s: waiting for the stream or copying the result back failed", cname(c));
  return checkCase(k, rank, n, b.recv.data(), b.recv.size() / es);
}

}  // namespace braidtest

namespace {

constexpr size_t kSmallCounts[] = {0, 1, 7, 1023};
constexpr size_t kLargeCount = (1u << 20) + 3;

// Which calls a sweep makes: every collective, type and op by default.
struct SweepSet {
  std::vector<C> colls{C::kAllReduce, C::kReduce, C::kReduceScatter, C::kAllGather, C::kBroadcast, C::kAllToAll};
  std::vector<braidDataType_t> types{std::begin(kTypes), std::end(kTypes)};
  size_t largeCount = kLargeCount;
};

int sweep(braidComm_t comm, int rank, int n, bool large, const SweepSet& set = SweepSet{}) {
  Buffers b;
  int rootPick = 0;
  for (C c : set.colls) {
    const bool reducing = c == C::kAllReduce || c == C::kReduce || c == C::kReduceScatter;
    for (braidDataType_t dt : set.types) {
      for (braidRedOp_t op : kOps) {
        if (!reducing && op != braidSum) continue;
        std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
        // The large count: every type with sum, every op with float32 (keeps the suite in budget).
        if (large && (op == braidSum || dt == braidFloat32)) {
          size_t perRank =
              c == C::kAllReduce || c == C::kReduce || c == C::kBroadcast ? set.largeCount : set.largeCount / n;
          counts.push_back(perRank);
        }
        for (size_t count : counts) {
          for (bool inPlace : {false, true}) {
            int root = (rootPick++) % n;
            if (runCase(comm, rank, n, c, dt, op, count, inPlace, root, b) != 0) return 1;
          }
        }
      }
    }
  }
  return 0;
}

void sweepOn(const char* transport, int n, bool large) {
  Env env{{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "120"}};
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) { return sweep(comm, rank, size, large); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace

TEST_CASE("collectives over shm: every type, op, count and placement", "[mp][shm]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 8);
  INFO("nranks " << n);
  if (underTest("shm")) sweepOn("shm", n, n <= 4);
}

TEST_CASE("collectives over tcp: every type, op, count and placement", "[mp][tcp]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 8);
  INFO("nranks " << n);
  if (underTest("tcp")) sweepOn("tcp", n, n <= 4);
}

TEST_CASE("collectives over ibverbs: every type, op, count and placement", "[mp][ibverbs]") {
  const int n = GENERATE(1, 2, 3, 4, 5, 8);
  INFO("nranks " << n);
  // Without an RDMA device only the refusal can be checked (tests/mp/test_ibverbs.cc).
  if (underTest("ibverbs")) {
    sweepOn("ibverbs", n, n <= 4);
  } else {
    WARN(rdmaAbsence() << ": SKIPPING the ibverbs sweep");
  }
}

// Over whichever UCX transports the environment allows: meson runs this as mp-ucx (UCX_TLS=tcp,self)
// and mp-ucx-sm (shared memory). ucx cannot reduce on receive, so every reduction also runs through
// the lowering pass here.
TEST_CASE("collectives over ucx: every type, op, count and placement", "[mp][ucx]") {
  const int n = GENERATE(1, 2, 3, 5);
  INFO("nranks " << n);
  if (underTest("ucx")) sweepOn("ucx", n, n <= 3);
}

TEST_CASE("collectives across emulated hosts mix shm and tcp links", "[mp][hosts]") {
  const int n = GENERATE(4, 5);
  // Ranks 0..1 on one emulated host, the rest on another: shm inside, tcp across.
  auto res = runComm(
      n, {{"BRAID_TIMEOUT", "120"}},
      [](braidComm_t comm, int rank, int size) { return sweep(comm, rank, size, false); }, 240,
      [](int rank) { setenv("BRAID_HOSTID", rank < 2 ? "emuhostA" : "emuhostB", 1); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("every algorithm is exact on 1..8 ranks, on one host and on 2 and 3 emulated hosts", "[mp][algos]") {
  // {ranks, hosts}: blocks of ceil(n / hosts) ranks per host, as braidrun --hosts gives; a negative
  // host count interleaves the hosts (rank r on host r % |hosts|), so hosts have unequal sizes and
  // non-contiguous ranks.
  const std::pair<int, int> layouts[] = {{1, 1}, {2, 1}, {3, 1}, {4, 2}, {5, 2}, {6, 3}, {7, 3}, {8, 2}, {5, -2}};
  const char* algo = GENERATE("ring", "tree", "rabenseifner", "recursive_doubling", "hierarchical");
  SweepSet set;
  // ReduceScatter: "rabenseifner" is its recursive halving; AllGather: "recursive_doubling" its
  // doubling, "ring" its ring; AllToAll: "recursive_doubling" Bruck's, "ring" the pairwise
  // exchange; the other names leave them to the selector.
  set.colls = {C::kAllReduce, C::kReduce, C::kBroadcast, C::kReduceScatter, C::kAllGather, C::kAllToAll};
  set.types = {braidInt8, braidInt32, braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
  set.largeCount = 70001;  // several pipelining chunks at 4 KiB
  for (auto [n, hosts] : layouts) {
    INFO("BRAID_ALGO=" << algo << " ranks " << n << " hosts " << hosts);
    auto res = runComm(
        n, {{"BRAID_TIMEOUT", "120"}, {"BRAID_ALGO", algo}, {"BRAID_CHUNK_SIZE", "4K"}},
        [&](braidComm_t comm, int rank, int size) { return sweep(comm, rank, size, true, set); }, 240,
        [n = n, hosts = hosts](int rank) {
          int h = hosts < 0 ? rank % -hosts : rank / ((n + hosts - 1) / hosts);
          setenv("BRAID_HOSTID", ("emuhost" + std::to_string(h)).c_str(), 1);
        });
    INFO(describe(res));
    REQUIRE(allOk(res));
  }
}

TEST_CASE("every AllReduce algorithm gives every rank the same bits, signed zeros and NaN payloads included",
          "[mp][algos]") {
  // The ops are commutative in value, not in bits: min(-0, +0) is +0 and min(+0, -0) is -0, and a
  // fold of two NaNs keeps the first one's payload. Recursive doubling's partners fold the same
  // two partial results, each its own first, and so ended with different bits (a -0 against a +0
  // over tcp) until both put the lower ranks' first.
  const char* algo = GENERATE("", "ring", "tree", "rabenseifner", "recursive_doubling", "hierarchical");
  // mp-algos-lowered runs it again with the folds as local steps after plain receives (src/lower.h).
  const char* transport = GENERATE("shm", "tcp");
  for (int n : {2, 3, 4}) {
    INFO("BRAID_ALGO=" << algo << " over " << transport << ", ranks " << n);
    auto res = runComm(
        n, {{"BRAID_TRANSPORTS", transport}, {"BRAID_ALGO", algo}, {"BRAID_CHUNK_SIZE", "4K"}},
        [](braidComm_t comm, int rank, int size) {
          for (size_t count : {size_t{9}, size_t{3000}}) {
            // Element i: a zero of the sign (rank + i) % 2 chooses, a NaN whose payload names the
            // rank, a NaN on one rank only, or a number.
            std::vector<uint32_t> in(count);
            for (size_t i = 0; i < count; ++i) {
              const uint32_t number = 0x3f800000u + static_cast<uint32_t>(rank * 977 + i * 131) % 0x7fffff;
              const uint32_t nan = 0x7fc00000u | static_cast<uint32_t>(rank + 1) << 8 | (i & 0xff);
              switch (i % 4) {
                case 0:
                  in[i] = (rank + i) % 2 != 0 ? 0x80000000u : 0u;
                  break;
                case 1:
                  in[i] = nan;
                  break;
                case 2:
                  in[i] = static_cast<int>(i / 4 % size) == rank ? nan : number;
                  break;
                default:
                  in[i] = number;
                  break;
              }
            }
            for (braidRedOp_t op : {braidSum, braidProd, braidMin, braidMax}) {
              for (bool inPlace : {false, true}) {
                std::vector<uint32_t> out(count), all(count * size);
                if (inPlace) out = in;
                CHECK_BRAID(rank, braidAllReduce(inPlace ? out.data() : in.data(), out.data(), count, braidFloat32, op,
                                                 comm, nullptr));
                CHECK_BRAID(rank, braidAllGather(out.data(), all.data(), count, braidUint32, comm, nullptr));
                for (int r = 0; r < size; ++r)
                  for (size_t i = 0; i < count; ++i)
                    if (all[r * count + i] != out[i])
                      return fail(rank, "count %zu %s %s: [%zu] is %08x here and %08x on rank %d", count,
                                  braid::redopName(op), inPlace ? "in place" : "out of place", i, out[i],
                                  all[r * count + i], r);
                for (size_t i = 0; i < count; ++i) {
                  const bool nan = (out[i] & 0x7fffffffu) > 0x7f800000u, zero = (out[i] & 0x7fffffffu) == 0;
                  if ((i % 4 == 1 || i % 4 == 2) != nan || (i % 4 == 0 && !zero))
                    return fail(rank, "count %zu %s: [%zu] is %08x", count, braid::redopName(op), i, out[i]);
                }
              }
            }
          }
          return 0;
        },
        120);
    INFO(describe(res));
    REQUIRE(allOk(res));
  }
}
