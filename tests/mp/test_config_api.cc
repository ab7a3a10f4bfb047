// braidConfig_t and braidCommInitRankConfig; braidCommRegister/Deregister; braidMemAlloc/Free.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "src/api.h"
#include "src/comm.h"
#include "src/cuda/runtime.h"
#include "tests/mp/harness.h"
#include "tests/scratch_dir.h"

using namespace braidtest;

namespace {

// Runs every rank's body with a communicator made by braidCommInitRankConfig(config).
std::vector<RankResult> runWithConfig(int n, const Env& env, const braidConfig_t& config,
                                      const std::function<int(braidComm_t, int)>& body) {
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) return std::vector<RankResult>(n);
  return forkRanks(n, env, [&](int rank, int size) {
    braidConfig_t c = config;
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRankConfig(&comm, size, id, rank, &c));
    int rc = body(comm, rank);
    if (rc != 0) {
      braidCommAbort(comm);
      return rc;
    }
    CHECK_BRAID(rank, braidCommDestroy(comm));
    return 0;
  });
}

}  // namespace

TEST_CASE("a config's transports override BRAID_TRANSPORTS for its communicator", "[mp][config]") {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.transports = "tcp";
  // Both ranks share a host, where shm would be chosen; the config asks for tcp alone.
  auto res = runWithConfig(2, {{"BRAID_TRANSPORTS", "shm"}}, config, [](braidComm_t comm, int rank) {
    braidComm* c = internalsOf(comm);
    if (c->transports.size() != 1 || strcmp(c->transports[0]->name(), "tcp") != 0)
      return fail(rank, "the communicator uses %zu transports, the first %s", c->transports.size(),
                  c->transports.empty() ? "none" : c->transports[0]->name());
    std::vector<float> in(1000, static_cast<float>(rank + 1)), out(1000, 0.0f);
    CHECK_BRAID(rank, braidAllReduce(in.data(), out.data(), in.size(), braidFloat32, braidSum, comm, nullptr));
    for (float v : out)
      if (v != 3.0f) return fail(rank, "AllReduce over tcp gave %g", v);
    // A communicator split from this one keeps the config's transports.
    braidComm_t half = nullptr;
    CHECK_BRAID(rank, braidCommSplit(comm, 0, rank, &half));
    braidComm* h = internalsOf(half);
    const bool tcp = h->transports.size() == 1 && strcmp(h->transports[0]->name(), "tcp") == 0;
    CHECK_BRAID(rank, braidCommDestroy(half));
    if (!tcp) return fail(rank, "the split communicator does not keep the config's transports");
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));

  // Without the config the environment's list applies.
  res = runComm(2, {{"BRAID_TRANSPORTS", "shm"}}, [](braidComm_t comm, int rank, int) {
    braidComm* c = internalsOf(comm);
    if (c->transports.size() != 1 || strcmp(c->transports[0]->name(), "shm") != 0)
      return fail(rank, "BRAID_TRANSPORTS=shm was not honoured without a config");
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("a config's timeout overrides BRAID_TIMEOUT", "[mp][config]") {
  // Rank 1 never joins: rank 0's init must end by the config's 2 seconds, not BRAID_TIMEOUT's 200
  // (the harness kills it after 60 s).
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(
      1, {{"BRAID_TIMEOUT", "200"}},
      [&](int rank, int) {
        braidConfig_t config = BRAID_CONFIG_INITIALIZER;
        config.timeoutSec = 2;
        braidComm_t comm = nullptr;
        braidResult_t r = braidCommInitRankConfig(&comm, 2, id, 0, &config);
        if (r != braidTimeout)
          return fail(rank, "init without the second rank gave %s: %s", braidGetErrorString(r), braidGetLastError());
        if (comm != nullptr) return fail(rank, "a failed init set *comm");
        return 0;
      },
      60);
  INFO(describe(res));
  CHECK(allOk(res));
  // And the communicator runs with it.
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  config.timeoutSec = 7;
  res = runWithConfig(2, {{"BRAID_TIMEOUT", "200"}}, config, [](braidComm_t comm, int rank) {
    if (internalsOf(comm)->settings.timeoutSec != 7)
      return fail(rank, "timeout %g", internalsOf(comm)->settings.timeoutSec);
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("a bad config is braidInvalidArgument naming the field, and changes nothing", "[mp][config]") {
  auto res = forkRanks(1, {}, [](int rank, int) {
    braidUniqueId id;
    CHECK_BRAID(rank, braidGetUniqueId(&id));
    struct Case {
      const char* what;
      braidConfig_t config;
      const char* needle;
    };
    std::vector<Case> cases;
    auto with = [&](const char* what, const char* needle, auto edit) {
      braidConfig_t c = BRAID_CONFIG_INITIALIZER;
      edit(c);
      cases.push_back({what, c, needle});
    };
    with("zeroed struct", "config->magic", [](braidConfig_t& c) { memset(&c, 0, sizeof(c)); });
    with("wrong magic", "config->magic", [](braidConfig_t& c) { c.magic ^= 1; });
    with("small size", "config->size", [](braidConfig_t& c) { c.size = 8; });
    with("large size", "config->size", [](braidConfig_t& c) { c.size += 8; });
    with("future version", "config->version", [](braidConfig_t& c) { c.version = BRAID_VERSION_CODE + 1; });
    with("unknown transport", "config->transports", [](braidConfig_t& c) { c.transports = "shm,pigeon"; });
    with("empty transports", "config->transports", [](braidConfig_t& c) { c.transports = " , "; });
    with("cuda memory", "config->memType", [](braidConfig_t& c) { c.memType = braidMemCuda; });
    with("bad memory type", "config->memType", [](braidConfig_t& c) { c.memType = 7; });
    with("negative timeout", "config->timeoutSec", [](braidConfig_t& c) { c.timeoutSec = -1; });
    with("huge timeout", "config->timeoutSec", [](braidConfig_t& c) { c.timeoutSec = 2000000000; });
    with("p2pTags 2", "config->p2pTags", [](braidConfig_t& c) { c.p2pTags = 2; });
    with("negative device", "config->cudaDevice", [](braidConfig_t& c) { c.cudaDevice = -1; });
    with("huge device", "config->cudaDevice", [](braidConfig_t& c) { c.cudaDevice = 1024; });
    for (Case& c : cases) {
      braidComm_t comm = reinterpret_cast<braidComm_t>(uintptr_t{0x1234});
      braidResult_t r = braidCommInitRankConfig(&comm, 1, id, 0, &c.config);
      if (r != braidInvalidArgument) return fail(rank, "%s: got %s", c.what, braidGetErrorString(r));
      if (strstr(braidGetLastError(), c.needle) == nullptr)
        return fail(rank, "%s: the message does not name %s: %s", c.what, c.needle, braidGetLastError());
      if (comm != reinterpret_cast<braidComm_t>(uintptr_t{0x1234})) return fail(rank, "%s: *comm was written", c.what);
    }
    // The id is still good: a valid config (and a NULL one) initializes a communicator of one.
    braidConfig_t ok = BRAID_CONFIG_INITIALIZER;
    ok.memType = braidMemHost;
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRankConfig(&comm, 1, id, 0, &ok));
    CHECK_BRAID(rank, braidCommDestroy(comm));
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("ranks whose configs name different transports are refused", "[mp][config]") {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(2, {}, [&](int rank, int size) {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.transports = rank == 0 ? "shm,tcp" : "tcp";
    braidComm_t comm = nullptr;
    braidResult_t r = braidCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != braidInvalidUsage) return fail(rank, "got %s: %s", braidGetErrorString(r), braidGetLastError());
    if (strstr(braidGetLastError(), "BRAID_TRANSPORTS") == nullptr)
      return fail(rank, "message: %s", braidGetLastError());
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

// Both change what init exchanges (the self-test's messages and agreement; the tag links, one more
// connect of every transport), so ranks that differ are refused before either would wait for the
// other. Neither message had a test.
TEST_CASE("ranks whose link self-test or BRAID_P2P_TAGS differ are refused, naming the setting", "[mp][config]") {
  const char* name = GENERATE("BRAID_LINK_CHECK_MS", "BRAID_P2P_TAGS");
  INFO(name);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(2, {{"BRAID_TIMEOUT", "30"}}, [&](int rank, int size) {
    const bool check = strcmp(name, "BRAID_LINK_CHECK_MS") == 0;
    setenv(name, rank == 1 ? "0" : (check ? "5000" : "1"), 1);
    braidComm_t comm = nullptr;
    const braidResult_t r = braidCommInitRank(&comm, size, id, rank);
    if (r != braidInvalidUsage) return fail(rank, "got %s: %s", braidGetErrorString(r), braidGetLastError());
    const std::string want = check ? std::string("rank ") + (rank == 0 ? "1 has the link self-test off, rank 0 on"
                                                                       : "0 has the link self-test on, rank 1 off")
                                   : std::string("rank ") + (rank == 0 ? "1 has BRAID_P2P_TAGS=0, rank 0 has 1"
                                                                       : "0 has BRAID_P2P_TAGS=1, rank 1 has 0");
    if (strstr(braidGetLastError(), want.c_str()) == nullptr || strstr(braidGetLastError(), name) == nullptr)
      return fail(rank, "message lacks \"%s\" or %s: %s", want.c_str(), name, braidGetLastError());
    if (comm != nullptr) return fail(rank, "comm was set");
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

// Both decide how a call on device buffers is cut and where it runs, so a difference would leave
// ranks waiting for pieces their peers never post; checked at init also where no GPU is present.
TEST_CASE(
    "BRAID_CUDA_STAGING_PIECE or BRAID_CUDA_IPC_MIN that differs between ranks fails init on every rank naming it",
    "[mp][config]") {
  const char* name = GENERATE("BRAID_CUDA_STAGING_PIECE", "BRAID_CUDA_IPC_MIN");
  INFO(name);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(3, {{"BRAID_TIMEOUT", "30"}}, [&](int rank, int size) {
    setenv(name, rank == 2 ? "4M" : "2M", 1);
    braidComm_t comm = nullptr;
    const braidResult_t r = braidCommInitRank(&comm, size, id, rank);
    if (r != braidInvalidUsage) return fail(rank, "got %s: %s", braidGetErrorString(r), braidGetLastError());
    const std::string want = std::string(name) + " differs: " + (rank == 2 ? "2097152 on rank 0" : "4194304 on rank 2");
    if (strstr(braidGetLastError(), want.c_str()) == nullptr)
      return fail(rank, "message lacks \"%s\": %s", want.c_str(), braidGetLastError());
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("registrations: counted, per communicator, refused when stale or foreign", "[mp][config]") {
  auto res = forkRanks(1, {}, [](int rank, int) {
    braidUniqueId a, b;
    CHECK_BRAID(rank, braidGetUniqueId(&a));
    CHECK_BRAID(rank, braidGetUniqueId(&b));
    braidComm_t comm = nullptr, other = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, 1, a, 0));
    CHECK_BRAID(rank, braidCommInitRank(&other, 1, b, 0));
    std::vector<char> buf(1 << 16);
    void* const kUntouched = reinterpret_cast<void*>(uintptr_t{0x5678});
    void* h = kUntouched;
    // Bad arguments: an error, *handle untouched, nothing recorded.
    if (braidCommRegister(nullptr, buf.data(), buf.size(), &h) != braidInvalidArgument || h != kUntouched)
      return fail(rank, "NULL comm accepted");
    if (braidCommRegister(comm, nullptr, buf.size(), &h) != braidInvalidArgument || h != kUntouched)
      return fail(rank, "NULL buff accepted");
    if (braidCommRegister(comm, buf.data(), 0, &h) != braidInvalidArgument || h != kUntouched)
      return fail(rank, "size 0 accepted");
    if (braidCommRegister(comm, buf.data(), buf.size(), nullptr) != braidInvalidArgument)
      return fail(rank, "NULL handle accepted");
    if (internalsOf(comm)->regions.count() != 0) return fail(rank, "a refused registration was recorded");

    // The same range twice: one region, counted twice. An overlapping range: a region of its own.
    void *h1 = nullptr, *h2 = nullptr, *h3 = nullptr;
    CHECK_BRAID(rank, braidCommRegister(comm, buf.data(), buf.size(), &h1));
    CHECK_BRAID(rank, braidCommRegister(comm, buf.data(), buf.size(), &h2));
    CHECK_BRAID(rank, braidCommRegister(comm, buf.data() + 100, 1000, &h3));
    if (h1 != h2 || h1 == h3 || h1 == nullptr) return fail(rank, "handles %p %p %p", h1, h2, h3);
    if (internalsOf(comm)->regions.count() != 2) return fail(rank, "%zu regions", internalsOf(comm)->regions.count());

    // Another communicator's handle, a value never handed out, NULL: refused, nothing changes.
    if (braidCommDeregister(other, h1) != braidInvalidArgument ||
        strstr(braidGetLastError(), "another communicator") == nullptr)
      return fail(rank, "a foreign handle was accepted: %s", braidGetLastError());
    if (braidCommDeregister(comm, buf.data()) != braidInvalidArgument) return fail(rank, "a stray pointer accepted");
    if (braidCommDeregister(comm, nullptr) != braidInvalidArgument) return fail(rank, "NULL accepted");
    if (internalsOf(comm)->regions.count() != 2) return fail(rank, "a refused deregister changed the regions");

    // Two registrations, two deregisters; then the handle is stale.
    CHECK_BRAID(rank, braidCommDeregister(comm, h1));
    if (internalsOf(comm)->regions.count() != 2)
      return fail(rank, "the first deregister ended a twice-registered region");
    CHECK_BRAID(rank, braidCommDeregister(comm, h2));
    if (internalsOf(comm)->regions.count() != 1) return fail(rank, "the last deregister kept the region");
    if (braidCommDeregister(comm, h1) != braidInvalidArgument || strstr(braidGetLastError(), "deregistered") == nullptr)
      return fail(rank, "a deregistered handle was accepted: %s", braidGetLastError());
    // A new region may take the freed slot; the old handle still does not name it.
    void* h4 = nullptr;
    CHECK_BRAID(rank, braidCommRegister(comm, buf.data() + 5000, 10, &h4));
    if (h4 == h1) return fail(rank, "a new region got a stale handle's value");
    if (braidCommDeregister(comm, h1) != braidInvalidArgument) return fail(rank, "a stale handle named a new region");

    // Destroy releases what is left: h3 and h4 are refused afterwards, on any communicator.
    CHECK_BRAID(rank, braidCommDestroy(comm));
    if (braidCommDeregister(other, h3) != braidInvalidArgument || strstr(braidGetLastError(), "destroyed") == nullptr)
      return fail(rank, "a region of a destroyed communicator: %s", braidGetLastError());
    CHECK_BRAID(rank, braidCommDestroy(other));
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("braidMemAlloc gives page-aligned zeroed host memory; braidMemFree refuses what it did not give",
          "[mp][config]") {
  auto res = forkRanks(1, {}, [](int rank, int) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    void* const kUntouched = reinterpret_cast<void*>(uintptr_t{0x9abc});
    void* p = kUntouched;
    if (braidMemAlloc(nullptr, 64) != braidInvalidArgument) return fail(rank, "NULL ptr accepted");
    if (braidMemAlloc(&p, 0) != braidInvalidArgument || p != kUntouched) return fail(rank, "size 0 accepted");
    if (braidMemAlloc(&p, SIZE_MAX) == braidSuccess || p != kUntouched) return fail(rank, "SIZE_MAX accepted");
    CHECK_BRAID(rank, braidMemAlloc(&p, 10000));
    if (reinterpret_cast<uintptr_t>(p) % page != 0) return fail(rank, "%p is not page-aligned", p);
    const char* bytes = static_cast<const char*>(p);
    for (int i = 0; i < 10000; ++i)
      if (bytes[i] != 0) return fail(rank, "byte %d is not zero", i);
    memset(p, 0x5a, 10000);
    // Memory braid did not hand out, and an interior pointer, are refused and freed nothing.
    std::vector<char> mine(64);
    if (braidMemFree(mine.data()) != braidInvalidArgument) return fail(rank, "a foreign pointer was freed");
    if (braidMemFree(static_cast<char*>(p) + 64) != braidInvalidArgument) return fail(rank, "an interior pointer");
    if (static_cast<unsigned char*>(p)[9999] != 0x5a) return fail(rank, "the allocation changed");
    CHECK_BRAID(rank, braidMemFree(p));
    if (braidMemFree(p) != braidInvalidArgument || strstr(braidGetLastError(), "freed already") == nullptr)
      return fail(rank, "a double free: %s", braidGetLastError());
    CHECK_BRAID(rank, braidMemFree(nullptr));
    // Registrable like any host buffer.
    braidUniqueId id;
    CHECK_BRAID(rank, braidGetUniqueId(&id));
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, 1, id, 0));
    void* q = nullptr;
    void* h = nullptr;
    CHECK_BRAID(rank, braidMemAlloc(&q, 1 << 20));
    CHECK_BRAID(rank, braidCommRegister(comm, q, 1 << 20, &h));
    CHECK_BRAID(rank, braidCommDeregister(comm, h));
    CHECK_BRAID(rank, braidCommDestroy(comm));
    CHECK_BRAID(rank, braidMemFree(q));
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("a topology file's chunk_bytes is the chunk the plans are cut in", "[mp][config][topo]") {
  ScratchDir dir("chunk");
  const std::string& d = dir.path();
  // A machine dump, with the cost line's chunk set to 4 KiB (the default is 256 KiB).
  auto res = runComm(2, {{"BRAID_TOPO_DUMP_FILE", d + "/machine.topo"}}, [](braidComm_t, int, int) { return 0; });
  REQUIRE(allOk(res));
  std::string file = readFile(d + "/machine.topo");
  size_t at = file.find("chunk_bytes=");
  REQUIRE(at != std::string::npos);
  file.replace(at, file.find_first_of(" \n", at) - at, "chunk_bytes=4096");
  std::ofstream(d + "/small-chunk.topo") << file;
  const Env env = {{"BRAID_TOPO_FILE", d + "/small-chunk.topo"},
                   {"BRAID_ALGO", "ring"},
                   {"BRAID_DEBUG", "INFO"},
                   {"BRAID_DEBUG_SUBSYS", "PLAN"},
                   {"BRAID_DEBUG_FILE", d + "/plan.%p"}};
  res = runComm(2, env, [](braidComm_t comm, int rank, int) {
    if (internalsOf(comm)->settings.chunkBytes != 4096)
      return fail(rank, "chunk %llu", static_cast<unsigned long long>(internalsOf(comm)->settings.chunkBytes));
    std::vector<float> in(1 << 14, 1.0f), out(in.size(), 0.0f);  // 64 KiB: a 32 KiB piece per rank
    CHECK_BRAID(rank, braidAllReduce(in.data(), out.data(), in.size(), braidFloat32, braidSum, comm, nullptr));
    for (float v : out)
      if (v != 2.0f) return fail(rank, "AllReduce gave %g", v);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  // The ring's sends, in the plans printed: 4 KiB each, not the default 32 KiB pieces.
  FILE* ls = popen(("cat " + d + "/plan.*").c_str(), "r");
  REQUIRE(ls != nullptr);
  char line[512];
  uint64_t sends = 0, largest = 0;
  while (fgets(line, sizeof(line), ls) != nullptr) {
    unsigned idx = 0;
    char kind[32] = {};
    unsigned long long bytes = 0;
    if (strstr(line, "allreduce/ring") == nullptr && sscanf(line, " %u %31s %llu B", &idx, kind, &bytes) == 3 &&
        strcmp(kind, "send") == 0) {
      ++sends;
      largest = std::max<uint64_t>(largest, bytes);
    }
  }
  pclose(ls);
  CHECK(sends > 0);
  CHECK(largest == 4096);
}

TEST_CASE("BRAID_DEBUG_SUBSYS=P2P logs each send and receive posted, with peer and bytes", "[mp][config][p2p]") {
  ScratchDir dir("p2plog");
  const std::string& d = dir.path();
  const Env env = {{"BRAID_DEBUG_SUBSYS", "P2P"}, {"BRAID_DEBUG_FILE", d + "/log.%p"}};
  auto res = runComm(2, env, [](braidComm_t comm, int rank, int) {
    std::vector<int32_t> mine(16, rank), theirs(16, -1);
    const int peer = 1 - rank;
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidSend(mine.data(), mine.size(), braidInt32, peer, comm, nullptr));
    CHECK_BRAID(rank, braidRecv(theirs.data(), theirs.size(), braidInt32, peer, comm, nullptr));
    CHECK_BRAID(rank, braidGroupEnd());
    if (theirs[0] != peer) return fail(rank, "received %d", theirs[0]);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  FILE* in = popen(("cat " + d + "/log.*").c_str(), "r");
  REQUIRE(in != nullptr);
  std::string all;
  char line[512];
  while (fgets(line, sizeof(line), in) != nullptr) all += line;
  pclose(in);
  INFO(all);
  CHECK(all.find("send to rank 1: 64 bytes") != std::string::npos);
  CHECK(all.find("receive from rank 1: 64 bytes") != std::string::npos);
  CHECK(all.find("send to rank 0: 64 bytes") != std::string::npos);
  CHECK(all.find("receive from rank 0: 64 bytes") != std::string::npos);
}

// config->p2pTags decides over BRAID_P2P_TAGS, both ways; a derived communicator (split) keeps it.
TEST_CASE("config->p2pTags turns the tag links on or off over BRAID_P2P_TAGS", "[mp][p2p][tags][config]") {
  for (const int want : {1, 0}) {
    braidConfig_t config = BRAID_CONFIG_INITIALIZER;
    config.p2pTags = want;
    auto res = runWithConfig(2, {{"BRAID_P2P_TAGS", want ? "0" : "1"}}, config, [want](braidComm_t comm, int rank) {
      braidComm_t half = nullptr;
      CHECK_BRAID(rank, braidCommSplit(comm, 0, rank, &half));
      for (braidComm_t c : {comm, half}) {
        int32_t v = rank, got = -1;
        int source = -1;
        braidResult_t r = braidSuccess;
        if (rank == 0) r = braidSendTagged(&v, 1, braidInt32, 1, 4, c, nullptr);
        if (rank == 1) r = braidRecvTagged(&got, 1, braidInt32, BRAID_ANY_SOURCE, 4, c, nullptr, &source);
        if (want == 1 && (r != braidSuccess || (rank == 1 && (got != 0 || source != 0))))
          return fail(rank, "p2pTags 1: %s: %s (got %d from %d)", braidGetErrorString(r), braidGetLastError(), got,
                      source);
        if (want == 0 && r != braidInvalidUsage)
          return fail(rank, "p2pTags 0: %s, not braidInvalidUsage", braidGetErrorString(r));
      }
      CHECK_BRAID(rank, braidCommDestroy(half));
      return 0;
    });
    INFO("config->p2pTags " << want << ": " << describe(res));
    REQUIRE(allOk(res));
  }
  // A caller built against the first layout (which ends at timeoutSec) passes a shorter struct: what
  // lies past it is not read, and BRAID_P2P_TAGS decides.
  braidConfig_t old = BRAID_CONFIG_INITIALIZER;
  old.size = offsetof(braidConfig_t, p2pTags);
  old.p2pTags = 7;
  auto res = runWithConfig(2, {{"BRAID_P2P_TAGS", "1"}}, old, [](braidComm_t comm, int rank) {
    int32_t v = rank, got = -1;
    if (rank == 0) CHECK_BRAID(rank, braidSendTagged(&v, 1, braidInt32, 1, 0, comm, nullptr));
    if (rank == 1) CHECK_BRAID(rank, braidRecvTagged(&got, 1, braidInt32, 0, 0, comm, nullptr, nullptr));
    return rank == 1 && got != 0 ? fail(rank, "got %d", got) : 0;
  });
  INFO("first-layout config: " << describe(res));
  REQUIRE(allOk(res));
}

// config->cudaDevice picks the communicator's device over BRAID_CUDA_DEVICE and the current one; a
// device the process does not see is refused naming the field; without a GPU the communicator has
// none, whatever is set; a caller whose struct ends before the field is not read past its end.
TEST_CASE("config->cudaDevice is the communicator's CUDA device where there is one", "[mp][config]") {
  auto res = forkRanks(1, {{"BRAID_CUDA_DEVICE", "0"}}, [](int rank, int) {
    const int devices = braid::gpuDeviceCount();
    auto init = [&](braidConfig_t config, braidComm_t* comm) {
      braidUniqueId id;
      const braidResult_t r = braidGetUniqueId(&id);
      return r != braidSuccess ? r : braidCommInitRankConfig(comm, 1, id, 0, &config);
    };
    braidConfig_t c = BRAID_CONFIG_INITIALIZER;
    c.cudaDevice = devices > 0 ? devices - 1 : 3;
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, init(c, &comm));
    int device = -7;
    const braidResult_t asked = braidCommCuDevice(comm, &device);
    if (devices == 0 && asked == braidSuccess)
      return fail(rank, "no CUDA device here, yet the communicator has device %d", device);
    if (devices > 0 && (asked != braidSuccess || device != devices - 1))
      return fail(rank, "config->cudaDevice %d: the communicator has device %d (%s)", devices - 1, device,
                  braidGetErrorString(asked));
    CHECK_BRAID(rank, braidCommDestroy(comm));
    if (devices > 0) {
      c.cudaDevice = devices;  // one past the last
      comm = nullptr;
      const braidResult_t r = init(c, &comm);
      if (r != braidInvalidArgument || strstr(braidGetLastError(), "config->cudaDevice") == nullptr)
        return fail(rank, "config->cudaDevice %d of %d devices: %s: %s", devices, devices, braidGetErrorString(r),
                    braidGetLastError());
    }
    braidConfig_t old = BRAID_CONFIG_INITIALIZER;  // a struct that ends at p2pTags
    old.size = offsetof(braidConfig_t, cudaDevice);
    old.cudaDevice = -5;
    comm = nullptr;
    CHECK_BRAID(rank, init(old, &comm));
    CHECK_BRAID(rank, braidCommDestroy(comm));
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}
