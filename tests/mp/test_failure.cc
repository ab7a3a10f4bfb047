// Failure handling end to end: a rank killed or stopped mid-AllReduce becomes an error naming it on
// every survivor; the survivors shrink to a working communicator; async errors and splits.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

int64_t monoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the machine
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Whether an error says that the ranks' calls differ: in the words of a message's check, or in the
// calls' own where shm's mailboxes saw the difference first.
bool saysCallsDiffer(const char* error) {
  return strstr(error, "belongs to another call") != nullptr || strstr(error, "mismatched calls") != nullptr;
}

// Every rank exited 0 but `victim`, which died of SIGKILL (raised by itself or sent by the test).
void expectOnlyKilled(const std::vector<RankResult>& res, int victim) {
  INFO(describe(res));
  for (size_t r = 0; r < res.size(); ++r) CHECK(res[r].status == (static_cast<int>(r) == victim ? 128 + SIGKILL : 0));
}

// A page shared by the test's processes (mapped before the fork).
struct Shared {
  int64_t killNs;
  int32_t victimPid;
  int32_t left;    // ranks that finished braidCommDestroy
  int32_t hubPid;  // rank 0's
  int64_t detectNs[8];
};

Shared* mapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  memset(p, 0, sizeof(Shared));
  return static_cast<Shared*>(p);
}

// Survivors: AllReduce until one fails; returns its result. The failing call is the first one the
// failure reaches (a failure fails every pending operation).
braidResult_t reduceUntilFailure(braidComm_t comm, std::vector<float>* buf) {
  braidResult_t r = braidSuccess;
  for (int i = 0; i < 1000 && r == braidSuccess; ++i)
    r = braidAllReduce(buf->data(), buf->data(), buf->size(), braidFloat32, braidAvg, comm, nullptr);
  return r;
}

// The survivors' common check: the error names the victim and the operation, the failed-rank list
// is exactly {victim}, and the shrunk communicator renumbers and reduces correctly.
int checkAndShrink(braidComm_t comm, int rank, int size, int victim, braidResult_t got, braidResult_t want,
                   const char* cause) {
  if (got != want)
    return fail(rank, "expected %s, got %s: %s", braidGetErrorString(want), braidGetErrorString(got),
                braidGetLastError());
  std::string msg = braidGetLastError();
  std::string who = "rank " + std::to_string(victim) + " (host ";
  if (msg.find(who) == std::string::npos || msg.find(cause) == std::string::npos ||
      msg.find("AllReduce #") == std::string::npos)
    return fail(rank, "message does not name rank %d, '%s' and the operation: %s", victim, cause, msg.c_str());
  braidResult_t async = braidSuccess;
  CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
  if (async != want) return fail(rank, "async error %s", braidGetErrorString(async));
  return shrinkWithoutChecked(comm, rank, size, victim);
}

// The state letter of process pid in /proc/<pid>/stat (R, S, T, Z, ...), '?' when it is gone.
char procState(pid_t pid) {
  char path[64], buf[256] = {};
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = fopen(path, "r");
  if (f == nullptr) return '?';
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  const char* paren = strrchr(buf, ')');  // the command name may hold spaces and parentheses
  return n > 0 && paren != nullptr && paren[1] == ' ' ? paren[2] : '?';
}

bool isStopped(pid_t pid) { return procState(pid) == 'T'; }

// The braid segments that process pid has mapped, as names under /dev/shm ("/braid-..."), from its
// /proc/<pid>/maps (unlinked ones too: the kernel marks them " (deleted)").
std::vector<std::string> mappedSegments(pid_t pid) {
  std::vector<std::string> out;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/maps", static_cast<int>(pid));
  FILE* f = fopen(path, "r");
  if (f == nullptr) return out;
  char line[1024];
  while (fgets(line, sizeof(line), f) != nullptr) {
    const char* at = strstr(line, "/dev/shm/braid-");
    if (at == nullptr) continue;
    std::string name(at + strlen("/dev/shm"));
    name.erase(name.find_first_of(" \n"));
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  fclose(f);
  return out;
}

// The names in /dev/shm that start with "braid-<pid>-" (the creator's pid, as the shm transport names them).
std::vector<std::string> segmentsOfPid(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "braid-" + std::to_string(pid) + "-";
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d))
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(std::string("/") + e->d_name);
  closedir(d);
  return out;
}

bool shmExists(const std::string& name) { return access(("/dev/shm" + name).c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("kill -9 each rank in turn mid-AllReduce: survivors name it, shrink, and reduce correctly", "[mp][failure]") {
  Shared* shared = mapShared();
  std::vector<double> latencyMs;
  const std::vector<std::string>& transports = transportsUnderTest();
  REQUIRE(!transports.empty());
  for (int round = 0; round < 5; ++round) {
    const char* transport = transports[round % transports.size()].c_str();
    for (int victim = 0; victim < 4; ++victim) {
      INFO("round " << round << " victim " << victim << " over " << transport);
      memset(shared, 0, sizeof(*shared));
      auto res = runComm(
          4, {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}, {"BRAID_HEARTBEAT_MS", "200"}},
          [&](braidComm_t comm, int rank, int size) {
            std::vector<float> buf(1 << 18, 1.0f);
            if (rank == victim) {
              // A few good rounds, then die with an AllReduce in flight.
              for (int i = 0; i < 2; ++i)
                CHECK_BRAID(rank,
                            braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr));
              braidRequest_t req;
              CHECK_BRAID(rank, braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm,
                                                nullptr, &req));
              usleep(1000);
              shared->killNs = monoNs();
              raise(SIGKILL);
            }
            braidResult_t r = reduceUntilFailure(comm, &buf);
            shared->detectNs[rank] = monoNs();
            return checkAndShrink(comm, rank, size, victim, r, braidRemoteError, "died");
          },
          120);
      expectOnlyKilled(res, victim);
      for (int r = 0; r < 4; ++r) {
        if (r != victim && shared->killNs != 0 && shared->detectNs[r] != 0)
          latencyMs.push_back((shared->detectNs[r] - shared->killNs) / 1e6);
      }
    }
  }
  // Detection latency: from the kill to the failing call's return on a survivor (the figure the
  // issue note quotes). Reported, not asserted: timing belongs to benchmarks.
  std::sort(latencyMs.begin(), latencyMs.end());
  if (!latencyMs.empty())
    printf("detection latency over 20 kills (%zu survivor observations): median %.1f ms, max %.1f ms\n",
           latencyMs.size(), latencyMs[latencyMs.size() / 2], latencyMs.back());
  munmap(shared, sizeof(*shared));
}

TEST_CASE("a stopped rank (SIGSTOP) becomes braidTimeout naming it on every other rank", "[mp][failure]") {
  const int victim = GENERATE(0, 2);  // the hub of the control plane, and an ordinary rank
  INFO("victim " << victim);
  Shared* shared = mapShared();
  auto res = runComm(
      4, {{"BRAID_TIMEOUT", "60"}, {"BRAID_HEARTBEAT_MS", "100"}, {"BRAID_HEARTBEAT_MISSES", "5"}},
      [&](braidComm_t comm, int rank, int size) {
        std::vector<float> buf(1 << 16, 1.0f);
        if (rank == victim) {
          CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr));
          braidRequest_t req;
          CHECK_BRAID(rank,
                      braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr, &req));
          shared->victimPid = getpid();
          shared->killNs = monoNs();
          raise(SIGSTOP);
          _exit(7);  // not reached: the survivors kill us
        }
        braidResult_t r = reduceUntilFailure(comm, &buf);
        shared->detectNs[rank] = monoNs();
        int rc = checkAndShrink(comm, rank, size, victim, r, braidTimeout, "stopped answering");
        // The lowest survivor ends the stopped process (the harness would only after its deadline).
        if (rank == (victim == 0 ? 1 : 0) && shared->victimPid > 0) kill(shared->victimPid, SIGKILL);
        return rc;
      },
      120);
  expectOnlyKilled(res, victim);
  for (int r = 0; r < 4; ++r) {
    if (r != victim && shared->detectNs[r] != 0)
      printf("SIGSTOP of rank %d: rank %d failed after %.0f ms\n", victim, r,
             (shared->detectNs[r] - shared->killNs) / 1e6);
  }
  munmap(shared, sizeof(*shared));
}

// A rank stopped the moment its init returns may never have run its background thread, whose
// heartbeats tell rank 0 it is alive: rank 0 then allowed it the init grace (BRAID_TIMEOUT, for
// peers still connecting) and the stop surfaced as the survivors' operations timing out, each
// naming the rank it waited for (which with recursive doubling was a live partner waiting too).
// Seen in scripts/settings_sweep.sh under BRAID_ALGO=recursive_doubling on the 2 cores. Every
// survivor must get "stopped answering" naming the victim within the heartbeats' silence.
TEST_CASE("a rank stopped as soon as its init returns is 'stopped answering' on every survivor, not a timeout",
          "[mp][failure]") {
  const int victim = GENERATE(1, 2, 3, 1, 2, 3);
  INFO("victim " << victim);
  Shared* shared = mapShared();
  auto res = runComm(
      4, {{"BRAID_TIMEOUT", "20"}, {"BRAID_HEARTBEAT_MS", "100"}, {"BRAID_HEARTBEAT_MISSES", "5"}},
      [&](braidComm_t comm, int rank, int size) {
        if (rank == victim) {
          shared->victimPid = getpid();
          shared->killNs = monoNs();
          raise(SIGSTOP);
          _exit(7);  // not reached: the survivors kill us
        }
        std::vector<float> buf(1 << 10, 1.0f);
        braidResult_t r = reduceUntilFailure(comm, &buf);
        shared->detectNs[rank] = monoNs();
        int rc = checkAndShrink(comm, rank, size, victim, r, braidTimeout, "stopped answering");
        if (rank == 0 && shared->victimPid > 0) kill(shared->victimPid, SIGKILL);
        return rc;
      },
      60);
  expectOnlyKilled(res, victim);
  for (int r = 0; r < 4; ++r) {
    if (r == victim || shared->detectNs[r] == 0) continue;
    const double ms = (shared->detectNs[r] - shared->killNs) / 1e6;
    INFO("rank " << r << " failed after " << ms << " ms");
    CHECK(ms < 10000);  // the heartbeats' 0.5 s, not BRAID_TIMEOUT's 20 s
  }
  munmap(shared, sizeof(*shared));
}

// Ranks other than 0 hear of a death only through rank 0, while their links to the dead rank break
// at once. On a loaded host rank 0 may not run for a while: the survivors must wait for its notice,
// not blame the broken link (which said "peer rank 2 closed the connection" before). Rank 0 is
// stopped here for 500 ms as the victim dies.
TEST_CASE("a death that rank 0 relays late is still 'died' on every survivor, not a broken link", "[mp][failure]") {
  for (const std::string& transport : transportsUnderTest()) {
    if (transport == "shm") continue;  // shm's links find the dead peer's pid themselves
    INFO("over " << transport);
    Shared* shared = mapShared();
    const int victim = 2;
    auto res = runComm(
        4, {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int size) {
          if (rank == 0) shared->hubPid = getpid();
          std::vector<float> buf(1 << 12, 1.0f);
          CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidAvg, comm, nullptr));
          __atomic_add_fetch(&shared->left, 1, __ATOMIC_SEQ_CST);  // past the good one
          if (rank == victim) {
            while (__atomic_load_n(&shared->left, __ATOMIC_SEQ_CST) < size) usleep(1000);
            const pid_t hub = shared->hubPid;
            kill(hub, SIGSTOP);
            if (fork() == 0) {  // resumes rank 0 once the victim is long gone
              usleep(500 * 1000);
              kill(hub, SIGCONT);
              _exit(0);
            }
            raise(SIGKILL);
          }
          braidResult_t r = reduceUntilFailure(comm, &buf);
          return checkAndShrink(comm, rank, size, victim, r, braidRemoteError, "died");
        });
    expectOnlyKilled(res, victim);
    munmap(shared, sizeof(*shared));
  }
}

TEST_CASE("the async error turns up while a nonblocking AllReduce is in flight", "[mp][failure]") {
  Shared* shared = mapShared();
  auto res = runComm(3, {{"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int) {
    std::vector<float> buf(1 << 16, 1.0f);
    braidRequest_t req;
    CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm, nullptr));
    __atomic_add_fetch(&shared->victimPid, 1, __ATOMIC_SEQ_CST);
    if (rank == 2) {
      // Dies after everyone finished the good AllReduce, before the second one.
      while (__atomic_load_n(&shared->victimPid, __ATOMIC_SEQ_CST) < 3) usleep(1000);
      raise(SIGKILL);
    }
    CHECK_BRAID(rank, braidIAllReduce(buf.data(), buf.data(), buf.size(), braidFloat32, braidSum, comm, nullptr, &req));
    // Poll only the async error (no braidTest: the background thread serves the notice).
    braidResult_t async = braidSuccess;
    for (int i = 0; i < 60000 && async == braidSuccess; ++i) {
      CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
      if (async == braidSuccess) usleep(1000);
    }
    if (async != braidRemoteError) return fail(rank, "async error stayed %s", braidGetErrorString(async));
    if (strstr(braidGetLastError(), "rank 2 (host") == nullptr)
      return fail(rank, "no culprit: %s", braidGetLastError());
    braidResult_t w = braidWait(req);
    if (w != braidRemoteError) return fail(rank, "the request ended %s", braidGetErrorString(w));
    return 0;
  });
  expectOnlyKilled(res, 2);
  munmap(shared, sizeof(*shared));
}

TEST_CASE("split by color and key; a healthy shrink; bad arguments change nothing", "[mp][failure][split]") {
  auto res = runComm(4, {{"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int size) {
    // Colors: even and odd ranks; key reverses the order within a color.
    braidComm_t half = nullptr;
    CHECK_BRAID(rank, braidCommSplit(comm, rank % 2, size - rank, &half));
    int hr = -1, hn = 0;
    CHECK_BRAID(rank, braidCommUserRank(half, &hr));
    CHECK_BRAID(rank, braidCommCount(half, &hn));
    if (hn != 2 || hr != (rank < 2 ? 1 : 0)) return fail(rank, "split gave rank %d of %d", hr, hn);
    int64_t v = rank + 1;
    CHECK_BRAID(rank, braidAllReduce(&v, &v, 1, braidInt64, braidProd, half, nullptr));
    if (v != (rank % 2 == 0 ? 1 * 3 : 2 * 4)) return fail(rank, "split AllReduce gave %lld", static_cast<long long>(v));
    CHECK_BRAID(rank, braidCommDestroy(half));

    // No color: no communicator; everyone else still gets theirs.
    braidComm_t some = reinterpret_cast<braidComm_t>(1);
    CHECK_BRAID(rank, braidCommSplit(comm, rank == 3 ? BRAID_SPLIT_NOCOLOR : 0, 0, &some));
    if ((rank == 3) != (some == nullptr)) return fail(rank, "NOCOLOR handling");
    if (some != nullptr) {
      int n = 0;
      CHECK_BRAID(rank, braidCommCount(some, &n));
      if (n != 3) return fail(rank, "split without rank 3 has %d ranks", n);
      CHECK_BRAID(rank, braidCommDestroy(some));
    }

    // Bad arguments: clear errors, *newcomm untouched.
    braidComm_t untouched = reinterpret_cast<braidComm_t>(2);
    int bad[2] = {1, 1};
    if (braidCommShrink(comm, bad, 2, &untouched) != braidInvalidArgument ||
        untouched != reinterpret_cast<braidComm_t>(2))
      return fail(rank, "duplicate exclusion accepted");
    int self = rank;
    if (braidCommShrink(comm, &self, 1, &untouched) != braidInvalidArgument)
      return fail(rank, "self exclusion accepted");
    int out = 9;
    if (braidCommShrink(comm, &out, 1, &untouched) != braidInvalidArgument) return fail(rank, "rank 9 accepted");
    if (braidCommSplit(comm, -5, 0, &untouched) != braidInvalidArgument) return fail(rank, "color -5 accepted");
    if (strstr(braidGetLastError(), "color -5") == nullptr) return fail(rank, "message: %s", braidGetLastError());

    // A shrink of a healthy communicator: rank 3 stays out, the others go on without it.
    if (rank != 3) {
      int three = 3;
      braidComm_t rest = nullptr;
      CHECK_BRAID(rank, braidCommShrink(comm, &three, 1, &rest));
      float f = 1.0f;
      CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidSum, rest, nullptr));
      if (f != 3.0f) return fail(rank, "shrunk sum %g", f);
      CHECK_BRAID(rank, braidCommDestroy(rest));
    }
    // ... and the parent, still healthy, splits again with rank 3 in it (rank 3 had counted one
    // derivation less than the others and its rendezvous never met theirs).
    braidComm_t all = nullptr;
    CHECK_BRAID(rank, braidCommSplit(comm, 0, rank, &all));
    int64_t one = 1;
    CHECK_BRAID(rank, braidAllReduce(&one, &one, 1, braidInt64, braidSum, all, nullptr));
    if (one != 4) return fail(rank, "split after a shrink: sum %lld", static_cast<long long>(one));
    CHECK_BRAID(rank, braidCommDestroy(all));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("BRAID_CHECK_MISMATCH: matching calls run correctly, mismatched ones fail everywhere naming the ranks",
          "[mp][failure][mismatch]") {
  const int form = GENERATE(0, 1, 2);  // count, collective, datatype differ on rank 2
  INFO("form " << form);
  auto res =
      runComm(4, {{"BRAID_TIMEOUT", "60"}, {"BRAID_CHECK_MISMATCH", "1"}}, [&](braidComm_t comm, int rank, int n) {
        // Matching calls of several collectives still give the right results with the check in front.
        // The mismatch that follows may reach a rank while it still finishes one of them (a failure
        // fails every pending operation): then that call reports it.
        auto mismatchSeen = [&](braidResult_t r) { return r == braidInvalidUsage; };
        std::vector<int32_t> v(1000, rank + 1), all(4000);
        std::vector<float> f(1000, 1.0f);
        braidResult_t r = braidAllReduce(v.data(), v.data(), v.size(), braidInt32, braidSum, comm, nullptr);
        if (r == braidSuccess && v[999] != 10) return fail(rank, "AllReduce gave %d", v[999]);
        if (r == braidSuccess) r = braidAllGather(v.data(), all.data(), v.size(), braidInt32, comm, nullptr);
        if (r == braidSuccess) r = braidBroadcast(&rank, v.data(), 1, braidInt32, 3, comm, nullptr);
        if (r == braidSuccess && v[0] != 3) return fail(rank, "Broadcast gave %d", v[0]);
        if (r == braidSuccess) r = braidBarrier(comm, nullptr);
        if (r != braidSuccess && !mismatchSeen(r)) return fail(rank, "matching calls: %s", braidGetLastError());
        if (r == braidSuccess && rank == 2 && form == 0)
          r = braidAllReduce(f.data(), f.data(), 999, braidFloat32, braidSum, comm, nullptr);
        else if (r == braidSuccess && rank == 2 && form == 1)
          r = braidBroadcast(f.data(), f.data(), 1000, braidFloat32, 0, comm, nullptr);
        else if (r == braidSuccess && rank == 2 && form == 2)
          r = braidAllReduce(v.data(), v.data(), 1000, braidInt32, braidSum, comm, nullptr);
        else if (r == braidSuccess)
          r = braidAllReduce(f.data(), f.data(), 1000, braidFloat32, braidSum, comm, nullptr);
        if (r != braidInvalidUsage) return fail(rank, "expected braidInvalidUsage, got %s", braidGetErrorString(r));
        std::string msg = braidGetLastError();
        if (msg.find("mismatched calls") == std::string::npos || msg.find("rank 2 (host") == std::string::npos ||
            msg.find(" #5 ") == std::string::npos)
          return fail(rank, "message: %s", msg.c_str());
        if (rank == 0) fprintf(stderr, "form %d: %s\n", form, msg.c_str());
        (void)n;
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// Without BRAID_CHECK_MISMATCH, calls that differ where the chunking hides it: rank 2's count twice
// the others' cuts into twice as many chunks of the same size, so every message has the length its
// receive expects. Rank 3 took rank 2's first chunks as its whole call and returned success with
// wrong sums (shm, tcp and ucx alike), the rest queued for its next call. Every message now carries
// its call (Xfer::call; over ucx in its tag since 2026-12-07) and every rank fails naming the
// difference.
TEST_CASE("calls whose counts differ by whole chunks fail on every rank; none returns success",
          "[mp][failure][mismatch][ucx]") {
  const int form = GENERATE(0, 1);  // AllReduce, Broadcast (rank 2 / the root sends twice the bytes)
  for (const std::string& transport : transportsUnderTest()) {
    if (transport == "ibverbs") continue;  // no RDMA device: tests/unit/test_chunk_link.cc runs its protocol
    INFO("form " << form << " over " << transport);
    Env env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
    // Over UCX's tcp: its cma transport (in UCX_TLS's default, and mp-ucx-sm's) aborts a rank
    // whose peer left while a transfer between them was under way (test_ucx.cc skips deaths there
    // for that), as the ranks here leave once the calls fail: one full run of mp-ucx-sm aborted so.
    if (transport == "ucx") env["UCX_TLS"] = "tcp,self";
    auto res = runComm(4, env, [&](braidComm_t comm, int rank, int) {
      const size_t one = (1 << 20) / sizeof(float);
      std::vector<float> buf(2 * one, 1.0f);
      const bool twice = form == 0 ? rank == 2 : rank == 0;
      const size_t count = twice ? 2 * one : one;
      braidResult_t r = form == 0 ? braidAllReduce(buf.data(), buf.data(), count, braidFloat32, braidSum, comm, nullptr)
                                  : braidBroadcast(buf.data(), buf.data(), count, braidFloat32, 0, comm, nullptr);
      // A Broadcast's root receives nothing: its call may complete, its next one fails.
      if (form == 1 && rank == 0 && r == braidSuccess) r = braidBarrier(comm, nullptr);
      if (r != braidInvalidUsage)
        return fail(rank, "expected braidInvalidUsage, got %s (%s); buf[0] = %g", braidGetErrorString(r),
                    braidGetLastError(), static_cast<double>(buf[0]));
      if (!saysCallsDiffer(braidGetLastError())) return fail(rank, "message: %s", braidGetLastError());
      return 0;
    });
    INFO(describe(res));
    CHECK(allOk(res));
  }
}

TEST_CASE("a message that a mismatched call left unread is refused by the next call, never taken as its own",
          "[mp][failure][mismatch][ucx]") {
  // Call 1: rank 0 broadcasts 1s from root 0 and rank 1 reduces to root 0, so each only sends: both
  // may return success, and each one's message stays unread at the other. Call 2: both broadcast
  // 2s from root 0, whose message to rank 1 queues behind call 1's. Rank 1 took call 1's 1s as call
  // 2's and returned success (tcp, ucx's tags and its chunk protocol under BRAID_UCX_PROTO=rma;
  // shm's FIFO likewise): the messages now carry the call's number, and call 2 fails. On shm's mailboxes, which number
  // their calls, nothing is taken by the wrong call and nothing shows the difference: every call may succeed there,
  // with the right data. Rank 0 only sends in both calls: a Barrier after them fails there.
  const size_t count = GENERATE(size_t{16}, size_t{1} << 18);
  for (const std::string& transport : transportsUnderTest()) {
    if (transport == "ibverbs") continue;  // no RDMA device: tests/unit/test_chunk_link.cc runs its protocol
    INFO(count << " floats over " << transport);
    Env env = {{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}};
    if (transport == "ucx") env["UCX_TLS"] = "tcp,self";  // as in the test above
    auto res = runComm(2, env, [&](braidComm_t comm, int rank, int) {
      std::vector<float> in(count, 1.0f), out(count, 0.0f);
      braidResult_t r = rank == 0 ? braidBroadcast(in.data(), out.data(), count, braidFloat32, 0, comm, nullptr)
                                  : braidReduce(in.data(), out.data(), count, braidFloat32, braidSum, 0, comm, nullptr);
      if (r == braidSuccess) {
        std::fill(in.begin(), in.end(), 2.0f);
        std::fill(out.begin(), out.end(), 0.0f);
        r = braidBroadcast(in.data(), out.data(), count, braidFloat32, 0, comm, nullptr);
        for (size_t i = 0; r == braidSuccess && i < count; ++i)
          if (out[i] != 2.0f)
            return fail(rank, "the second call returned success with out[%zu] = %g (root sent 2)", i,
                        static_cast<double>(out[i]));
      }
      if (r == braidSuccess) r = braidBarrier(comm, nullptr);
      if (r == braidSuccess) return 0;
      if (r != braidInvalidUsage)
        return fail(rank, "expected braidInvalidUsage, got %s (%s)", braidGetErrorString(r), braidGetLastError());
      if (!saysCallsDiffer(braidGetLastError())) return fail(rank, "message: %s", braidGetLastError());
      return 0;
    });
    INFO(describe(res));
    CHECK(allOk(res));
  }
}

TEST_CASE("gossip skips a failed neighbour and renormalizes the weights on the next call", "[mp][failure]") {
  // idle: rank 1 (not rank 3's neighbour) has no call in flight when the failure comes; its next
  // call must still report it (it once ran on the survivors silently, one call ahead of the others).
  const bool idle = GENERATE(false, true);
  INFO("idle " << idle);
  Shared* shared = mapShared();
  auto res = runComm(4, {{"BRAID_TIMEOUT", "60"}}, [&](braidComm_t comm, int rank, int) {
    braidGraph_t ring = nullptr;
    CHECK_BRAID(rank, braidGraphCreateNamed(comm, "ring", &ring));  // left and right, 1/3 each
    std::vector<float> x(5000), y(5000);
    for (int i = 0; i < 2; ++i) {
      std::fill(x.begin(), x.end(), static_cast<float>(rank + 1));
      CHECK_BRAID(rank, braidNeighborAllReduce(x.data(), y.data(), x.size(), braidFloat32, ring, comm, nullptr));
    }
    // Rank 3 dies once everyone finished those calls (dying earlier would fail a call still
    // pending elsewhere: a failure fails every pending operation).
    __atomic_add_fetch(&shared->victimPid, 1, __ATOMIC_SEQ_CST);
    if (rank == 3) {
      while (__atomic_load_n(&shared->victimPid, __ATOMIC_SEQ_CST) < 4) usleep(1000);
      raise(SIGKILL);
    }
    braidResult_t r = braidSuccess;
    if (idle && rank == 1) {
      while (braidCommGetAsyncError(comm, &r) == braidSuccess && r == braidSuccess) usleep(1000);
      if (r != braidRemoteError) return fail(rank, "async error: %s", braidGetErrorString(r));
      r = braidNeighborAllReduce(x.data(), y.data(), x.size(), braidFloat32, ring, comm, nullptr);
      if (r != braidRemoteError) return fail(rank, "the first call after the failure: %s", braidGetErrorString(r));
    }
    // The call that meets the failure reports it, naming the rank.
    for (int i = 0; i < 1000 && r == braidSuccess; ++i)
      r = braidNeighborAllReduce(x.data(), y.data(), x.size(), braidFloat32, ring, comm, nullptr);
    if (r != braidRemoteError || strstr(braidGetLastError(), "rank 3 (host") == nullptr)
      return fail(rank, "expected braidRemoteError naming rank 3: %s", braidGetLastError());
    // The next calls run on the survivors: rank 1 keeps both neighbours (1/3 each); ranks 0 and 2
    // lost rank 3, so their remaining weights 1/3 + 1/3 become 1/2 + 1/2.
    const float want[3] = {0.5f * 1 + 0.5f * 2, (1.0f + 2 + 3) / 3, 0.5f * 3 + 0.5f * 2};
    for (int call = 0; call < 3; ++call) {
      std::fill(x.begin(), x.end(), static_cast<float>(rank + 1));
      CHECK_BRAID(rank, braidNeighborAllReduce(x.data(), y.data(), x.size(), braidFloat32, ring, comm, nullptr));
      for (size_t i = 0; i < y.size(); ++i)
        if (std::fabs(y[i] - want[rank]) > 1e-5f)
          return fail(rank, "call %d: y[%zu] = %g, want %g", call, i, y[i], want[rank]);
    }
    // Nonblocking works there too; the communicator itself stays failed for other collectives.
    braidRequest_t req;
    CHECK_BRAID(rank, braidINeighborAllReduce(x.data(), x.data(), x.size(), braidFloat32, ring, comm, nullptr, &req));
    CHECK_BRAID(rank, braidWait(req));
    if (std::fabs(x[0] - want[rank]) > 1e-5f) return fail(rank, "in place: %g", x[0]);
    if (braidAllReduce(x.data(), x.data(), 1, braidFloat32, braidSum, comm, nullptr) != braidRemoteError)
      return fail(rank, "AllReduce on the failed communicator did not fail");
    CHECK_BRAID(rank, braidGraphDestroy(ring));
    return 0;
  });
  expectOnlyKilled(res, 3);
  munmap(shared, sizeof(*shared));
}

TEST_CASE("a rank resumed after SIGSTOP reads its peers' goodbyes before it judges their silence", "[mp][failure]") {
  // Rank 0 (it watches every rank) is stopped for longer than BRAID_HEARTBEAT_MS x MISSES while
  // ranks 1 and 2 leave cleanly; resumed, it must find their goodbyes, not blame their silence.
  Shared* shared = mapShared();
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  char logPath[] = "/tmp/braid-test-sigstop-XXXXXX";
  const int logFd = mkstemp(logPath);
  REQUIRE(logFd >= 0);
  auto res = forkRanks(
      3, {{"BRAID_TIMEOUT", "60"}, {"BRAID_HEARTBEAT_MS", "100"}, {"BRAID_HEARTBEAT_MISSES", "3"}},
      [&](int rank, int size) {
        if (rank == 0) dup2(logFd, 2);  // its warnings, for the parent to read
        braidComm_t comm = nullptr;
        CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
        // Long enough for every rank to have heard the others' heartbeats: silence counts from then.
        float f = 1.0f;
        for (int i = 0; i < 3; ++i) {
          CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidMax, comm, nullptr));
          usleep(100 * 1000);
        }
        CHECK_BRAID(rank, braidBarrier(comm, nullptr));
        if (rank == 0) {
          __atomic_store_n(&shared->victimPid, getpid(), __ATOMIC_SEQ_CST);
          raise(SIGSTOP);
          braidResult_t async = braidSuccess;
          CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
          if (async != braidSuccess) return fail(rank, "async error after SIGCONT: %s", braidGetLastError());
          // Destroy waits for the goodbyes, which the background thread reads after its first look.
          CHECK_BRAID(rank, braidCommDestroy(comm));
          return 0;
        }
        pid_t victim = 0;
        while ((victim = __atomic_load_n(&shared->victimPid, __ATOMIC_SEQ_CST)) == 0 || !isStopped(victim))
          usleep(1000);
        CHECK_BRAID(rank, braidCommDestroy(comm));
        if (__atomic_add_fetch(&shared->left, 1, __ATOMIC_SEQ_CST) == size - 1) {
          // The last to leave: keep rank 0 stopped for three times heartbeat x misses, then resume it.
          usleep(900 * 1000);
          kill(victim, SIGCONT);
        }
        return 0;
      },
      120);
  close(logFd);
  const std::string log = readFile(logPath);
  unlink(logPath);
  INFO(describe(res) << "\nrank 0 log:\n" << log);
  CHECK(allOk(res));
  CHECK(log.find("stopped answering") == std::string::npos);
  CHECK(log.find("communicator failed") == std::string::npos);
  munmap(shared, sizeof(*shared));
}

TEST_CASE("a rank killed during shm setup leaves no segment of the job in /dev/shm", "[mp][failure][shm]") {
  // The victim is stopped the moment it has a segment mapped; if the segment's name still exists
  // then, it is killed inside the window between shm_open and the unlink (else just killed: init may
  // be over). Either way no name of the job's processes may stay behind, and the survivor's error
  // names the victim.
  const int victim = GENERATE(0, 1);  // the hub of the bootstrap star, and an ordinary rank
  INFO("victim " << victim);
  int hits = 0;
  const int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    braidUniqueId id;
    REQUIRE(braidGetUniqueId(&id) == braidSuccess);
    std::vector<pid_t> pids(2);
    for (int r = 0; r < 2; ++r) {
      pids[r] = spawnProcess({{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "20"}}, [&id, r, victim] {
        braidComm_t comm = nullptr;
        if (braidCommInitRank(&comm, 2, id, r) == braidSuccess) {
          braidCommAbort(comm);  // the victim's kill came after init: nothing more to see
          return 0;
        }
        const std::string who = "rank " + std::to_string(victim) + " (host ";
        if (strstr(braidGetLastError(), who.c_str()) == nullptr)
          return fail(r, "init error does not name %s...): %s", who.c_str(), braidGetLastError());
        return 0;
      });
    }
    std::vector<std::string> seen;
    bool hit = false;
    for (int spins = 0; spins < 2000000; ++spins) {
      if (!mappedSegments(pids[victim]).empty()) {
        kill(pids[victim], SIGSTOP);
        while (!isStopped(pids[victim]) && procState(pids[victim]) != '?' && procState(pids[victim]) != 'Z')
          usleep(100);
        seen = mappedSegments(pids[victim]);
        for (const std::string& name : seen) hit |= shmExists(name);
        break;
      }
      const char st = procState(pids[victim]);
      if (st == 'Z' || st == '?') break;
      usleep(50);
    }
    kill(pids[victim], SIGKILL);
    std::vector<RankResult> res = {waitProcess(pids[0], 60), waitProcess(pids[1], 60)};
    hits += hit ? 1 : 0;
    INFO("round " << round << (hit ? ": killed inside the window" : ": killed outside the window") << "\n"
                  << describe(res));
    CHECK(res[1 - victim].status == 0);
    std::vector<std::string> left;
    for (const std::string& name : seen)
      if (shmExists(name)) left.push_back(name);
    for (pid_t p : pids)
      for (const std::string& name : segmentsOfPid(p))
        if (std::find(left.begin(), left.end(), name) == left.end()) left.push_back(name);
    std::string leftText;
    for (const std::string& name : left) {
      leftText += " /dev/shm" + name;
      shm_unlink(name.c_str());  // the test leaves nothing behind either
    }
    INFO("left behind:" << leftText);
    CHECK(left.empty());
  }
  printf("shm kill during init (victim rank %d): inside the window in %d of %d runs\n", victim, hits, rounds);
}

TEST_CASE("a rank resumed after SIGSTOP learns it was the one stopped and blames no live peer", "[mp][failure]") {
  // Rank 0 is stopped; ranks 1 and 2 stay alive, keep beating and rightly declare rank 0 stopped.
  // Resumed, rank 0 must read their notice (it names rank 0), not take their silence toward a
  // stopped process for theirs.
  Shared* shared = mapShared();
  auto res = runComm(
      3, {{"BRAID_TIMEOUT", "60"}, {"BRAID_HEARTBEAT_MS", "100"}, {"BRAID_HEARTBEAT_MISSES", "3"}},
      [&](braidComm_t comm, int rank, int size) {
        float f = 1.0f;
        for (int i = 0; i < 3; ++i) {  // every rank hears the others' heartbeats before the stop
          CHECK_BRAID(rank, braidAllReduce(&f, &f, 1, braidFloat32, braidMax, comm, nullptr));
          usleep(100 * 1000);
        }
        CHECK_BRAID(rank, braidBarrier(comm, nullptr));
        braidResult_t async = braidSuccess;
        if (rank == 0) {
          __atomic_store_n(&shared->victimPid, getpid(), __ATOMIC_SEQ_CST);
          raise(SIGSTOP);
          for (int i = 0; i < 60000 && async == braidSuccess; ++i) {
            CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
            if (async == braidSuccess) usleep(1000);
          }
          std::string msg = braidGetLastError();
          __atomic_store_n(&shared->killNs, 1, __ATOMIC_SEQ_CST);  // the others may go
          // Who "stopped answering" is the rank named last before those words.
          const size_t stopped = msg.find(" stopped answering");
          const size_t named = stopped == std::string::npos ? std::string::npos : msg.rfind("rank ", stopped);
          if (named != std::string::npos && atoi(msg.c_str() + named + 5) != 0)
            return fail(rank, "blames a live rank: %s", msg.c_str());
          if (async != braidTimeout || msg.find("rank 0 (host") == std::string::npos ||
              msg.find("stopped answering") == std::string::npos || msg.find("(this rank)") == std::string::npos)
            return fail(rank, "expected the notice that this rank stopped, got %s: %s", braidGetErrorString(async),
                        msg.c_str());
          return 0;
        }
        pid_t victim = 0;
        while ((victim = __atomic_load_n(&shared->victimPid, __ATOMIC_SEQ_CST)) == 0 || !isStopped(victim))
          usleep(1000);
        while (async == braidSuccess) {  // the heartbeats find the stopped rank 0
          CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
          if (async == braidSuccess) usleep(1000);
        }
        if (async != braidTimeout || strstr(braidGetLastError(), "rank 0 (host") == nullptr)
          return fail(rank, "expected a timeout naming rank 0: %s", braidGetLastError());
        if (__atomic_add_fetch(&shared->left, 1, __ATOMIC_SEQ_CST) == size - 1) kill(victim, SIGCONT);
        while (__atomic_load_n(&shared->killNs, __ATOMIC_SEQ_CST) == 0) usleep(1000);
        return 0;
      },
      120);
  INFO(describe(res));
  CHECK(allOk(res));
  munmap(shared, sizeof(*shared));
}
