// What the [gpu] tests share: the skip where no device is present, device buffers, random inputs and
// the comparison against the CPU kernels. Built only with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "src/cuda/runtime.h"
#include "src/reduce.h"

namespace braid::gputest {

// True (after a WARN saying why) when there is no CUDA device: the caller returns, and the test
// reads as skipped in the log instead of passing silently.
inline bool noGpu() {
  if (gpuDeviceCount() > 0) return false;
  WARN("skipped: " << gpuAbsentReason());
  return true;
}

// cudaMalloc'ed bytes, freed at the end of the scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&p_, bytes == 0 ? 1 : bytes) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
};

// Random bit patterns: every float class (NaN, infinity, subnormal, -0) shows up.
inline void randomBytes(std::vector<char>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= v->size(); i += 8) {
    const uint64_t r = rng();
    memcpy(v->data() + i, &r, 8);
  }
  for (; i < v->size(); ++i) (*v)[i] = static_cast<char>(rng());
}

// Whether element i of a and b agree: bit for bit, except that two NaNs agree whatever their
// payloads (the GPU's arithmetic returns its canonical NaN where x86 keeps the first operand's;
// IEEE 754 leaves the payload open).
inline bool isNan(braidDataType_t dt, const char* p) {
  switch (dt) {
    case braidFloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return (h & 0x7fff) > 0x7c00;
    }
    case braidBfloat16: {
      uint16_t h;
      memcpy(&h, p, 2);
      return (h & 0x7fff) > 0x7f80;
    }
    case braidFloat32: {
      float f;
      memcpy(&f, p, 4);
      return f != f;
    }
    case braidFloat64: {
      double d;
      memcpy(&d, p, 8);
      return d != d;
    }
    default:
      return false;
  }
}

// The index of the first element where `got` differs from `want`, or -1.
inline long firstDifference(braidDataType_t dt, const std::vector<char>& got, const std::vector<char>& want,
                            size_t count) {
  const size_t es = dtypeSize(dt);
  for (size_t i = 0; i < count; ++i) {
    const char* g = got.data() + i * es;
    const char* w = want.data() + i * es;
    if (memcmp(g, w, es) == 0) continue;
    if (isNan(dt, g) && isNan(dt, w)) continue;
    return static_cast<long>(i);
  }
  return -1;
}

inline constexpr braidDataType_t kAllTypes[] = {braidInt8,   braidUint8,   braidInt32,    braidUint32,  braidInt64,
                                                braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
inline constexpr braidRedOp_t kAllOps[] = {braidSum, braidProd, braidMin, braidMax, braidAvg};

}  // namespace braid::gputest
