// The CPU reduction kernels' bandwidth beside memcpy of the same bytes, per size and SIMD level (the
// counterpart of cuda_reduce_perf). Like that one it measures internal kernels (src/reduce.h,
// src/reduce_internal.h), not the public API, so it links braid's internals. One process, one
// thread: run it alone, and compare only within one run.
//
// Per row, `size` is the bytes of each input and output. Bandwidth = bytes moved / time:
//   red     out = a op b, the pairwise kernel (ReduceKernel): 3 x size
//   fold2   a op b streamed to two outputs in one pass (FoldStreamKernel; avg divides by 2): 4 x size
//   div2    a copy of an input divided by 2 in place (scaleDivide's kernel: by the reciprocal), each
//           call on a fresh copy (not timed): 2 x size
//   div3    the same by 3 (a true division): 2 x size
//   copy    memcpy of size: 2 x size
// Flags: nccl-tests' -b -e -f -n -w -d -o (the first datatype and op given; default 32M, float, sum).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "perf/options.h"
#include "src/base/nt_store.h"
#include "src/reduce.h"
#include "src/reduce_internal.h"

namespace {

using namespace braid;

// Microseconds per call of fn, averaged over `iters` calls after `warmup`.
template <class Fn>
double timeUs(int warmup, int iters, Fn fn) {
  for (int i = 0; i < warmup; ++i) fn();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - t0;
  return took.count() / iters;
}

// The same for a division in place, each call on a fresh copy of the inputs (not timed): the
// values would otherwise shrink call by call into subnormals and zeros.
double divideUs(DivideKernel divide, char* buf, const char* from, size_t count, size_t bytes, int divisor, int warmup,
                int iters) {
  double us = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    std::memcpy(buf, from, bytes);
    const double one = timeUs(0, 1, [&] { divide(buf, count, divisor); });
    if (i >= warmup) us += one;
  }
  return us / iters;
}

double gbps(double bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0; }

}  // namespace

int main(int argc, char** argv) {
  const perf::Options o = perf::parseOptions(argc, argv);
  const braidDataType_t dt = o.types.front();
  const braidRedOp_t op = o.ops.front();
  const size_t es = dtypeSize(dt);
  const size_t most = o.maxBytes / es * es;
  // Inputs of small integers in every type (1..7): no NaN, no overflow of the 16-bit floats.
  std::vector<char> a(most + 64), b(most + 64), out(most + 64), out2(most + 64), copy(most + 64);
  for (size_t i = 0; i < most / es; ++i) {
    const float v = static_cast<float>(1 + i % 7);
    uint64_t bits = 0;
    switch (dt) {
      case braidFloat16:
        bits = floatToHalf(v);
        break;
      case braidBfloat16:
        bits = floatToBf16(v);
        break;
      case braidFloat32:
        std::memcpy(&bits, &v, 4);
        break;
      case braidFloat64: {
        const double d = v;
        std::memcpy(&bits, &d, 8);
        break;
      }
      default:
        bits = static_cast<uint64_t>(v);
        break;
    }
    std::memcpy(a.data() + i * es, &bits, es);
    std::memcpy(b.data() + i * es, &bits, es);
  }
  // 64-byte aligned starts, as the transports' slots and braidMemAlloc memory are.
  auto at = [](std::vector<char>& v) { return v.data() + (64 - reinterpret_cast<uintptr_t>(v.data()) % 64) % 64; };
  char *pa = at(a), *pb = at(b), *po = at(out), *po2 = at(out2), *pc = at(copy);
  std::printf("# cpu_reduce_perf: %s %s, active level %s; GB/s of bytes moved (see the top of the source)\n",
              perf::typeName(dt), perf::opName(op), simdLevelName());
  std::printf("# %12s %7s %10s %10s %10s %10s %10s\n", "size(B)", "level", "red", "fold2", "div2", "div3", "copy");
  constexpr SimdLevel kLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};
  for (size_t size = o.minBytes; size <= o.maxBytes;
       size = o.stepBytes > 0 ? size + o.stepBytes : size * o.stepFactor) {
    const size_t count = size / es, bytes = count * es;
    const double copyUs = timeUs(o.warmup, o.iters, [&] { std::memcpy(pc, pa, bytes); });
    for (SimdLevel level : kLevels) {
      const ReduceKernel red = reduceKernelFor(level, dt, op);
      const FoldStreamKernel fold = foldStreamKernelFor(level, dt, op);
      const DivideKernel divide = divideKernelFor(level, dt);
      if (red == nullptr || fold == nullptr || divide == nullptr) continue;  // not on this CPU
      void* outs[] = {po, po2};
      const void* ins[] = {pa, pb};
      const double redUs = timeUs(o.warmup, o.iters, [&] { red(po, pa, pb, count); });
      const double foldUs = timeUs(o.warmup, o.iters, [&] {
        fold(outs, 2, ins, 2, count, 2);
        storeFence();
      });
      const double div2Us = divideUs(divide, po, pa, count, bytes, 2, o.warmup, o.iters);
      const double div3Us = divideUs(divide, po, pa, count, bytes, 3, o.warmup, o.iters);
      std::printf("  %12zu %7s %10.1f %10.1f %10.1f %10.1f %10.1f\n", bytes, simdLevelString(level),
                  gbps(3.0 * bytes, redUs), gbps(4.0 * bytes, foldUs), gbps(2.0 * bytes, div2Us),
                  gbps(2.0 * bytes, div3Us), gbps(2.0 * bytes, copyUs));
    }
    if (size == 0) break;
  }
  return 0;
}
