// Bad input gets a clear error and changes nothing; a dead peer becomes an error naming it.
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "src/base/socket.h"
#include "src/bootstrap.h"
#include "tests/mp/harness.h"
#include "tests/scratch_dir.h"

using namespace braidtest;

TEST_CASE("invalid arguments are refused with braidInvalidArgument and buffers stay untouched", "[mp][errors]") {
  auto res = runComm(2, {}, [](braidComm_t comm, int rank, int size) {
    std::vector<float> in(16, 1.0f), out(16, 7.0f);
    auto untouched = [&] {
      for (float v : out)
        if (v != 7.0f) return false;
      for (float v : in)
        if (v != 1.0f) return false;
      return true;
    };
    struct Case {
      const char* what;
      braidResult_t got;
    };
    const size_t huge = SIZE_MAX / 2;
    Case cases[] = {
        {"NULL comm", braidAllReduce(in.data(), out.data(), 16, braidFloat32, braidSum, nullptr, nullptr)},
        {"NULL sendbuff", braidAllReduce(nullptr, out.data(), 16, braidFloat32, braidSum, comm, nullptr)},
        {"NULL recvbuff", braidAllReduce(in.data(), nullptr, 16, braidFloat32, braidSum, comm, nullptr)},
        {"bad dtype",
         braidAllReduce(in.data(), out.data(), 16, static_cast<braidDataType_t>(42), braidSum, comm, nullptr)},
        {"bad op",
         braidAllReduce(in.data(), out.data(), 16, braidFloat32, static_cast<braidRedOp_t>(-1), comm, nullptr)},
        {"count overflow", braidAllReduce(in.data(), out.data(), huge, braidFloat32, braidSum, comm, nullptr)},
        {"allgather overflow", braidAllGather(in.data(), out.data(), huge / 4, braidFloat32, comm, nullptr)},
        // One element past the largest count whose n buffers still fit a ptrdiff_t.
        {"count one past the limit",
         braidAllReduce(in.data(), out.data(), PTRDIFF_MAX / (4 * static_cast<size_t>(size)) + 1, braidFloat32,
                        braidSum, comm, nullptr)},
        {"alltoall one past the limit",
         braidAllToAll(in.data(), out.data(), PTRDIFF_MAX / (8 * static_cast<size_t>(size)) + 1, braidFloat64, comm,
                       nullptr)},
        {"bad op (reduce-scatter)", braidReduceScatter(in.data(), out.data(), 4, braidFloat32,
                                                       static_cast<braidRedOp_t>(braidNumOps), comm, nullptr)},
        {"gather root too big", braidGather(in.data(), out.data(), 4, braidFloat32, size, comm, nullptr)},
        {"scatter NULL sendbuff at the root", braidScatter(nullptr, out.data(), 4, braidFloat32, rank, comm, nullptr)},
        {"root too big", braidBroadcast(in.data(), out.data(), 16, braidFloat32, size, comm, nullptr)},
        {"negative root", braidReduce(in.data(), out.data(), 16, braidFloat32, braidSum, -1, comm, nullptr)},
        {"peer out of range", braidSend(in.data(), 16, braidFloat32, size + 3, comm, nullptr)},
        {"partial overlap", braidAllReduce(out.data(), out.data() + 1, 8, braidFloat32, braidSum, comm, nullptr)},
        {"NULL request", braidIAllReduce(in.data(), out.data(), 16, braidFloat32, braidSum, comm, nullptr, nullptr)},
    };
    for (const Case& c : cases) {
      if (c.got != braidInvalidArgument)
        return fail(rank, "%s: got %s instead of braidInvalidArgument", c.what, braidGetErrorString(c.got));
      if (!untouched()) return fail(rank, "%s: a buffer was written", c.what);
    }
    if (strlen(braidGetLastError()) == 0) return fail(rank, "no last-error text");
    // Valid usage errors.
    if (braidGroupEnd() != braidInvalidUsage) return fail(rank, "GroupEnd without Start accepted");
    int dummy = 0;
    if (braidAllReduce(in.data(), out.data(), 16, braidFloat32, braidSum, comm, &dummy) != braidInvalidUsage)
      return fail(rank, "a CUDA stream was accepted by a host-only build");
    // The communicator still works after all that.
    CHECK_BRAID(rank, braidAllReduce(in.data(), out.data(), 16, braidFloat32, braidSum, comm, nullptr));
    for (float v : out)
      if (v != static_cast<float>(size)) return fail(rank, "after errors: %g", v);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("bad configuration is a clear error at init", "[mp][errors]") {
  // In a child, as every init here: an init in the test process would set up its logger, once per
  // process, from this environment, and every later test's ranks would inherit that logger.
  auto bad = forkRanks(1, {}, [](int rank, int) {
    braidComm_t comm = nullptr;
    braidUniqueId id;
    memset(&id, 0, sizeof(id));
    if (braidCommInitRank(&comm, 2, id, 0) != braidInvalidArgument) return fail(rank, "a zeroed id was taken");
    if (braidCommInitRank(&comm, 0, id, 0) != braidInvalidArgument) return fail(rank, "0 ranks were taken");
    if (braidCommInitRank(nullptr, 1, id, 0) != braidInvalidArgument) return fail(rank, "a null comm was taken");
    if (comm != nullptr) return fail(rank, "a refused init set the comm");
    return 0;
  });
  INFO(describe(bad));
  REQUIRE(allOk(bad));
  for (auto [var, value, needle] : {std::tuple{"BRAID_SOCKET_IFNAME", "nosuchif0", "nosuchif0"},
                                    std::tuple{"BRAID_TRANSPORTS", "shm,carrierpigeon", "carrierpigeon"},
                                    std::tuple{"BRAID_TIMEOUT", "soon", "BRAID_TIMEOUT"}}) {
    auto res = forkRanks(1, {{var, value}}, [&](int rank, int) {
      braidUniqueId uid;
      braidComm_t c = nullptr;
      braidResult_t r = braidGetUniqueId(&uid);
      if (r == braidSuccess) r = braidCommInitRank(&c, 1, uid, 0);
      if (r != braidInvalidArgument) return fail(rank, "%s=%s gave %s", var, value, braidGetErrorString(r));
      if (strstr(braidGetLastError(), needle) == nullptr)
        return fail(rank, "message lacks '%s': %s", needle, braidGetLastError());
      return 0;
    });
    INFO(var << "=" << value << "\n" << describe(res));
    REQUIRE(allOk(res));
  }
}

// Each of n ranks inits with env; every rank must fail with braidInvalidArgument and a message
// holding every needle. A rank that hangs is killed at the harness deadline and fails the check.
static std::vector<RankResult> initFailsEverywhere(int n, const Env& env, std::vector<std::string> needles) {
  braidUniqueId uid;
  if (braidGetUniqueId(&uid) != braidSuccess) return std::vector<RankResult>(n);
  return forkRanks(
      n, env,
      [&](int rank, int size) {
        braidComm_t c = nullptr;
        braidResult_t r = braidCommInitRank(&c, size, uid, rank);
        if (r != braidInvalidArgument)
          return fail(rank, "init gave %s: %s", braidGetErrorString(r), braidGetLastError());
        for (const std::string& needle : needles)
          if (strstr(braidGetLastError(), needle.c_str()) == nullptr)
            return fail(rank, "message lacks '%s': %s", needle.c_str(), braidGetLastError());
        return 0;
      },
      120);
}

TEST_CASE("a setting out of its range fails init on every rank naming the variable and the range", "[mp][errors]") {
  ScratchDir dir("errors");
  // Each of these was accepted and misbehaved later: a negative heartbeat period (a healthy job
  // failed at its first op), a deadline in the past, a slot size wrapped to 256K or an 8 GiB
  // segment per rank, a crawling socket, a check silently left off, logs silently at WARN.
  for (auto [var, value, needle] : {
           std::tuple{"BRAID_HEARTBEAT_MS", "9223372036854775807", "0 or 1..3600000"},
           std::tuple{"BRAID_HEARTBEAT_MISSES", "4611686018427387904", "1..1000"},
           std::tuple{"BRAID_TIMEOUT", "99999999999", "1..315360000"},
           std::tuple{"BRAID_SHM_SLOT_SIZE", "18014398509482240K", "64..64M"},
           std::tuple{"BRAID_SHM_SLOT_SIZE", "1G", "64..64M"},
           std::tuple{"BRAID_TCP_SOCKBUF", "1", "0 or 64K..1G"},
           std::tuple{"BRAID_TCP_CROWD_SNDBUF", "4K", "0 or 64K..1G"},
           std::tuple{"BRAID_COPY_PIECE", "1K", "0 or 4K..1G"},
           std::tuple{"BRAID_NSOCKS", "17", "1..16"},
           std::tuple{"BRAID_NSOCKS", "0", "1..16"},
           std::tuple{"BRAID_TCP_TEST_DELAY_US", "-5", "BRAID_TCP_TEST_DELAY_US"},
           std::tuple{"BRAID_SOCKET_FAMILY", "ipv5", "auto|ipv4|ipv6"},
           std::tuple{"BRAID_CHECK_MISMATCH", "abc", "true"},
           std::tuple{"BRAID_APPROXIMATE", "7x", "true"},
           std::tuple{"BRAID_DEBUG", "LOUD", "NONE|WARN|INFO|TRACE"},
           std::tuple{"BRAID_SIMD", "sse9", "scalar|avx2|avx512"},
           std::tuple{"BRAID_DEBUG_SUBSYS", "INIT,BOGUS", "'BOGUS'"},
       }) {
    auto res = initFailsEverywhere(2, {{var, value}}, {std::string(var), needle});
    INFO(var << "=" << value << "\n" << describe(res));
    REQUIRE(allOk(res));
  }
  // A log file that cannot be opened (a directory) fails init too, instead of logging elsewhere
  // in silence.
  auto res = initFailsEverywhere(2, {{"BRAID_DEBUG_FILE", dir.path()}}, {"BRAID_DEBUG_FILE", dir.path()});
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("shared-memory FIFOs that need more than half of the host's memory fail init", "[mp][errors][shm]") {
  // Each setting is in range, the product is not: 64M x 4096 slots is 256 GiB per FIFO. Before the
  // bound, BRAID_SHM_SLOT_SIZE=1G made each rank populate an 8 GiB segment.
  auto res =
      initFailsEverywhere(2, {{"BRAID_SHM_SLOT_SIZE", "64M"}, {"BRAID_SHM_SLOTS", "4096"}, {"BRAID_TRANSPORTS", "shm"}},
                          {"BRAID_SHM_SLOT_SIZE", "BRAID_SHM_SLOTS", "half of this host"});
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("BRAID_CHECK_MISMATCH takes the usual spellings of true", "[mp][errors][mismatch]") {
  const char* spelling = GENERATE(as<const char*>{}, "true", "yes", "ON");
  INFO("BRAID_CHECK_MISMATCH=" << spelling);
  auto res =
      runComm(2, {{"BRAID_CHECK_MISMATCH", spelling}, {"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int) {
        // Sum on one rank, max on the other: with the check off both "succeed" with
        // different results.
        std::vector<float> v(64, 1.0f + rank);
        braidResult_t r =
            braidAllReduce(v.data(), v.data(), v.size(), braidFloat32, rank == 0 ? braidSum : braidMax, comm, nullptr);
        if (r != braidInvalidUsage) return fail(rank, "mismatched ops gave %s", braidGetErrorString(r));
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a FIFO as BRAID_TOPO_FILE or BRAID_DEBUG_FILE fails init instead of hanging", "[mp][errors][topo]") {
  ScratchDir dir("errors");
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO waits for the other end: past BRAID_TIMEOUT, forever.
  for (const char* var : {"BRAID_TOPO_FILE", "BRAID_DEBUG_FILE"}) {
    auto res = initFailsEverywhere(2, {{var, fifo}, {"BRAID_TIMEOUT", "30"}}, {var, fifo});
    INFO(var << "=" << fifo << "\n" << describe(res));
    REQUIRE(allOk(res));
  }
}

TEST_CASE("BRAID_TOPO_DUMP_FILE never replaces a FIFO or symlink or directory", "[mp][errors][topo]") {
  ScratchDir dir("errors");
  const std::string fifo = dir.path() + "/fifo", target = dir.path() + "/target", link = dir.path() + "/link";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  FILE* f = fopen(target.c_str(), "w");
  REQUIRE(f != nullptr);
  fputs("precious\n", f);
  fclose(f);
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  REQUIRE(mkdir((dir.path() + "/sub").c_str(), 0700) == 0);
  for (const std::string& bad : {fifo, link, dir.path() + "/sub"}) {
    // One rank: the dump is rank 0's (no %r), and its init is the one that must say so.
    auto res = initFailsEverywhere(1, {{"BRAID_TOPO_DUMP_FILE", bad}}, {"BRAID_TOPO_DUMP_FILE", "not replacing"});
    INFO(bad << "\n" << describe(res));
    CHECK(allOk(res));
  }
  struct stat st;
  REQUIRE(lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  REQUIRE(lstat(link.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  REQUIRE(lstat((dir.path() + "/sub").c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  char buf[32] = {};
  f = fopen(target.c_str(), "r");
  REQUIRE(f != nullptr);
  CHECK(fgets(buf, sizeof(buf), f) != nullptr);
  fclose(f);
  CHECK(std::string(buf) == "precious\n");
  // Nothing is left beside them (no temporary file).
  CHECK(system(("test $(ls -A '" + dir.path() + "' | wc -l) -eq 4").c_str()) == 0);
}

TEST_CASE("a rank killed mid-AllReduce makes every other rank fail naming it", "[mp][errors][failure]") {
  const char* transport = GENERATE(from_range(transportsUnderTest())).c_str();
  const int victim = GENERATE(0, 2);  // rank 0 (the hub of failure notices) and an ordinary rank
  INFO(transport << " victim " << victim);
  auto res =
      runComm(4, {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int size) {
        std::vector<float> buf(1 << 20, 1.0f);
        // A few good rounds, then the victim dies in the middle of an AllReduce. The others may learn
        // it while still finishing a good round (a failure fails every pending operation), so they
        // call until something fails.
        if (rank == victim) {
          for (int i = 0; i < 3; ++i)
            CHECK_BRAID(rank,
                        braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr));
          braidRequest_t req;  // the same call as the others' (BRAID_CHECK_MISMATCH=1 would say it is not)
          CHECK_BRAID(rank,
                      braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr, &req));
          raise(SIGKILL);
        }
        auto t0 = std::chrono::steady_clock::now();
        braidResult_t r = braidSuccess;
        for (int i = 0; i < 103 && r == braidSuccess; ++i) {
          t0 = std::chrono::steady_clock::now();  // the failing call's own duration is what counts
          r = braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr);
        }
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r != braidRemoteError) return fail(rank, "expected braidRemoteError, got %s", braidGetErrorString(r));
        std::string msg = braidGetLastError();
        std::string who = "rank " + std::to_string(victim) + " (host ";
        if (msg.find(who) == std::string::npos || msg.find("AllReduce") == std::string::npos)
          return fail(rank, "message does not name rank %d and the operation: %s", victim, msg.c_str());
        fprintf(stderr, "rank %d learned in %.2f s: %s\n", rank, secs, msg.c_str());
        braidResult_t async = braidSuccess;
        CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
        if (async != braidRemoteError) return fail(rank, "async error %d", async);
        // Later calls fail at once with the same error.
        if (braidBarrier(comm, nullptr) != braidRemoteError) return fail(rank, "later call succeeded");
        braidCommAbort(comm);
        _exit(secs < 10 ? 0 : 3);
      });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << " status " << res[r].status);
    if (r == victim)
      CHECK(res[r].status == 128 + SIGKILL);
    else
      CHECK(res[r].status == 0);
  }
}

TEST_CASE("strangers on the rendezvous port are refused and do not stop the real ranks", "[mp][errors][hostile]") {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  braid::UniqueIdData data;
  REQUIRE(braid::decodeUniqueId(id, &data).ok());
  // Queue three strangers in the listener's backlog before any rank runs: garbage, a well-formed
  // hello with the wrong secret, and one that closes at once.
  std::vector<braid::Fd> strangers(3);
  for (auto& s : strangers) REQUIRE(braid::connectTo(data.root, braid::Deadline::afterSeconds(5), &s).ok());
  const char garbage[] = "GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
  std::vector<char> big(4096, 'x');
  REQUIRE(braid::sendAll(strangers[0].get(), big.data(), big.size(), braid::Deadline::afterSeconds(5)).ok());
  // A copy of a real hello layout is internal; a stranger guessing it still lacks the secret.
  REQUIRE(braid::sendAll(strangers[1].get(), garbage, sizeof(garbage), braid::Deadline::afterSeconds(5)).ok());
  strangers[2].reset();
  auto res = forkRanks(3, {}, [&](int rank, int size) {
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
    int v = 1, sum = 0;
    CHECK_BRAID(rank, braidAllReduce(&v, &sum, 1, braidInt32, braidSum, comm, nullptr));
    if (sum != size) return fail(rank, "sum %d", sum);
    CHECK_BRAID(rank, braidCommDestroy(comm));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  // The stranger was closed on: reading gives EOF or a reset, not a rank table.
  char c;
  braid::Status st = braid::recvAll(strangers[0].get(), &c, 1, braid::Deadline::afterSeconds(5));
  CHECK(st.code() == braidRemoteError);
}

// Calls that differ where no message ever shows it: the ranks wait for each other. They waited
// for BRAID_TIMEOUT (300 s by default) and then read a timeout that only guessed at the cause;
// rank 0 now compares the calls of the ranks that wait (src/call_watch.h) and fails everyone at
// once, naming both calls. BRAID_TIMEOUT=30 here: braidTimeout means the compare did not happen.
TEST_CASE("calls that differ and wait for each other fail on every rank naming both calls, not at BRAID_TIMEOUT",
          "[mp][errors][mismatch]") {
  // Each a mismatch where no message flows (marked messages show the others, as they arrive): 0: a
  // Reduce whose two ranks each name themselves root; 1: under BRAID_ALGO=recursive_doubling (it
  // forces AllReduce alone), an AllReduce of 16 floats on rank 0 (a plan) and a Broadcast of as
  // many on rank 1 (the mailboxes); 2: as 0, but rank 1 posts 20 more such calls, more than the
  // calls its report carries, before it waits; 3: as 0, but rank 1 first posts a receive from rank
  // 0 (which would send after its Reduce), so its oldest operation is one no call numbers. Forms
  // 0, 2 and 3 on the plans' path
  // (BRAID_SHM_SMALL_BYTES=0): the mailboxes compare the calls in their mail (tests/mp/test_small.cc).
  const int form = GENERATE(0, 1, 2, 3);
  INFO("form " << form);
  // Without BRAID_CHECK_MISMATCH, whose header check would see these first (and says so its own way).
  Env env = {{"BRAID_TIMEOUT", "30"}, {"BRAID_CHECK_MISMATCH", "0"}};
  if (form == 1)
    env["BRAID_ALGO"] = "recursive_doubling";
  else
    env["BRAID_SHM_SMALL_BYTES"] = "0";
  auto res = runComm(2, env, [&](braidComm_t comm, int rank, int) {
    std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
    const char* want[2] = {};  // what the message says of each call
    braidResult_t r = braidSuccess;
    if (form == 0) {
      r = braidReduce(in.data(), out.data(), 4096, braidFloat32, braidSum, rank, comm, nullptr);
      want[0] = "Reduce #1 (count 4096, float32, sum, root 0)";
      want[1] = "Reduce #1 (count 4096, float32, sum, root 1)";
    } else if (form == 1) {
      r = rank == 0 ? braidAllReduce(in.data(), out.data(), 16, braidFloat32, braidSum, comm, nullptr)
                    : braidBroadcast(in.data(), out.data(), 16, braidFloat32, 0, comm, nullptr);
      want[0] = "AllReduce #1 (count 16, float32, sum)";
      want[1] = "Broadcast #1 (count 16, float32, root 0)";
    } else if (form == 3) {
      braidRequest_t q[2] = {};
      if (rank == 1) {
        r = braidIRecv(out.data(), 1, braidFloat32, 0, comm, nullptr, &q[0]);
        if (r == braidSuccess)
          r = braidIReduce(in.data(), out.data() + 16, 4096, braidFloat32, braidSum, 1, comm, nullptr, &q[1]);
        for (braidRequest_t req : q) {
          const braidResult_t w = req != nullptr ? braidWait(req) : braidSuccess;
          if (r == braidSuccess) r = w;
        }
      } else {
        r = braidReduce(in.data(), out.data(), 4096, braidFloat32, braidSum, 0, comm, nullptr);
        if (r == braidSuccess) r = braidSend(in.data(), 1, braidFloat32, 1, comm, nullptr);
      }
    } else if (rank == 1) {
      std::vector<braidRequest_t> reqs;
      for (int i = 0; i <= 20 && r == braidSuccess; ++i) {
        braidRequest_t q = nullptr;
        r = braidIReduce(in.data(), out.data() + 4096 * i, 4096, braidFloat32, braidSum, 1, comm, nullptr, &q);
        if (r == braidSuccess) reqs.push_back(q);
      }
      for (braidRequest_t q : reqs) {
        const braidResult_t w = braidWait(q);
        if (r == braidSuccess) r = w;
      }
    } else {
      r = braidReduce(in.data(), out.data(), 4096, braidFloat32, braidSum, 0, comm, nullptr);
    }
    if (form >= 2) {
      want[0] = "Reduce #1 (count 4096, float32, sum, root 0)";
      want[1] = "Reduce #1 (count 4096, float32, sum, root 1)";
    }
    const std::string msg = braidGetLastError();
    if (rank == 0) fprintf(stderr, "form %d: %s\n", form, msg.c_str());
    if (r != braidInvalidUsage)
      return fail(rank, "expected braidInvalidUsage, got %s: %s", braidGetErrorString(r), msg.c_str());
    if (msg.find("mismatched calls: rank ") == std::string::npos || msg.find(want[0]) == std::string::npos ||
        msg.find(want[1]) == std::string::npos || msg.find("waited for each other") == std::string::npos)
      return fail(rank, "message: %s", msg.c_str());
    if (msg.find("rank 0 (host") == std::string::npos || msg.find("rank 1 (host") == std::string::npos)
      return fail(rank, "both ranks not named, with host and pid: %s", msg.c_str());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// BRAID_CHECK_MISMATCH's call header carried the operation's sequence number, which counts the
// point-to-point calls too: a rank that sent to two peers while each of them received once was
// told its next collective differed from theirs ("AllGather #2 ... but ... AllGather #1"). The
// header now carries the collective's own number (src/call_watch.h).
TEST_CASE("BRAID_CHECK_MISMATCH: ranks that made different numbers of point-to-point calls still run collectives",
          "[mp][errors][mismatch]") {
  // On the plans' path (the mailboxes of small calls compare their own way).
  const Env env = {{"BRAID_CHECK_MISMATCH", "1"}, {"BRAID_TIMEOUT", "30"}, {"BRAID_SHM_SMALL_BYTES", "0"}};
  auto res = runComm(3, env, [&](braidComm_t comm, int rank, int) {
    int32_t word = rank + 1;
    if (rank == 0) {
      CHECK_BRAID(rank, braidSend(&word, 1, braidInt32, 1, comm, nullptr));
      CHECK_BRAID(rank, braidSend(&word, 1, braidInt32, 2, comm, nullptr));
    } else {
      int32_t got = 0;
      CHECK_BRAID(rank, braidRecv(&got, 1, braidInt32, 0, comm, nullptr));
      if (got != 1) return fail(rank, "received %d", got);
    }
    int32_t all[3] = {};
    CHECK_BRAID(rank, braidAllGather(&word, all, 1, braidInt32, comm, nullptr));
    CHECK_BRAID(rank, braidAllReduce(&word, &word, 1, braidInt32, braidSum, comm, nullptr));
    if (all[0] != 1 || all[1] != 2 || all[2] != 3 || word != 6)
      return fail(rank, "gathered %d %d %d, summed %d", all[0], all[1], all[2], word);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a timeout names whom the waiting rank waits for, and the awaited rank reads that it is the one",
          "[mp][errors]") {
  // Rank 1 posts its Reduce only after rank 0 timed out waiting for it (BRAID_TIMEOUT=2): rank 0
  // names rank 1, and rank 1, whose call is refused with rank 0's notice, reads that it was itself
  // (a rank once read "waiting for rank 1" as if it waited for itself).
  // Set by rank 0 once its call timed out (a page both processes share, mapped before the fork).
  auto* timedOut =
      static_cast<int*>(mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(timedOut != MAP_FAILED);
  *timedOut = 0;
  auto res = runComm(2, {{"BRAID_TIMEOUT", "2"}}, [&](braidComm_t comm, int rank, int) {
    std::vector<float> in(4096, 1.0f), out(4096);
    if (rank == 1) {
      while (__atomic_load_n(timedOut, __ATOMIC_SEQ_CST) == 0) usleep(1000);
      usleep(200000);  // rank 0's notice reaches us
    }
    braidResult_t r = braidReduce(in.data(), out.data(), in.size(), braidFloat32, braidSum, 0, comm, nullptr);
    if (rank == 0) __atomic_store_n(timedOut, 1, __ATOMIC_SEQ_CST);
    if (r != braidTimeout) return fail(rank, "expected braidTimeout, got %s", braidGetErrorString(r));
    std::string msg = braidGetLastError();
    fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
    if (msg.find("Reduce #1 on rank 0 (host") == std::string::npos ||
        msg.find("waiting for rank 1 (host") == std::string::npos)
      return fail(rank, "message does not name the waiting rank and the awaited one: %s", msg.c_str());
    if (rank == 1 && msg.find("(this rank)") == std::string::npos)
      return fail(rank, "the notice blames this rank without saying so: %s", msg.c_str());
    braidCommAbort(comm);
    _exit(0);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  munmap(timedOut, sizeof(int));
}

TEST_CASE("an init that fails because a peer gave up names that peer and the step", "[mp][errors]") {
  // The quitter cannot read its BRAID_TOPO_FILE and leaves right after the rendezvous; the other
  // rank finds the connection closed in the next exchange and must say whose it was.
  const int quitter = GENERATE(0, 1);  // the hub of the bootstrap star, and an ordinary rank
  INFO("quitter " << quitter);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(2, {{"BRAID_TIMEOUT", "20"}}, [&](int rank, int size) {
    if (rank == quitter) setenv("BRAID_TOPO_FILE", "/nonexistent/braid-topo.json", 1);
    braidComm_t comm = nullptr;
    braidResult_t r = braidCommInitRank(&comm, size, id, rank);
    if (r == braidSuccess) return fail(rank, "init succeeded");
    if (rank == quitter) return 0;
    std::string msg = braidGetLastError();
    fprintf(stderr, "rank %d: %s\n", rank, msg.c_str());
    const std::string peer = "rank " + std::to_string(quitter) + " (host ";
    if (msg.find(peer) == std::string::npos || msg.find("allgather") == std::string::npos)
      return fail(rank, "message does not name %s...) and the step: %s", peer.c_str(), msg.c_str());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
