/* Collectives through the NCCL API: every op on every supported type in and out of place, the
 * other collectives, grouped point to point, and PreMulSum ops. Expected values are computed here
 * in double from the inputs; every test value is exact in every type. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim_test.h"

static const ncclDataType_t kTypes[] = {ncclInt8,   ncclUint8,   ncclInt32,    ncclUint32,  ncclInt64,
                                        ncclUint64, ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64};
static const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg"};

static int is_float(ncclDataType_t dt) {
  return dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclFloat32 || dt == ncclFloat64;
}

/* Input of rank r at index i for an op: sums stay below 127 for 4 ranks, products below 17. */
static double input(ncclRedOp_t op, int r, size_t i) {
  switch (op) {
    case ncclProd:
      return 1 + (double)((r + i) % 2);
    case ncclMax:
    case ncclMin:
      return (double)((r * 5 + i * 3) % 11);
    default:
      return (double)(r + 1) + (double)(i % 7);
  }
}

static double expected(ncclDataType_t dt, ncclRedOp_t op, size_t i, int n) {
  double acc = input(op, 0, i);
  for (int r = 1; r < n; ++r) {
    double v = input(op, r, i);
    switch (op) {
      case ncclProd:
        acc *= v;
        break;
      case ncclMax:
        acc = v > acc ? v : acc;
        break;
      case ncclMin:
        acc = v < acc ? v : acc;
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op == ncclAvg) acc = is_float(dt) ? acc / n : trunc(acc / n);
  return acc;
}

static int close_enough(ncclDataType_t dt, ncclRedOp_t op, double got, double want) {
  if (op != ncclAvg || !is_float(dt)) return got == want;
  const double tol = dt == ncclFloat16 || dt == ncclBfloat16 ? 1e-2 : 1e-6;
  return fabs(got - want) <= tol * fabs(want);
}

static int allreduce_sweep(ncclComm_t comm, int rank, int n) {
  enum { kCount = 37 };
  unsigned char send[kCount * 8], recv[kCount * 8];
  for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
    for (size_t o = 0; o < sizeof(kOps) / sizeof(kOps[0]); ++o) {
      for (int inplace = 0; inplace < 2; ++inplace) {
        const ncclDataType_t dt = kTypes[t];
        for (size_t i = 0; i < kCount; ++i) store(dt, send, i, input(kOps[o], rank, i));
        memset(recv, 0xab, sizeof(recv));
        void* out = inplace ? (void*)send : (void*)recv;
        CHECK_NCCL(ncclAllReduce(send, out, kCount, dt, kOps[o], comm, NULL));
        for (size_t i = 0; i < kCount; ++i) {
          double want = expected(dt, kOps[o], i, n), got = load(dt, out, i);
          EXPECT(close_enough(dt, kOps[o], got, want), "allreduce %s %s%s [%zu]: got %g, want %g", type_name(dt),
                 kOpNames[o], inplace ? " in place" : "", i, got, want);
        }
      }
    }
  }
  /* Zero elements, then one large buffer (several pipeline chunks). */
  CHECK_NCCL(ncclAllReduce(send, recv, 0, ncclFloat32, ncclSum, comm, NULL));
  const size_t big = (size_t)1 << 18;
  float* x = malloc(big * sizeof(float));
  EXPECT(x != NULL, "malloc");
  for (size_t i = 0; i < big; ++i) x[i] = (float)(rank + (int)(i % 13));
  CHECK_NCCL(ncclAllReduce(x, x, big, ncclFloat32, ncclSum, comm, NULL));
  for (size_t i = 0; i < big; ++i) {
    const float want = (float)(n * (n - 1) / 2 + n * (int)(i % 13));
    if (x[i] != want) {
      free(x);
      return fail_at(__LINE__, "large allreduce [%zu]: got %g, want %g", i, x[i], want);
    }
  }
  free(x);
  return 0;
}

static int rooted(ncclComm_t comm, int rank, int n) {
  int a[40], b[40];
  /* Broadcast out of place from the last rank; Bcast in place from rank 0. */
  const int root = n - 1;
  for (int i = 0; i < 40; ++i) a[i] = rank == root ? 3 * i + 1 : -7, b[i] = -1;
  CHECK_NCCL(ncclBroadcast(a, b, 40, ncclInt32, root, comm, NULL));
  for (int i = 0; i < 40; ++i) EXPECT(b[i] == 3 * i + 1, "broadcast [%d]: %d", i, b[i]);
  for (int i = 0; i < 40; ++i) a[i] = rank == 0 ? 1000 - i : 0;
  CHECK_NCCL(ncclBcast(a, 40, ncclInt32, 0, comm, NULL));
  for (int i = 0; i < 40; ++i) EXPECT(a[i] == 1000 - i, "bcast [%d]: %d", i, a[i]);
  /* fp8 data moves as bytes. */
  unsigned char f8[16];
  for (int i = 0; i < 16; ++i) f8[i] = rank == 0 ? (unsigned char)(0x38 + i) : 0;
  CHECK_NCCL(ncclBroadcast(f8, f8, 16, ncclFloat8e4m3, 0, comm, NULL));
  for (int i = 0; i < 16; ++i) EXPECT(f8[i] == 0x38 + i, "fp8 broadcast [%d]: 0x%x", i, f8[i]);
  /* Reduce (sum, int64) to rank 1 % n, in place there; other ranks pass no recvbuff. */
  const int rroot = 1 % n;
  long long v[9];
  for (int i = 0; i < 9; ++i) v[i] = (long long)(rank + 1) * (i + 1);
  CHECK_NCCL(ncclReduce(v, rank == rroot ? v : NULL, 9, ncclInt64, ncclSum, rroot, comm, NULL));
  if (rank == rroot)
    for (int i = 0; i < 9; ++i) EXPECT(v[i] == (long long)n * (n + 1) / 2 * (i + 1), "reduce [%d]: %lld", i, v[i]);
  return 0;
}

static int gathers(ncclComm_t comm, int rank, int n) {
  enum { kC = 5 };
  float send[kC], all[64 * kC];
  /* AllGather out of place, then in place (sendbuff = recvbuff + rank * count). */
  for (int i = 0; i < kC; ++i) send[i] = (float)(rank * 100 + i);
  CHECK_NCCL(ncclAllGather(send, all, kC, ncclFloat32, comm, NULL));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < kC; ++i) EXPECT(all[r * kC + i] == r * 100 + i, "allgather [%d][%d]", r, i);
  for (int i = 0; i < n * kC; ++i) all[i] = -1;
  for (int i = 0; i < kC; ++i) all[rank * kC + i] = (float)(rank * 10 + i);
  CHECK_NCCL(ncclAllGather(all + rank * kC, all, kC, ncclFloat32, comm, NULL));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < kC; ++i) EXPECT(all[r * kC + i] == r * 10 + i, "allgather in place [%d][%d]", r, i);
  /* ReduceScatter (sum) out of place and in place (recvbuff = sendbuff + rank * count). */
  int s[64 * 6], out[6];
  for (int inplace = 0; inplace < 2; ++inplace) {
    for (int j = 0; j < n * 6; ++j) s[j] = rank + j;
    int* dst = inplace ? s + rank * 6 : out;
    CHECK_NCCL(ncclReduceScatter(s, dst, 6, ncclInt32, ncclSum, comm, NULL));
    for (int i = 0; i < 6; ++i)
      EXPECT(dst[i] == n * (n - 1) / 2 + n * (rank * 6 + i), "reducescatter%s [%d]: %d", inplace ? " in place" : "", i,
             dst[i]);
  }
  /* AlltoAll: block j goes to rank j. */
  int a2a[64 * 3], got[64 * 3];
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < 3; ++k) a2a[j * 3 + k] = rank * 1000 + j * 10 + k;
  CHECK_NCCL(ncclAlltoAll(a2a, got, 3, ncclInt32, comm, NULL));
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < 3; ++k) EXPECT(got[i * 3 + k] == i * 1000 + rank * 10 + k, "alltoall [%d][%d]", i, k);
  /* Gather to the last rank (out of place, then in place); Scatter from rank 0. */
  const int root = n - 1;
  double g[4], gall[64 * 4];
  for (int inplace = 0; inplace < 2; ++inplace) {
    for (int i = 0; i < n * 4; ++i) gall[i] = -1;
    double* src = inplace && rank == root ? gall + root * 4 : g;
    for (int i = 0; i < 4; ++i) src[i] = rank + 0.5 * i;
    CHECK_NCCL(ncclGather(src, gall, 4, ncclFloat64, root, comm, NULL));
    if (rank == root)
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < 4; ++i) EXPECT(gall[r * 4 + i] == r + 0.5 * i, "gather [%d][%d]", r, i);
  }
  for (int i = 0; i < n * 4; ++i) gall[i] = rank == 0 ? 7 * i : -1;
  CHECK_NCCL(ncclScatter(gall, g, 4, ncclFloat64, 0, comm, NULL));
  for (int i = 0; i < 4; ++i) EXPECT(g[i] == 7 * (rank * 4 + i), "scatter [%d]: %g", i, g[i]);
  /* Scatter in place from the last rank (its block stays where it is), and a Gather and a Scatter
   * grouped together. */
  for (int i = 0; i < n * 4; ++i) gall[i] = rank == root ? 3 * i : -1;
  double* dst = rank == root ? gall + root * 4 : g;
  CHECK_NCCL(ncclScatter(gall, dst, 4, ncclFloat64, root, comm, NULL));
  for (int i = 0; i < 4; ++i) EXPECT(dst[i] == 3 * (rank * 4 + i), "scatter in place [%d]: %g", i, dst[i]);
  double h[4], hall[64 * 4];
  for (int i = 0; i < 4; ++i) h[i] = 100 * rank + i;
  for (int i = 0; i < n * 4; ++i) gall[i] = 5 * i, hall[i] = -1;
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclGather(h, hall, 4, ncclFloat64, 0, comm, NULL));
  CHECK_NCCL(ncclScatter(gall, g, 4, ncclFloat64, root, comm, NULL));
  CHECK_NCCL(ncclGroupEnd());
  if (rank == 0)
    for (int i = 0; i < n * 4; ++i) EXPECT(hall[i] == 100 * (i / 4) + i % 4, "grouped gather [%d]: %g", i, hall[i]);
  for (int i = 0; i < 4; ++i) EXPECT(g[i] == 5 * (rank * 4 + i), "grouped scatter [%d]: %g", i, g[i]);
  return 0;
}

/* A ring of sends and receives in one group: a small double message and a 1 MiB byte message. */
static int ring_p2p(ncclComm_t comm, int rank, int n) {
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  double out[100], in[100];
  const size_t big = (size_t)1 << 20;
  unsigned char* bout = malloc(big);
  unsigned char* bin = malloc(big);
  EXPECT(bout != NULL && bin != NULL, "malloc");
  for (int i = 0; i < 100; ++i) out[i] = rank * 1000 + i, in[i] = -1;
  for (size_t i = 0; i < big; ++i) bout[i] = (unsigned char)(rank + i * 7), bin[i] = 0;
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(out, 100, ncclFloat64, next, comm, NULL));
  CHECK_NCCL(ncclRecv(in, 100, ncclFloat64, prev, comm, NULL));
  CHECK_NCCL(ncclSend(bout, big, ncclUint8, next, comm, NULL));
  CHECK_NCCL(ncclRecv(bin, big, ncclUint8, prev, comm, NULL));
  CHECK_NCCL(ncclGroupEnd());
  int bad = -1;
  for (size_t i = 0; i < big && bad < 0; ++i)
    if (bin[i] != (unsigned char)(prev + i * 7)) bad = (int)i;
  free(bout);
  free(bin);
  EXPECT(bad < 0, "1 MiB receive from rank %d differs at byte %d", prev, bad);
  for (int i = 0; i < 100; ++i) EXPECT(in[i] == prev * 1000 + i, "receive from rank %d [%d]: %g", prev, i, in[i]);
  return 0;
}

/* PreMulSum: each rank's input scaled by the op's scalar, then summed. */
static int premulsum(ncclComm_t comm, int rank, int n) {
  enum { kC = 21 };
  /* fp32 x 0.5, fp16 x 0.25, bf16 x 3, fp64 x -2, int32 x 3: every product and sum is exact. */
  const ncclDataType_t types[] = {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat64, ncclInt32};
  const double scalars[] = {0.5, 0.25, 3, -2, 3};
  for (int t = 0; t < 5; ++t) {
    const ncclDataType_t dt = types[t];
    unsigned char scalar[8], send[kC * 8], recv[kC * 8], keep[kC * 8];
    store(dt, scalar, 0, scalars[t]);
    ncclRedOp_t op;
    CHECK_NCCL(ncclRedOpCreatePreMulSum(&op, scalar, dt, ncclScalarHostImmediate, comm));
    EXPECT((int)op >= (int)ncclNumOps, "created op %d collides with a built-in op", (int)op);
    for (int i = 0; i < kC; ++i) store(dt, send, i, input(ncclSum, rank, i));
    memcpy(keep, send, sizeof(send));
    CHECK_NCCL(ncclAllReduce(send, recv, kC, dt, op, comm, NULL));
    EXPECT(memcmp(keep, send, sizeof(send)) == 0, "premulsum %s wrote to sendbuff", type_name(dt));
    for (int i = 0; i < kC; ++i) {
      const double want = scalars[t] * expected(dt, ncclSum, i, n);
      EXPECT(load(dt, recv, i) == want, "premulsum %s [%d]: got %g, want %g", type_name(dt), i, load(dt, recv, i),
             want);
    }
    /* Reduce to rank 0 in place. */
    CHECK_NCCL(ncclReduce(send, rank == 0 ? send : NULL, kC, dt, op, 0, comm, NULL));
    if (rank == 0)
      for (int i = 0; i < kC; ++i)
        EXPECT(load(dt, send, i) == scalars[t] * expected(dt, ncclSum, i, n), "premulsum reduce %s [%d]", type_name(dt),
               i);
    CHECK_NCCL(ncclRedOpDestroy(op, comm));
  }
  /* fp16 rounding: (1/3 in fp16) * 3 = 4095/4096 exactly, a tie between 2047/2048 and 1 that rounds
   * to even (1.0); each rank contributes 1, so the sum is exactly n (n <= 4). */
  unsigned short third = to_half_bits(1.0f / 3.0f), three[3], res[3];
  ncclRedOp_t hop;
  CHECK_NCCL(ncclRedOpCreatePreMulSum(&hop, &third, ncclFloat16, ncclScalarHostImmediate, comm));
  for (int i = 0; i < 3; ++i) three[i] = to_half_bits(3.0f);
  CHECK_NCCL(ncclAllReduce(three, res, 3, ncclFloat16, hop, comm, NULL));
  for (int i = 0; i < 3; ++i)
    EXPECT(load(ncclFloat16, res, i) == n, "fp16 premulsum rounding: %g", load(ncclFloat16, res, i));
  /* Two PreMulSum calls in one group (their scaled copies must live until the group is issued), and
   * ReduceScatter with a PreMulSum op (int32 x 3). */
  int sc = 3, rs[64 * 2], rso[2];
  ncclRedOp_t iop;
  CHECK_NCCL(ncclRedOpCreatePreMulSum(&iop, &sc, ncclInt32, ncclScalarHostImmediate, comm));
  for (int j = 0; j < n * 2; ++j) rs[j] = rank + j;
  unsigned short three2[3], res2[3];
  for (int i = 0; i < 3; ++i) three2[i] = to_half_bits(3.0f);
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclAllReduce(three2, res2, 3, ncclFloat16, hop, comm, NULL));
  CHECK_NCCL(ncclReduceScatter(rs, rso, 2, ncclInt32, iop, comm, NULL));
  CHECK_NCCL(ncclGroupEnd());
  for (int i = 0; i < 3; ++i)
    EXPECT(load(ncclFloat16, res2, i) == n, "grouped fp16 premulsum: %g", load(ncclFloat16, res2, i));
  for (int i = 0; i < 2; ++i)
    EXPECT(rso[i] == 3 * (n * (n - 1) / 2 + n * (rank * 2 + i)), "premulsum reducescatter [%d]: %d", i, rso[i]);
  CHECK_NCCL(ncclRedOpDestroy(hop, comm));
  CHECK_NCCL(ncclRedOpDestroy(iop, comm));
  /* ncclAvg on fp16 scales first, as NCCL does: the average of 60000s is 60000 (exact in fp16 at
   * 1/2 and 1/4; near it at 1/3), where the sum first made it inf. ReduceScatter and Reduce too. */
  unsigned short big[8], avg[8];
  for (int i = 0; i < 8; ++i) big[i] = to_half_bits(60000.0f);
  CHECK_NCCL(ncclAllReduce(big, avg, 8, ncclFloat16, ncclAvg, comm, NULL));
  for (int i = 0; i < 8; ++i)
    EXPECT(fabs(load(ncclFloat16, avg, i) - 60000) <= 60, "fp16 avg of 60000s: %g", load(ncclFloat16, avg, i));
  CHECK_NCCL(ncclReduceScatter(big, avg, 8 / n, ncclFloat16, ncclAvg, comm, NULL));
  EXPECT(fabs(load(ncclFloat16, avg, 0) - 60000) <= 60, "fp16 avg reducescatter: %g", load(ncclFloat16, avg, 0));
  CHECK_NCCL(ncclReduce(big, avg, 8, ncclFloat16, ncclAvg, 0, comm, NULL));
  if (rank == 0)
    EXPECT(fabs(load(ncclFloat16, avg, 7) - 60000) <= 60, "fp16 avg reduce: %g", load(ncclFloat16, avg, 7));
  return 0;
}

int coll_phase(int rank, int n, const ncclUniqueId* ids) {
  /* Init with a config: nonblocking on even ranks (init still completes before returning). */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = rank % 2;
  config.commName = "shim-test";
  config.netName = "Socket";
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRankConfig(&comm, n, ids[0], rank, &config));
  ncclResult_t async = ncclInternalError;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "async error after init: %d", (int)async);
  int count = -1, me = -1;
  CHECK_NCCL(ncclCommCount(comm, &count));
  CHECK_NCCL(ncclCommUserRank(comm, &me));
  EXPECT(count == n && me == rank, "count %d rank %d", count, me);
  int rc = allreduce_sweep(comm, rank, n);
  if (rc == 0) rc = rooted(comm, rank, n);
  if (rc == 0) rc = gathers(comm, rank, n);
  if (rc == 0) rc = ring_p2p(comm, rank, n);
  if (rc == 0) rc = premulsum(comm, rank, n);
  if (rc != 0) {
    ncclCommAbort(comm);
    return rc;
  }
  /* Finalized: queries still answer, collectives are refused. */
  CHECK_NCCL(ncclCommFinalize(comm));
  CHECK_NCCL(ncclCommCount(comm, &count));
  int v = 0;
  EXPECT_FAIL(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, comm, NULL), ncclInvalidUsage, "finalized");
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}
