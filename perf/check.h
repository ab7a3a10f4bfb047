// Filling inputs and checking outputs of the *_perf benchmarks, for every datatype.
//
// The fp16/bf16 conversions here are written apart from the library's own on purpose: they are
// the reference the library is checked against. Inputs are small integers, which convert exactly.
#ifndef BRAID_PERF_CHECK_H_
#define BRAID_PERF_CHECK_H_

#include <cstddef>
#include <cstdint>

#include "common.h"

namespace braid::perf {

// Fills recvbuff before a check run and the guard bytes after every buffer. No input or
// expected value of any datatype has this byte pattern.
inline constexpr unsigned char kPoison = 0xA5;
inline constexpr size_t kGuardBytes = 64;

// buf[j] = desc.input(ctx, ctx.rank, j) for j < n, converted to ctx.type.
void fillInputs(const Ctx& ctx, const CollDesc& desc, void* buf, size_t n);

// Elements j < n of buf that differ from desc.expect(ctx, inPlace, j): bit for bit, except avg on
// floating types, which is compared with a relative tolerance (1e-2 for 16-bit types, 1e-5 float,
// 1e-12 double).
size_t countWrong(const Ctx& ctx, const CollDesc& desc, const void* buf, size_t n, bool inPlace);

// Bytes of the kGuardBytes at base + offset that no longer hold kPoison.
size_t countGuardDamage(const void* base, size_t offset);

// IEEE binary16 and bfloat16 <-> float, round to nearest even; NaN stays NaN, overflow is infinity.
uint16_t floatToHalfBits(float f);
float halfBitsToFloat(uint16_t h);
uint16_t floatToBf16Bits(float f);
float bf16BitsToFloat(uint16_t b);

}  // namespace braid::perf

#endif  // BRAID_PERF_CHECK_H_
