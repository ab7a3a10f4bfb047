// netns_collectives: every collective across the test bed's "hosts" (tests/netns/run.sh), checked exactly.
//
//   netns_collectives                  AllReduce with every op on int32, float32, float64, bfloat16, float16,
//                                      Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Barrier and
//                                      send/recv, at counts on both sides of the pipelining and tcp chunks;
//                                      exit 0 when every result is exact, 1 naming the first that is not.
//   netns_collectives --kill-rank R    rank R SIGKILLs itself in the middle of a large AllReduce; every
//                                      other rank must fail with an error naming rank R within
//                                      kDetectBound (it prints the error and exits 0 only if so).
//
// Launched by braidrun (any launcher braidCommInitFromEnv knows); the collectives through the public API,
// the element values and their expected reductions from the multi-process tests' harness. Init failing with
// "unknown transport" (BRAID_TRANSPORTS names one this build lacks, e.g. ucx) exits 77, meson's skip.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "tests/mp/harness.h"

namespace {

constexpr int kExitSkip = 77;
// Counts per rank: one element, a few cache lines, just past 256 KiB of 4-byte elements (BRAID_CHUNK_SIZE
// and the shm slot), and past several 512 KiB tcp chunks (BRAID_TCP_CHUNK) for every type.
constexpr size_t kCounts[] = {1, 1031, 65600, 300007};
// A survivor that has not heard of the death by then is hung, not slow: detection takes milliseconds when
// the dead rank's sockets close and BRAID_HEARTBEAT_MS x BRAID_HEARTBEAT_MISSES (5 s) at worst.
constexpr auto kDetectBound = std::chrono::seconds(30);
constexpr size_t kKillCount = 4 << 20;  // floats: 16 MiB, many chunks in flight when the rank dies

int gRank = -1;

#define CHECK(call) CHECK_BRAID(gRank, call)

const braidDataType_t kTypes[] = {braidInt32, braidFloat32, braidFloat64, braidBfloat16, braidFloat16};

// The harness's inputs (small integers: every partial sum and product is exact in every type, in any
// order); the expected value rounded once to the element's type, as braid rounds an average (integers
// truncate, floats divide the exact sum), so that every comparison is exact.
int allReduces(braidComm_t comm, int rank, int n) {
  for (braidDataType_t dt : kTypes) {
    const size_t es = braidtest::elemSize(dt);
    for (int o = 0; o < braidNumOps; ++o) {
      const auto op = static_cast<braidRedOp_t>(o);
      for (size_t count : kCounts) {
        std::vector<unsigned char> send(count * es), recv(count * es, 0xA5), want(es);
        for (size_t i = 0; i < count; ++i)
          braidtest::storeElem(dt, send.data(), i, braidtest::inputValue(op, rank, i, n));
        CHECK(braidAllReduce(send.data(), recv.data(), count, dt, op, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          braidtest::storeElem(dt, want.data(), 0, braidtest::expectedValue(dt, op, i, n));
          const double got = braidtest::loadElem(dt, recv.data(), i), expect = braidtest::loadElem(dt, want.data(), 0);
          if (got != expect)
            return braidtest::fail(rank, "allreduce %s %s count %zu: element %zu is %g, expected %g",
                                   braidtest::typeName(dt), braidtest::opName(op), count, i, got, expect);
        }
      }
    }
  }
  return 0;
}

// Data whose every element says where it came from: rank r's element i (of block b for AllToAll).
int32_t tagOf(int r, size_t i, int b = 0) { return static_cast<int32_t>(r * 10000019u + b * 1000003u + i); }

int wrong(const char* what, size_t count, size_t i, int32_t got, int32_t want) {
  return braidtest::fail(gRank, "%s count %zu: element %zu is %" PRId32 ", expected %" PRId32, what, count, i, got,
                         want);
}

int dataMovement(braidComm_t comm, int rank, int n) {
  for (size_t count : kCounts) {
    std::vector<int32_t> mine(count), all(count * n), out(count * n);
    for (size_t i = 0; i < count; ++i) mine[i] = tagOf(rank, i);

    for (int root : {0, n - 1}) {  // the last rank lives on the last host
      std::vector<int32_t> bc(count, -1);
      if (rank == root) bc = mine;
      CHECK(braidBroadcast(bc.data(), bc.data(), count, braidInt32, root, comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        if (bc[i] != tagOf(root, i)) return wrong("broadcast", count, i, bc[i], tagOf(root, i));

      std::vector<int32_t> red(count, -1), in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(braidtest::inputValue(braidSum, rank, i, n));
      CHECK(braidReduce(in.data(), red.data(), count, braidInt32, braidSum, root, comm, nullptr));
      if (rank == root)
        for (size_t i = 0; i < count; ++i)
          if (red[i] != static_cast<int32_t>(braidtest::expectedValue(braidInt32, braidSum, i, n)))
            return wrong("reduce", count, i, red[i],
                         static_cast<int32_t>(braidtest::expectedValue(braidInt32, braidSum, i, n)));
    }

    std::fill(all.begin(), all.end(), -1);
    CHECK(braidAllGather(mine.data(), all.data(), count, braidInt32, comm, nullptr));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (all[r * count + i] != tagOf(r, i))
          return wrong("allgather", count, r * count + i, all[r * count + i], tagOf(r, i));

    // ReduceScatter: rank r holds inputValue(r, j) at j = b*count + i; block b of the sum lands on rank b.
    for (size_t j = 0; j < count * n; ++j) all[j] = static_cast<int32_t>(braidtest::inputValue(braidSum, rank, j, n));
    std::vector<int32_t> block(count, -1);
    CHECK(braidReduceScatter(all.data(), block.data(), count, braidInt32, braidSum, comm, nullptr));
    for (size_t i = 0; i < count; ++i) {
      int32_t want = static_cast<int32_t>(braidtest::expectedValue(braidInt32, braidSum, rank * count + i, n));
      if (block[i] != want) return wrong("reducescatter", count, i, block[i], want);
    }

    // AllToAll: block b of rank r goes to rank b, which finds it at block r.
    for (int b = 0; b < n; ++b)
      for (size_t i = 0; i < count; ++i) all[b * count + i] = tagOf(rank, i, b);
    std::fill(out.begin(), out.end(), -1);
    CHECK(braidAllToAll(all.data(), out.data(), count, braidInt32, comm, nullptr));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (out[r * count + i] != tagOf(r, i, rank))
          return wrong("alltoall", count, i, out[r * count + i], tagOf(r, i, rank));

    // Send/recv in one group: to the next rank and to the rank half the job away (another host when the
    // hosts are even in number), receiving from the matching ranks.
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n, far = (rank + n / 2) % n, from = (rank + n - n / 2) % n;
    std::vector<int32_t> a(count, -1), b(count, -1);
    CHECK(braidGroupStart());
    CHECK(braidSend(mine.data(), count, braidInt32, next, comm, nullptr));
    CHECK(braidRecv(a.data(), count, braidInt32, prev, comm, nullptr));
    if (far != rank) {
      CHECK(braidSend(mine.data(), count, braidInt32, far, comm, nullptr));
      CHECK(braidRecv(b.data(), count, braidInt32, from, comm, nullptr));
    }
    CHECK(braidGroupEnd());
    for (size_t i = 0; i < count; ++i) {
      if (a[i] != tagOf(prev, i)) return wrong("send/recv from the previous rank", count, i, a[i], tagOf(prev, i));
      if (far != rank && b[i] != tagOf(from, i))
        return wrong("send/recv across the job", count, i, b[i], tagOf(from, i));
    }
    CHECK(braidBarrier(comm, nullptr));
  }
  return 0;
}

// True when braid's message names rank `dead` as a whole word ("rank 3 (host", "rank 3:", not "rank 31").
bool namesRank(const char* msg, int dead) {
  std::string needle = "rank " + std::to_string(dead);
  for (const char* p = strstr(msg, needle.c_str()); p; p = strstr(p + 1, needle.c_str())) {
    char after = p[needle.size()];
    if (after < '0' || after > '9') return true;
  }
  return false;
}

// The survivors' side: large AllReduces until one fails; it must fail naming the dead rank, in time.
int survive(braidComm_t comm, int rank, int dead) {
  std::vector<float> buf(kKillCount, 1.f);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < kDetectBound) {
    const auto call = std::chrono::steady_clock::now();
    braidResult_t r = braidAllReduce(buf.data(), buf.data(), kKillCount, braidFloat32, braidSum, comm, nullptr);
    if (r == braidSuccess) continue;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - call).count();
    const char* msg = braidGetLastError();
    bool named = namesRank(msg, dead);
    printf("rank %d: %s after %.1f ms (%s): %s\n", rank, named ? "ok" : "WRONG ERROR", ms, braidGetErrorString(r), msg);
    fflush(stdout);
    braidCommAbort(comm);
    return named ? 0 : 1;
  }
  fprintf(stderr, "rank %d: no error within %lld s of rank %d's death\n", rank,
          static_cast<long long>(kDetectBound.count()), dead);
  braidCommAbort(comm);
  return 1;
}

// The dying rank: a few AllReduces, then one left in flight and SIGKILL.
int die(braidComm_t comm) {
  std::vector<float> buf(kKillCount, 1.f);
  for (int i = 0; i < 2; ++i)
    CHECK(braidAllReduce(buf.data(), buf.data(), kKillCount, braidFloat32, braidSum, comm, nullptr));
  braidRequest_t req = nullptr;
  CHECK(braidIAllReduce(buf.data(), buf.data(), kKillCount, braidFloat32, braidSum, comm, nullptr, &req));
  int done = 0;
  for (int i = 0; i < 100 && !done; ++i) CHECK(braidTest(req, &done));
  raise(SIGKILL);
  return 1;  // not reached
}

int initComm(braidComm_t* comm) {
  braidResult_t r = braidCommInitFromEnv(comm);
  if (r == braidSuccess) return 0;
  const char* msg = braidGetLastError();
  if (strstr(msg, "unknown transport")) {
    fprintf(stderr, "SKIP: this build lacks a transport the run asks for: %s\n", msg);
    return kExitSkip;
  }
  fprintf(stderr, "rank ?: init failed: %s: %s\n", braidGetErrorString(r), msg);
  return 1;
}

int runChecks() {
  braidComm_t comm = nullptr;
  if (int rc = initComm(&comm)) return rc;
  int n = 0;
  CHECK(braidCommCount(comm, &n));
  CHECK(braidCommUserRank(comm, &gRank));
  if (int rc = allReduces(comm, gRank, n)) return rc;
  if (int rc = dataMovement(comm, gRank, n)) return rc;
  CHECK(braidCommDestroy(comm));
  if (gRank == 0) printf("netns_collectives: every collective exact on %d ranks\n", n);
  return 0;
}

// The rank that dies runs in a child, so that its launcher sees this process exit 0 when the child died
// the way it was told to; the child dies with this process if the launcher ends the job.
int runKill(int dead) {
  const char* rankText = getenv("BRAID_RANK");
  if (rankText && atoi(rankText) == dead) {
    pid_t child = fork();
    if (child < 0) {
      perror("fork");
      return 1;
    }
    if (child > 0) {
      int st = 0;
      if (waitpid(child, &st, 0) < 0) return 1;
      if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
        printf("rank %d: killed itself mid-AllReduce\n", dead);
        return 0;
      }
      fprintf(stderr, "rank %d: expected to die by SIGKILL, exit status %d\n", dead, st);
      return WIFEXITED(st) && WEXITSTATUS(st) == kExitSkip ? kExitSkip : 1;
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
  }
  braidComm_t comm = nullptr;
  if (int rc = initComm(&comm)) return rc;
  int n = 0;
  CHECK(braidCommCount(comm, &n));
  CHECK(braidCommUserRank(comm, &gRank));
  if (dead >= n) {
    fprintf(stderr, "--kill-rank %d: the job has %d ranks\n", dead, n);
    return 1;
  }
  return gRank == dead ? die(comm) : survive(comm, gRank, dead);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 1) return runChecks();
  if (argc == 3 && strcmp(argv[1], "--kill-rank") == 0) return runKill(atoi(argv[2]));
  fprintf(stderr, "usage: %s [--kill-rank R]\n", argv[0]);
  return 2;
}
