// Datatype sizes and names, the scalar kernels, and the choice of kernel table (fp16/bf16 conversions
// are in src/base/half.h). The choice is made once, while the library is loaded: the best level this CPU
// supports (AVX-512, AVX2, scalar), capped by BRAID_SIMD. reduceKernel() is then one array lookup.
//
// Semantics shared by every level (the SIMD files reproduce them bit for bit):
// - Integers wrap around (two's complement), signed ones included: sums and products are done in
//   unsigned arithmetic, so no signed overflow (undefined behaviour) can happen.
// - Floats: IEEE operations in the type's precision under the default rounding mode. fp16 and bf16
//   are widened to fp32 exactly, reduced, and rounded back to nearest even. fp32 carries at least
//   2p+2 bits for both (p = 11 and 8), so this double rounding gives the correctly rounded sum and
//   product of the two inputs.
// - min(a, b) is `a < b ? a : b` and max(a, b) is `a > b ? a : b` (the semantics of vminps and
//   vmaxps), except that a NaN in `a` is returned as is; so a NaN in either input gives a NaN.
//   min(-0, +0) is +0 and min(+0, -0) is -0, as with the scalar expression.
#include "src/reduce.h"

#include <strings.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "src/base/nt_store.h"
#include "src/reduce_internal.h"
#include "src/reduce_ops.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace braid {
namespace {

constexpr const char* kSimdLevelNames[kNumSimdLevels] = {"scalar", "avx2", "avx512"};

// ---- Scalar kernels ------------------------------------------------------------------------------

template <class T, braidRedOp_t kOp>
void scalarKernel(void* out, const void* a, const void* b, size_t count) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  // Element i is read before it is written, so out == a or out == b is fine.
  for (size_t i = 0; i < count; ++i) o[i] = applyOp<kOp>(x[i], y[i]);
}

template <class Codec, braidRedOp_t kOp>
void scalarHalfKernel(void* out, const void* a, const void* b, size_t count) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < count; ++i) o[i] = Codec::narrow(applyOp<kOp>(Codec::widen(x[i]), Codec::widen(y[i])));
}

// buf[i] /= divisor, one element at a time (divideElem, divideNarrowElem: src/reduce_ops.h).
template <class T>
void divideEach(void* buf, size_t count, int divisor) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = divideElem(p[i], divisor);
}

template <class Codec>
void divideNarrowEach(void* buf, size_t count, int divisor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = divideNarrowElem<Codec>(p[i], divisor);
}

// The scalar FoldStreamKernel: 1 KiB of the result at a time folded into a block on the stack with
// the pairwise kernel (and divided, for braidAvg: kDivide), then streamed to every output
// (copyStreaming). For the scalar level only.
template <class Kernel, size_t kSize, DivideKernel kDivide = nullptr>
void scalarFoldStream(void* const* outs, int nouts, const void* const* ins, int nins, size_t count,
                      [[maybe_unused]] int divisor) {
  constexpr size_t kBlock = 1024 / kSize;
  alignas(64) unsigned char acc[kBlock * kSize];
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t n = count - i < kBlock ? count - i : kBlock;
    const size_t at = i * kSize;
    Kernel::run(acc, static_cast<const char*>(ins[0]) + at, static_cast<const char*>(ins[1]) + at, n);
    for (int p = 2; p < nins; ++p) Kernel::run(acc, acc, static_cast<const char*>(ins[p]) + at, n);
    if constexpr (kDivide != nullptr) {
      if (divisor > 1) kDivide(acc, n, divisor);
    }
    for (int j = 0; j < nouts; ++j)
      copyStreaming(static_cast<char*>(outs[j]) + at, reinterpret_cast<const char*>(acc), n * kSize);
  }
}

template <template <braidRedOp_t> class Kernel, size_t kSize, DivideKernel kDivide>
constexpr void setRow(KernelTable& table, braidDataType_t dt) {
  table.kernels[dt][braidSum] = &Kernel<braidSum>::run;
  table.kernels[dt][braidProd] = &Kernel<braidProd>::run;
  table.kernels[dt][braidMin] = &Kernel<braidMin>::run;
  table.kernels[dt][braidMax] = &Kernel<braidMax>::run;
  table.kernels[dt][braidAvg] = &Kernel<braidSum>::run;
  table.foldStreams[dt][braidSum] = &scalarFoldStream<Kernel<braidSum>, kSize>;
  table.foldStreams[dt][braidProd] = &scalarFoldStream<Kernel<braidProd>, kSize>;
  table.foldStreams[dt][braidMin] = &scalarFoldStream<Kernel<braidMin>, kSize>;
  table.foldStreams[dt][braidMax] = &scalarFoldStream<Kernel<braidMax>, kSize>;
  table.foldStreams[dt][braidAvg] = &scalarFoldStream<Kernel<braidSum>, kSize, kDivide>;
  table.divides[dt] = kDivide;
}

template <class T>
struct Plain {
  template <braidRedOp_t kOp>
  struct Of {
    static void run(void* out, const void* a, const void* b, size_t count) { scalarKernel<T, kOp>(out, a, b, count); }
  };
};

template <class Codec>
struct Narrow {
  template <braidRedOp_t kOp>
  struct Of {
    static void run(void* out, const void* a, const void* b, size_t count) {
      scalarHalfKernel<Codec, kOp>(out, a, b, count);
    }
  };
};

constexpr KernelTable makeScalarTable() {
  KernelTable table{};
  setRow<Plain<int8_t>::Of, 1, &divideEach<int8_t>>(table, braidInt8);
  setRow<Plain<uint8_t>::Of, 1, &divideEach<uint8_t>>(table, braidUint8);
  setRow<Plain<int32_t>::Of, 4, &divideEach<int32_t>>(table, braidInt32);
  setRow<Plain<uint32_t>::Of, 4, &divideEach<uint32_t>>(table, braidUint32);
  setRow<Plain<int64_t>::Of, 8, &divideEach<int64_t>>(table, braidInt64);
  setRow<Plain<uint64_t>::Of, 8, &divideEach<uint64_t>>(table, braidUint64);
  setRow<Narrow<HalfCodec>::Of, 2, &divideNarrowEach<HalfCodec>>(table, braidFloat16);
  setRow<Narrow<Bf16Codec>::Of, 2, &divideNarrowEach<Bf16Codec>>(table, braidBfloat16);
  setRow<Plain<float>::Of, 4, &divideEach<float>>(table, braidFloat32);
  setRow<Plain<double>::Of, 8, &divideEach<double>>(table, braidFloat64);
  return table;
}

// ---- Kernel tables ---------------------------------------------------------------------------------
// Constant-initialized to the scalar kernels, so that a static initializer of another translation
// unit that reduces before initKernels() has run gets correct (scalar) results. initKernels()
// runs during static initialization, before any thread of the user can call in, and nothing writes
// the tables afterwards: readers need no synchronization.
constinit KernelTable gLevelTables[kNumSimdLevels] = {makeScalarTable(), makeScalarTable(), makeScalarTable()};
constinit KernelTable gActive = makeScalarTable();
constinit SimdLevel gActiveLevel = SimdLevel::kScalar;

bool initKernels() {
  // Each level starts from the one below it, so a slot a SIMD file leaves alone keeps the best
  // kernel of a lower level.
  fillAvx2Kernels(gLevelTables[static_cast<int>(SimdLevel::kAvx2)]);
  gLevelTables[static_cast<int>(SimdLevel::kAvx512)] = gLevelTables[static_cast<int>(SimdLevel::kAvx2)];
  fillAvx512Kernels(gLevelTables[static_cast<int>(SimdLevel::kAvx512)]);
  for (KernelTable& table : gLevelTables) {
    for (auto& row : table.kernels) row[braidAvg] = row[braidSum];
  }
  // Read once, here: BRAID_SIMD is meant for tests and comparisons, set before the process starts.
  // This runs during static initialization, before the config table (another translation unit)
  // may exist, so the variable is read directly; a communicator's init refuses a bad value
  // (checkParams), and a process that never makes one is told here, once.
  const char* cap = std::getenv("BRAID_SIMD");
  if (cap != nullptr && cap[0] != '\0' && !knownSimdLevel(cap))
    fprintf(stderr, "braid WARN BRAID_SIMD=%s is not scalar, avx2 or avx512; using the best this CPU has\n", cap);
  gActiveLevel = selectSimdLevel(cap);
  gActive = gLevelTables[static_cast<int>(gActiveLevel)];
  return true;
}

[[maybe_unused]] const bool gKernelsReady = initKernels();

// ---- Weighted steps (gossip) ---------------------------------------------------------------------
// Plain loops: the compiler vectorizes the float and double ones; fp16/bf16 go through the scalar
// conversions (gossip buffers of those types are rarer, and this keeps one rounding per element).

template <class T, bool kAccumulate>
void weightFloats(void* dst, const void* src, size_t count, double weight) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const T w = static_cast<T>(weight);
  for (size_t i = 0; i < count; ++i) d[i] = weightFloat<T, kAccumulate>(d[i], s[i], w);
}

#if defined(__x86_64__)
// AVX2 + F16C for the 16-bit types, eight elements at a time; they return how many they did and the
// scalar loop finishes. Same arithmetic as the scalar code (fp32 multiply, then add, then one
// rounding to nearest even), so the results are bit for bit the scalar ones.
#define BRAID_WEIGHT_AVX2 __attribute__((target("avx2,f16c")))

template <bool kAccumulate>
BRAID_WEIGHT_AVX2 size_t weightHalfAvx2(uint16_t* d, const uint16_t* s, size_t count, float weight) {
  const __m256 w = _mm256_set1_ps(weight);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_mul_ps(w, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    if constexpr (kAccumulate)
      x = _mm256_add_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + i))), x);
    // vcvtps2ph with an explicit nearest-even immediate: overflow to infinity, NaNs quieted.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

BRAID_WEIGHT_AVX2 inline __m256 widenBf16x8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

template <bool kAccumulate>
BRAID_WEIGHT_AVX2 size_t weightBf16Avx2(uint16_t* d, const uint16_t* s, size_t count, float weight) {
  const __m256 w = _mm256_set1_ps(weight);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff), quietBit = _mm256_set1_epi32(0x400000);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 x = _mm256_mul_ps(w, widenBf16x8(s + i));
    if constexpr (kAccumulate) x = _mm256_add_ps(widenBf16x8(d + i), x);
    // floatToBf16, per lane: add 0x7fff plus the lowest kept bit, keep the top 16 bits; NaNs are
    // quieted instead of rounded.
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(half, lsb));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const __m256i top = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(bits, quietBit), nan), 16);
    // Lanes hold 0..0xffff: packing with unsigned saturation is exact. packus works per 128-bit
    // half, so gather the two halves' results into the low 128 bits.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(top, top), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(packed));
  }
  return i;
}
#endif

template <class Codec, bool kAccumulate>
void weightNarrow(void* dst, const void* src, size_t count, double weight) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const float w = static_cast<float>(weight);
  size_t i = 0;
#if defined(__x86_64__)
  if (gActiveLevel >= SimdLevel::kAvx2) {
    i = std::is_same_v<Codec, HalfCodec> ? weightHalfAvx2<kAccumulate>(d, s, count, w)
                                         : weightBf16Avx2<kAccumulate>(d, s, count, w);
  }
#endif
  for (; i < count; ++i) d[i] = weightNarrowElem<Codec, kAccumulate>(d[i], s[i], w);
}

template <class T, bool kAccumulate>
void weightInts(void* dst, const void* src, size_t count, double weight) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = weightInt<T, kAccumulate>(d[i], s[i], weight);
}

template <bool kAccumulate>
void weighted(braidDataType_t dt, void* dst, const void* src, size_t count, double weight) {
  switch (dt) {
    case braidInt8:
      return weightInts<int8_t, kAccumulate>(dst, src, count, weight);
    case braidUint8:
      return weightInts<uint8_t, kAccumulate>(dst, src, count, weight);
    case braidInt32:
      return weightInts<int32_t, kAccumulate>(dst, src, count, weight);
    case braidUint32:
      return weightInts<uint32_t, kAccumulate>(dst, src, count, weight);
    case braidInt64:
      return weightInts<int64_t, kAccumulate>(dst, src, count, weight);
    case braidUint64:
      return weightInts<uint64_t, kAccumulate>(dst, src, count, weight);
    case braidFloat16:
      return weightNarrow<HalfCodec, kAccumulate>(dst, src, count, weight);
    case braidBfloat16:
      return weightNarrow<Bf16Codec, kAccumulate>(dst, src, count, weight);
    case braidFloat32:
      return weightFloats<float, kAccumulate>(dst, src, count, weight);
    case braidFloat64:
      return weightFloats<double, kAccumulate>(dst, src, count, weight);
    case braidNumTypes:
      break;
  }
}

}  // namespace

void scaleBy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight) {
  weighted<false>(dt, dst, src, count, weight);
}

void axpy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight) {
  weighted<true>(dt, dst, src, count, weight);
}

// ---- Datatypes -------------------------------------------------------------------------------------

// ---- Kernels ---------------------------------------------------------------------------------------

ReduceKernel reduceKernel(braidDataType_t dt, braidRedOp_t op) {
  // Hot path: called per chunk. Two compares and a load.
  if (static_cast<unsigned>(dt) >= braidNumTypes || static_cast<unsigned>(op) >= braidNumOps) return nullptr;
  return gActive.kernels[dt][op];
}

FoldStreamKernel foldStreamKernel(braidDataType_t dt, braidRedOp_t op) {
  if (static_cast<unsigned>(dt) >= braidNumTypes || static_cast<unsigned>(op) >= braidNumOps) return nullptr;
  return gActive.foldStreams[dt][op];
}

void reduce(braidDataType_t dt, braidRedOp_t op, void* out, const void* a, const void* b, size_t count) {
  // Callers validate dt and op at the API boundary; an invalid pair has no kernel and writes nothing.
  if (ReduceKernel kernel = reduceKernel(dt, op)) kernel(out, a, b, count);
}

void scaleDivide(braidDataType_t dt, void* buf, size_t count, int divisor) {
  // The divisor is a rank count (>= 1); dividing by 1 changes nothing, and smaller divisors have no
  // meaning for an average, so both leave the buffer as it is.
  if (divisor <= 1 || !validDtype(dt)) return;
  gActive.divides[dt](buf, count, divisor);
}

// ---- SIMD levels -----------------------------------------------------------------------------------

const char* simdLevelString(SimdLevel level) {
  const int index = static_cast<int>(level);
  return index >= 0 && index < kNumSimdLevels ? kSimdLevelNames[index] : "invalid";
}

const char* simdLevelName() { return simdLevelString(gActiveLevel); }

SimdLevel activeSimdLevel() { return gActiveLevel; }

bool simdLevelSupported(SimdLevel level) {
#if defined(__x86_64__)
  // __builtin_cpu_supports also checks that the OS saves the AVX/AVX-512 register state (XCR0).
  // cpu_init is required when this runs from a static initializer, before libgcc's own. F16C is
  // read from cpuid directly: not every compiler's __builtin_cpu_supports knows its name.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && f16c;
  switch (level) {
    case SimdLevel::kScalar:
      return true;
    case SimdLevel::kAvx2:
      return avx2;
    case SimdLevel::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return level == SimdLevel::kScalar;
#endif
}

bool knownSimdLevel(const char* cap) {
  for (int i = 0; i < kNumSimdLevels; ++i)
    if (strcasecmp(cap, kSimdLevelNames[i]) == 0) return true;
  return false;
}

SimdLevel selectSimdLevel(const char* cap) {
  int limit = kNumSimdLevels - 1;
  if (cap != nullptr) {
    for (int i = 0; i < kNumSimdLevels; ++i) {
      if (strcasecmp(cap, kSimdLevelNames[i]) == 0) limit = i;
    }
  }
  for (int i = limit; i > 0; --i) {
    if (simdLevelSupported(static_cast<SimdLevel>(i))) return static_cast<SimdLevel>(i);
  }
  return SimdLevel::kScalar;
}

ReduceKernel reduceKernelFor(SimdLevel level, braidDataType_t dt, braidRedOp_t op) {
  const int index = static_cast<int>(level);
  if (index < 0 || index >= kNumSimdLevels || !simdLevelSupported(level)) return nullptr;
  if (!validDtype(dt) || !validRedop(op)) return nullptr;
  return gLevelTables[index].kernels[dt][op];
}

FoldStreamKernel foldStreamKernelFor(SimdLevel level, braidDataType_t dt, braidRedOp_t op) {
  const int index = static_cast<int>(level);
  if (index < 0 || index >= kNumSimdLevels || !simdLevelSupported(level)) return nullptr;
  if (!validDtype(dt) || !validRedop(op)) return nullptr;
  return gLevelTables[index].foldStreams[dt][op];
}

DivideKernel divideKernelFor(SimdLevel level, braidDataType_t dt) {
  const int index = static_cast<int>(level);
  if (index < 0 || index >= kNumSimdLevels || !simdLevelSupported(level) || !validDtype(dt)) return nullptr;
  return gLevelTables[index].divides[dt];
}

}  // namespace braid
