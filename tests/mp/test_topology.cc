// The selector on real communicators: a dumped topology loaded back reproduces the algorithm table,
// BRAID_ALGO errors stop init on every rank, and ranks that would choose differently are refused.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "src/api.h"
#include "src/comm.h"
#include "tests/mp/harness.h"
#include "tests/scratch_dir.h"

using namespace braidtest;

namespace {

// Writes each rank's table to prefix.<rank>.
std::vector<RankResult> tables(int n, const Env& env, const std::string& prefix) {
  return runComm(
      n, env,
      [&](braidComm_t comm, int rank, int) {
        std::ofstream(prefix + "." + std::to_string(rank)) << internalsOf(comm)->selector.describe();
        return 0;
      },
      120, [n](int rank) { setenv("BRAID_HOSTID", rank < n / 2 ? "emuA" : "emuB", 1); });
}

// Runs init on n ranks where rank r's environment is env(r); every rank must fail with `code` and a
// message containing `needle`.
void expectInitFailure(int n, const std::function<void(int)>& env, braidResult_t code, const char* needle) {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(n, {{"BRAID_TIMEOUT", "30"}}, [&](int rank, int size) {
    env(rank);
    braidComm_t c = nullptr;
    braidResult_t r = braidCommInitRank(&c, size, id, rank);
    if (r != code)
      return fail(rank, "init gave %s, expected %s: %s", braidGetErrorString(r), braidGetErrorString(code),
                  braidGetLastError());
    if (strstr(braidGetLastError(), needle) == nullptr)
      return fail(rank, "message lacks '%s': %s", needle, braidGetLastError());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace

TEST_CASE("a dumped topology, loaded back, gives the same algorithm table", "[mp][topo]") {
  ScratchDir dir("topo");
  const std::string& d = dir.path();
  const std::string dump = d + "/machine.topo";
  auto res = tables(4, {{"BRAID_TOPO_DUMP_FILE", dump}}, d + "/detected");
  INFO(describe(res));
  REQUIRE(allOk(res));
  const std::string file = readFile(dump);
  REQUIRE(file.rfind("braid-topology 1", 0) == 0);
  CHECK(file.find("cluster ranks=4") != std::string::npos);
  res = tables(4, {{"BRAID_TOPO_FILE", dump}}, d + "/loaded");
  REQUIRE(allOk(res));
  const std::string detected = readFile(d + "/detected.0");
  REQUIRE_FALSE(detected.empty());
  for (int r = 0; r < 4; ++r) {
    CHECK(readFile(d + "/detected." + std::to_string(r)) == detected);  // every rank agrees
    CHECK(readFile(d + "/loaded." + std::to_string(r)) == detected);
  }
  // A file that says otherwise changes the choice: a network 1000x slower keeps large AllReduces off it.
  std::string slow = file;
  size_t at = slow.find("inter_gbps=");
  REQUIRE(at != std::string::npos);
  slow.replace(at, slow.find_first_of(" \n", at) - at, "inter_gbps=0.002");
  std::ofstream(d + "/slow.topo") << slow;
  res = tables(4, {{"BRAID_TOPO_FILE", d + "/slow.topo"}}, d + "/slow");
  REQUIRE(allOk(res));
  CHECK(readFile(d + "/slow.0") != detected);
}

TEST_CASE("BRAID_ALGO: an unknown name fails init on every rank; ranks that disagree are refused", "[mp][topo]") {
  expectInitFailure(
      2, [](int) { setenv("BRAID_ALGO", "allreduce:bogus", 1); }, braidInvalidArgument, "unknown algorithm 'bogus'");
  expectInitFailure(
      2, [](int) { setenv("BRAID_ALGO", "broadcast:rabenseifner", 1); }, braidInvalidArgument,
      "broadcast has no algorithm 'rabenseifner'");
  expectInitFailure(
      3, [](int rank) { setenv("BRAID_ALGO", rank == 1 ? "allreduce:tree" : "allreduce:ring", 1); }, braidInvalidUsage,
      "different algorithm table");
  expectInitFailure(
      2, [](int) { setenv("BRAID_TOPO_FILE", "/nonexistent/braid.topo", 1); }, braidSystemError,
      "BRAID_TOPO_FILE: open topology file /nonexistent/braid.topo");
}

TEST_CASE("the algorithm named by BRAID_ALGO is the one that runs", "[mp][topo]") {
  for (const char* algo : {"ring", "tree", "rabenseifner", "recursive_doubling"}) {
    auto res = runComm(3, {{"BRAID_ALGO", std::string("allreduce:") + algo}}, [&](braidComm_t comm, int rank, int) {
      std::vector<int32_t> buf(1000, rank + 1);
      CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), buf.size(), braidInt32, braidSum, comm, nullptr));
      for (int32_t v : buf)
        if (v != 6) return fail(rank, "%s: got %d", algo, v);
      for (uint64_t bytes : {8ull, 4000ull, 1ull << 26})
        if (internalsOf(comm)->selector.pick(braid::Coll::kAllReduce, bytes) != [&] {
              braid::Algo a;
              braid::parseAlgo(algo, &a);
              return a;
            }())
          return fail(rank, "%s not picked at %llu bytes", algo, static_cast<unsigned long long>(bytes));
      return 0;
    });
    INFO(algo << "\n" << describe(res));
    REQUIRE(allOk(res));
  }
}

// Ranks whose links all receive through the shm FIFOs (single copy off) say so after connecting,
// and the table prices the linear AllGather's extra copies: the ring from some size on, the same
// table on every rank, written into the dump. With single copy on, only above the cut; over
// sockets nothing changes.
TEST_CASE("the links' copies reach the algorithm table", "[mp][topo]") {
  ScratchDir dir("topo-copies");
  const std::string dump = dir.path() + "/fifo.topo";
  const uint64_t large = uint64_t{1} << 26;
  // fifo: 0 = at once, 1 = above the single-copy cut where every link reads by single copy (else at
  // once: the kernel refused process_vm_readv), 2 = never.
  auto check = [&](const Env& env, int fifo) {
    auto res = runComm(4, env, [&](braidComm_t comm, int rank, int n) {
      braidComm* c = internalsOf(comm);
      bool single = true;
      for (int p = 0; p < n; ++p)
        if (p != rank) single = single && c->links[p]->receiveCopies() == braid::Link::Copies::kOne;
      const uint64_t want = fifo == 2             ? braid::topo::ClusterShape::kNever
                            : fifo == 1 && single ? c->settings.ntStoresMin
                                                  : 0;
      if (c->cluster.twoCopiesFrom(0) != want)
        return fail(rank, "two copies from %llu bytes, expected %llu",
                    static_cast<unsigned long long>(c->cluster.twoCopiesFrom(0)),
                    static_cast<unsigned long long>(want));
      if (fifo == 1) return 0;
      const braid::Algo algo = fifo == 0 ? braid::Algo::kRing : braid::Algo::kLinear;
      if (c->selector.pick(braid::Coll::kAllGather, large) != algo)
        return fail(rank, "AllGather of 64 MiB picks %d",
                    static_cast<int>(c->selector.pick(braid::Coll::kAllGather, large)));
      if (c->selector.pick(braid::Coll::kAllGather, 4096) != braid::Algo::kRecursiveDoubling)
        return fail(rank, "AllGather of 4 KiB is not by doubling");
      // A call on the chosen plan, large enough for it, is still right.
      const size_t count = (size_t{3} << 20) / sizeof(int32_t);
      std::vector<int32_t> in(count), out(count * n, -1);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(rank * 1000003 + i);
      CHECK_BRAID(rank, braidAllGather(in.data(), out.data(), count, braidInt32, comm, nullptr));
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; i += 997)
          if (out[r * count + i] != static_cast<int32_t>(r * 1000003 + i))
            return fail(rank, "block %d element %zu is %d", r, i, out[r * count + i]);
      return 0;
    });
    INFO(describe(res));
    REQUIRE(allOk(res));
  };
  check({{"BRAID_TRANSPORTS", "shm"}, {"BRAID_SHM_CMA", "0"}, {"BRAID_TOPO_DUMP_FILE", dump}}, 0);
  CHECK(readFile(dump).find("cluster ranks=4 hosts=0,0,0,0 cores=") != std::string::npos);
  CHECK(readFile(dump).find(" fifo_from=0\n") != std::string::npos);
  // BRAID_SHM_CMA_SPEED=0: single copy wherever the kernel lets a rank read its peers.
  check({{"BRAID_TRANSPORTS", "shm"}, {"BRAID_SHM_CMA", "auto"}, {"BRAID_SHM_CMA_SPEED", "0"}}, 1);
  check({{"BRAID_TRANSPORTS", "tcp"}}, 2);
  // A rank alone on its host has no same-host link at all: it says never, not "two copies from 0",
  // and a cluster of such hosts keeps the table it had before the links.
  auto res = runComm(
      2, {{"BRAID_TRANSPORTS", "shm,tcp"}, {"BRAID_SHM_CMA", "0"}},
      [&](braidComm_t comm, int rank, int) {
        const braid::topo::ClusterShape& c = internalsOf(comm)->cluster;
        if (c.nhosts != 2 || !c.hostTwoCopiesFrom.empty())
          return fail(rank, "%d hosts, fifo_from '%s' (expected 2 hosts, none)", c.nhosts,
                      c.twoCopiesList(c.nhosts).c_str());
        return 0;
      },
      120, [](int rank) { setenv("BRAID_HOSTID", rank == 0 ? "emuA" : "emuB", 1); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// The table printed at init is the whole table: it runs to several KiB on 4 ranks, past the
// logger's stack buffer, which used to cut it off within the AllGather lines.
TEST_CASE("BRAID_DEBUG_SUBSYS=TUNE prints the whole algorithm table", "[mp][topo]") {
  ScratchDir dir("topo-tune");
  const std::string& d = dir.path();
  auto res = runComm(4,
                     {{"BRAID_DEBUG", "INFO"},
                      {"BRAID_DEBUG_SUBSYS", "TUNE"},
                      {"BRAID_DEBUG_FILE", d + "/log.%p"},
                      {"BRAID_TRANSPORTS", "shm"},
                      {"BRAID_SHM_CMA", "0"}},
                     [&](braidComm_t comm, int rank, int) {
                       if (rank == 0) std::ofstream(d + "/table") << internalsOf(comm)->selector.describe();
                       return 0;
                     });
  INFO(describe(res));
  REQUIRE(allOk(res));
  const std::string table = readFile(d + "/table");
  std::string log;  // every rank's file: only rank 0 prints the table
  for (const auto& e : std::filesystem::directory_iterator(d))
    if (e.path().filename().string().rfind("log.", 0) == 0) log += readFile(e.path().string());
  REQUIRE(table.size() > 1024);
  CHECK(log.find("algorithm table for 4 ranks on 1 hosts") != std::string::npos);
  CHECK(log.find(table) != std::string::npos);
}
