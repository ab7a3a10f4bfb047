// The CUDA reduction kernel's bandwidth beside a device-to-device cudaMemcpy of the same bytes, per
// size (issue "GPUs": the kernels should reach 90% of the copy's bandwidth from 64 MiB). Built only
// with CUDA. Unlike the other *_perf tools it measures an internal kernel (src/cuda/kernels.h), not
// the public API, so it links braid's internals.
//
// Per row, `size` is the bytes of each input. The reduce reads two inputs and writes one output
// (3 x size moved); the fused reduce-copy writes two outputs (4 x size); the copy reads and writes
// size each (2 x size). Bandwidth = bytes moved / time, times from CUDA events around -n launches.
//
// Flags: nccl-tests' -b -e -f -n -w -d -o (one datatype and op: the first given; default 1M..1G,
// float, sum), plus -B N (the grid's cap on blocks; default the kernels' own, half the
// multiprocessors) and -g N (the device). Without a CUDA device it says so and exits 0.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf/cuda_bench.h"
#include "perf/options.h"
#include "src/cuda/kernels.h"
#include "src/cuda/runtime.h"
#include "src/reduce.h"

namespace {

using namespace braid;

using perf::must;
using perf::timeUs;

// One reduction of `count` elements against the CPU kernel (bit for bit, NaNs aside: the inputs
// are small integers in every type, so no NaN arises).
bool check(braidDataType_t dt, braidRedOp_t op, size_t count, const GpuLaunch& l) {
  const size_t bytes = count * dtypeSize(dt);
  std::vector<char> a(bytes), b(bytes), want(bytes), got(bytes);
  for (size_t i = 0; i < count; ++i) {
    // The same small value written in the datatype: 1..7 in every type.
    const int v = 1 + static_cast<int>(i % 7);
    const int w = 1 + static_cast<int>((i * 5) % 7);
    for (auto [buf, x] : {std::pair{&a, v}, std::pair{&b, w}}) {
      char* p = buf->data() + i * dtypeSize(dt);
      switch (dt) {
        case braidFloat16: {
          const uint16_t h = floatToHalf(static_cast<float>(x));
          std::memcpy(p, &h, 2);
          break;
        }
        case braidBfloat16: {
          const uint16_t h = floatToBf16(static_cast<float>(x));
          std::memcpy(p, &h, 2);
          break;
        }
        case braidFloat32: {
          const float f = static_cast<float>(x);
          std::memcpy(p, &f, 4);
          break;
        }
        case braidFloat64: {
          const double d = x;
          std::memcpy(p, &d, 8);
          break;
        }
        default: {
          const uint64_t u = static_cast<uint64_t>(x);
          std::memcpy(p, &u, dtypeSize(dt));  // little-endian: the low bytes
        }
      }
    }
  }
  void *da = nullptr, *db = nullptr, *dout = nullptr;
  must(cudaMalloc(&da, bytes), "cudaMalloc");
  must(cudaMalloc(&db, bytes), "cudaMalloc");
  must(cudaMalloc(&dout, bytes), "cudaMalloc");
  must(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  must(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  must(gpuReduce(dt, op, dout, nullptr, da, db, count, l), "gpuReduce");
  must(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  reduce(dt, op == braidAvg ? braidSum : op, want.data(), a.data(), b.data(), count);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dout);
  return got == want;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 0, device = 0;
  const perf::Options o = perf::parseCudaBenchFlags(argc, argv, {{"-B", &blocks}, {"-g", &device}});
  if (gpuDeviceCount() == 0) {
    std::printf("cuda_reduce_perf: %s; nothing measured\n", gpuAbsentReason());
    return 0;
  }
  if (device < 0 || device >= gpuDeviceCount()) {
    std::fprintf(stderr, "cuda_reduce_perf: -g %d: this process sees %d device(s)\n", device, gpuDeviceCount());
    return 2;
  }
  must(gpuSetDevice(device), "select the device");
  const braidDataType_t dt = o.types.front();
  const braidRedOp_t op = o.ops.front();
  cudaStream_t stream = nullptr;
  must(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const GpuLaunch l{reinterpret_cast<GpuStream>(stream), device, blocks};
  cudaDeviceProp prop{};
  must(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::printf("# device %d: %s, %d multiprocessors; kernel grid cap %d blocks of %d threads\n", device, prop.name,
              prop.multiProcessorCount, blocks > 0 ? blocks : gpuBlockCap(device), kGpuThreads);
  std::printf("# %s %s; check against the CPU kernel: %s\n", perf::typeName(dt), perf::opName(op),
              check(dt, op, (1u << 20) + 3, l) ? "ok" : "FAILED");
  std::printf("# %12s %12s %6s %10s %10s %10s %10s %10s %8s\n", "size(B)", "count", "blocks", "red(us)", "red(GB/s)",
              "fused(GB/s)", "copy(us)", "copy(GB/s)", "red/copy");
  const size_t es = dtypeSize(dt);
  void *a = nullptr, *b = nullptr, *out = nullptr, *out2 = nullptr;
  const size_t maxBytes = o.maxBytes / es * es;
  must(cudaMalloc(&a, maxBytes), "cudaMalloc");
  must(cudaMalloc(&b, maxBytes), "cudaMalloc");
  must(cudaMalloc(&out, maxBytes), "cudaMalloc");
  must(cudaMalloc(&out2, maxBytes), "cudaMalloc");
  must(cudaMemset(a, 0, maxBytes), "cudaMemset");
  must(cudaMemset(b, 0, maxBytes), "cudaMemset");
  for (size_t size = o.minBytes; size <= o.maxBytes;
       size = o.stepBytes > 0 ? size + o.stepBytes : size * o.stepFactor) {
    const size_t count = size / es;
    const size_t bytes = count * es;
    const double red =
        timeUs(o.warmup, o.iters, stream, [&] { must(gpuReduce(dt, op, out, nullptr, a, b, count, l), "gpuReduce"); });
    const double fused =
        timeUs(o.warmup, o.iters, stream, [&] { must(gpuReduce(dt, op, out, out2, a, b, count, l), "gpuReduce"); });
    const double copy = timeUs(o.warmup, o.iters, stream, [&] {
      must(cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    });
    const double redGbps = 3.0 * bytes / red / 1e3;
    const double copyGbps = 2.0 * bytes / copy / 1e3;
    std::printf("  %12zu %12zu %6d %10.1f %10.1f %10.1f %10.1f %10.1f %8.3f\n", bytes, count,
                gpuBlocksFor(count, es, l), red, redGbps, 4.0 * bytes / fused / 1e3, copy, copyGbps,
                redGbps / copyGbps);
    if (size == 0) break;
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  cudaFree(out2);
  cudaStreamDestroy(stream);
  return 0;
}
