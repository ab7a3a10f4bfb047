// Element conversions, input filling and result checking for the *_perf benchmarks.
#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "options.h"

namespace braid::perf {
namespace {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Converts a reference value to element type T. Integers wrap (two's complement), as the library's
// integer arithmetic does; the value is already integral for them.
template <typename T>
T toElem(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{floatToHalfBits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{floatToBf16Bits(static_cast<float>(v))};
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(v)));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
double toDouble(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return halfBitsToFloat(x.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16BitsToFloat(x.bits);
  } else {
    return static_cast<double>(x);
  }
}

template <typename T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Calls f(T{}) with T the C++ element type of `type`.
template <typename F>
void withType(braidDataType_t type, F&& f) {
  switch (type) {
    case braidInt8:
      return f(int8_t{});
    case braidUint8:
      return f(uint8_t{});
    case braidInt32:
      return f(int32_t{});
    case braidUint32:
      return f(uint32_t{});
    case braidInt64:
      return f(int64_t{});
    case braidUint64:
      return f(uint64_t{});
    case braidFloat16:
      return f(Half{});
    case braidBfloat16:
      return f(BFloat16{});
    case braidFloat32:
      return f(float{});
    default:
      return f(double{});
  }
}

}  // namespace

uint16_t floatToHalfBits(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs < 0x38800000u) {
    // Below 2^-14 half is subnormal: count units of 2^-24 (the scaling is exact; nearbyint rounds
    // to nearest even). 0x400 units carry into the smallest normal, as they should.
    auto units = static_cast<uint32_t>(std::nearbyint(bitsFloat(abs) * 16777216.0f));
    return static_cast<uint16_t>(sign | units);
  }
  int32_t exp = static_cast<int32_t>(abs >> 23) - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | ((abs >> 13) & 0x3ffu);
  uint32_t rest = abs & 0x1fffu;                             // the 13 bits dropped
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into infinity is correct
  return static_cast<uint16_t>(sign | h);
}

float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  if (exp == 31) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t floatToBf16Bits(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16BitsToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

void fillInputs(const Ctx& ctx, const CollDesc& desc, void* buf, size_t n) {
  withType(ctx.type, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (size_t j = 0; j < n; ++j) p[j] = toElem<T>(desc.input(ctx, ctx.rank, j));
  });
}

size_t countWrong(const Ctx& ctx, const CollDesc& desc, const void* buf, size_t n, bool inPlace) {
  const bool tolerant = desc.reduces && ctx.op == braidAvg && typeIsFloat(ctx.type);
  const double tol = ctx.eltSize == 2 ? 1e-2 : ctx.eltSize == 4 ? 1e-5 : 1e-12;
  size_t wrong = 0;
  withType(ctx.type, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(buf);
    T poison;
    std::memset(&poison, kPoison, sizeof(T));
    for (size_t j = 0; j < n; ++j) {
      Expect e = desc.expect(ctx, inPlace, j);
      if (e.kind == Expect::kUntouched) {
        wrong += !sameBits(p[j], poison);
      } else if (e.kind == Expect::kValue && tolerant) {
        double diff = std::fabs(toDouble(p[j]) - e.value);
        wrong += !(diff <= tol * std::max(1.0, std::fabs(e.value)));  // NaN fails this too
      } else if (e.kind == Expect::kValue) {
        wrong += !sameBits(p[j], toElem<T>(e.value));
      }
    }
  });
  return wrong;
}

size_t countGuardDamage(const void* base, size_t offset) {
  const auto* p = static_cast<const unsigned char*>(base) + offset;
  return static_cast<size_t>(std::count_if(p, p + kGuardBytes, [](unsigned char c) { return c != kPoison; }));
}

}  // namespace braid::perf
