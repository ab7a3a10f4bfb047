// The link self-test and its fallback (src/link_check.h), with links broken for real by
// BRAID_TEST_LINK_FAULT: the pair lands on the next transport on both sides, collectives over the
// mix of transports are right, a pair with no transport left fails init on every rank, and with
// the self-test off nothing changes (and a corrupted link really corrupts).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/comm.h"
#include "tests/mp/harness.h"
#include "tests/scratch_dir.h"

using namespace braidtest;

namespace {

// The transport carrying this rank's link to `peer`.
std::string transportTo(braidComm_t comm, int peer) {
  braidComm* c = internalsOf(comm);
  return c->transports[c->transportOf[peer]]->name();
}

// This rank's links: on `moved` for the pair (a, b), on `usual` for every other.
int checkPlacement(braidComm_t comm, int rank, int n, int a, int b, const char* moved, const char* usual) {
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    const bool pair = (rank == a && p == b) || (rank == b && p == a);
    const std::string want = pair ? moved : usual;
    if (transportTo(comm, p) != want)
      return fail(rank, "link to rank %d is on %s, want %s", p, transportTo(comm, p).c_str(), want.c_str());
  }
  return 0;
}

// AllReduce sums of a few sizes (one element, odd, several chunks) and a message each way between
// ranks a and b: the links of every transport in use carry real traffic.
int checkTraffic(braidComm_t comm, int rank, int n, int a, int b) {
  for (size_t count : {size_t{1}, size_t{1001}, size_t{300000}}) {
    std::vector<int32_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(rank + i % 7);
    CHECK_BRAID(rank, braidAllReduce(v.data(), v.data(), count, braidInt32, braidSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      const int32_t want = static_cast<int32_t>(n * (n - 1) / 2 + n * static_cast<int>(i % 7));
      if (v[i] != want) return fail(rank, "AllReduce of %zu: element %zu is %d, want %d", count, i, v[i], want);
    }
  }
  if (rank != a && rank != b) return 0;
  const int peer = rank == a ? b : a;
  std::vector<uint8_t> out(4099), in(out.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(rank * 31 + i * 7);
  CHECK_BRAID(rank, braidGroupStart());
  CHECK_BRAID(rank, braidSend(out.data(), out.size(), braidUint8, peer, comm, nullptr));
  CHECK_BRAID(rank, braidRecv(in.data(), in.size(), braidUint8, peer, comm, nullptr));
  CHECK_BRAID(rank, braidGroupEnd());
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != static_cast<uint8_t>(peer * 31 + i * 7))
      return fail(rank, "message from rank %d: byte %zu is %u", peer, i, in[i]);
  return 0;
}

// The log lines of every rank's file in dir.
std::vector<std::string> logLines(const std::string& dir) {
  std::vector<std::string> lines;
  FILE* f = popen(("cat " + dir + "/log.* 2>/dev/null").c_str(), "r");
  if (f == nullptr) return lines;
  char line[2048];
  while (fgets(line, sizeof(line), f) != nullptr) lines.emplace_back(line);
  pclose(f);
  return lines;
}

// Whether some line holds all the needles.
bool anyLineHas(const std::vector<std::string>& lines, const std::vector<std::string>& needles) {
  for (const std::string& l : lines) {
    bool all = true;
    for (const std::string& n : needles) all = all && l.find(n) != std::string::npos;
    if (all) return true;
  }
  return false;
}

Env faultEnv(const std::string& transports, const std::string& fault, const std::string& checkMs) {
  return {{"BRAID_TRANSPORTS", transports},
          {"BRAID_TEST_LINK_FAULT", fault},
          {"BRAID_LINK_CHECK_MS", checkMs},
          {"BRAID_TIMEOUT", "60"}};
}

bool shmAndTcp() {
  if (underTest("shm") && underTest("tcp")) return true;
  WARN("SKIPPED: needs both shm and tcp working here");
  return false;
}

}  // namespace

TEST_CASE("a corrupting shm link falls back to tcp on both sides, and says so at INFO", "[mp][linkcheck]") {
  if (!shmAndTcp()) return;
  for (int n : {3, 4}) {
    ScratchDir scratch("linkcheck");
    const std::string& dir = scratch.path();
    Env env = faultEnv("shm,tcp", "shm:0-1:corrupt", "5000");
    env["BRAID_DEBUG"] = "INFO";
    env["BRAID_DEBUG_SUBSYS"] = "INIT";
    env["BRAID_DEBUG_FILE"] = dir + "/log.%p";
    auto res = runComm(n, env, [](braidComm_t comm, int rank, int size) {
      if (checkPlacement(comm, rank, size, 0, 1, "tcp", "shm") != 0) return 1;
      return checkTraffic(comm, rank, size, 0, 1);
    });
    INFO(n << " ranks: " << describe(res));
    REQUIRE(allOk(res));
    const std::vector<std::string> lines = logLines(dir);
    // Rank 0 says why rank 1 is on tcp, with the byte its test found wrong; rank 1 the same of
    // rank 0; a bystander's links are plain shm.
    CHECK(anyLineHas(lines, {"[0] braid INFO rank 1 (host ", "): tcp (shm failed its self-test: byte "}));
    CHECK(anyLineHas(lines, {"[1] braid INFO rank 0 (host ", "): tcp (shm failed its self-test: byte "}));
    CHECK(anyLineHas(lines, {"[2] braid INFO rank 0 (host ", "): shm (same host)"}));
    CHECK(anyLineHas(lines,
                     {"[0] braid WARN link self-test of shm between rank 0", "and rank 1", "moving the pair to tcp"}));
  }
}

TEST_CASE("a link that drops its messages falls back after the self-test's deadline", "[mp][linkcheck]") {
  if (!shmAndTcp()) return;
  auto res = runComm(3, faultEnv("shm,tcp", "shm:1-2:drop", "300"), [](braidComm_t comm, int rank, int size) {
    if (checkPlacement(comm, rank, size, 1, 2, "tcp", "shm") != 0) return 1;
    return checkTraffic(comm, rank, size, 1, 2);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a failure that only one side of the pair sees moves the pair on both sides", "[mp][linkcheck]") {
  if (!shmAndTcp()) return;
  for (const char* mode : {"drop", "corrupt"}) {
    // Only rank 0 breaks its end: with drop, rank 2 waits in vain while rank 0's test passes; with
    // corrupt, rank 0 sees a wrong byte while rank 2's test passes.
    auto res = runComm(
        3, faultEnv("shm,tcp", "", "300"),
        [](braidComm_t comm, int rank, int size) {
          if (checkPlacement(comm, rank, size, 0, 2, "tcp", "shm") != 0) return 1;
          return checkTraffic(comm, rank, size, 0, 2);
        },
        240,
        [mode](int rank) {
          if (rank == 0) setenv("BRAID_TEST_LINK_FAULT", (std::string("shm:0-2:") + mode).c_str(), 1);
        });
    INFO(mode << ": " << describe(res));
    REQUIRE(allOk(res));
  }
}

TEST_CASE("a link whose posts fail falls back, also from tcp to shm", "[mp][linkcheck]") {
  if (!shmAndTcp()) return;
  // tcp first: the pair moves to shm, so shm's connect runs a second time on one communicator.
  auto res = runComm(3, faultEnv("tcp,shm", "tcp:0-2:error", "5000"), [](braidComm_t comm, int rank, int size) {
    if (checkPlacement(comm, rank, size, 0, 2, "shm", "tcp") != 0) return 1;
    return checkTraffic(comm, rank, size, 0, 2);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a pair whose every transport fails its self-test fails init on every rank, naming the pair",
          "[mp][linkcheck]") {
  if (!underTest("shm")) {
    WARN("SKIPPED: shm does not work here");
    return;
  }
  struct Case {
    const char* transports;
    const char* fault;
    const char* tried;
  };
  std::vector<Case> cases = {{"shm", "shm:0-1:corrupt", "tried shm of"}};
  if (underTest("tcp")) cases.push_back({"shm,tcp", "shm:0-1:corrupt,tcp:0-1:error", "tried shm, tcp of"});
  for (const Case& c : cases) {
    braidUniqueId uid;
    REQUIRE(braidGetUniqueId(&uid) == braidSuccess);
    auto res = forkRanks(3, faultEnv(c.transports, c.fault, "5000"), [&](int rank, int size) {
      braidComm_t comm = nullptr;
      braidResult_t r = braidCommInitRank(&comm, size, uid, rank);
      if (r == braidSuccess) return fail(rank, "init succeeded with every transport of the pair broken");
      const std::string msg = braidGetLastError();
      for (const char* needle : {"the link between rank 0 (host ", "and rank 1 (host ", c.tried})
        if (msg.find(needle) == std::string::npos) return fail(rank, "message lacks '%s': %s", needle, msg.c_str());
      return 0;
    });
    INFO(c.transports << " with " << c.fault << ": " << describe(res));
    CHECK(allOk(res));
  }
}

TEST_CASE("with the self-test off, nothing moves; a corrupting link then really corrupts", "[mp][linkcheck]") {
  if (!shmAndTcp()) return;
  auto res = runComm(3, faultEnv("shm,tcp", "", "0"), [](braidComm_t comm, int rank, int size) {
    if (checkPlacement(comm, rank, size, 0, 1, "shm", "shm") != 0) return 1;
    return checkTraffic(comm, rank, size, 0, 1);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  // The fault is real: unchecked, the pair stays on shm and its messages arrive with a byte flipped.
  res = runComm(2, faultEnv("shm,tcp", "shm:0-1:corrupt", "0"), [](braidComm_t comm, int rank, int size) {
    if (checkPlacement(comm, rank, size, 0, 1, "shm", "shm") != 0) return 1;
    std::vector<uint8_t> out(1000, static_cast<uint8_t>(rank)), in(out.size(), static_cast<uint8_t>(rank));
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidSend(out.data(), out.size(), braidUint8, 1 - rank, comm, nullptr));
    CHECK_BRAID(rank, braidRecv(in.data(), in.size(), braidUint8, 1 - rank, comm, nullptr));
    CHECK_BRAID(rank, braidGroupEnd());
    size_t wrong = 0;
    for (uint8_t b : in) wrong += b != static_cast<uint8_t>(1 - rank);
    return wrong == 1 ? 0 : fail(rank, "%zu bytes of the corrupted link's message differ, want 1", wrong);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("ranks that disagree on whether to self-test the links fail init on every rank", "[mp][linkcheck]") {
  braidUniqueId uid;
  REQUIRE(braidGetUniqueId(&uid) == braidSuccess);
  auto res = forkRanks(3, {{"BRAID_TIMEOUT", "60"}}, [&](int rank, int size) {
    if (rank == 1) setenv("BRAID_LINK_CHECK_MS", "0", 1);
    braidComm_t comm = nullptr;
    braidResult_t r = braidCommInitRank(&comm, size, uid, rank);
    if (r != braidInvalidUsage) return fail(rank, "init gave %s: %s", braidGetErrorString(r), braidGetLastError());
    if (strstr(braidGetLastError(), "link self-test") == nullptr || strstr(braidGetLastError(), "rank 1") == nullptr)
      return fail(rank, "message lacks the setting or the rank: %s", braidGetLastError());
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("BRAID_LINK_CHECK_MS and BRAID_TEST_LINK_FAULT out of range fail init naming the variable",
          "[mp][linkcheck]") {
  struct Bad {
    const char* var;
    const char* value;
  };
  for (const Bad& b : {Bad{"BRAID_LINK_CHECK_MS", "-1"}, Bad{"BRAID_LINK_CHECK_MS", "soon"},
                       Bad{"BRAID_TEST_LINK_FAULT", "shm:0-0:corrupt"}, Bad{"BRAID_TEST_LINK_FAULT", "shm:0-1:melt"},
                       Bad{"BRAID_TEST_LINK_FAULT", "warp:0-1:drop"}, Bad{"BRAID_TEST_LINK_FAULT", "shm-0-1"}}) {
    auto res = forkRanks(1, {{b.var, b.value}}, [&](int rank, int) {
      braidUniqueId uid;
      braidComm_t c = nullptr;
      braidResult_t r = braidGetUniqueId(&uid);
      if (r == braidSuccess) r = braidCommInitRank(&c, 1, uid, 0);
      if (r != braidInvalidArgument) return fail(rank, "%s=%s gave %s", b.var, b.value, braidGetErrorString(r));
      if (strstr(braidGetLastError(), b.var) == nullptr)
        return fail(rank, "message lacks %s: %s", b.var, braidGetLastError());
      return 0;
    });
    INFO(b.var << "=" << b.value << ": " << describe(res));
    CHECK(allOk(res));
  }
}
