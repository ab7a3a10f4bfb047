#include "tests/mp/harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "braid_build_config.h"
#include "src/api.h"
#if BRAID_HAVE_IBVERBS
#include "src/base/config.h"
#include "transports/ibverbs/ib_api.h"
#endif
#include "src/reduce.h"
#include "transports/transport.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace braidtest {

namespace {
// Exit status of a rank whose leak check found leaks (LeakSanitizer's own default exit code).
constexpr int kLeakExitStatus = 23;

// Children leave with _exit, which skips LeakSanitizer's atexit check: run it here so that a leak
// in a rank fails the test (the report goes to stderr). Everything the test body allocated is
// released by now; what the child inherited from the parent is still reachable from its stack.
int checkLeaks(int rc) {
#if defined(__SANITIZE_ADDRESS__)
  if (__lsan_do_recoverable_leak_check() != 0 && rc == 0) return kLeakExitStatus;
#endif
  return rc;
}

// Likewise gcov's counters, which it writes at exit: in a coverage build (tests/meson.build defines
// BRAIDTEST_GCOV_DUMP) the ranks write them before their _exit, or the counts would cover only what
// the test processes themselves ran.
#if defined(BRAIDTEST_GCOV_DUMP)
extern "C" void __gcov_dump(void);
#endif
void dumpCoverage() {
#if defined(BRAIDTEST_GCOV_DUMP)
  __gcov_dump();
#endif
}

// Test traffic stays on loopback (ids created in this process and every rank's tcp links), unless
// a test or the caller names another interface.
struct LoopbackByDefault {
  LoopbackByDefault() { setenv("BRAID_SOCKET_IFNAME", "lo", 0); }
} gLoopbackByDefault;
}  // namespace

pid_t spawnProcess(const Env& env, const std::function<int()>& fn) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  int rc = 1;
  try {
    rc = fn();
  } catch (...) {
    fprintf(stderr, "pid %d: exception\n", static_cast<int>(getpid()));
  }
  rc = checkLeaks(rc);
  dumpCoverage();
  fflush(stdout);
  fflush(stderr);
  _exit(rc);
}

RankResult waitProcess(pid_t pid, int timeoutSec) {
  RankResult res;
  time_t deadline = time(nullptr) + timeoutSec;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (time(nullptr) > deadline) {
      fprintf(stderr, "harness: pid %d still running after %d s: killing it\n", static_cast<int>(pid), timeoutSec);
      if (getenv("BRAIDTEST_HANG_STACKS") != nullptr) {  // where it hangs, before it goes
        const std::string cmd = "gdb -p " + std::to_string(pid) + " -batch -ex 'thread apply all bt' 1>&2";
        if (system(cmd.c_str()) != 0) fprintf(stderr, "harness: no stacks (%s failed)\n", cmd.c_str());
      }
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      res.timedOut = true;
      res.status = 128 + SIGKILL;
      return res;
    }
    usleep(2000);
  }
  res.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

std::vector<RankResult> forkRanks(int n, const Env& env, const std::function<int(int, int)>& body, int timeoutSec) {
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) pids[r] = spawnProcess(env, [&body, r, n] { return body(r, n); });
  // The ranks run at once: waiting for them in turn, each with what is left of the deadline, costs
  // nothing, and reaps only our ranks (not a test's other children).
  const time_t deadline = time(nullptr) + timeoutSec;
  std::vector<RankResult> res(n);
  for (int r = 0; r < n; ++r)
    res[r] = waitProcess(pids[r], static_cast<int>(std::max<time_t>(0, deadline - time(nullptr))));
  return res;
}

std::vector<RankResult> runComm(int n, const Env& env, const std::function<int(braidComm_t, int, int)>& body,
                                int timeoutSec, const std::function<void(int)>& beforeInit) {
  braidUniqueId id;
  if (braidGetUniqueId(&id) != braidSuccess) {
    fprintf(stderr, "harness: braidGetUniqueId failed: %s\n", braidGetLastError());
    return std::vector<RankResult>(n);
  }
  return forkRanks(
      n, env,
      [&](int rank, int size) {
        if (beforeInit) beforeInit(rank);
        braidComm_t comm = nullptr;
        CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
        int rc = body(comm, rank, size);
        if (rc != 0) {
          braidCommAbort(comm);
          return rc;
        }
        CHECK_BRAID(rank, braidCommDestroy(comm));
        return 0;
      },
      timeoutSec);
}

const std::vector<std::string>& transportsUnderTest() {
  static const std::vector<std::string> kUsable = [] {
    std::vector<std::string> usable;
    const char* only = getenv("BRAIDTEST_TRANSPORTS");
    std::vector<std::string> keep;
    if (only != nullptr) {
      std::stringstream list(only);
      for (std::string item; std::getline(list, item, ',');) keep.push_back(item);
    }
    for (const braid::TransportEntry& t : braid::transportRegistry()) {
      if (only != nullptr && std::find(keep.begin(), keep.end(), t.name) == keep.end()) {
        fprintf(stderr, "harness: transport %s is left out by BRAIDTEST_TRANSPORTS=%s: SKIPPING its tests\n", t.name,
                only);
        continue;
      }
      // A real communicator over this transport alone, with one AllReduce through its links.
      auto res =
          runComm(2, {{"BRAID_TRANSPORTS", t.name}, {"BRAID_TIMEOUT", "30"}}, [](braidComm_t comm, int rank, int) {
            float x = 1.0f;
            CHECK_BRAID(rank, braidAllReduce(&x, &x, 1, braidFloat32, braidSum, comm, nullptr));
            return x == 2.0f ? 0 : fail(rank, "probe AllReduce gave %g", static_cast<double>(x));
          });
      if (allOk(res)) {
        usable.push_back(t.name);
      } else if (strcmp(t.name, "shm") == 0 || strcmp(t.name, "tcp") == 0) {
        // These two need nothing but a Linux host: one that does not work is broken, and skipping
        // its tests would pass a build that cannot move a byte.
        fprintf(stderr, "harness: transport %s does not work (%s): it works on every host, so this run FAILS\n", t.name,
                describe(res).c_str());
        exit(1);
      } else {
        fprintf(stderr, "harness: transport %s is compiled in but does not work here (%s): SKIPPING its tests\n",
                t.name, describe(res).c_str());
      }
    }
    return usable;
  }();
  return kUsable;
}

std::string rdmaAbsence() {
#if BRAID_HAVE_IBVERBS
  // libibverbs as the transport opens it (libbraid does not link it), but through a table of this
  // call's own: loadIbverbs's once-per-process choice would bind the ranks forked after this.
  braid::ib::IbvApi api;
  const braid::Status loaded = braid::ib::openIbverbs(braid::paramString("BRAID_IB_LIBRARY"), &api);
  if (!loaded.ok()) return loaded.message();
  int n = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&n);
  std::string why;
  if (list == nullptr) why = std::string("no RDMA device (ibv_get_device_list: ") + strerror(errno) + ")";
  if (list != nullptr && n == 0) why = "no RDMA device (ibv_get_device_list: 0 devices)";
  if (list != nullptr) api.free_device_list(list);
  return why;
#else
  return "ibverbs is not built (meson found no libibverbs)";
#endif
}

bool underTest(const char* name) {
  for (const std::string& t : transportsUnderTest())
    if (t == name) return true;
  fprintf(stderr, "harness: transport %s is not under test here: SKIPPING\n", name);
  return false;
}

braidComm* internalsOf(braidComm_t handle) {
  braidComm* comm = nullptr;
  if (!braid::commOf(handle, &comm).ok()) abort();
  return comm;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool allOk(const std::vector<RankResult>& r) {
  for (const auto& x : r)
    if (x.status != 0) return false;
  return !r.empty();
}

std::string describe(const std::vector<RankResult>& r) {
  std::string s;
  for (size_t i = 0; i < r.size(); ++i)
    s += "rank " + std::to_string(i) + ": status " + std::to_string(r[i].status) +
         (r[i].timedOut ? " (timed out)" : "") + "\n";
  return s;
}

size_t elemSize(braidDataType_t dt) { return braid::dtypeSize(dt); }
const char* typeName(braidDataType_t dt) { return braid::dtypeName(dt); }
const char* opName(braidRedOp_t op) { return braid::redopName(op); }
bool isFloat(braidDataType_t dt) {
  return dt == braidFloat16 || dt == braidBfloat16 || dt == braidFloat32 || dt == braidFloat64;
}

double loadElem(braidDataType_t dt, const void* buf, size_t i) {
  switch (dt) {
    case braidInt8:
      return static_cast<const int8_t*>(buf)[i];
    case braidUint8:
      return static_cast<const uint8_t*>(buf)[i];
    case braidInt32:
      return static_cast<const int32_t*>(buf)[i];
    case braidUint32:
      return static_cast<const uint32_t*>(buf)[i];
    case braidInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case braidUint64:
      return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case braidFloat16:
      return braid::halfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case braidBfloat16:
      return braid::bf16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case braidFloat32:
      return static_cast<const float*>(buf)[i];
    case braidFloat64:
      return static_cast<const double*>(buf)[i];
    default:
      return NAN;
  }
}

void storeElem(braidDataType_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case braidInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case braidUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case braidInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case braidUint32:
      static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v);
      break;
    case braidInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case braidUint64:
      static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v);
      break;
    case braidFloat16:
      static_cast<uint16_t*>(buf)[i] = braid::floatToHalf(static_cast<float>(v));
      break;
    case braidBfloat16:
      static_cast<uint16_t*>(buf)[i] = braid::floatToBf16(static_cast<float>(v));
      break;
    case braidFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case braidFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    default:
      break;
  }
}

double inputValue(braidRedOp_t op, int rank, size_t i, int n) {
  if (op == braidProd) return ((static_cast<size_t>(rank) + i) % static_cast<size_t>(n)) == 0 ? 2 : 1;
  return 1 + static_cast<double>((static_cast<size_t>(rank) * 7 + i * 3) % 5);
}

double expectedValue(braidDataType_t dt, braidRedOp_t op, size_t i, int n) {
  double acc = inputValue(op, 0, i, n);
  for (int r = 1; r < n; ++r) {
    double v = inputValue(op, r, i, n);
    switch (op) {
      case braidSum:
      case braidAvg:
        acc += v;
        break;
      case braidProd:
        acc *= v;
        break;
      case braidMin:
        acc = std::min(acc, v);
        break;
      case braidMax:
        acc = std::max(acc, v);
        break;
      default:
        break;
    }
  }
  if (op == braidAvg) acc = isFloat(dt) ? acc / n : std::trunc(acc / n);
  return acc;
}

bool matches(braidDataType_t dt, braidRedOp_t op, double got, double want) {
  if (op != braidAvg || !isFloat(dt)) return got == want;
  double tol = dt == braidFloat64 ? 1e-12 : dt == braidFloat32 ? 1e-6 : 1e-2;
  return std::fabs(got - want) <= tol * std::fabs(want);
}

namespace {

bool portFree(int port, bool ipv6) {
  const int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int rc = -1;
  if (ipv6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    a.sin6_addr = in6addr_loopback;
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  close(fd);
  return rc == 0;
}

}  // namespace

int unusedPorts(int salt, int count, bool ipv6) {
  // [20000, 32000): below Linux's default ephemeral range (32768-60999).
  constexpr int kLow = 20000, kSpan = 12000;
  const int start = static_cast<int>((static_cast<unsigned>(getpid()) * 131u + static_cast<unsigned>(salt) * 977u) %
                                     static_cast<unsigned>(kSpan - count));
  for (int i = 0; i < kSpan; i += count) {
    const int base = kLow + (start + i) % (kSpan - count);
    bool all = true;
    for (int k = 0; k < count && all; ++k) all = portFree(base + k, ipv6);
    if (all) return base;
  }
  return kLow + start;
}

int fail(int rank, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "rank %d: %s\n", rank, buf);
  return 1;
}

// One AllReduce of `count` elements of `dt` with `op` on send/recv (recv alone when in place),
// checked against the harness's expected values. Returns 0 or fail().
int allReduceChecked(braidComm_t comm, int rank, int n, char* send, char* recv, size_t count, braidDataType_t dt,
                     braidRedOp_t op, bool inPlace) {
  char* in = inPlace ? recv : send;
  for (size_t i = 0; i < count; ++i) storeElem(dt, in, i, inputValue(op, rank, i, n));
  if (!inPlace) memset(recv, 0x5c, count * elemSize(dt));
  CHECK_BRAID(rank, braidAllReduce(in, recv, count, dt, op, comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    const double got = loadElem(dt, recv, i), want = expectedValue(dt, op, i, n);
    if (!matches(dt, op, got, want))
      return fail(rank, "%s %s count %zu %s: [%zu] = %g, want %g", typeName(dt), opName(op), count,
                  inPlace ? "in place" : "out of place", i, got, want);
  }
  return 0;
}

int shrinkWithoutChecked(braidComm_t comm, int rank, int size, int victim) {
  int failed[8] = {}, nFailed = 0;
  CHECK_BRAID(rank, braidCommGetFailedRanks(comm, failed, 8, &nFailed));
  if (nFailed != 1 || failed[0] != victim) return fail(rank, "failed ranks: %d listed, first %d", nFailed, failed[0]);
  braidComm_t small = nullptr;
  CHECK_BRAID(rank, braidCommShrink(comm, &victim, 1, &small));
  int newRank = -1, newSize = 0;
  CHECK_BRAID(rank, braidCommUserRank(small, &newRank));
  CHECK_BRAID(rank, braidCommCount(small, &newSize));
  if (newSize != size - 1 || newRank != rank - (rank > victim ? 1 : 0))
    return fail(rank, "shrunk to rank %d of %d", newRank, newSize);
  std::vector<int32_t> v(4099);
  const int bad = allReduceChecked(small, newRank, newSize, nullptr, reinterpret_cast<char*>(v.data()), v.size(),
                                   braidInt32, braidSum, true);
  CHECK_BRAID(rank, braidCommDestroy(small));
  return bad;
}

// One Reduce (root: the last rank, past rank 1, whose output in place is an input the fold must
// not overwrite early) or ReduceScatter of `count` elements (per rank) on buffers at send/recv,
// checked. Returns 0 or fail().
int rootedOrScatteredChecked(braidComm_t comm, int rank, int n, bool scatter, char* send, char* recv, size_t count,
                             braidDataType_t dt, braidRedOp_t op, bool inPlace) {
  const int root = n - 1;
  const size_t es = elemSize(dt), inCount = scatter ? count * static_cast<size_t>(n) : count;
  char* out = inPlace ? (scatter ? send + static_cast<size_t>(rank) * count * es : send) : recv;
  for (size_t i = 0; i < inCount; ++i) storeElem(dt, send, i, inputValue(op, rank, i, n));
  if (!inPlace) memset(recv, 0x5c, count * es);
  if (scatter) {
    CHECK_BRAID(rank, braidReduceScatter(send, out, count, dt, op, comm, nullptr));
  } else {
    CHECK_BRAID(rank, braidReduce(send, out, count, dt, op, root, comm, nullptr));
  }
  if (!scatter && rank != root) return 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t at = scatter ? static_cast<size_t>(rank) * count + i : i;
    const double got = loadElem(dt, out, i), want = expectedValue(dt, op, at, n);
    if (!matches(dt, op, got, want))
      return fail(rank, "%s %s %s count %zu %s: [%zu] = %g, want %g", scatter ? "ReduceScatter" : "Reduce",
                  typeName(dt), opName(op), count, inPlace ? "in place" : "out of place", i, got, want);
  }
  return 0;
}

// State T (stopped) or t (traced) after the ')' that ends the name in /proc/pid/stat.
bool waitStopped(pid_t pid) {
  for (int i = 0; i < 2000; ++i) {
    char path[64], buf[512] = {};
    snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
    FILE* f = fopen(path, "re");
    if (f == nullptr) return false;
    const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char* end = strrchr(buf, ')');
    if (end != nullptr && (end[2] == 'T' || end[2] == 't')) return true;
    usleep(1000);
  }
  return false;
}

}  // namespace braidtest
