// The CUDA kernels (src/cuda/kernels.h) against the CPU kernels (src/reduce.h) on the host: every
// datatype x op x size, with aligned, equally shifted and differently shifted pointers (the 16-byte
// bulk, the one-by-one head and tail, and the all-scalar path), the fused reduce-copy, in place, the
// avg division and the gossip weights. Results must agree bit for bit (NaN payloads aside, see
// gpu_test.h). Skipped where no GPU is present.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <vector>

#include "src/cuda/kernels.h"
#include "tests/gpu/gpu_test.h"

namespace braid {
namespace {

using namespace gputest;

// 0, 1, 7, a few packs plus a tail, and a large count with a tail.
constexpr size_t kCounts[] = {0, 1, 7, 4096 + 3, (1u << 20) + 5};

// Element offsets of (out, a, b): aligned, all shifted alike (head + bulk + tail), and a shifted
// alone (pointers of different 16-byte offsets: one element per thread).
struct Shift {
  const char* name;
  size_t out, a, b;
};
constexpr Shift kShifts[] = {{"aligned", 0, 0, 0}, {"all +1", 1, 1, 1}, {"a +1", 0, 1, 0}};

constexpr int kAvgRanks = 3;

TEST_CASE("gpu kernels: reduce matches the CPU for every dtype, op, size and alignment", "[gpu][kernels]") {
  if (noGpu()) return;
  const size_t maxBytes = ((1u << 20) + 5 + 2) * 8;
  DeviceBuffer dOut(maxBytes), dA(maxBytes), dB(maxBytes), dOut2(maxBytes);
  GpuLaunch l;
  uint64_t seed = 1;
  for (braidDataType_t dt : kAllTypes) {
    const size_t es = dtypeSize(dt);
    for (braidRedOp_t op : kAllOps) {
      for (size_t n : kCounts) {
        for (const Shift& sh : kShifts) {
          INFO(dtypeName(dt) << " " << redopName(op) << " count " << n << " " << sh.name);
          std::vector<char> a(n * es), b(n * es), want(n * es), got(n * es), got2(n * es);
          randomBytes(&a, seed++);
          randomBytes(&b, seed++);
          char* out = dOut.get() + sh.out * es;
          char* out2 = dOut2.get() + sh.out * es;
          char* da = dA.get() + sh.a * es;
          char* db = dB.get() + sh.b * es;
          REQUIRE(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice) == cudaSuccess);
          REQUIRE(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
          // The fused form on every other size: both destinations hold the result.
          const bool fused = (n % 2) == 1;
          REQUIRE(gpuReduce(dt, op, out, fused ? out2 : nullptr, da, db, n, l).ok());
          if (op == braidAvg) {
            REQUIRE(gpuScaleDivide(dt, out, n, kAvgRanks, l).ok());
            if (fused) REQUIRE(gpuScaleDivide(dt, out2, n, kAvgRanks, l).ok());
          }
          REQUIRE(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
          reduce(dt, op == braidAvg ? braidSum : op, want.data(), a.data(), b.data(), n);
          if (op == braidAvg) scaleDivide(dt, want.data(), n, kAvgRanks);
          CHECK(firstDifference(dt, got, want, n) == -1);
          if (fused) {
            REQUIRE(cudaMemcpy(got2.data(), out2, got2.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(firstDifference(dt, got2, want, n) == -1);
          }
        }
      }
    }
  }
}

TEST_CASE("gpu kernels: in place (out == a) and the fused reduce-copy in place", "[gpu][kernels]") {
  if (noGpu()) return;
  const size_t n = 4096 * 3 + 5;
  for (braidDataType_t dt : kAllTypes) {
    INFO(dtypeName(dt));
    const size_t es = dtypeSize(dt);
    DeviceBuffer dA(n * es), dB(n * es), dCopy(n * es);
    std::vector<char> a(n * es), b(n * es), want(n * es), got(n * es);
    randomBytes(&a, 100 + dt);
    randomBytes(&b, 200 + dt);
    REQUIRE(cudaMemcpy(dA.get(), a.data(), a.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dB.get(), b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(gpuReduce(dt, braidSum, dA.get(), dCopy.get(), dA.get(), dB.get(), n, GpuLaunch{}).ok());
    reduce(dt, braidSum, want.data(), a.data(), b.data(), n);
    REQUIRE(cudaMemcpy(got.data(), dA.get(), got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(firstDifference(dt, got, want, n) == -1);
    REQUIRE(cudaMemcpy(got.data(), dCopy.get(), got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(firstDifference(dt, got, want, n) == -1);
  }
}

TEST_CASE("gpu kernels: scaleBy and axpy match the CPU's gossip steps", "[gpu][kernels]") {
  if (noGpu()) return;
  for (braidDataType_t dt : kAllTypes) {
    const size_t es = dtypeSize(dt);
    for (size_t n : kCounts) {
      for (double weight : {0.3, -2.5}) {
        INFO(dtypeName(dt) << " count " << n << " weight " << weight);
        DeviceBuffer dDst(n * es + 16), dSrc(n * es + 16);
        std::vector<char> dst(n * es), src(n * es), want(n * es), got(n * es);
        randomBytes(&dst, 300 + n + dt);
        randomBytes(&src, 400 + n + dt);
        // scaleBy into a shifted destination, axpy onto it.
        char* d = dDst.get() + es;
        char* s = dSrc.get() + es;
        REQUIRE(cudaMemcpy(s, src.data(), src.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(gpuScaleBy(dt, d, s, n, weight, GpuLaunch{}).ok());
        want = dst;
        scaleBy(dt, want.data(), src.data(), n, weight);
        REQUIRE(cudaMemcpy(got.data(), d, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(firstDifference(dt, got, want, n) == -1);
        REQUIRE(cudaMemcpy(d, dst.data(), dst.size(), cudaMemcpyHostToDevice) == cudaSuccess);
        REQUIRE(gpuAxpy(dt, d, s, n, weight, GpuLaunch{}).ok());
        want = dst;
        axpy(dt, want.data(), src.data(), n, weight);
        REQUIRE(cudaMemcpy(got.data(), d, got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(firstDifference(dt, got, want, n) == -1);
      }
    }
  }
}

TEST_CASE("gpu kernels: bad arguments are refused and nothing is written", "[gpu][kernels]") {
  if (noGpu()) return;
  DeviceBuffer dOut(256), dA(256);
  std::vector<char> ones(256, 1), got(256);
  REQUIRE(cudaMemcpy(dOut.get(), ones.data(), 256, cudaMemcpyHostToDevice) == cudaSuccess);
  // A float buffer at an odd address, an unknown datatype and op, a null buffer.
  CHECK(gpuReduce(braidFloat32, braidSum, dOut.get() + 1, nullptr, dA.get(), dA.get(), 8, GpuLaunch{}).code() ==
        braidInvalidArgument);
  CHECK(gpuReduce(braidNumTypes, braidSum, dOut.get(), nullptr, dA.get(), dA.get(), 8, GpuLaunch{}).code() ==
        braidInvalidArgument);
  CHECK(gpuReduce(braidFloat32, braidNumOps, dOut.get(), nullptr, dA.get(), dA.get(), 8, GpuLaunch{}).code() ==
        braidInvalidArgument);
  CHECK(gpuReduce(braidFloat32, braidSum, dOut.get(), nullptr, nullptr, dA.get(), 8, GpuLaunch{}).code() ==
        braidInvalidArgument);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(got.data(), dOut.get(), 256, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == ones);
}

TEST_CASE("gpu kernels: the grid stays within the cap", "[gpu][kernels]") {
  if (noGpu()) return;
  GpuLaunch l;
  l.device = 0;
  const int cap = gpuBlockCap(0);
  INFO("multiprocessors " << gpuMultiprocessors(0) << ", cap " << cap);
  CHECK(cap >= 1);
  CHECK(cap <= gpuMultiprocessors(0));
  CHECK(gpuBlocksFor(1, 4, l) == 1);
  CHECK(gpuBlocksFor(size_t{1} << 30, 4, l) == cap);
  l.maxBlocks = 3;
  CHECK(gpuBlocksFor(size_t{1} << 30, 4, l) == 3);
}

}  // namespace
}  // namespace braid
