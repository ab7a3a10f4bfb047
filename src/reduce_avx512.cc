// AVX-512 (F, BW, VL) reduction kernels: every datatype x {sum, prod, min, max}, and braidAvg's
// division of fp16 and bf16.
//
// Same structure and semantics as reduce_avx2.cc (see there and reduce.cc), with 512-bit vectors
// and the partial last vector done with masked loads and stores, which do not fault on the
// masked-off bytes. Function-level target attributes keep the rest of the binary baseline x86-64;
// reduce.cc installs these only when cpuid reports avx512f, avx512bw and avx512vl.
//
// 64-bit products use 32x32->64 multiplies rather than vpmullq, which would need AVX512DQ as well.
#include "src/reduce_internal.h"

#if defined(__x86_64__)

// GCC 12's AVX-512 intrinsics start from `_mm512_undefined_*()`, which -Wmaybe-uninitialized
// reports once per use (GCC bug 105593, fixed in GCC 13). The warning must be off where those
// header lines are, hence before the include; it is restored at the end of this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#define BRAID_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))
#define BRAID_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"), always_inline)) inline

namespace braid {
namespace {

// ---- Lane operations -------------------------------------------------------------------------------

// vminps(a, b) is `a < b ? a : b`; where `a` is NaN, `a` is put back (see reduce.cc).
template <braidRedOp_t kOp>
BRAID_AVX512_INLINE __m512 opPs(__m512 a, __m512 b) {
  if constexpr (kOp == braidSum) return _mm512_add_ps(a, b);
  if constexpr (kOp == braidProd) return _mm512_mul_ps(a, b);
  if constexpr (kOp == braidMin)
    return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
  if constexpr (kOp == braidMax)
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a);
}

template <braidRedOp_t kOp>
BRAID_AVX512_INLINE __m512d opPd(__m512d a, __m512d b) {
  if constexpr (kOp == braidSum) return _mm512_add_pd(a, b);
  if constexpr (kOp == braidProd) return _mm512_mul_pd(a, b);
  if constexpr (kOp == braidMin)
    return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
  if constexpr (kOp == braidMax)
    return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a);
}

// Low bytes of byte products from two 16-bit multiplies (even bytes, then the odd ones shifted).
BRAID_AVX512_INLINE __m512i mul8(__m512i a, __m512i b) {
  const __m512i even = _mm512_mullo_epi16(a, b);
  const __m512i odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
  return _mm512_or_si512(_mm512_and_si512(even, _mm512_set1_epi16(0x00ff)), _mm512_slli_epi16(odd, 8));
}

// Low 64 bits of 64-bit products: lo*lo + ((lo*hi + hi*lo) << 32).
BRAID_AVX512_INLINE __m512i mul64(__m512i a, __m512i b) {
  const __m512i low = _mm512_mul_epu32(a, b);
  const __m512i cross =
      _mm512_add_epi64(_mm512_mul_epu32(a, _mm512_srli_epi64(b, 32)), _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b));
  return _mm512_add_epi64(low, _mm512_slli_epi64(cross, 32));
}

template <class T, braidRedOp_t kOp>
BRAID_AVX512_INLINE __m512i opInt(__m512i a, __m512i b) {
  constexpr bool kSigned = std::is_signed_v<T>;
  constexpr size_t kBytes = sizeof(T);
  if constexpr (kOp == braidSum) {
    if constexpr (kBytes == 1) return _mm512_add_epi8(a, b);
    if constexpr (kBytes == 4) return _mm512_add_epi32(a, b);
    if constexpr (kBytes == 8) return _mm512_add_epi64(a, b);
  } else if constexpr (kOp == braidProd) {
    if constexpr (kBytes == 1) return mul8(a, b);
    if constexpr (kBytes == 4) return _mm512_mullo_epi32(a, b);
    if constexpr (kBytes == 8) return mul64(a, b);
  } else if constexpr (kOp == braidMin) {
    if constexpr (kBytes == 1) return kSigned ? _mm512_min_epi8(a, b) : _mm512_min_epu8(a, b);
    if constexpr (kBytes == 4) return kSigned ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b);
    if constexpr (kBytes == 8) return kSigned ? _mm512_min_epi64(a, b) : _mm512_min_epu64(a, b);
  } else if constexpr (kOp == braidMax) {
    if constexpr (kBytes == 1) return kSigned ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
    if constexpr (kBytes == 4) return kSigned ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b);
    if constexpr (kBytes == 8) return kSigned ? _mm512_max_epi64(a, b) : _mm512_max_epu64(a, b);
  }
}

// fp32 lanes -> bf16 in the upper 16 bits of each lane, nearest even; NaNs quieted, payload kept.
BRAID_AVX512_INLINE __m512i roundToBf16(__m512 r) {
  const __m512i bits = _mm512_castps_si512(r);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  return _mm512_mask_or_epi32(rounded, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), bits, _mm512_set1_epi32(0x00400000));
}

// ---- One vector's worth of each datatype -----------------------------------------------------------
// run(out, a, b) does kWidth elements; run(out, a, b, mask) only the lanes in `mask` (the tail).

template <braidRedOp_t kOp>
struct F32 {
  using T = float;
  using Mask = __mmask16;
  static constexpr size_t kWidth = 16;
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b, Mask m) {
    _mm512_mask_storeu_ps(out, m, opPs<kOp>(_mm512_maskz_loadu_ps(m, a), _mm512_maskz_loadu_ps(m, b)));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b) {
    _mm512_storeu_ps(out, opPs<kOp>(_mm512_loadu_ps(a), _mm512_loadu_ps(b)));
  }
};

template <braidRedOp_t kOp>
struct F64 {
  using T = double;
  using Mask = __mmask8;
  static constexpr size_t kWidth = 8;
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b, Mask m) {
    _mm512_mask_storeu_pd(out, m, opPd<kOp>(_mm512_maskz_loadu_pd(m, a), _mm512_maskz_loadu_pd(m, b)));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b) {
    _mm512_storeu_pd(out, opPd<kOp>(_mm512_loadu_pd(a), _mm512_loadu_pd(b)));
  }
};

// fp16: vcvtph2ps widens exactly; vcvtps2ph rounds to nearest even (immediate), overflows to
// infinity and quiets NaNs.
template <braidRedOp_t kOp>
struct F16 {
  using T = uint16_t;
  using Mask = __mmask16;
  static constexpr size_t kWidth = 16;
  BRAID_AVX512_INLINE static __m256i compute(__m256i x, __m256i y) {
    return _mm512_cvtps_ph(opPs<kOp>(_mm512_cvtph_ps(x), _mm512_cvtph_ps(y)), _MM_FROUND_TO_NEAREST_INT);
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b, Mask m) {
    _mm256_mask_storeu_epi16(out, m, compute(_mm256_maskz_loadu_epi16(m, a), _mm256_maskz_loadu_epi16(m, b)));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), compute(x, y));
  }
};

// bf16: widen the even element of each 32-bit lane by a shift and the odd one by masking, reduce
// in fp32, round, and put both halves back in place (see reduce_avx2.cc).
template <braidRedOp_t kOp>
struct Bf16 {
  using T = uint16_t;
  using Mask = __mmask32;
  static constexpr size_t kWidth = 32;
  BRAID_AVX512_INLINE static __m512i compute(__m512i x, __m512i y) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const __m512 evenR =
        opPs<kOp>(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
    const __m512 oddR =
        opPs<kOp>(_mm512_castsi512_ps(_mm512_and_si512(x, high)), _mm512_castsi512_ps(_mm512_and_si512(y, high)));
    return _mm512_or_si512(_mm512_srli_epi32(roundToBf16(evenR), 16), _mm512_and_si512(roundToBf16(oddR), high));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b, Mask m) {
    _mm512_mask_storeu_epi16(out, m, compute(_mm512_maskz_loadu_epi16(m, a), _mm512_maskz_loadu_epi16(m, b)));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b) {
    _mm512_storeu_si512(out, compute(_mm512_loadu_si512(a), _mm512_loadu_si512(b)));
  }
};

template <class Int, braidRedOp_t kOp>
struct Ints {
  using T = Int;
  static constexpr size_t kWidth = 64 / sizeof(Int);
  // One mask bit per element: 64, 16 or 8 of them.
  using Mask =
      std::conditional_t<sizeof(Int) == 1, __mmask64, std::conditional_t<sizeof(Int) == 4, __mmask16, __mmask8>>;
  BRAID_AVX512_INLINE static __m512i load(Mask m, const T* p) {
    if constexpr (sizeof(Int) == 1) return _mm512_maskz_loadu_epi8(m, p);
    if constexpr (sizeof(Int) == 4) return _mm512_maskz_loadu_epi32(m, p);
    if constexpr (sizeof(Int) == 8) return _mm512_maskz_loadu_epi64(m, p);
  }
  BRAID_AVX512_INLINE static void store(T* p, Mask m, __m512i v) {
    if constexpr (sizeof(Int) == 1) _mm512_mask_storeu_epi8(p, m, v);
    if constexpr (sizeof(Int) == 4) _mm512_mask_storeu_epi32(p, m, v);
    if constexpr (sizeof(Int) == 8) _mm512_mask_storeu_epi64(p, m, v);
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b, Mask m) {
    store(out, m, opInt<Int, kOp>(load(m, a), load(m, b)));
  }
  BRAID_AVX512_INLINE static void run(T* out, const T* a, const T* b) {
    _mm512_storeu_si512(out, opInt<Int, kOp>(_mm512_loadu_si512(a), _mm512_loadu_si512(b)));
  }
};

// ---- The streaming loop ----------------------------------------------------------------------------

template <class Step>
BRAID_AVX512 void streamKernel(void* out, const void* a, const void* b, size_t count) {
  using T = typename Step::T;
  using Mask = typename Step::Mask;
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
    // 0 < count - i < kWidth <= 64: the shift is defined.
    const Mask mask = static_cast<Mask>((uint64_t{1} << (count - i)) - 1);
    Step::run(o + i, x + i, y + i, mask);
  }
}

// ---- braidAvg's division, fp16 and bf16 ------------------------------------------------------------
// As reduce_avx2.cc's, sixteen lanes a vector: its fp16 and bf16 divisions ran at 14-50 GB/s in L1
// and L2 on the AMD VM against 30-35 GB/s for the sum kernels here. The other types keep AVX2's
// (those are past the sum kernels' speed already).

BRAID_AVX512_INLINE __m512 divide(__m512 v, const Divisor& by) {
  const __m512 s = _mm512_set1_ps(by.f);
  return by.exact ? _mm512_mul_ps(v, s) : _mm512_div_ps(v, s);
}

struct DivF16 {
  using T = uint16_t;
  static constexpr size_t kWidth = 16;
  using By = Divisor;
  BRAID_AVX512_INLINE static void run(T* p, size_t n, const Divisor& by) {
    for (size_t i = 0; i < n; i += kWidth) {
      __m256i* at = reinterpret_cast<__m256i*>(p + i);
      const __m512 q = divide(_mm512_cvtph_ps(_mm256_loadu_si256(at)), by);
      _mm256_storeu_si256(at, _mm512_cvtps_ph(q, _MM_FROUND_TO_NEAREST_INT));
    }
  }
};

struct DivBf16 {
  using T = uint16_t;
  static constexpr size_t kWidth = 32;
  using By = Divisor;
  BRAID_AVX512_INLINE static void run(T* p, size_t n, const Divisor& by) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (size_t i = 0; i < n; i += kWidth) {
      void* at = p + i;
      const __m512i x = _mm512_loadu_si512(at);
      const __m512 evenQ = divide(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), by);
      const __m512 oddQ = divide(_mm512_castsi512_ps(_mm512_and_si512(x, high)), by);
      _mm512_storeu_si512(
          at, _mm512_or_si512(_mm512_srli_epi32(roundToBf16(evenQ), 16), _mm512_and_si512(roundToBf16(oddQ), high)));
    }
  }
};

// ---- The fold to several outputs -------------------------------------------------------------------

#define BRAID_FOLD_TARGET BRAID_AVX512
#include "src/reduce_fold.inc"
#undef BRAID_FOLD_TARGET

template <template <braidRedOp_t> class Step>
void fillRow(KernelTable& table, braidDataType_t dt) {
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

void fillAvx512Kernels(KernelTable& table) {
  fillRow<I8>(table, braidInt8);
  fillRow<U8>(table, braidUint8);
  fillRow<I32>(table, braidInt32);
  fillRow<U32>(table, braidUint32);
  fillRow<I64>(table, braidInt64);
  fillRow<U64>(table, braidUint64);
  fillRow<F16>(table, braidFloat16);
  fillRow<Bf16>(table, braidBfloat16);
  fillRow<F32>(table, braidFloat32);
  fillRow<F64>(table, braidFloat64);
  table.foldStreams[braidFloat16][braidAvg] = &foldStreamKernel<F16<braidSum>, DivF16>;
  table.divides[braidFloat16] = &divideKernel<DivF16>;
  table.foldStreams[braidBfloat16][braidAvg] = &foldStreamKernel<Bf16<braidSum>, DivBf16>;
  table.divides[braidBfloat16] = &divideKernel<DivBf16>;
}

}  // namespace braid

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#else  // !defined(__x86_64__)

namespace braid {
void fillAvx512Kernels(KernelTable&) {}
}  // namespace braid

#endif
