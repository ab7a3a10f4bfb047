/* Error paths, configs (current and older layouts), split, and failures of a peer (abort, death):
 * every refused call returns the documented code, says why in ncclGetLastError, and leaves the
 * caller's buffers and outputs alone. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim_test.h"

/* Configs refused before any network traffic; *comm must stay untouched. */
static int bad_configs(int rank, int n, const ncclUniqueId* id) {
  ncclComm_t sentinel = (ncclComm_t)(uintptr_t)0x5eed, comm = sentinel;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.magic = 0;
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, n, *id, rank, &c), ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");
  ncclConfig_t b = NCCL_CONFIG_INITIALIZER;
  b.blocking = 5;
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, n, *id, rank, &b), ncclInvalidArgument, "blocking");
  ncclConfig_t net = NCCL_CONFIG_INITIALIZER;
  net.netName = "IB";
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, n, *id, rank, &net), ncclInvalidUsage, "IB");
  ncclConfig_t tiny = NCCL_CONFIG_INITIALIZER;
  tiny.size = 8;
  EXPECT_FAIL(ncclCommInitRankConfig(&comm, n, *id, rank, &tiny), ncclInvalidArgument, "size");
  EXPECT_FAIL(ncclCommInitRank(&comm, n, *id, n), ncclInvalidArgument, "rank");
  EXPECT_FAIL(ncclCommInitRank(&comm, 0, *id, 0), ncclInvalidArgument, "nranks");
  EXPECT(comm == sentinel, "a refused init wrote *comm");
  return 0;
}

/* ncclConfig_t as NCCL 2.17 and 2.14 headers laid it out (smaller than today's). */
struct config_v21700 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char* netName;
};
struct config_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
};

/* Places `bytes` at the very end of a readable page followed by an inaccessible one, so that
 * reading past the old struct faults instead of passing unnoticed. */
static void* at_page_end(const void* src, size_t bytes, void** map, size_t* len) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  if (mprotect(m + page, page, PROT_NONE) != 0) return NULL;
  char* at = m + page - bytes;
  memcpy(at, src, bytes);
  *map = m;
  *len = 2 * page;
  return at;
}

static int init_old_config(int rank, int n, const ncclUniqueId* id, const void* cfg, size_t bytes, const char* what) {
  void* map = NULL;
  size_t len = 0;
  ncclConfig_t* placed = at_page_end(cfg, bytes, &map, &len);
  EXPECT(placed != NULL, "mmap: %m");
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRankConfig(&comm, n, *id, rank, placed));
  munmap(map, len);
  int v = rank + 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(v == n * (n + 1) / 2, "allreduce on a comm made with a %s config: %d", what, v);
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}

static int old_configs(int rank, int n, const ncclUniqueId* ids) {
  struct config_v21700 c17 = {
      sizeof(c17),           0xcafebeef, NCCL_VERSION(2, 17, 1), rank % 2, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,
      NCCL_CONFIG_UNDEF_INT, NULL};
  struct config_v21400 c14 = {sizeof(c14), 0xcafebeef, NCCL_VERSION(2, 14, 3), 1};
  int rc = init_old_config(rank, n, &ids[1], &c17, sizeof(c17), "2.17");
  return rc != 0 ? rc : init_old_config(rank, n, &ids[2], &c14, sizeof(c14), "2.14");
}

/* Calls refused on a live communicator; the communicator stays usable afterwards. */
static int refused_calls(ncclComm_t comm, int rank, int n) {
  int send[8] = {1, 2, 3, 4, 5, 6, 7, 8}, recv[8];
  memset(recv, 0x5a, sizeof(recv));
  const ncclDataType_t badType = (ncclDataType_t)ncclNumTypes;
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, badType, ncclSum, comm, NULL), ncclInvalidArgument, "datatype");
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, (ncclDataType_t)99, ncclSum, comm, NULL), ncclInvalidArgument, "datatype");
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, ncclFloat8e4m3, ncclSum, comm, NULL), ncclInvalidArgument, "fp8");
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, ncclInt32, (ncclRedOp_t)42, comm, NULL), ncclInvalidArgument, "op 42");
  /* A stream with host buffers: refused with or without a device (braid checks which memory). */
  cudaStream_t stream = (cudaStream_t)(uintptr_t)0x1;
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, ncclInt32, ncclSum, comm, stream), ncclInvalidUsage, "stream");
  EXPECT_FAIL(ncclBroadcast(send, recv, 8, ncclInt32, n, comm, NULL), ncclInvalidArgument, "root");
  EXPECT_FAIL(ncclReduce(send, recv, 8, ncclInt32, ncclSum, -1, comm, NULL), ncclInvalidArgument, "root");
  EXPECT_FAIL(ncclGather(send, recv, 1, ncclInt32, n, comm, NULL), ncclInvalidArgument, "root");
  EXPECT_FAIL(ncclSend(send, 8, ncclInt32, n, comm, NULL), ncclInvalidArgument, "peer");
  EXPECT_FAIL(ncclRecv(recv, 8, ncclInt32, -1, comm, NULL), ncclInvalidArgument, "peer");
  EXPECT_FAIL(ncclAllReduce(send, recv, 8, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument, "comm");
  for (int i = 0; i < 8; ++i) EXPECT(recv[i] == 0x5a5a5a5a, "a refused call wrote recvbuff[%d]", i);
  /* Device and memory: with a CUDA device (a GPU machine) real; without one refused, saying CUDA,
   * and nothing written. */
  int dev = 1234;
  void* p = (void*)&dev;
  if (ncclCommCuDevice(comm, &dev) == ncclSuccess) {
    EXPECT(dev >= 0 && dev != 1234, "ncclCommCuDevice gave device %d", dev);
    CHECK_NCCL(ncclMemAlloc(&p, 4096));
    EXPECT(p != NULL && p != (void*)&dev, "ncclMemAlloc gave no memory");
    /* Device memory with a host-only op refused before anything runs, then freed once. */
    float fhalf = 0.5f;
    ncclRedOp_t pre = (ncclRedOp_t)-1;
    CHECK_NCCL(ncclRedOpCreatePreMulSum(&pre, &fhalf, ncclFloat32, ncclScalarHostImmediate, comm));
    EXPECT_FAIL(ncclAllReduce(p, p, 16, ncclFloat32, pre, comm, NULL), ncclInvalidUsage, "PreMulSum");
    CHECK_NCCL(ncclRedOpDestroy(pre, comm));
    CHECK_NCCL(ncclMemFree(p));
    EXPECT_FAIL(ncclMemFree(p), ncclInvalidArgument, "ncclMemAlloc");
  } else {
    EXPECT_FAIL(ncclCommCuDevice(comm, &dev), ncclInvalidUsage, "CUDA");
    EXPECT(dev == 1234, "ncclCommCuDevice wrote *device");
    EXPECT_FAIL(ncclMemAlloc(&p, 4096), ncclInvalidUsage, "CUDA");
    EXPECT(p == (void*)&dev, "ncclMemAlloc wrote *ptr");
  }
  EXPECT_FAIL(ncclCommCuDevice(comm, NULL), ncclInvalidArgument, "device");
  CHECK_NCCL(ncclMemFree(NULL));
  EXPECT_FAIL(ncclMemFree(&dev), ncclInvalidArgument, "ncclMemAlloc");
  ncclWindow_t win = NULL;
  EXPECT_FAIL(ncclCommWindowRegister(comm, send, sizeof(send), &win, NCCL_WIN_DEFAULT), ncclInvalidUsage, "CUDA");
  EXPECT_FAIL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclInvalidUsage, "revoke");
  /* PreMulSum misuse. */
  float half = 0.5f;
  ncclRedOp_t op = (ncclRedOp_t)-1;
  EXPECT_FAIL(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarDevice, comm), ncclInvalidUsage, "CUDA");
  EXPECT_FAIL(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat8e5m2, ncclScalarHostImmediate, comm), ncclInvalidArgument,
              "fp8");
  EXPECT((int)op == -1, "a refused ncclRedOpCreatePreMulSum wrote *op");
  CHECK_NCCL(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, comm));
  double d[2] = {1, 2};
  EXPECT_FAIL(ncclAllReduce(d, d, 2, ncclFloat64, op, comm, NULL), ncclInvalidArgument, "datatype");
  EXPECT_FAIL(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "built in");
  CHECK_NCCL(ncclRedOpDestroy(op, comm));
  EXPECT_FAIL(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "not created");
  float f[2] = {1, 2};
  EXPECT_FAIL(ncclAllReduce(f, f, 2, ncclFloat32, op, comm, NULL), ncclInvalidArgument, "not created");
  /* Registration is a recorded hint. */
  void* handle = NULL;
  CHECK_NCCL(ncclCommRegister(comm, send, sizeof(send), &handle));
  EXPECT(handle != NULL, "ncclCommRegister gave no handle");
  CHECK_NCCL(ncclCommDeregister(comm, handle));
  EXPECT_FAIL(ncclCommDeregister(comm, handle), ncclInvalidArgument, "not registered");
  /* The same range twice (braid counts it once per registration), and an empty range. */
  void* again = NULL;
  void* empty = NULL;
  CHECK_NCCL(ncclCommRegister(comm, send, sizeof(send), &handle));
  CHECK_NCCL(ncclCommRegister(comm, send, sizeof(send), &again));
  CHECK_NCCL(ncclCommRegister(comm, NULL, 0, &empty));
  EXPECT(handle != again, "two registrations share a handle");
  CHECK_NCCL(ncclCommDeregister(comm, handle));
  CHECK_NCCL(ncclCommDeregister(comm, again));
  CHECK_NCCL(ncclCommDeregister(comm, empty));
  EXPECT_FAIL(ncclCommDeregister(comm, again), ncclInvalidArgument, "not registered");
  CHECK_NCCL(ncclCommRegister(comm, send, sizeof(send), &handle)); /* left for ncclCommDestroy to free */
  /* Groups. */
  EXPECT_FAIL(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  CHECK_NCCL(ncclGroupStart());
  EXPECT_FAIL(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "ncclGroupEnd");
  CHECK_NCCL(ncclGroupEnd());
  EXPECT(strstr(ncclGetErrorString(ncclRemoteError), "remote process") != NULL, "ncclRemoteError's string: %s",
         ncclGetErrorString(ncclRemoteError));
  /* Still usable. */
  int v = rank;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclMax, comm, NULL));
  EXPECT(v == n - 1, "allreduce after refused calls: %d", v);
  return 0;
}

int error_phase(int rank, int n, const ncclUniqueId* ids) {
  int rc = bad_configs(rank, n, &ids[0]);
  if (rc != 0) return rc;
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, n, ids[0], rank));
  rc = refused_calls(comm, rank, n);
  if (rc != 0) {
    ncclCommAbort(comm);
    return rc;
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_NCCL(ncclCommDestroy(NULL));
  return old_configs(rank, n, ids);
}

/* Color rank % 2, key n - rank (so ranks reverse order); with 3 or more ranks the last rank joins
 * none. */
int split_phase(int rank, int n, const ncclUniqueId* ids) {
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, n, ids[0], rank));
  const int nocolor = n >= 3 && rank == n - 1;
  const int color = nocolor ? NCCL_SPLIT_NOCOLOR : rank % 2;
  ncclComm_t sub = (ncclComm_t)(uintptr_t)0x5eed;
  CHECK_NCCL(ncclCommSplit(comm, color, n - rank, &sub, NULL));
  if (nocolor) {
    EXPECT(sub == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    int members = 0, above = 0, sum = 0;
    for (int q = 0; q < n; ++q) {
      if ((n >= 3 && q == n - 1) || q % 2 != color) continue;
      ++members;
      sum += q;
      above += q > rank;
    }
    int count = -1, me = -1;
    CHECK_NCCL(ncclCommCount(sub, &count));
    CHECK_NCCL(ncclCommUserRank(sub, &me));
    EXPECT(count == members && me == above, "split: count %d (want %d), rank %d (want %d)", count, members, me, above);
    int v = rank;
    CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, sub, NULL));
    EXPECT(v == sum, "allreduce on the split communicator: %d, want %d", v, sum);
    CHECK_NCCL(ncclCommDestroy(sub));
  }
  EXPECT_FAIL(ncclCommSplit(comm, -5, 0, &sub, NULL), ncclInvalidArgument, "color");
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}

/* The last rank fails mid-run (ncclCommAbort, or exiting without a word); the others' next
 * AllReduce must fail with ncclRemoteError, found by braid's control plane (not by the deadline),
 * and ncclCommGetAsyncError must report it too. The survivors then shrink the communicator. */
static int peer_failure(int rank, int n, const ncclUniqueId* ids, int abort_it) {
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, n, ids[0], rank));
  int v = 1;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL));
  EXPECT(v == n, "first allreduce: %d", v);
  /* The victim fails only once every other rank has its result: braid fails the operations still
   * pending anywhere, the first AllReduce included. */
  __atomic_add_fetch(g_shared, 1, __ATOMIC_SEQ_CST);
  if (rank == n - 1) {
    while (__atomic_load_n(g_shared, __ATOMIC_SEQ_CST) < n) usleep(1000); /* the driver's deadline bounds it */
    if (abort_it) CHECK_NCCL(ncclCommAbort(comm));
    _exit(0); /* no destroy: as if killed */
  }
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < 100 && r == ncclSuccess; ++i) r = ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL);
  EXPECT(r == ncclRemoteError, "allreduce after rank %d %s: %d (%s): %s", n - 1, abort_it ? "aborted" : "died", (int)r,
         ncclGetErrorString(r), ncclGetLastError(NULL));
  EXPECT(strstr(ncclGetLastError(NULL), "Timed out") == NULL && strstr(ncclGetLastError(NULL), "timed out") == NULL,
         "the failure was found by the deadline: %s", ncclGetLastError(NULL));
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclRemoteError, "ncclCommGetAsyncError: %d", (int)async);
  printf("rank %d saw: %s\n", rank, ncclGetLastError(NULL));
  /* The survivors go on without the failed rank. */
  int failed = n - 1, count = -1;
  ncclComm_t rest = NULL;
  CHECK_NCCL(ncclCommShrink(comm, &failed, 1, &rest, NULL, NCCL_SHRINK_DEFAULT));
  CHECK_NCCL(ncclCommCount(rest, &count));
  EXPECT(count == n - 1, "shrunk communicator has %d ranks", count);
  v = rank;
  CHECK_NCCL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, rest, NULL));
  EXPECT(v == (n - 1) * (n - 2) / 2, "allreduce after shrink: %d", v);
  CHECK_NCCL(ncclCommDestroy(rest));
  CHECK_NCCL(ncclCommAbort(comm));
  return 0;
}

int abort_phase(int rank, int n, const ncclUniqueId* ids) { return peer_failure(rank, n, ids, 1); }
int exit_phase(int rank, int n, const ncclUniqueId* ids) { return peer_failure(rank, n, ids, 0); }
