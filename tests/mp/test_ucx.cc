// The ucx transport's own failure cases (the Link contract and the collective sweeps run on it
// through transportsUnderTest() and the [ucx] sweep): a rank killed mid-collective fails every
// survivor naming it, in both UCX error modes, and the survivors' teardown afterwards neither
// hangs, crashes nor leaves UCX complaining about leaked requests or endpoints.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// UCX's complaints at a healthy teardown. Leaks (a request "not returned to mpool ucp_requests",
// callbacks left in the queue, an endpoint not closed) never; with `strict`, no warning or error at
// all. Without peer-failure reports (none), UCX logs an error when a peer's worker goes while our
// flush-close of the endpoint to it is still under way (ranks leave at their own pace): not
// strict there.
bool ucxComplained(const std::string& log, bool strict) {
  if (strict) return log.find("UCX  WARN") != std::string::npos || log.find("UCX  ERROR") != std::string::npos;
  return log.find("not returned to mpool") != std::string::npos ||
         log.find("remain in the queue") != std::string::npos || log.find("not closed") != std::string::npos;
}

// BRAID_UCX_ERR_MODE=peer needs a UCX transport that reports peer failure (tcp here): not the
// shared-memory ones that mp-ucx-sm selects.
bool peerModeUsable() {
  const char* tls = getenv("UCX_TLS");
  if (tls == nullptr || strstr(tls, "tcp") != nullptr || strstr(tls, "all") != nullptr) return true;
  WARN("BRAID_UCX_ERR_MODE=peer skipped: UCX_TLS=" << tls << " has no transport that reports peer failure");
  return false;
}

// Whether the ucx data path under test completes a send before the peer has its bytes.
bool eagerCompletion() {
  const char* proto = getenv("BRAID_UCX_PROTO");
  return proto != nullptr && strcmp(proto, "rma") == 0;
}

// The file that rank `rank` of test process `test`'s run logs into (StderrLog).
std::string logPath(pid_t test, int rank) {
  return "/tmp/braid_ucx_test_" + std::to_string(test) + "_" + std::to_string(rank);
}

// A rank killed before its StderrLog::finish() leaves its file behind: the test process removes
// its n ranks' files after the run (they used to pile up in /tmp, one per killed rank).
void removeLogs(int n) {
  for (int r = 0; r < n; ++r) unlink(logPath(getpid(), r).c_str());
}

// Sends this process's stdout (where UCX logs by default) and stderr (braid's log) to a file until
// finish(), which returns its text. For a rank forked by the test process (forkRanks).
class StderrLog {
 public:
  explicit StderrLog(int rank) : path_(logPath(getppid(), rank)) {
    int fd = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    saved_[0] = dup(1);
    saved_[1] = dup(2);
    ok_ = fd >= 0 && saved_[0] >= 0 && saved_[1] >= 0 && dup2(fd, 1) >= 0 && dup2(fd, 2) >= 0;
    if (fd >= 0) close(fd);
  }
  bool ok() const { return ok_; }
  std::string finish() {
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; ++i) {
      if (saved_[i] < 0) continue;
      dup2(saved_[i], i + 1);
      close(saved_[i]);
      saved_[i] = -1;
    }
    std::string text = readFile(path_);
    unlink(path_.c_str());
    return text;
  }
  ~StderrLog() { (void)finish(); }

 private:
  std::string path_;
  int saved_[2] = {-1, -1};  // the original stdout and stderr
  bool ok_ = false;
};

// Runs n ranks over ucx with BRAID_UCX_ERR_MODE=mode; `victim` dies (SIGKILL) with an AllReduce in
// flight after two good ones. Every survivor must see braidRemoteError naming the victim, then
// destroy its communicator without hanging or crashing (UCX may name the requests the transport
// abandoned then: progressing the worker could write a matched receive's data into a buffer that
// is gone, see transports/ucx/ucx_link.cc).
void killMidAllReduce(int n, int victim, const char* mode) {
  INFO("nranks " << n << " victim " << victim << " BRAID_UCX_ERR_MODE=" << mode);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  Env env{{"BRAID_TRANSPORTS", "ucx"},
          {"BRAID_TIMEOUT", "60"},
          {"BRAID_HEARTBEAT_MS", "200"},
          {"BRAID_UCX_ERR_MODE", mode}};
  auto res = forkRanks(n, env, [&](int rank, int size) {
    StderrLog log(rank);
    if (!log.ok()) return fail(rank, "cannot redirect stderr");
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
    std::vector<float> buf(1 << 18, 1.0f);
    braidResult_t r = braidSuccess;
    for (int i = 0; i < 2 && r == braidSuccess; ++i) {
      r = braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm, nullptr);
      // A 1 MiB AllReduce over tagged messages completes a send only once the peer has the bytes
      // (rendezvous), so the victim returns from the good ones only after the survivors can. In rma
      // mode a send completes once its last announcement left (eager): the victim may finish and die
      // while a survivor has yet to read its last bytes, which the death then takes with it, and the
      // survivor sees the death in a good AllReduce already. That is a death seen, as required.
      if (r != braidSuccess && (rank == victim || !eagerCompletion())) {
        (void)log.finish();  // so that the reason shows
        return fail(rank, "good AllReduce %d returned %s: %s", i, braidGetErrorString(r), braidGetLastError());
      }
    }
    // The victim's good AllReduces may end before a survivor's (a survivor still waiting for a live
    // peer's bytes), and the death fails whatever is pending: the victim dies only once its barrier
    // returned, when every survivor is past them. A survivor's barrier may see the death already.
    if (r == braidSuccess) r = braidBarrier(comm, nullptr);
    if (rank == victim) {
      if (r != braidSuccess) {
        (void)log.finish();
        return fail(rank, "barrier returned %s: %s", braidGetErrorString(r), braidGetLastError());
      }
      braidRequest_t req;
      CHECK_BRAID(rank,
                  braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm, nullptr, &req));
      usleep(1000);
      raise(SIGKILL);
    }
    for (int i = 0; i < 1000 && r == braidSuccess; ++i)
      r = braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm, nullptr);
    const std::string msg = braidGetLastError();
    braidResult_t destroyed = braidCommDestroy(comm);
    (void)log.finish();  // UCX's log of a failed teardown is not checked (see above)
    if (r != braidRemoteError) return fail(rank, "AllReduce returned %s: %s", braidGetErrorString(r), msg.c_str());
    if (msg.find("rank " + std::to_string(victim) + " (host ") == std::string::npos)
      return fail(rank, "the error does not name rank %d: %s", victim, msg.c_str());
    // A failed communicator's destroy reports the failure; it must return, whatever it says.
    (void)destroyed;
    return 0;
  });
  removeLogs(n);
  INFO(describe(res));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(res[r].status == (r == victim ? 128 + SIGKILL : 0));
  }
}

}  // namespace

TEST_CASE("ucx: a rank killed mid-AllReduce is braidRemoteError naming it on every survivor; teardown returns",
          "[mp][ucx]") {
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: skipped");
    return;
  }
  // Rank 0 is the control plane's hub; rank 2 an ordinary rank. "peer": UCX itself reports the
  // death; "auto" on one host is "none": only braid's control plane does.
  const int victim = GENERATE(0, 2);
  const char* mode = GENERATE("peer", "auto");
  if (strcmp(mode, "peer") == 0 && !peerModeUsable()) return;
  const char* tls = getenv("UCX_TLS");
  if (strcmp(mode, "auto") == 0 && tls != nullptr && (strstr(tls, "cma") != nullptr || strstr(tls, "sm") != nullptr)) {
    // Without peer-failure reports, UCX's cma transport aborts a survivor whose peer died mid-transfer.
    WARN("a death without peer-failure reports skipped: UCX_TLS=" << tls << " has cma, which aborts the survivors");
    return;
  }
  killMidAllReduce(3, victim, mode);
}

TEST_CASE("ucx: a healthy communicator tears down without UCX complaints, in both error modes", "[mp][ucx]") {
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: skipped");
    return;
  }
  const char* mode = GENERATE("peer", "none");
  INFO("BRAID_UCX_ERR_MODE=" << mode);
  const bool strict = strcmp(mode, "peer") == 0;
  if (strict && !peerModeUsable()) return;
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(
      3, {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_UCX_ERR_MODE", mode}}, [&](int rank, int size) {
        StderrLog log(rank);
        if (!log.ok()) return fail(rank, "cannot redirect stderr");
        braidComm_t comm = nullptr;
        CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
        // Eager (small) and rendezvous (large) messages both leave requests behind.
        for (size_t count : {size_t{1}, size_t{1} << 20}) {
          std::vector<float> buf(count, 1.0f);
          CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm, nullptr));
          if (buf[count - 1] != static_cast<float>(size))
            return fail(rank, "sum %g", static_cast<double>(buf[count - 1]));
        }
        CHECK_BRAID(rank, braidCommDestroy(comm));
        const std::string text = log.finish();
        if (ucxComplained(text, strict)) return fail(rank, "UCX complained at teardown:\n%s", text.c_str());
        return 0;
      });
  removeLogs(3);  // a rank timed out and killed leaves its file
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("ucx: a rank that sends its last messages and leaves at once: the peer reads them all later", "[mp][ucx]") {
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: skipped");
    return;
  }
  // In rma mode a send completes as soon as UCX has taken its active messages, and the sender may
  // then leave while its bytes are still on their way. The receiver posts its receives only later
  // (the sender is gone, or waits in its destroy by then), and consuming the first message returns
  // credits to the sender. Every message must arrive byte-exact, and the departure fail nothing.
  // Then the other way round, a few times on one core: the receiver leaves as soon as it has the
  // last message, which may be before the sender saw its own send complete (CI once failed that
  // send with "left the communicator while an operation still needed it").
  const char* mode = GENERATE("peer", "none");
  const bool lateReceiver = GENERATE(true, false);
  INFO("BRAID_UCX_ERR_MODE=" << mode << (lateReceiver ? ", late receiver" : ", receiver leaves at once"));
  if (strcmp(mode, "peer") == 0 && !peerModeUsable()) return;
  const std::vector<size_t> sizes = {1 << 20, 1 << 20, 1 << 20, 77777, 3, 0, 100000};
  const int rounds = lateReceiver ? 1 : 4;
  std::vector<braidUniqueId> ids(rounds);
  for (braidUniqueId& id : ids) REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(
      2, {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_UCX_ERR_MODE", mode}}, [&](int rank, int size) {
        if (!lateReceiver) {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(0, &one);
          (void)sched_setaffinity(0, sizeof(one), &one);  // both ranks take turns on one core
        }
        const int sender = lateReceiver ? 1 : 0;
        for (int round = 0; round < rounds; ++round) {
          braidComm_t comm = nullptr;
          CHECK_BRAID(rank, braidCommInitRank(&comm, size, ids[round], rank));
          std::vector<std::vector<uint8_t>> bufs;
          for (size_t m = 0; m < sizes.size(); ++m) {
            bufs.emplace_back(sizes[m], static_cast<uint8_t>(0xEE));
            if (rank == sender)
              for (size_t i = 0; i < sizes[m]; ++i) bufs[m][i] = static_cast<uint8_t>(i * 131 + m * 7 + round + 1);
          }
          if (rank == sender) {
            for (size_t m = 0; m < sizes.size(); ++m)
              CHECK_BRAID(rank, braidSend(bufs[m].data(), sizes[m], braidUint8, 1 - rank, comm, nullptr));
          } else {
            if (lateReceiver) usleep(500000);
            for (size_t m = 0; m < sizes.size(); ++m) {
              CHECK_BRAID(rank, braidRecv(bufs[m].data(), sizes[m], braidUint8, 1 - rank, comm, nullptr));
              for (size_t i = 0; i < sizes[m]; ++i)
                if (bufs[m][i] != static_cast<uint8_t>(i * 131 + m * 7 + round + 1))
                  return fail(rank, "round %d message %zu byte %zu is 0x%02x", round, m, i, bufs[m][i]);
            }
          }
          CHECK_BRAID(rank, braidCommDestroy(comm));
        }
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

namespace {

// The UCX libraries mapped into this process, by name ("libucs.so.0 libucm.so.0"); "" when none.
std::string ucxLibrariesLoaded() {
  const std::string maps = readFile("/proc/self/maps");
  std::string found;
  for (const char* lib : {"libucp.so", "libuct.so", "libucs.so", "libucm.so"})
    if (maps.find(std::string("/") + lib) != std::string::npos) {
      // Appended in two steps: `" " + std::string(lib)` set off GCC 12's -Wrestrict false positive.
      if (!found.empty()) found += ' ';
      found += lib;
    }
  return found;
}

}  // namespace

// libucs's constructor patches mmap, munmap, madvise and brk of the whole process (UCM's hooks): a
// process that never asks for ucx must not carry them. (This test binary links braid's internals,
// not UCX; each rank checks its own mappings after an AllReduce.)
TEST_CASE("ucx: UCX is loaded only into a process whose BRAID_TRANSPORTS names it", "[mp][ucx]") {
  auto res = runComm(2, {{"BRAID_TRANSPORTS", "shm,tcp"}}, [](braidComm_t comm, int rank, int) {
    float f = 1.0f;
    CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidSum, comm, nullptr));
    const std::string loaded = ucxLibrariesLoaded();
    if (!loaded.empty()) return fail(rank, "BRAID_TRANSPORTS=shm,tcp, yet loaded: %s", loaded.c_str());
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: the half that loads it is skipped");
    return;
  }
  res = runComm(2, {{"BRAID_TRANSPORTS", "ucx"}}, [](braidComm_t comm, int rank, int) {
    float f = 1.0f;
    CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidSum, comm, nullptr));
    if (f != 2.0f) return fail(rank, "AllReduce over ucx gave %g", f);
    if (ucxLibrariesLoaded().find("libucp.so") == std::string::npos) return fail(rank, "ucx ran without libucp?");
    return 0;
  });
  INFO(describe(res));
  CHECK(allOk(res));
}

TEST_CASE("ucx: outputs written around the cache (BRAID_NT_STORES_MIN) arrive right, copies and folds", "[mp][ucx]") {
  if (!underTest("ucx")) return;
  const int n = GENERATE(2, 3);
  INFO("nranks " << n << ", BRAID_UCX_PROTO " << (getenv("BRAID_UCX_PROTO") ? getenv("BRAID_UCX_PROTO") : "(tag)"));
  // Every call here has more than 4 KiB of buffers on the host: its receives into the output take
  // streaming stores, a fold's through ReduceSpec::streamFn (the rma protocol's chunk links).
  const Env env = {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_NT_STORES_MIN", "4K"}};
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 300007;  // past a chunk, ending mid-line
    std::vector<char> send(count * 8 * static_cast<size_t>(size) + 64), recv(send.size());
    for (braidDataType_t dt : {braidInt32, braidFloat64})
      for (braidRedOp_t op : {braidSum, braidMax}) {
        for (bool inPlace : {false, true})
          if (allReduceChecked(comm, rank, size, send.data(), recv.data(), count, dt, op, inPlace) != 0 ||
              rootedOrScatteredChecked(comm, rank, size, false, send.data(), recv.data(), count, dt, op, inPlace) !=
                  0 ||
              rootedOrScatteredChecked(comm, rank, size, true, send.data(), recv.data(), count / 4, dt, op, inPlace) !=
                  0)
            return 1;
      }
    // Copies into the output: a Broadcast from every root, out of place.
    std::vector<int32_t> b(count), out(count);
    for (int root = 0; root < size; ++root) {
      for (size_t i = 0; i < count; ++i) b[i] = static_cast<int32_t>(i * 7 + root);
      std::fill(out.begin(), out.end(), -1);
      CHECK_BRAID(rank, braidBroadcast(b.data(), out.data(), count, braidInt32, root, comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        if (out[i] != static_cast<int32_t>(i * 7 + root))
          return fail(rank, "Broadcast from %d: [%zu] = %d", root, i, static_cast<int>(out[i]));
    }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// In rma mode a staged send completes once its writes are done (sendsAwaitWrites), so a link's
// active messages name the transfers they carry. A survivor that aborted its failed communicator
// tore its links down after the engine, the transfers gone with it, and its link to a live peer
// reaped the messages UCX had completed meanwhile: a write done for a transfer that no longer
// existed, a segfault in ChunkLink::onWriteDone under braidCommAbort (test_errors.cc's killed rank
// with BRAID_UCX_PROTO=rma and BRAID_CHUNK_SIZE=8192: 4 runs in 8). Small chunks keep many messages
// in flight on every link when the victim dies; the survivors abort at once.
TEST_CASE("ucx: a death while every link carries many messages: the survivors abort without touching the dead calls",
          "[mp][ucx]") {
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: skipped");
    return;
  }
  // Over UCX's tcp (mp-ucx, mp-ucx-rma): its cma transport aborts a survivor whose peer died
  // mid-transfer (see above).
  const char* tls = getenv("UCX_TLS");
  if (tls == nullptr || strstr(tls, "cma") != nullptr || strstr(tls, "tcp") == nullptr) {
    WARN("a death while messages fly is tested over UCX's tcp alone: UCX_TLS=" << (tls != nullptr ? tls : "(unset)"));
    return;
  }
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    const Env env = {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_CHUNK_SIZE", "8K"}};
    auto res = runComm(4, env, [&](braidComm_t comm, int rank, int) {
      std::vector<float> buf(1 << 20, 1.0f);
      if (rank == 2) {
        for (int i = 0; i < 3; ++i)
          CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr));
        braidRequest_t req;
        CHECK_BRAID(rank,
                    braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr, &req));
        raise(SIGKILL);
      }
      braidResult_t r = braidSuccess;
      for (int i = 0; i < 103 && r == braidSuccess; ++i)
        r = braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr);
      if (r != braidRemoteError) return fail(rank, "expected braidRemoteError, got %s", braidGetErrorString(r));
      braidCommAbort(comm);
      _exit(0);
    });
    INFO(describe(res));
    for (int r = 0; r < 4; ++r) CHECK(res[r].status == (r == 2 ? 128 + SIGKILL : 0));
  }
}

// A rank where UCX cannot start (here: UCX_TLS names no transport UCX has) records it, and only
// pairs that need ucx fail. Before, every rank whose UCX failed to start failed its init, though
// BRAID_TRANSPORTS=shm,ucx put all its pairs on shm and a single rank needs no link at all, and
// a pair that did need ucx heard no reason.
TEST_CASE("ucx: a rank where UCX cannot start fails only the pairs that need ucx, saying why", "[mp][ucx]") {
  if (!underTest("ucx")) {
    WARN("ucx is not compiled in or does not work here: skipped");
    return;
  }
  SECTION("pairs on an earlier transport, and a communicator of one rank") {
    for (int n : {3, 1}) {
      INFO(n << " ranks");
      const Env env = {{"BRAID_TRANSPORTS", n == 1 ? "ucx" : "shm,ucx"}, {"UCX_TLS", "no-such-transport"}};
      auto res = runComm(n, env, [](braidComm_t comm, int rank, int size) {
        float f = 1.0f;
        CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidSum, comm, nullptr));
        return f == static_cast<float>(size) ? 0 : fail(rank, "AllReduce gave %g", f);
      });
      INFO(describe(res));
      CHECK(allOk(res));
    }
  }
  SECTION("a pair that needs ucx") {
    braidUniqueId id;
    REQUIRE(braidGetUniqueId(&id) == braidSuccess);
    auto res = forkRanks(2, {{"BRAID_TRANSPORTS", "ucx"}, {"BRAID_TIMEOUT", "30"}}, [&](int rank, int size) {
      if (rank == 1) setenv("UCX_TLS", "no-such-transport", 1);
      braidComm_t comm = nullptr;
      const braidResult_t r = braidCommInitRank(&comm, size, id, rank);
      if (r != braidInvalidUsage) return fail(rank, "got %s: %s", braidGetErrorString(r), braidGetLastError());
      const char* want =
          rank == 1 ? "rank 1 could not start UCX (ucp_init" : "rank 1 could not start UCX (see its log)";
      if (strstr(braidGetLastError(), want) == nullptr)
        return fail(rank, "message lacks \"%s\": %s", want, braidGetLastError());
      return 0;
    });
    INFO(describe(res));
    CHECK(allOk(res));
  }
}
