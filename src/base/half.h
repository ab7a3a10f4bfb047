// fp16 / bf16 <-> fp32, round to nearest even, NaN preserved (quiet), overflow to infinity.
// Header-only and stateless, so that code outside libbraid (the NCCL shim) converts exactly as
// the reduction kernels do. Baseline x86-64 code: the SIMD files use function-level target
// attributes only, so no vectorized copy of these inline functions can reach the linker.
#pragma once

#include <bit>
#include <cstdint>

// The CUDA kernels (src/cuda/kernels.cu) convert with these same functions, so device and CPU
// results agree bit for bit: under nvcc they are host and device functions.
#if defined(__CUDACC__)
#define BRAID_HOST_DEVICE __host__ __device__
#else
#define BRAID_HOST_DEVICE
#endif

namespace braid {

BRAID_HOST_DEVICE inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}

BRAID_HOST_DEVICE inline float bitsFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  return std::bit_cast<float>(bits);
#endif
}

BRAID_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    // Infinity, or NaN with its payload kept and the quiet bit set.
    bits = sign | 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: mantissa * 2^-24. Shift the leading one up to the implicit bit's place.
    uint32_t e = 127 - 14;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return bitsFloat(bits);
}

BRAID_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  const uint32_t bits = floatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {
    // NaN: quiet, top of the payload kept (what vcvtps2ph does).
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 = 0x477ff000 is halfway between 65504 (the largest half, odd mantissa) and 65536: ties
  // go to even, i.e. to infinity. Infinity itself lands here too.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {
    // Normal half (>= 2^-14): rebias the exponent by 127 - 15 and round the 13 dropped bits to
    // nearest even. A carry out of the mantissa correctly bumps the exponent.
    const uint32_t rebased = magnitude - ((127u - 15u) << 23);
    return static_cast<uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
  }
  // Subnormal half: the result is round(f * 2^24) units of 2^-24. Up to 2^-25 (a tie between 0
  // and the smallest subnormal, going to even) it is zero.
  if (magnitude <= 0x33000000u) return sign;
  const uint32_t exponent = magnitude >> 23;                      // 102..112 here
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;  // value = mantissa * 2^(exponent-150)
  const uint32_t shift = 126u - exponent;                         // 14..24
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  uint32_t units = mantissa >> shift;
  if (rest > half || (rest == half && (units & 1u) != 0)) ++units;  // 1024 units encodes 2^-14: fine
  return static_cast<uint16_t>(sign | units);
}

BRAID_HOST_DEVICE inline float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;  // NaN: quiet it
  return bitsFloat(bits);
}

BRAID_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  const uint32_t bits = floatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits | 0x00400000u) >> 16);
  // Round the low 16 bits to nearest even. Values from halfway above the largest bf16 carry into
  // the exponent and become infinity; subnormals round on the same grid with no special case.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace braid
