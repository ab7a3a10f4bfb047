// Internals of the reduction kernels: the per-instruction-set kernel tables, how reduce.cc picks
// one, and the hooks tests and benchmarks use to run every level this CPU supports.
#pragma once

#include <cstdint>
#include <cstring>

#include "src/reduce.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace braid {

// Ordered: a higher level may use everything a lower one does.
enum class SimdLevel : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumSimdLevels = 3;

// buf[i] /= divisor, i < count, divisor >= 2: scaleDivide's work for one datatype.
using DivideKernel = void (*)(void* buf, size_t count, int divisor);

// One kernel per (datatype, op). The braidAvg slot of `kernels` holds the sum kernel (avg divides
// afterwards, see scaleDivide); that of `foldStreams` divides each line before it stores it. An
// aggregate so that the scalar table can be built at compile time.
struct KernelTable {
  ReduceKernel kernels[braidNumTypes][braidNumOps];
  FoldStreamKernel foldStreams[braidNumTypes][braidNumOps];
  DivideKernel divides[braidNumTypes];
};

// "scalar", "avx2", "avx512".
const char* simdLevelString(SimdLevel level);

// True when this CPU and OS can run the level's kernels: AVX2 needs avx2+f16c; AVX-512 needs
// avx512f+avx512bw+avx512vl on top. kScalar is always supported. Thread-safe.
bool simdLevelSupported(SimdLevel level);

// The best supported level, capped by `cap` ("scalar", "avx2" or "avx512", the values of
// BRAID_SIMD). A null, empty or unknown cap means no cap. Thread-safe.
SimdLevel selectSimdLevel(const char* cap);
// Whether `cap` is one of the spellings above (any case).
bool knownSimdLevel(const char* cap);

// The level reduceKernel() uses (chosen once, when the library is loaded).
SimdLevel activeSimdLevel();

// The kernel of one level, for tests and benchmarks. nullptr when the level is not supported on
// this CPU (its kernels would fault) or (dt, op) is invalid. Thread-safe.
ReduceKernel reduceKernelFor(SimdLevel level, braidDataType_t dt, braidRedOp_t op);
FoldStreamKernel foldStreamKernelFor(SimdLevel level, braidDataType_t dt, braidRedOp_t op);
DivideKernel divideKernelFor(SimdLevel level, braidDataType_t dt);

// braidAvg's divisor as the SIMD files' divisions use it (their Div types): a power-of-two n has an
// exact reciprocal, and v * (1 / n) is then the same quotient as v / n, v x 2^-k rounded once
// (subnormal or flushed alike, whatever MXCSR says), for a fraction of a division's cost. A divisor
// below 2 divides by 1.
struct Divisor {
  explicit Divisor(int divisor)
      : n(divisor > 1 ? divisor : 1),
        exact((n & (n - 1)) == 0),
        f(exact ? 1.0f / static_cast<float>(n) : static_cast<float>(n)),
        d(exact ? 1.0 / static_cast<double>(n) : static_cast<double>(n)) {}
  int n;
  bool exact;  // n is a power of two: multiply by f or d, its reciprocal; else divide by them
  float f;
  double d;
};

// One 16-byte piece of a fold's result to an output: a non-temporal store where `to` is 16-byte
// aligned (x86-64), a plain one otherwise. Baseline x86-64 and inline, so the SIMD files' kernels
// take it without a call.
inline void streamPiece(void* to, const void* from) {
#if defined(__x86_64__)
  const __m128i v = _mm_loadu_si128(static_cast<const __m128i*>(from));
  if ((reinterpret_cast<uintptr_t>(to) & 15) == 0) {
    _mm_stream_si128(static_cast<__m128i*>(to), v);
  } else {
    _mm_storeu_si128(static_cast<__m128i*>(to), v);
  }
#else
  std::memcpy(to, from, 16);
#endif
}

// Defined in reduce_avx2.cc and reduce_avx512.cc: overwrite the slots of `table` that the file
// vectorizes (reduce_avx2.cc: sum, prod, min and max of each datatype, avg's fold to several
// outputs and the divisions; reduce_avx512.cc: sum, prod, min and max, and avg's fold and division
// of fp16 and bf16, the rest kept from AVX2). Installing a kernel does not run it, so these are
// safe to call on any CPU; off x86-64 they do nothing.
void fillAvx2Kernels(KernelTable& table);
void fillAvx512Kernels(KernelTable& table);

}  // namespace braid
