// The ibverbs transport as a communicator sees it, with real processes. What needs no RDMA device
// runs everywhere: without one, `BRAID_TRANSPORTS=ibverbs,tcp` falls back to tcp and
// `BRAID_TRANSPORTS=ibverbs` alone fails init saying "no RDMA device"; bad ibverbs settings fail
// init naming the variable; without libibverbs itself (BRAID_IB_LIBRARY naming a missing file) the
// same happens, in words naming the library. With a device the same tests check that ibverbs
// carries the links (the Link contract, tests/mp/test_links.cc, and the collective sweep,
// tests/mp/test_collectives.cc, pick it up through transportsUnderTest()).
#include "braid_build_config.h"

#if BRAID_HAVE_IBVERBS

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "src/comm.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// The name of the transport carrying rank's link to peer.
std::string carrier(braidComm_t comm, int peer) {
  braidComm* c = internalsOf(comm);
  const int t = c->transportOf[peer];
  return t < 0 ? "none" : c->transports[t]->name();
}

// The link to the other rank is carried by `want`, and a small AllReduce over it is right.
int carriedAndSums(braidComm_t comm, int rank, const std::string& want) {
  const std::string got = carrier(comm, 1 - rank);
  if (got != want) return fail(rank, "the link is carried by %s, not %s", got.c_str(), want.c_str());
  std::vector<float> x(1000, static_cast<float>(rank + 1));
  CHECK_BRAID(rank, braidAllReduce(x.data(), x.data(), x.size(), braidFloat32, braidSum, comm, nullptr));
  for (float v : x)
    if (v != 3.0f) return fail(rank, "AllReduce gave %g", static_cast<double>(v));
  return 0;
}

// Init with BRAID_TRANSPORTS=ibverbs alone (in `env`) fails with braidInvalidUsage on both ranks,
// leaves the handle as it was, and says `why` after naming ibverbs.
std::vector<RankResult> initRefused(Env env, const std::string& why) {
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) return {};
  env["BRAID_TRANSPORTS"] = "ibverbs";
  env["BRAID_TIMEOUT"] = "60";
  return forkRanks(2, env, [&](int rank, int n) {
    braidComm_t comm = reinterpret_cast<braidComm_t>(0x5eed);
    braidResult_t r = braidCommInitRank(&comm, n, id, rank);
    const std::string msg = braidGetLastError();
    if (r != braidInvalidUsage)
      return fail(rank, "init over ibverbs alone gave %s: %s", braidGetErrorString(r), msg.c_str());
    if (comm != reinterpret_cast<braidComm_t>(0x5eed)) return fail(rank, "the failed init wrote the handle");
    if (msg.find("ibverbs: " + why) == std::string::npos)
      return fail(rank, "the error does not say 'ibverbs: %s': %s", why.c_str(), msg.c_str());
    return 0;
  });
}

}  // namespace

TEST_CASE("BRAID_TRANSPORTS=ibverbs,tcp: ibverbs where there is a device, else tcp", "[mp][ibverbs]") {
  const std::string none = rdmaAbsence();
  const std::string want = none.empty() ? "ibverbs" : "tcp";
  INFO("expecting " << want << (none.empty() ? "" : ": " + none));
  auto res = runComm(2, {{"BRAID_TRANSPORTS", "ibverbs,tcp"}, {"BRAID_TIMEOUT", "60"}},
                     [&](braidComm_t comm, int rank, int) { return carriedAndSums(comm, rank, want); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("BRAID_TRANSPORTS=ibverbs without a device fails init saying so, and changes nothing", "[mp][ibverbs]") {
  const std::string none = rdmaAbsence();
  if (none.empty()) {
    WARN("this machine has an RDMA device: the no-device refusal cannot be checked here");
    return;
  }
  const auto res = initRefused({}, none);
  REQUIRE(res.size() == 2);
  INFO(describe(res));
  REQUIRE(allOk(res));
  WARN(none << ": checked the refusal; the data path needs a device");
}

TEST_CASE("without libibverbs, ibverbs refuses every pair as without a device, naming the library", "[mp][ibverbs]") {
  // libbraid opens libibverbs when a transport list names ibverbs (transports/ibverbs/ib_api.h); a
  // missing one must not fail the process or a list with a fallback.
  const char* kMissing = "libbraid-no-such-verbs.so.1";
  auto res = runComm(2, {{"BRAID_TRANSPORTS", "ibverbs,tcp"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_IB_LIBRARY", kMissing}},
                     [&](braidComm_t comm, int rank, int) { return carriedAndSums(comm, rank, "tcp"); });
  INFO(describe(res));
  REQUIRE(allOk(res));

  res = initRefused({{"BRAID_IB_LIBRARY", kMissing}}, std::string("cannot load ") + kMissing);
  REQUIRE(res.size() == 2);
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("bad ibverbs settings fail init on every rank naming the variable", "[mp][ibverbs][errors]") {
  struct Case {
    const char* var;
    const char* value;
  };
  // A ring slot off the cache line, a ring beyond what the immediate carries, a malformed device.
  for (const Case& c :
       {Case{"BRAID_IB_SLOT_SIZE", "100"}, Case{"BRAID_IB_SLOTS", "5000"}, Case{"BRAID_IB_SLOT_SIZE", "1M"},
        Case{"BRAID_IB_HCA", "mlx5_0:zero"}, Case{"BRAID_IB_MTU", "9000"}, Case{"BRAID_IB_RETRY_CNT", "8"}}) {
    INFO(c.var << "=" << c.value);
    braidUniqueId id;
    REQUIRE(braidGetUniqueId(&id) == braidSuccess);
    auto res = forkRanks(
        2, {{"BRAID_TRANSPORTS", "ibverbs,tcp"}, {"BRAID_TIMEOUT", "60"}, {c.var, c.value}},
        [&](int rank, int n) {
          braidComm_t comm = nullptr;
          braidResult_t r = braidCommInitRank(&comm, n, id, rank);
          if (r != braidInvalidArgument)
            return fail(rank, "init gave %s: %s", braidGetErrorString(r), braidGetLastError());
          if (strstr(braidGetLastError(), c.var) == nullptr)
            return fail(rank, "the error does not name %s: %s", c.var, braidGetLastError());
          return 0;
        },
        120);
    INFO(describe(res));
    REQUIRE(allOk(res));
  }
}

TEST_CASE("ibverbs alone carries every collective where there is a device", "[mp][ibverbs]") {
  const std::string none = rdmaAbsence();
  if (none.empty() != underTest("ibverbs")) {
    // A device that the probe communicator could not use: say so rather than pass.
    FAIL("ibv_get_device_list and the harness's probe disagree: " << (none.empty() ? "a device, but" : none)
                                                                  << " (see the harness line above)");
  }
  if (!none.empty()) {
    WARN(none << ": SKIPPING the ibverbs data path");
    return;
  }
  const int n = GENERATE(2, 3, 4);
  auto res =
      runComm(n,
              {{"BRAID_TRANSPORTS", "ibverbs"},
               {"BRAID_TIMEOUT", "60"},
               {"BRAID_IB_SLOT_SIZE", "192"},
               {"BRAID_IB_SLOTS", "4"}},
              [](braidComm_t comm, int rank, int size) {
                for (int p = 0; p < size; ++p)
                  if (p != rank && carrier(comm, p) != "ibverbs")
                    return fail(rank, "peer %d is carried by %s", p, carrier(comm, p).c_str());
                // Counts around the 192-byte slot and far beyond the 4-slot ring.
                for (size_t count : {size_t{0}, size_t{1}, size_t{47}, size_t{48}, size_t{49}, size_t{100003}}) {
                  std::vector<double> x(count);
                  for (size_t i = 0; i < count; ++i) x[i] = static_cast<double>(rank + i % 7);
                  CHECK_BRAID(rank, braidAllReduce(x.data(), x.data(), count, braidFloat64, braidSum, comm, nullptr));
                  for (size_t i = 0; i < count; ++i) {
                    const double want = size * (size - 1) / 2.0 + size * static_cast<double>(i % 7);
                    if (x[i] != want)
                      return fail(rank, "count %zu: element %zu is %g, expected %g", count, i, x[i], want);
                  }
                }
                return 0;
              });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

#endif  // BRAID_HAVE_IBVERBS
