// The CUDA kernels of local steps: reduce (dst = a op b, optionally written to a second destination
// in the same pass), the braidAvg division, the gossip weights (scaleBy, axpy) and copies. The same
// semantics as the CPU kernels of src/reduce.h, bit for bit: both compute each element with
// src/reduce_ops.h. Compiled only with CUDA (BRAID_HAVE_CUDA); plain C++ here, so callers need no
// CUDA header.
//
// Every call only enqueues work on `launch.stream` and returns; the caller learns of completion
// through the stream (an event, a synchronize). Pointers must be device-accessible (device, managed
// or mapped pinned memory) and aligned to their element size; anything else is refused
// (braidInvalidArgument) before anything is enqueued. Outputs may alias inputs exactly, not partially.
//
// Speed. Where all pointers of a call share their offset modulo 16 bytes, the bulk moves in 16-byte
// loads and stores; the few elements before the first 16-byte boundary and after the last are done
// one by one. Pointers of different offsets go one element per thread (coalesced, slower).
//
// Threads: any thread with the stream's device current.
#pragma once

#include <cstddef>

#include "braid/braid.h"
#include "src/base/status.h"

struct CUstream_st;  // cudaStream_t is a CUstream_st*

namespace braid {

using GpuStream = CUstream_st*;

// Threads per block of every kernel: 512 keeps 16-byte loads of a whole block in flight with
// few blocks.
inline constexpr int kGpuThreads = 512;
// 16-byte loads each thread issues before it waits for the first: memory latency is hidden by
// bytes in flight, and with few blocks each thread must carry several.
inline constexpr int kGpuUnroll = 4;

struct GpuLaunch {
  GpuStream stream = nullptr;  // the legacy default stream when null
  int device = -1;             // the stream's device (for its multiprocessor count); -1 = the current device
  int maxBlocks = 0;           // cap on the grid; 0 = gpuBlockCap(device)
};

// The default cap on a kernel's blocks: half the device's multiprocessors (at least 1). A collective's
// kernels run beside the user's compute (the next layer's backward pass overlaps the previous one's
// AllReduce), so they must not fill the GPU; half leaves the user's kernels the other half while the
// memory system, not the multiprocessor count, bounds a streaming kernel's speed. 16 when the device
// cannot be asked. Not yet measured on a GPU: cuda_reduce_perf -B sweeps it.
int gpuBlockCap(int device);

// The blocks a kernel over `count` elements of `elemSize` bytes gets under `launch` (for benchmarks).
int gpuBlocksFor(size_t count, size_t elemSize, const GpuLaunch& launch);

// out[i] = a[i] op b[i] for i < count, and out2[i] too when out2 is not null (a fused reduce-copy:
// the reduced chunk reaches its next destination without a second pass). braidAvg reduces as
// braidSum (divide at the end with gpuScaleDivide), as the CPU does.
Status gpuReduce(braidDataType_t dt, braidRedOp_t op, void* out, void* out2, const void* a, const void* b, size_t count,
                 const GpuLaunch& launch);

// buf[i] /= divisor (scaleDivide of src/reduce.h); divisor <= 1 enqueues nothing.
Status gpuScaleDivide(braidDataType_t dt, void* buf, size_t count, int divisor, const GpuLaunch& launch);

// dst[i] = weight * src[i] and dst[i] += weight * src[i] (scaleBy and axpy of src/reduce.h).
Status gpuScaleBy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight, const GpuLaunch& launch);
Status gpuAxpy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight, const GpuLaunch& launch);

// bytes from src to dst, any memory kinds (cudaMemcpyAsync with cudaMemcpyDefault). The ranges must
// not overlap unless equal (equal ranges enqueue nothing).
Status gpuCopy(void* dst, const void* src, size_t bytes, const GpuLaunch& launch);

}  // namespace braid
