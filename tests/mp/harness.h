// Multi-process test harness: real processes (fork), real transports. The parent creates a unique
// id, forks one child per rank, and each child builds the communicator and runs the test body.
// A child reports failures on stderr and through its exit status; the parent kills stragglers at
// a deadline so a hang is a failure, not a stuck suite.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace braidtest {

struct RankResult {
  int status = -1;  // exit status, or 128 + signal
  bool timedOut = false;
};

// Env applied in every child before the body runs (e.g. BRAID_TRANSPORTS).
using Env = std::map<std::string, std::string>;

// Forks one process that applies env, runs fn and exits with its return value (an exception exits 1).
pid_t spawnProcess(const Env& env, const std::function<int()>& fn);
// Waits for a process from spawnProcess, killing it after timeoutSec (a hang is a failure); with
// BRAIDTEST_HANG_STACKS set, gdb prints its threads' stacks to stderr first.
RankResult waitProcess(pid_t pid, int timeoutSec);

// Whether process `pid` (another rank, stopped with SIGSTOP) is stopped within two seconds.
bool waitStopped(pid_t pid);

// Forks n ranks; each runs body(rank, n) and exits with its return value. Returns per-rank results.
std::vector<RankResult> forkRanks(int n, const Env& env, const std::function<int(int rank, int n)>& body,
                                  int timeoutSec = 240);

// As forkRanks, with a communicator built by braidCommInitRank before body and destroyed after.
// beforeInit, when given, runs in each rank first (per-rank environment such as BRAID_HOSTID).
std::vector<RankResult> runComm(int n, const Env& env,
                                const std::function<int(braidComm_t comm, int rank, int n)>& body, int timeoutSec = 240,
                                const std::function<void(int rank)>& beforeInit = {});

// The transports every test runs on: each one compiled into this build (braid's registry, in its
// order) that connects two local processes here, checked once per test process. One compiled in
// but unusable here is left out with a line on stderr saying why, so it is visibly skipped; except
// shm and tcp, which work on any Linux host: one of those failing its probe ends the test process
// with status 1, so a broken build cannot pass by skipping their tests.
// BRAIDTEST_TRANSPORTS (a comma-separated list, for the harness only) keeps just those: meson's
// mp-ucx-rma runs the Link contract over ucx alone that way, saying so on stderr.
const std::vector<std::string>& transportsUnderTest();
// Whether `name` is among transportsUnderTest(); for the tests of one transport (their tag picks
// the suite), which print that they are skipped when it is not.
bool underTest(const char* name);

// "" when this machine has an RDMA device, else why not in the ibverbs transport's words ("no RDMA
// device (ibv_get_device_list: ...)"), for the skip messages of the tests that need one.
std::string rdmaAbsence();

// True when every rank exited 0.
bool allOk(const std::vector<RankResult>& r);
std::string describe(const std::vector<RankResult>& r);

// Typed element access for the sweep tests: values are small integers, exact in every type.
double loadElem(braidDataType_t dt, const void* buf, size_t i);
void storeElem(braidDataType_t dt, void* buf, size_t i, double v);
size_t elemSize(braidDataType_t dt);
const char* typeName(braidDataType_t dt);
const char* opName(braidRedOp_t op);
bool isFloat(braidDataType_t dt);

// Input value of rank r at index i for a reduction op, and the expected reduction over n ranks.
double inputValue(braidRedOp_t op, int rank, size_t i, int n);
double expectedValue(braidDataType_t dt, braidRedOp_t op, size_t i, int n);
// Whether got matches want in dt (exact for integers and exact ops; a relative tolerance for avg).
bool matches(braidDataType_t dt, braidRedOp_t op, double got, double want);

// The communicator behind a live handle, for tests that read braid's internals (its selector, its
// settings, its transports); aborts on a handle that is not live.
braidComm* internalsOf(braidComm_t handle);
// A whole file's contents ("" when it cannot be read).
std::string readFile(const std::string& path);

// A base port such that base .. base + count - 1 are free on the loopback address now (ipv6: ::1),
// from below the kernel's ephemeral range (which hands ports to outgoing connections at any time:
// a port picked there was taken by a concurrent test's connection in CI). `salt` spreads the
// callers of one process; the pid spreads processes.
int unusedPorts(int salt, int count = 1, bool ipv6 = false);
// Prints "rank R: <msg>" to stderr and returns 1 (for `return fail(...)` in bodies).
int fail(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// One AllReduce of `count` elements of `dt` with `op` on send/recv (recv alone when in place),
// checked against expectedValue(). Returns 0 or fail().
int allReduceChecked(braidComm_t comm, int rank, int n, char* send, char* recv, size_t count, braidDataType_t dt,
                     braidRedOp_t op, bool inPlace);
// After `victim` failed: this rank's failed-rank list is exactly {victim}, and the communicator
// shrunk without it renumbers this rank and reduces correctly (then it is destroyed). 0 or fail().
int shrinkWithoutChecked(braidComm_t comm, int rank, int size, int victim);
// One Reduce (root: the last rank, past rank 1, whose output in place is an input a fold must not
// overwrite early) or ReduceScatter (`count` elements per rank) on send/recv, checked. 0 or fail().
int rootedOrScatteredChecked(braidComm_t comm, int rank, int n, bool scatter, char* send, char* recv, size_t count,
                             braidDataType_t dt, braidRedOp_t op, bool inPlace);

}  // namespace braidtest

// In a child body: check a braid call, report and return 1 on failure.
#define CHECK_BRAID(rank, call)                                                                                 \
  do {                                                                                                          \
    braidResult_t r_ = (call);                                                                                  \
    if (r_ != braidSuccess)                                                                                     \
      return ::braidtest::fail(rank, "%s failed: %s: %s", #call, braidGetErrorString(r_), braidGetLastError()); \
  } while (0)
