// The CUDA kernels of src/cuda/kernels.h. One elementwise kernel template (mapKernel) runs every
// operation: a functor gives one element's result from one or two inputs (src/reduce_ops.h, shared
// with the CPU), and the kernel moves the bytes: 16-byte packs in the aligned bulk, single elements
// in the head and tail, grid-stride loops so any grid covers any count.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "src/cuda/check.h"
#include "src/cuda/kernels.h"
#include "src/cuda/runtime.h"
#include "src/reduce_ops.h"

namespace braid {

namespace {

// fp16 through the hardware conversions, which are exact (widening) and round to nearest even
// (narrowing) like halfToFloat/floatToHalf; NaNs go through those functions, so a NaN's payload
// comes out as on the CPU. Much cheaper than the bit-by-bit functions on every element.
struct DeviceHalfCodec {
  __device__ static float widen(uint16_t v) {
    if ((v & 0x7fffu) > 0x7c00u) return halfToFloat(v);
    return __half2float(__ushort_as_half(v));
  }
  __device__ static uint16_t narrow(float f) {
    if (f != f) return floatToHalf(f);
    return __half_as_ushort(__float2half_rn(f));
  }
};

// A datatype as the kernels see it: how an element is stored, and for fp16/bf16 the codec that widens
// it to fp32 (void for the others, which compute in their own type).
template <class T, class C = void>
struct TypeTag {
  using Storage = T;
  using Codec = C;
};

template <braidRedOp_t k>
struct OpTag {
  static constexpr braidRedOp_t kOp = k;
};

// Element functors. kBinary: whether b is read (the unary ones see a only).
template <class Tag, braidRedOp_t kOp>
struct ReduceF {
  using T = typename Tag::Storage;
  using C = typename Tag::Codec;
  static constexpr bool kBinary = true;
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_void_v<C>) {
      return applyOp<kOp>(a, b);
    } else {
      return C::narrow(applyOp<kOp>(C::widen(a), C::widen(b)));
    }
  }
};

template <class Tag>
struct DivideF {
  using T = typename Tag::Storage;
  using C = typename Tag::Codec;
  static constexpr bool kBinary = false;
  int divisor;
  __device__ T operator()(T a, T) const {
    if constexpr (std::is_void_v<C>) {
      return divideElem(a, divisor);
    } else {
      return divideNarrowElem<C>(a, divisor);
    }
  }
};

// scaleBy (a = src) and axpy (a = dst, b = src). The weight is rounded once, as on the CPU: to fp32
// for float, fp16 and bf16; integers and float64 keep the double.
template <class Tag, bool kAccumulate>
struct WeightF {
  using T = typename Tag::Storage;
  using C = typename Tag::Codec;
  using W = std::conditional_t<std::is_same_v<T, float> || !std::is_void_v<C>, float, double>;
  static constexpr bool kBinary = kAccumulate;
  W w;
  __device__ T operator()(T a, T b) const {
    const T d = kAccumulate ? a : T(0);
    const T s = kAccumulate ? b : a;
    if constexpr (!std::is_void_v<C>) {
      return weightNarrowElem<C, kAccumulate>(d, s, w);
    } else if constexpr (std::is_integral_v<T>) {
      return weightInt<T, kAccumulate>(d, s, w);
    } else {
      return weightFloat<T, kAccumulate>(d, s, w);
    }
  }
};

// Where a call's elements go: [0, head) and [tail, count) one by one, packs of 16 bytes between.
struct Split {
  size_t head = 0;
  size_t packs = 0;
  size_t tail = 0;
  size_t count = 0;
};

template <class T, class F>
__global__ void __launch_bounds__(kGpuThreads) mapKernel(F f, T* out, T* out2, const T* a, const T* b, Split sp) {
  constexpr int kPer = 16 / sizeof(T);
  union Pack {
    uint4 v;
    T e[kPer];
  };
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nth = static_cast<size_t>(gridDim.x) * blockDim.x;
  // The unaligned head (or everything, when the pointers' offsets differ) and the tail. Each
  // element is read before it is written by the same thread, so exact aliasing is fine.
  for (size_t i = tid; i < sp.head; i += nth) {
    const T r = f(a[i], F::kBinary ? b[i] : a[i]);
    out[i] = r;
    if (out2 != nullptr) out2[i] = r;
  }
  for (size_t i = sp.tail + tid; i < sp.count; i += nth) {
    const T r = f(a[i], F::kBinary ? b[i] : a[i]);
    out[i] = r;
    if (out2 != nullptr) out2[i] = r;
  }
  const uint4* pa = reinterpret_cast<const uint4*>(a + sp.head);
  const uint4* pb = reinterpret_cast<const uint4*>(b + sp.head);
  uint4* po = reinterpret_cast<uint4*>(out + sp.head);
  uint4* po2 = out2 != nullptr ? reinterpret_cast<uint4*>(out2 + sp.head) : nullptr;
  // kGpuUnroll packs per input in flight per thread: all loads are issued before the first use.
  for (size_t base = tid; base < sp.packs; base += nth * kGpuUnroll) {
    Pack x[kGpuUnroll], y[kGpuUnroll];
#pragma unroll
    for (int u = 0; u < kGpuUnroll; ++u) {
      const size_t i = base + u * nth;
      if (i < sp.packs) {
        x[u].v = pa[i];
        if constexpr (F::kBinary) y[u].v = pb[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kGpuUnroll; ++u) {
      const size_t i = base + u * nth;
      if (i < sp.packs) {
        Pack r;
#pragma unroll
        for (int k = 0; k < kPer; ++k) r.e[k] = f(x[u].e[k], F::kBinary ? y[u].e[k] : x[u].e[k]);
        po[i] = r.v;
        if (po2 != nullptr) po2[i] = r.v;
      }
    }
  }
}

uintptr_t offset16(const void* p) { return reinterpret_cast<uintptr_t>(p) & 15u; }

template <class T, class F>
Status launchMap(const F& f, void* out, void* out2, const void* a, const void* b, size_t count,
                 const GpuLaunch& launch) {
  const void* ptrs[4] = {out, out2, a, b};
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0)
      return errorf(braidInvalidArgument, "device buffer %p is not aligned to its %zu-byte elements", p, sizeof(T));
  if (count == 0) return okStatus();
  if (!F::kBinary) b = a;  // never read; keeps the kernel's pointer arithmetic on a real buffer
  Split sp;
  sp.count = count;
  const uintptr_t off = offset16(a);
  const bool together =
      offset16(out) == off && (out2 == nullptr || offset16(out2) == off) && (!F::kBinary || offset16(b) == off);
  if (together) {
    sp.head = off == 0 ? 0 : (16 - off) / sizeof(T);
    if (sp.head > count) sp.head = count;
    constexpr size_t kPer = 16 / sizeof(T);
    sp.packs = (count - sp.head) / kPer;
    sp.tail = sp.head + sp.packs * kPer;
  } else {
    sp.head = count;
    sp.tail = count;
  }
  const int blocks = gpuBlocksFor(sp.packs > 0 ? sp.packs * (16 / sizeof(T)) : count, sizeof(T), launch);
  // cudaLaunchKernelEx returns this launch's own error; reading cudaGetLastError after a <<<>>>
  // launch would also report (and clear) an unrelated earlier error of the caller's.
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kGpuThreads);
  config.stream = reinterpret_cast<cudaStream_t>(launch.stream);
  return cudaStatus(cudaLaunchKernelEx(&config, mapKernel<T, F>, f, static_cast<T*>(out), static_cast<T*>(out2),
                                       static_cast<const T*>(a), static_cast<const T*>(b), sp),
                    "kernel launch");
}

// Calls fn(TypeTag<...>{}) for the datatype: one switch for every operation.
template <class Fn>
Status visitType(braidDataType_t dt, Fn&& fn) {
  switch (dt) {
    case braidInt8:
      return fn(TypeTag<int8_t>{});
    case braidUint8:
      return fn(TypeTag<uint8_t>{});
    case braidInt32:
      return fn(TypeTag<int32_t>{});
    case braidUint32:
      return fn(TypeTag<uint32_t>{});
    case braidInt64:
      return fn(TypeTag<int64_t>{});
    case braidUint64:
      return fn(TypeTag<uint64_t>{});
    case braidFloat16:
      return fn(TypeTag<uint16_t, DeviceHalfCodec>{});
    case braidBfloat16:
      return fn(TypeTag<uint16_t, Bf16Codec>{});
    case braidFloat32:
      return fn(TypeTag<float>{});
    case braidFloat64:
      return fn(TypeTag<double>{});
    default:
      break;
  }
  return errorf(braidInvalidArgument, "datatype %d is not a braidDataType_t", static_cast<int>(dt));
}

// Calls fn(OpTag<...>{}) for the reduction; braidAvg is braidSum (the division comes afterwards).
template <class Fn>
Status visitOp(braidRedOp_t op, Fn&& fn) {
  switch (op) {
    case braidSum:
    case braidAvg:
      return fn(OpTag<braidSum>{});
    case braidProd:
      return fn(OpTag<braidProd>{});
    case braidMin:
      return fn(OpTag<braidMin>{});
    case braidMax:
      return fn(OpTag<braidMax>{});
    default:
      break;
  }
  return errorf(braidInvalidArgument, "op %d is not a braidRedOp_t", static_cast<int>(op));
}

template <bool kAccumulate>
Status weighted(braidDataType_t dt, void* dst, const void* src, size_t count, double weight, const GpuLaunch& l) {
  return visitType(dt, [&](auto tag) {
    using F = WeightF<decltype(tag), kAccumulate>;
    // scaleBy reads src only; axpy reads dst and src (dst is its first operand).
    return launchMap<typename F::T>(F{static_cast<typename F::W>(weight)}, dst, nullptr, kAccumulate ? dst : src,
                                    kAccumulate ? src : nullptr, count, l);
  });
}

}  // namespace

int gpuBlockCap(int device) {
  const int sms = gpuMultiprocessors(device);
  if (sms <= 0) return 16;
  return sms / 2 > 0 ? sms / 2 : 1;
}

int gpuBlocksFor(size_t count, size_t elemSize, const GpuLaunch& launch) {
  int device = launch.device;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = -1;
  }
  const int cap = launch.maxBlocks > 0 ? launch.maxBlocks : gpuBlockCap(device);
  // One block per kGpuThreads x kGpuUnroll packs: small calls take few blocks and leave the rest
  // of the cap's room alone.
  const size_t perBlock = static_cast<size_t>(kGpuThreads) * kGpuUnroll * (16 / elemSize);
  const size_t want = (count + perBlock - 1) / perBlock;
  return want == 0 ? 1 : (want < static_cast<size_t>(cap) ? static_cast<int>(want) : cap);
}

Status gpuReduce(braidDataType_t dt, braidRedOp_t op, void* out, void* out2, const void* a, const void* b, size_t count,
                 const GpuLaunch& l) {
  if (out == nullptr || a == nullptr || b == nullptr)
    return count == 0 ? okStatus()
                      : errorf(braidInvalidArgument, "a device reduce of %zu elements with a null buffer", count);
  return visitType(dt, [&](auto tag) {
    return visitOp(op, [&](auto opTag) {
      using F = ReduceF<decltype(tag), decltype(opTag)::kOp>;
      return launchMap<typename F::T>(F{}, out, out2, a, b, count, l);
    });
  });
}

Status gpuScaleDivide(braidDataType_t dt, void* buf, size_t count, int divisor, const GpuLaunch& l) {
  if (divisor <= 1) return okStatus();
  return visitType(dt, [&](auto tag) {
    using F = DivideF<decltype(tag)>;
    return launchMap<typename F::T>(F{divisor}, buf, nullptr, buf, nullptr, count, l);
  });
}

Status gpuScaleBy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight, const GpuLaunch& l) {
  return weighted<false>(dt, dst, src, count, weight, l);
}

Status gpuAxpy(braidDataType_t dt, void* dst, const void* src, size_t count, double weight, const GpuLaunch& l) {
  return weighted<true>(dt, dst, src, count, weight, l);
}

Status gpuCopy(void* dst, const void* src, size_t bytes, const GpuLaunch& l) {
  if (bytes == 0 || dst == src) return okStatus();
  return cudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, reinterpret_cast<cudaStream_t>(l.stream)),
                    "cudaMemcpyAsync");
}

}  // namespace braid
