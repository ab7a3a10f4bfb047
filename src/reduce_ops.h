// One element of each reduction, scaling and weighting, as the CPU kernels (src/reduce.cc) and the
// CUDA kernels (src/cuda/kernels.cu) both compute it: one definition, so the two agree bit for bit.
// The semantics are described at the top of src/reduce.cc. Under nvcc these are host and device
// functions; float multiplies and adds use the _rn intrinsics there, which nvcc never contracts
// into a fused multiply-add (the CPU code rounds the product and the sum separately).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "braid/braid.h"
#include "src/base/half.h"  // BRAID_HOST_DEVICE, the fp16/bf16 conversions

namespace braid {

template <braidRedOp_t kOp, class T>
BRAID_HOST_DEVICE inline T applyOp(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // Wrap around: compute in an unsigned type at least as wide as unsigned int, so that neither
    // signed overflow nor promotion of small types to int can happen.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    if constexpr (kOp == braidSum) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (kOp == braidProd) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if constexpr (kOp == braidMin) return a < b ? a : b;
    if constexpr (kOp == braidMax) return a > b ? a : b;
  } else {
    if constexpr (kOp == braidSum) return a + b;
    if constexpr (kOp == braidProd) return a * b;
    // `a != a` is the NaN test; see src/reduce.cc for why `a` wins.
    if constexpr (kOp == braidMin) return (a != a) ? a : (a < b ? a : b);
    if constexpr (kOp == braidMax) return (a != a) ? a : (a > b ? a : b);
  }
}

struct HalfCodec {
  BRAID_HOST_DEVICE static float widen(uint16_t v) { return halfToFloat(v); }
  BRAID_HOST_DEVICE static uint16_t narrow(float f) { return floatToHalf(f); }
};

struct Bf16Codec {
  BRAID_HOST_DEVICE static float widen(uint16_t v) { return bf16ToFloat(v); }
  BRAID_HOST_DEVICE static uint16_t narrow(float f) { return floatToBf16(f); }
};

// a * b and a + b, each rounded once to nearest even.
template <class T>
BRAID_HOST_DEVICE inline T mulRounded(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return __fmul_rn(a, b);
  if constexpr (std::is_same_v<T, double>) return __dmul_rn(a, b);
#endif
  return a * b;
}

template <class T>
BRAID_HOST_DEVICE inline T addRounded(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return __fadd_rn(a, b);
  if constexpr (std::is_same_v<T, double>) return __dadd_rn(a, b);
#endif
  return a + b;
}

// v / divisor for braidAvg: integers truncate toward zero in a type wide enough for both operands
// (the quotient's magnitude is at most v's, so the cast back is exact); floats divide in their own
// precision. fp16/bf16 go through divideNarrowElem.
template <class T>
BRAID_HOST_DEVICE inline T divideElem(T v, int divisor) {
  if constexpr (std::is_integral_v<T>) {
    using Wide = std::conditional_t<std::is_signed_v<T>, std::conditional_t<(sizeof(T) <= 4), int32_t, int64_t>,
                                    std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>>;
    return static_cast<T>(static_cast<Wide>(v) / static_cast<Wide>(divisor));
  } else {
    return v / static_cast<T>(divisor);
  }
}

// fp32 division then rounding to fp16/bf16 is correctly rounded (fp32 has >= 2p+2 bits).
template <class Codec>
BRAID_HOST_DEVICE inline uint16_t divideNarrowElem(uint16_t v, int divisor) {
  return Codec::narrow(Codec::widen(v) / static_cast<float>(divisor));
}

// The weighted steps of gossip plans, one element: weight * s, plus d when kAccumulate.
// Floats compute in their own precision (the weight rounded to it once, by the caller).
template <class T, bool kAccumulate>
BRAID_HOST_DEVICE inline T weightFloat(T d, T s, T w) {
  const T x = mulRounded(w, s);
  return kAccumulate ? addRounded(d, x) : x;
}

template <class Codec, bool kAccumulate>
BRAID_HOST_DEVICE inline uint16_t weightNarrowElem(uint16_t d, uint16_t s, float w) {
  const float x = mulRounded(w, Codec::widen(s));
  return Codec::narrow(kAccumulate ? addRounded(Codec::widen(d), x) : x);
}

// Integers (no gossip plan uses them; defined so that a forced algorithm cannot reach undefined
// behaviour) compute in double and round to nearest even, saturating at the type's range. Clamped in
// double before the conversion: converting an out-of-range double is undefined. The bounds of 64-bit
// types round up to 2^63 / 2^64 in double, hence the >= test for the top.
template <class T, bool kAccumulate>
BRAID_HOST_DEVICE inline T weightInt(T d, T s, double weight) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  double v = mulRounded(weight, static_cast<double>(s));
  if constexpr (kAccumulate) v = addRounded(v, static_cast<double>(d));
  v = ::nearbyint(v);
  if (!(v > lo)) return std::numeric_limits<T>::min();  // NaN cannot happen (finite weights); it would land here
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace braid
