// Datatypes and reduction kernels (CPU). Float kernels are vectorized (AVX-512 or AVX2, chosen once
// at run time from cpuid; scalar fallback). fp16/bf16 are widened to fp32, reduced, and rounded back
// to nearest even, one pairwise operation at a time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "braid/braid.h"
#include "src/base/dtype.h"  // dtypeSize, dtypeName, redopName, validDtype, validRedop
#include "src/base/half.h"   // halfToFloat, floatToHalf, bf16ToFloat, floatToBf16

namespace braid {

// out[i] = a[i] op b[i], i < count. `out` may alias `a` or `b` exactly (not partially).
// braidAvg reduces as braidSum here; divide once at the end with scaleDivide.
using ReduceKernel = void (*)(void* out, const void* a, const void* b, size_t count);
// The kernel for (dt, op), picked from the best instruction set this CPU has. nullptr if invalid.
ReduceKernel reduceKernel(braidDataType_t dt, braidRedOp_t op);
void reduce(braidDataType_t dt, braidRedOp_t op, void* out, const void* a, const void* b, size_t count);

// outs[j][i] = ins[0][i] op ins[1][i] op ... op ins[nins - 1][i] (folded in that order, with the
// pairwise rounding of ReduceKernel: the very bits of folding the inputs one by one), for every
// j < nouts and i < count, nins >= 2, nouts >= 1. One pass: each input is read once, and the result
// of each cache line goes from the core to every output with non-temporal stores (plain ones into
// an output not 16-byte aligned, and for the last partial vector), so nothing is staged in between.
// For big outputs that will not be read again soon (src/direct_coll.cc; the shm and tcp links'
// streamed receives); the caller fences (storeFence) before it publishes them. An output may be
// exactly an input (each line is read before it is written, as ReduceKernel allows), but no other
// overlap. braidAvg's kernel folds as braidSum and divides each result by `divisor` as scaleDivide
// does (the same bits as folding, then dividing) before it stores it; the other ops ignore `divisor`.
using FoldStreamKernel = void (*)(void* const* outs, int nouts, const void* const* ins, int nins, size_t count,
                                  int divisor);
FoldStreamKernel foldStreamKernel(braidDataType_t dt, braidRedOp_t op);

// buf[i] /= divisor (floats: true division in the type's precision, fp16/bf16 via fp32 with
// round-to-nearest-even; integers: truncation toward zero). Used for braidAvg. Vectorized at the
// kernels' level for the float types; a power-of-two divisor multiplies by its exact reciprocal
// (the same correctly rounded quotient).
void scaleDivide(braidDataType_t dt, void* buf, size_t count, int divisor);

// Weighted steps of gossip plans (StepKind::kScaleBy, kAxpy), i < count:
//   scaleBy: dst[i] = weight * src[i]      (dst may alias src exactly)
//   axpy:    dst[i] = dst[i] + weight * src[i]
// float64 computes in double, float32 in float (weight rounded to float once); fp16/bf16 widen to
// fp32, compute, and round back to nearest even once per element and call. Integers (no gossip
// plan uses them; defined so that a forced algorithm cannot reach undefined behaviour) compute in
// double and round to nearest, saturating at the type's range.
void scaleBy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight);
void axpy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight);

// The instruction set the kernels use: "avx512", "avx2" or "scalar". BRAID_SIMD=scalar|avx2|avx512
// caps it (for tests and comparisons).
const char* simdLevelName();

}  // namespace braid
