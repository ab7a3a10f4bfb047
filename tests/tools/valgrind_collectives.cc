// valgrind_collectives: every collective once, small, for a leak check under valgrind
// (scripts/valgrind.sh). Launched by braidrun (or any launcher braidCommInitFromEnv knows) on 2 or
// more ranks; uses the public API only. Each call's result is checked, so that a run that "passes"
// with wrong data cannot hide behind a clean leak report. Exits 0 when every call succeeded.
//
// Covered: AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Send/Recv (group and
// nonblocking), Barrier, the nonblocking form of each collective with braidWait / braidWaitAll /
// braidTest, a gossip graph (NeighborAllReduce), braidCommSplit, braidCommShrink, destroy. Then the
// handles that are no longer live: a destroyed communicator and graph, released requests, a request
// given twice, requests of a destroyed communicator and a group whose communicator was destroyed
// before braidGroupEnd must be refused without an invalid read.
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "braid/braid.h"

namespace {

constexpr size_t kCount = 1000;  // elements per rank: a few chunks' worth of steps, quick under valgrind

int gRank = -1;

#define CHECK(call)                                                                                                \
  do {                                                                                                             \
    braidResult_t r_ = (call);                                                                                     \
    if (r_ != braidSuccess) {                                                                                      \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", gRank, #call, braidGetErrorString(r_), braidGetLastError()); \
      return 1;                                                                                                    \
    }                                                                                                              \
  } while (0)

#define EXPECT(cond, what)                                                     \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: wrong result: %s (%s)\n", gRank, what, #cond); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

// A call on a handle that is no longer live: must fail with `code` (and, under valgrind, read
// nothing freed).
#define EXPECT_REFUSED(call, code)                                                            \
  do {                                                                                        \
    braidResult_t r_ = (call);                                                                \
    if (r_ != (code)) {                                                                       \
      fprintf(stderr, "rank %d: %s gave %s, not %s\n", gRank, #call, braidGetErrorString(r_), \
              braidGetErrorString(code));                                                     \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

// Rank r's input: r + 1 everywhere, so sums are n(n+1)/2.
std::vector<float> input(int rank, size_t count) { return std::vector<float>(count, static_cast<float>(rank + 1)); }

bool all(const std::vector<float>& v, size_t from, size_t to, float want) {
  for (size_t i = from; i < to; ++i)
    if (v[i] != want) return false;
  return true;
}

int blocking(braidComm_t comm, int rank, int n) {
  const float sum = static_cast<float>(n * (n + 1) / 2);
  std::vector<float> send = input(rank, kCount * n), recv(kCount * n, -1);
  CHECK(braidAllReduce(send.data(), recv.data(), kCount, braidFloat32, braidSum, comm, nullptr));
  EXPECT(all(recv, 0, kCount, sum), "allreduce");

  std::vector<float> bc(kCount, rank == 0 ? 7.f : 0.f);
  CHECK(braidBroadcast(bc.data(), bc.data(), kCount, braidFloat32, 0, comm, nullptr));
  EXPECT(all(bc, 0, kCount, 7.f), "broadcast");

  std::fill(recv.begin(), recv.end(), -1.f);
  CHECK(braidReduce(send.data(), recv.data(), kCount, braidFloat32, braidMax, n - 1, comm, nullptr));
  if (rank == n - 1) EXPECT(all(recv, 0, kCount, static_cast<float>(n)), "reduce");

  CHECK(braidAllGather(send.data(), recv.data(), kCount, braidFloat32, comm, nullptr));
  for (int r = 0; r < n; ++r) EXPECT(all(recv, r * kCount, (r + 1) * kCount, r + 1.f), "allgather");

  std::fill(recv.begin(), recv.end(), -1.f);
  CHECK(braidReduceScatter(send.data(), recv.data(), kCount, braidFloat32, braidSum, comm, nullptr));
  EXPECT(all(recv, 0, kCount, sum), "reducescatter");

  CHECK(braidAllToAll(send.data(), recv.data(), kCount, braidFloat32, comm, nullptr));
  for (int r = 0; r < n; ++r) EXPECT(all(recv, r * kCount, (r + 1) * kCount, r + 1.f), "alltoall");

  std::fill(recv.begin(), recv.end(), -1.f);
  CHECK(braidGather(send.data(), rank == n - 1 ? recv.data() : nullptr, kCount, braidFloat32, n - 1, comm, nullptr));
  if (rank == n - 1)
    for (int r = 0; r < n; ++r) EXPECT(all(recv, r * kCount, (r + 1) * kCount, r + 1.f), "gather");
  std::fill(recv.begin(), recv.end(), -1.f);
  CHECK(braidScatter(rank == 0 ? send.data() : nullptr, recv.data(), kCount, braidFloat32, 0, comm, nullptr));
  EXPECT(all(recv, 0, kCount, 1.f) && all(recv, kCount, kCount * n, -1.f), "scatter");

  // Ring exchange: send to the next rank, receive from the previous one, as one group.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  std::fill(recv.begin(), recv.end(), -1.f);
  CHECK(braidGroupStart());
  CHECK(braidSend(send.data(), kCount, braidFloat32, next, comm, nullptr));
  CHECK(braidRecv(recv.data(), kCount, braidFloat32, prev, comm, nullptr));
  CHECK(braidGroupEnd());
  EXPECT(all(recv, 0, kCount, prev + 1.f), "send/recv");

  CHECK(braidBarrier(comm, nullptr));
  return 0;
}

int nonblocking(braidComm_t comm, int rank, int n) {
  const float sum = static_cast<float>(n * (n + 1) / 2);
  std::vector<float> send = input(rank, kCount * n);
  std::vector<std::vector<float>> out(8, std::vector<float>(kCount * n, -1.f));
  std::vector<float> bc(kCount, rank == 0 ? 5.f : 0.f);
  braidRequest_t req[8] = {};
  CHECK(braidIAllReduce(send.data(), out[0].data(), kCount, braidFloat32, braidSum, comm, nullptr, &req[0]));
  CHECK(braidIBroadcast(bc.data(), bc.data(), kCount, braidFloat32, 0, comm, nullptr, &req[1]));
  CHECK(braidIReduce(send.data(), out[2].data(), kCount, braidFloat32, braidSum, 0, comm, nullptr, &req[2]));
  CHECK(braidIAllGather(send.data(), out[3].data(), kCount, braidFloat32, comm, nullptr, &req[3]));
  CHECK(braidIReduceScatter(send.data(), out[4].data(), kCount, braidFloat32, braidSum, comm, nullptr, &req[4]));
  CHECK(braidIAllToAll(send.data(), out[5].data(), kCount, braidFloat32, comm, nullptr, &req[5]));
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  CHECK(braidISend(send.data(), kCount, braidFloat32, next, comm, nullptr, &req[6]));
  CHECK(braidIRecv(out[7].data(), kCount, braidFloat32, prev, comm, nullptr, &req[7]));
  CHECK(braidWait(req[0]));  // one by braidWait, the rest by braidWaitAll
  req[0] = nullptr;
  CHECK(braidWaitAll(8, req));
  // Released now: refused, one by one and given twice.
  int done = 0;
  EXPECT_REFUSED(braidWait(req[1]), braidInvalidUsage);
  EXPECT_REFUSED(braidTest(req[2], &done), braidInvalidUsage);
  EXPECT_REFUSED(braidWaitAll(8, req), braidInvalidUsage);
  braidRequest_t twice[2] = {};
  CHECK(braidIBarrier(comm, nullptr, &twice[0]));
  twice[1] = twice[0];
  EXPECT_REFUSED(braidWaitAll(2, twice), braidInvalidArgument);
  CHECK(braidWait(twice[0]));
  EXPECT(all(out[0], 0, kCount, sum), "iallreduce");
  EXPECT(all(bc, 0, kCount, 5.f), "ibroadcast");
  if (rank == 0) EXPECT(all(out[2], 0, kCount, sum), "ireduce");
  for (int r = 0; r < n; ++r) EXPECT(all(out[3], r * kCount, (r + 1) * kCount, r + 1.f), "iallgather");
  EXPECT(all(out[4], 0, kCount, sum), "ireducescatter");
  for (int r = 0; r < n; ++r) EXPECT(all(out[5], r * kCount, (r + 1) * kCount, r + 1.f), "ialltoall");
  EXPECT(all(out[7], 0, kCount, prev + 1.f), "isend/irecv");

  // A nonblocking barrier completed by polling braidTest.
  braidRequest_t barrier = nullptr;
  CHECK(braidIBarrier(comm, nullptr, &barrier));
  for (int done = 0; !done;) {
    CHECK(braidTest(barrier, &done));
    if (!done) sched_yield();
  }
  return 0;
}

int gossip(braidComm_t comm, int rank, int n) {
  braidGraph_t graph = nullptr;
  CHECK(braidGraphCreateNamed(comm, "ring", &graph));
  std::vector<float> send = input(rank, kCount), recv(kCount, -1.f);
  CHECK(braidNeighborAllReduce(send.data(), recv.data(), kCount, braidFloat32, graph, comm, nullptr));
  if (n == 2) EXPECT(all(recv, 0, kCount, 1.5f), "neighbor allreduce");
  CHECK(braidGraphDestroy(graph));
  EXPECT_REFUSED(braidGraphDestroy(graph), braidInvalidArgument);
  EXPECT_REFUSED(braidNeighborAllReduce(send.data(), recv.data(), kCount, braidFloat32, graph, comm, nullptr),
                 braidInvalidArgument);
  return 0;
}

// A derived communicator: one AllReduce on it, then destroy.
int useDerived(braidComm_t sub, const char* what) {
  int n = 0, rank = -1;
  CHECK(braidCommCount(sub, &n));
  CHECK(braidCommUserRank(sub, &rank));
  std::vector<float> v = input(rank, kCount);
  CHECK(braidAllReduce(v.data(), v.data(), kCount, braidFloat32, braidSum, sub, nullptr));
  EXPECT(all(v, 0, kCount, static_cast<float>(n * (n + 1) / 2)), what);
  // A request left pending at destroy (it completes there), then every use of the dead handles.
  braidRequest_t pending = nullptr;
  CHECK(braidIAllReduce(v.data(), v.data(), kCount, braidFloat32, braidSum, sub, nullptr, &pending));
  CHECK(braidGroupStart());
  CHECK(braidBarrier(sub, nullptr));  // recorded, issued at braidGroupEnd: by then sub is gone
  CHECK(braidCommDestroy(sub));
  EXPECT_REFUSED(braidGroupEnd(), braidInvalidArgument);
  int done = 0;
  EXPECT_REFUSED(braidWait(pending), braidInvalidUsage);
  EXPECT_REFUSED(braidTest(pending, &done), braidInvalidUsage);
  EXPECT_REFUSED(braidAllReduce(v.data(), v.data(), kCount, braidFloat32, braidSum, sub, nullptr),
                 braidInvalidArgument);
  EXPECT_REFUSED(braidCommCount(sub, &n), braidInvalidArgument);
  EXPECT_REFUSED(braidCommDestroy(sub), braidInvalidArgument);
  return 0;
}

int derived(braidComm_t comm, int rank, int n) {
  braidComm_t sub = nullptr;
  CHECK(braidCommSplit(comm, rank % 2, rank, &sub));  // evens and odds
  if (useDerived(sub, "split") != 0) return 1;
  sub = nullptr;
  CHECK(braidCommShrink(comm, nullptr, 0, &sub));  // nobody failed: everyone
  return useDerived(sub, "shrink");
}

}  // namespace

int main() {
  braidComm_t comm = nullptr;
  CHECK(braidCommInitFromEnv(&comm));
  int n = 0;
  CHECK(braidCommCount(comm, &n));
  CHECK(braidCommUserRank(comm, &gRank));
  int rc = blocking(comm, gRank, n);
  if (rc == 0) rc = nonblocking(comm, gRank, n);
  if (rc == 0) rc = gossip(comm, gRank, n);
  if (rc == 0) rc = derived(comm, gRank, n);
  if (rc != 0) {
    braidCommAbort(comm);
    return rc;
  }
  CHECK(braidCommDestroy(comm));
  if (gRank == 0) printf("valgrind_collectives: %d ranks, every collective ok\n", n);
  return 0;
}
