/* The NCCL shim on device buffers, as a program built for NCCL uses it: ncclCommCuDevice, buffers
 * from ncclMemAlloc and from cudaMalloc, collectives ordered on a stream (the inputs copied in on
 * the stream before the call, the results copied out after it, one synchronize at the end), ncclAvg
 * and a group of sends and receives around a ring. Every rank skips (status 77, saying why) where
 * the CUDA runtime sees no device, or where the test was built without it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim_test.h"

#ifndef BRAID_SHIM_TEST_CUDART

int device_phase(int rank, int n, const ncclUniqueId* ids) {
  (void)rank, (void)n, (void)ids;
  fprintf(stderr, "skipped: the shim tests were built without the CUDA runtime\n");
  return SKIP_STATUS;
}

#else

#include <cuda_runtime_api.h>

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) return fail_at(__LINE__, "%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

enum { kCount = 1 << 18 };

/* Rank r's input element i: small integers, exact in float and int32. */
static float input(int r, size_t i) { return (float)(r + 1 + (int)(i % 7)); }

/* Copies `host` into `src` on s, AllReduces it (sum or avg) into `dst`, copies `dst` into `back`
 * on s, then synchronizes once and checks every element. */
static int allreduce_round(ncclComm_t comm, int n, const float* host, void* src, void* dst, ncclRedOp_t op, float* back,
                           cudaStream_t s) {
  const size_t bytes = kCount * sizeof(float);
  CHECK_CUDA(cudaMemcpyAsync(src, host, bytes, cudaMemcpyHostToDevice, s));
  CHECK_NCCL(ncclAllReduce(src, dst, kCount, ncclFloat32, op, comm, s));
  CHECK_CUDA(cudaMemcpyAsync(back, dst, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (size_t i = 0; i < kCount; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += input(r, i);
    if (op == ncclAvg) want /= n;
    const double err = back[i] > want ? back[i] - want : want - back[i];
    /* A sum of small integers is exact; an average is rounded once. */
    EXPECT(err <= (op == ncclAvg ? 1e-6 * want : 0), "AllReduce %s %s: element %zu is %g, want %g",
           op == ncclAvg ? "avg" : "sum", src == dst ? "in place" : "out of place", i, back[i], want);
  }
  return 0;
}

static int device_body(ncclComm_t comm, int rank, int n, cudaStream_t s) {
  const size_t bytes = kCount * sizeof(float);
  float* host = malloc(bytes * (size_t)n);
  float* back = malloc(bytes * (size_t)n);
  EXPECT(host != NULL && back != NULL, "out of host memory");
  void* mem = NULL;  /* ncclMemAlloc: in place */
  float* out = NULL; /* cudaMalloc: out of place, n blocks for the all-gather */
  CHECK_NCCL(ncclMemAlloc(&mem, bytes));
  CHECK_CUDA(cudaMalloc((void**)&out, bytes * (size_t)n));
  for (size_t i = 0; i < kCount; ++i) host[i] = input(rank, i);

  /* AllReduce sum in place, then ncclAvg out of place, from the same input. */
  int rc = allreduce_round(comm, n, host, mem, mem, ncclSum, back, s);
  if (rc == 0) rc = allreduce_round(comm, n, host, mem, out, ncclAvg, back, s);
  if (rc != 0) return rc;

  /* An AllGather of the input (still in `mem`) into `out`: all n blocks. */
  CHECK_NCCL(ncclAllGather(mem, out, kCount, ncclFloat32, comm, s));
  CHECK_CUDA(cudaMemcpyAsync(back, out, bytes * (size_t)n, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < kCount; i += 97)
      EXPECT(back[(size_t)r * kCount + i] == input(r, i), "AllGather: block %d element %zu is %g, want %g", r, i,
             back[(size_t)r * kCount + i], input(r, i));

  /* A ring in a group: send mine to the next rank, receive the previous rank's into `out`. */
  CHECK_CUDA(cudaMemcpyAsync(mem, host, bytes, cudaMemcpyHostToDevice, s));
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclSend(mem, kCount, ncclFloat32, (rank + 1) % n, comm, s));
  CHECK_NCCL(ncclRecv(out, kCount, ncclFloat32, (rank + n - 1) % n, comm, s));
  CHECK_NCCL(ncclGroupEnd());
  CHECK_CUDA(cudaMemcpyAsync(back, out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  const int prev = (rank + n - 1) % n;
  for (size_t i = 0; i < kCount; ++i)
    EXPECT(back[i] == input(prev, i), "ring: element %zu is %g, want %g", i, back[i], input(prev, i));

  ncclResult_t async = ncclInternalError;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess, "ncclCommGetAsyncError: %d", (int)async);
  CHECK_NCCL(ncclMemFree(mem));
  CHECK_CUDA(cudaFree(out));
  free(host);
  free(back);
  return 0;
}

int device_phase(int rank, int n, const ncclUniqueId* ids) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fprintf(stderr, "skipped: no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return SKIP_STATUS;
  }
  /* Several ranks share device 0 when there is one (braid allows it; NCCL would not). */
  CHECK_CUDA(cudaSetDevice(rank % devices));
  ncclComm_t comm = NULL;
  CHECK_NCCL(ncclCommInitRank(&comm, n, ids[0], rank));
  int dev = -1;
  CHECK_NCCL(ncclCommCuDevice(comm, &dev));
  EXPECT(dev == rank % devices, "ncclCommCuDevice gave %d, want the device current at init, %d", dev, rank % devices);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int rc = device_body(comm, rank, n, s);
  cudaStreamDestroy(s);
  if (rc != 0) {
    ncclCommAbort(comm);
    return rc;
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}

#endif
