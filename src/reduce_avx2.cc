// AVX2 (+F16C) reduction kernels: every datatype x {sum, prod, min, max}, and braidAvg's division.
//
// Built with function-level target attributes, never a file-wide `#pragma GCC target`: inline
// functions from headers must stay baseline x86-64, or the linker could keep an AVX2 copy of one
// for the whole program. reduce.cc installs these only when cpuid reports avx2 and f16c.
//
// Each kernel streams out[i] = a[i] op b[i]: four unaligned 256-bit vectors per iteration (enough
// independent loads in flight to stay memory-bound), then one vector at a time, then the last
// partial vector through a zero-padded stack buffer, so the tail takes the very same vector code.
// A vector is loaded in full before its result is stored, so out == a or out == b is fine.
// Semantics (wraparound, NaN handling of min/max, rounding) are the scalar ones of reduce.cc.
#include "src/reduce_internal.h"
#include "src/reduce_ops.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#define BRAID_AVX2 __attribute__((target("avx2,f16c")))
#define BRAID_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

namespace braid {
namespace {

// ---- Lane operations -------------------------------------------------------------------------------

// vminps(a, b) is `a < b ? a : b` (it returns b when either is NaN or both are zero); putting `a`
// back where `a` is NaN makes any NaN input give a NaN, as the scalar kernels do.
template <braidRedOp_t kOp>
BRAID_AVX2_INLINE __m256 opPs(__m256 a, __m256 b) {
  if constexpr (kOp == braidSum) return _mm256_add_ps(a, b);
  if constexpr (kOp == braidProd) return _mm256_mul_ps(a, b);
  if constexpr (kOp == braidMin) return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  if constexpr (kOp == braidMax) return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}

template <braidRedOp_t kOp>
BRAID_AVX2_INLINE __m256d opPd(__m256d a, __m256d b) {
  if constexpr (kOp == braidSum) return _mm256_add_pd(a, b);
  if constexpr (kOp == braidProd) return _mm256_mul_pd(a, b);
  if constexpr (kOp == braidMin) return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  if constexpr (kOp == braidMax) return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
}

// Low 8 bits of byte products: the low byte of a 16-bit product depends only on the low bytes of
// the factors, so one 16-bit multiply gives the even bytes and one of the shifted words the odd.
BRAID_AVX2_INLINE __m256i mul8(__m256i a, __m256i b) {
  const __m256i even = _mm256_mullo_epi16(a, b);
  const __m256i odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
  return _mm256_or_si256(_mm256_and_si256(even, _mm256_set1_epi16(0x00ff)), _mm256_slli_epi16(odd, 8));
}

// Low 64 bits of 64-bit products from 32x32->64 multiplies: lo*lo + ((lo*hi + hi*lo) << 32).
BRAID_AVX2_INLINE __m256i mul64(__m256i a, __m256i b) {
  const __m256i low = _mm256_mul_epu32(a, b);
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)), _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// a > b per 64-bit lane; AVX2 compares signed only, so unsigned lanes are biased by 2^63 first.
template <bool kSigned>
BRAID_AVX2_INLINE __m256i greater64(__m256i a, __m256i b) {
  if constexpr (kSigned) {
    return _mm256_cmpgt_epi64(a, b);
  } else {
    const __m256i bias = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
  }
}

template <class T, braidRedOp_t kOp>
BRAID_AVX2_INLINE __m256i opInt(__m256i a, __m256i b) {
  constexpr bool kSigned = std::is_signed_v<T>;
  constexpr size_t kBytes = sizeof(T);
  // Sums and products are the same bits for signed and unsigned lanes (wraparound).
  if constexpr (kOp == braidSum) {
    if constexpr (kBytes == 1) return _mm256_add_epi8(a, b);
    if constexpr (kBytes == 4) return _mm256_add_epi32(a, b);
    if constexpr (kBytes == 8) return _mm256_add_epi64(a, b);
  } else if constexpr (kOp == braidProd) {
    if constexpr (kBytes == 1) return mul8(a, b);
    if constexpr (kBytes == 4) return _mm256_mullo_epi32(a, b);
    if constexpr (kBytes == 8) return mul64(a, b);
  } else if constexpr (kOp == braidMin) {
    if constexpr (kBytes == 1) return kSigned ? _mm256_min_epi8(a, b) : _mm256_min_epu8(a, b);
    if constexpr (kBytes == 4) return kSigned ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b);
    if constexpr (kBytes == 8) return _mm256_blendv_epi8(a, b, greater64<kSigned>(a, b));
  } else if constexpr (kOp == braidMax) {
    if constexpr (kBytes == 1) return kSigned ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
    if constexpr (kBytes == 4) return kSigned ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b);
    if constexpr (kBytes == 8) return _mm256_blendv_epi8(b, a, greater64<kSigned>(a, b));
  }
}

// fp32 lanes -> bf16 in the upper 16 bits of each lane, rounded to nearest even; NaN stays NaN
// (quiet bit set, payload kept), as floatToBf16 does.
BRAID_AVX2_INLINE __m256i roundToBf16(__m256 r) {
  const __m256i bits = _mm256_castps_si256(r);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(r, r, _CMP_UNORD_Q)));
}

// ---- One vector's worth of each datatype -----------------------------------------------------------

template <braidRedOp_t kOp>
struct F32 {
  using T = float;
  static constexpr size_t kWidth = 8;
  BRAID_AVX2_INLINE static void run(T* out, const T* a, const T* b) {
    _mm256_storeu_ps(out, opPs<kOp>(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
  }
};

template <braidRedOp_t kOp>
struct F64 {
  using T = double;
  static constexpr size_t kWidth = 4;
  BRAID_AVX2_INLINE static void run(T* out, const T* a, const T* b) {
    _mm256_storeu_pd(out, opPd<kOp>(_mm256_loadu_pd(a), _mm256_loadu_pd(b)));
  }
};

// fp16: F16C widens exactly; vcvtps2ph rounds with the immediate's mode (nearest even here,
// whatever MXCSR says), overflows to infinity and quiets NaNs.
template <braidRedOp_t kOp>
struct F16 {
  using T = uint16_t;
  static constexpr size_t kWidth = 8;
  BRAID_AVX2_INLINE static void run(T* out, const T* a, const T* b) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(opPs<kOp>(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
};

// bf16 is the top half of an fp32: within each 32-bit lane, shifting the even element up or
// masking off the odd element's partner widens it exactly, with no shuffles. Results are put back
// in the same places. (AVX512_BF16's vcvtne2ps2bf16 is not used: it flushes subnormals to zero.)
template <braidRedOp_t kOp>
struct Bf16 {
  using T = uint16_t;
  static constexpr size_t kWidth = 16;
  BRAID_AVX2_INLINE static void run(T* out, const T* a, const T* b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256 evenR =
        opPs<kOp>(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(y, 16)));
    const __m256 oddR =
        opPs<kOp>(_mm256_castsi256_ps(_mm256_and_si256(x, high)), _mm256_castsi256_ps(_mm256_and_si256(y, high)));
    const __m256i even = _mm256_srli_epi32(roundToBf16(evenR), 16);
    const __m256i odd = _mm256_and_si256(roundToBf16(oddR), high);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_or_si256(even, odd));
  }
};

template <class Int, braidRedOp_t kOp>
struct Ints {
  using T = Int;
  static constexpr size_t kWidth = 32 / sizeof(Int);
  BRAID_AVX2_INLINE static void run(T* out, const T* a, const T* b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), opInt<Int, kOp>(x, y));
  }
};

// ---- The streaming loop ----------------------------------------------------------------------------

template <class Step>
BRAID_AVX2 void streamKernel(void* out, const void* a, const void* b, size_t count) {
  using T = typename Step::T;
  constexpr size_t kWidth = Step::kWidth;
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  size_t i = 0;
  for (; i + 4 * kWidth <= count; i += 4 * kWidth) {
    Step::run(o + i, x + i, y + i);
    Step::run(o + i + kWidth, x + i + kWidth, y + i + kWidth);
    Step::run(o + i + 2 * kWidth, x + i + 2 * kWidth, y + i + 2 * kWidth);
    Step::run(o + i + 3 * kWidth, x + i + 3 * kWidth, y + i + 3 * kWidth);
  }
  for (; i + kWidth <= count; i += kWidth) Step::run(o + i, x + i, y + i);
  if (i < count) {
    // Zero padding keeps the unused lanes' inputs defined; their results are dropped.
    const size_t bytes = (count - i) * sizeof(T);
    T tx[kWidth] = {};
    T ty[kWidth] = {};
    T to[kWidth];
    std::memcpy(tx, x + i, bytes);
    std::memcpy(ty, y + i, bytes);
    Step::run(to, tx, ty);
    std::memcpy(o + i, to, bytes);
  }
}

// ---- braidAvg's division ---------------------------------------------------------------------------
// v / n in every lane, the bits of divideElem and divideNarrowElem (src/reduce_ops.h): floats divide
// in their own precision, fp16 and bf16 in fp32 and are then rounded as the Steps round; 8- and
// 32-bit integers in double (exact, below), 64-bit ones one at a time. A power-of-two n multiplies by
// its reciprocal (Divisor, src/reduce_internal.h). The plain loop of the scalar level (SSE width for fp32, one
// element at a time for fp16 and bf16) took 44% of a 2-rank avg AllReduce of fp32 on braidMemAlloc
// memory at 1 MiB (perf record), more than the fold; fp16 and bf16 divided at 1-3 GB/s.

struct DivF32 {
  using T = float;
  using By = Divisor;
  static constexpr size_t kWidth = 8;
  BRAID_AVX2_INLINE static __m256 apply(__m256 v, const Divisor& by) {
    const __m256 s = _mm256_set1_ps(by.f);
    return by.exact ? _mm256_mul_ps(v, s) : _mm256_div_ps(v, s);
  }
  BRAID_AVX2_INLINE static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; i += kWidth) _mm256_storeu_ps(p + i, apply(_mm256_loadu_ps(p + i), by));
  }
};

// v / n in four double lanes (fp64, and the integers below).
BRAID_AVX2_INLINE __m256d divideDoubles(__m256d v, const Divisor& by) {
  const __m256d s = _mm256_set1_pd(by.d);
  return by.exact ? _mm256_mul_pd(v, s) : _mm256_div_pd(v, s);
}

struct DivF64 {
  using T = double;
  using By = Divisor;
  static constexpr size_t kWidth = 4;
  BRAID_AVX2_INLINE static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; i += kWidth) _mm256_storeu_pd(p + i, divideDoubles(_mm256_loadu_pd(p + i), by));
  }
};

struct DivF16 {
  using T = uint16_t;
  using By = Divisor;
  static constexpr size_t kWidth = 8;
  BRAID_AVX2_INLINE static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; i += kWidth) {
      __m128i* at = reinterpret_cast<__m128i*>(p + i);
      const __m256 q = DivF32::apply(_mm256_cvtph_ps(_mm_loadu_si128(at)), by);
      _mm_storeu_si128(at, _mm256_cvtps_ph(q, _MM_FROUND_TO_NEAREST_INT));
    }
  }
};

// Widened and put back in place as the Bf16 Step does.
struct DivBf16 {
  using T = uint16_t;
  using By = Divisor;
  static constexpr size_t kWidth = 16;
  BRAID_AVX2_INLINE static void run(T* p, size_t n, const Divisor& by) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (size_t i = 0; i < n; i += kWidth) {
      __m256i* at = reinterpret_cast<__m256i*>(p + i);
      const __m256i x = _mm256_loadu_si256(at);
      const __m256 evenQ = DivF32::apply(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), by);
      const __m256 oddQ = DivF32::apply(_mm256_castsi256_ps(_mm256_and_si256(x, high)), by);
      const __m256i even = _mm256_srli_epi32(roundToBf16(evenQ), 16);
      _mm256_storeu_si256(at, _mm256_or_si256(even, _mm256_and_si256(roundToBf16(oddQ), high)));
    }
  }
};

// 64-bit integers: one element at a time.
template <class Int>
struct DivInt {
  using T = Int;
  using By = Divisor;
  static constexpr size_t kWidth = 1;
  static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; ++i) p[i] = divideElem(p[i], by.n);
  }
};

// 8- and 32-bit integers, eight a vector, in double (divideDoubles): for |v| < 2^53 the double
// quotient's rounding error (at most 2^-53 |v| / n) is less than the 1/n that separates a quotient
// that is not whole from the next whole number, so truncating it gives the integer quotient
// (truncated toward zero, as divideElem does); a power-of-two n scales exactly. Unsigned 32-bit
// lanes go biased by 2^31 through the signed conversions and are floored, not truncated, on the way
// back.

// Four signed 32-bit lanes' quotients, truncated.
BRAID_AVX2_INLINE __m128i divideSigned4(__m128i v, const Divisor& by) {
  return _mm256_cvttpd_epi32(divideDoubles(_mm256_cvtepi32_pd(v), by));
}

// The same for four unsigned lanes given as v - 2^31 (signed), returned the same way: the quotient
// floored, less 2^31 (exact: both are whole numbers below 2^32 in magnitude).
BRAID_AVX2_INLINE __m128i divideBiased4(__m128i v, const Divisor& by) {
  const __m256d half = _mm256_set1_pd(2147483648.0);
  const __m256d q = divideDoubles(_mm256_add_pd(_mm256_cvtepi32_pd(v), half), by);
  return _mm256_cvttpd_epi32(_mm256_sub_pd(_mm256_floor_pd(q), half));
}

template <bool kSigned>
BRAID_AVX2_INLINE __m256i divide32(__m256i x, const Divisor& by) {
  if constexpr (kSigned) {
    return _mm256_set_m128i(divideSigned4(_mm256_extracti128_si256(x, 1), by),
                            divideSigned4(_mm256_castsi256_si128(x), by));
  } else {
    const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    const __m256i b = _mm256_xor_si256(x, bias);  // x - 2^31 as a signed lane
    const __m256i q = _mm256_set_m128i(divideBiased4(_mm256_extracti128_si256(b, 1), by),
                                       divideBiased4(_mm256_castsi256_si128(b), by));
    return _mm256_xor_si256(q, bias);
  }
}

template <class Int>
struct DivSmallInt {
  static_assert(sizeof(Int) == 1 || sizeof(Int) == 4);
  using T = Int;
  using By = Divisor;
  static constexpr size_t kWidth = 8;
  BRAID_AVX2_INLINE static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; i += kWidth) {
      if constexpr (sizeof(Int) == 4) {
        __m256i* at = reinterpret_cast<__m256i*>(p + i);
        _mm256_storeu_si256(at, divide32<std::is_signed_v<Int>>(_mm256_loadu_si256(at), by));
      } else {
        // Widened to 32-bit lanes (the quotients fit the type again), then narrowed with saturating
        // packs that never saturate.
        __m128i* at = reinterpret_cast<__m128i*>(p + i);
        const __m128i bytes = _mm_loadl_epi64(at);
        const __m256i wide = std::is_signed_v<Int> ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
        const __m256i q = divide32<true>(wide, by);
        const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64(at, std::is_signed_v<Int> ? _mm_packs_epi16(words, words) : _mm_packus_epi16(words, words));
      }
    }
  }
};

// ---- The fold to several outputs -------------------------------------------------------------------

#define BRAID_FOLD_TARGET BRAID_AVX2
#include "src/reduce_fold.inc"
#undef BRAID_FOLD_TARGET

// Every op of one datatype, and braidAvg's fold (Step's sum, then Div on each line) and division.
template <template <braidRedOp_t> class Step, class Div>
void fillRow(KernelTable& table, braidDataType_t dt) {
  static_assert(Step<braidSum>::kWidth % Div::kWidth == 0 &&
                std::is_same_v<typename Step<braidSum>::T, typename Div::T>);
  table.foldStreams[dt][braidAvg] = &foldStreamKernel<Step<braidSum>, Div>;
  table.divides[dt] = &divideKernel<Div>;
  table.kernels[dt][braidSum] = &streamKernel<Step<braidSum>>;
  table.foldStreams[dt][braidSum] = &foldStreamKernel<Step<braidSum>>;
  table.kernels[dt][braidProd] = &streamKernel<Step<braidProd>>;
  table.foldStreams[dt][braidProd] = &foldStreamKernel<Step<braidProd>>;
  table.kernels[dt][braidMin] = &streamKernel<Step<braidMin>>;
  table.foldStreams[dt][braidMin] = &foldStreamKernel<Step<braidMin>>;
  table.kernels[dt][braidMax] = &streamKernel<Step<braidMax>>;
  table.foldStreams[dt][braidMax] = &foldStreamKernel<Step<braidMax>>;
}

template <braidRedOp_t kOp>
using I8 = Ints<int8_t, kOp>;
template <braidRedOp_t kOp>
using U8 = Ints<uint8_t, kOp>;
template <braidRedOp_t kOp>
using I32 = Ints<int32_t, kOp>;
template <braidRedOp_t kOp>
using U32 = Ints<uint32_t, kOp>;
template <braidRedOp_t kOp>
using I64 = Ints<int64_t, kOp>;
template <braidRedOp_t kOp>
using U64 = Ints<uint64_t, kOp>;

}  // namespace

void fillAvx2Kernels(KernelTable& table) {
  fillRow<I8, DivSmallInt<int8_t>>(table, braidInt8);
  fillRow<U8, DivSmallInt<uint8_t>>(table, braidUint8);
  fillRow<I32, DivSmallInt<int32_t>>(table, braidInt32);
  fillRow<U32, DivSmallInt<uint32_t>>(table, braidUint32);
  fillRow<I64, DivInt<int64_t>>(table, braidInt64);
  fillRow<U64, DivInt<uint64_t>>(table, braidUint64);
  fillRow<F16, DivF16>(table, braidFloat16);
  fillRow<Bf16, DivBf16>(table, braidBfloat16);
  fillRow<F32, DivF32>(table, braidFloat32);
  fillRow<F64, DivF64>(table, braidFloat64);
}

}  // namespace braid

#else  // !defined(__x86_64__)

namespace braid {
void fillAvx2Kernels(KernelTable&) {}
}  // namespace braid

#endif
