/* All ranks of a communicator in one process and one thread, as single-process NCCL programs run:
 * ncclCommInitAll, inits and splits grouped between ncclGroupStart and ncclGroupEnd, collectives
 * on every rank issued in one group, and destruction in rank order (rank 0 first). */
#include <stdint.h>
#include <stdio.h>

#include "shim_test.h"

enum { kMaxLocal = 16 };

/* comm[i] is rank i: a grouped AllReduce of i + 1 and a grouped ring of sends and receives. */
static int exercise(ncclComm_t* comm, int n, const char* what) {
  int v[kMaxLocal], out[kMaxLocal], in[kMaxLocal];
  for (int i = 0; i < n; ++i) {
    int count = -1, rank = -1;
    CHECK_NCCL(ncclCommCount(comm[i], &count));
    CHECK_NCCL(ncclCommUserRank(comm[i], &rank));
    EXPECT(count == n && rank == i, "%s: comm[%d] has count %d, rank %d", what, i, count, rank);
    v[i] = i + 1;
    out[i] = 100 + i;
    in[i] = -1;
  }
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) CHECK_NCCL(ncclAllReduce(&v[i], &v[i], 1, ncclInt32, ncclSum, comm[i], NULL));
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) EXPECT(v[i] == n * (n + 1) / 2, "%s: grouped allreduce on rank %d: %d", what, i, v[i]);
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) {
    CHECK_NCCL(ncclSend(&out[i], 1, ncclInt32, (i + 1) % n, comm[i], NULL));
    CHECK_NCCL(ncclRecv(&in[i], 1, ncclInt32, (i + n - 1) % n, comm[i], NULL));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) EXPECT(in[i] == 100 + (i + n - 1) % n, "%s: rank %d received %d", what, i, in[i]);
  return 0;
}

static int destroy_all(ncclComm_t* comm, int n) {
  for (int i = 0; i < n; ++i) CHECK_NCCL(ncclCommDestroy(comm[i])); /* rank 0 first */
  return 0;
}

int local_phase(int unused_rank, int n, const ncclUniqueId* unused_ids) {
  (void)unused_rank, (void)unused_ids;
  EXPECT(n <= kMaxLocal, "at most %d local ranks", kMaxLocal);
  ncclComm_t comm[kMaxLocal];
  int devs[kMaxLocal];
  for (int i = 0; i < n; ++i) devs[i] = i, comm[i] = (ncclComm_t)(uintptr_t)0x5eed;
  /* Refused: no ranks, a repeated device. */
  EXPECT_FAIL(ncclCommInitAll(comm, 0, NULL), ncclInvalidArgument, "ndev");
  devs[n - 1] = 0;
  EXPECT_FAIL(ncclCommInitAll(comm, n, devs), ncclInvalidArgument, "devlist");
  EXPECT(comm[0] == (ncclComm_t)(uintptr_t)0x5eed, "a refused ncclCommInitAll wrote comm[0]");
  devs[n - 1] = n - 1;
  CHECK_NCCL(ncclCommInitAll(comm, n, devs));
  int rc = exercise(comm, n, "ncclCommInitAll");
  if (rc != 0) return rc;
  rc = destroy_all(comm, n);
  if (rc != 0) return rc;

  /* The same with grouped inits: pending until ncclGroupEnd. */
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) CHECK_NCCL(ncclCommInitRank(&comm[i], n, id, i));
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm[0], &async));
  EXPECT(async == ncclInProgress, "a comm pending in a group reports %d, not ncclInProgress", (int)async);
  int v = 0;
  EXPECT_FAIL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm[0], NULL), ncclInvalidUsage, "ncclGroupEnd");
  EXPECT_FAIL(ncclCommDestroy(comm[1]), ncclInvalidUsage, "ncclGroupEnd");
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    CHECK_NCCL(ncclCommGetAsyncError(comm[i], &async));
    EXPECT(async == ncclSuccess, "comm[%d] after ncclGroupEnd: %d", i, (int)async);
  }
  rc = exercise(comm, n, "grouped ncclCommInitRank");
  return rc != 0 ? rc : destroy_all(comm, n);
}

/* Splits of every rank in one group: colors i % 2, keys i (order kept). */
int local_split_phase(int unused_rank, int n, const ncclUniqueId* unused_ids) {
  (void)unused_rank, (void)unused_ids;
  EXPECT(n <= kMaxLocal, "at most %d local ranks", kMaxLocal);
  ncclComm_t comm[kMaxLocal], sub[kMaxLocal];
  CHECK_NCCL(ncclCommInitAll(comm, n, NULL));
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) CHECK_NCCL(ncclCommSplit(comm[i], i % 2, i, &sub[i], NULL));
  CHECK_NCCL(ncclGroupEnd());
  int v[kMaxLocal];
  for (int i = 0; i < n; ++i) {
    int count = -1, rank = -1;
    CHECK_NCCL(ncclCommCount(sub[i], &count));
    CHECK_NCCL(ncclCommUserRank(sub[i], &rank));
    EXPECT(count == (n + 1 - i % 2) / 2 && rank == i / 2, "sub[%d]: count %d, rank %d", i, count, rank);
    v[i] = i;
  }
  CHECK_NCCL(ncclGroupStart());
  for (int i = 0; i < n; ++i) CHECK_NCCL(ncclAllReduce(&v[i], &v[i], 1, ncclInt32, ncclSum, sub[i], NULL));
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < n; ++i) {
    int want = 0;
    for (int q = i % 2; q < n; q += 2) want += q;
    EXPECT(v[i] == want, "allreduce on sub[%d]: %d, want %d", i, v[i], want);
  }
  int rc = destroy_all(sub, n);
  return rc != 0 ? rc : destroy_all(comm, n);
}
