// Reduction kernels and datatype conversions, at every SIMD level this CPU supports.
//
// The references here are written independently of src/reduce.cc: floats are reduced in double and
// rounded to fp16/bf16 by a direct double -> narrow rounding (so a kernel result must be the
// correctly rounded one, bit for bit); integers are reduced exactly in uint64 arithmetic (double
// cannot hold every int64).
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "src/reduce.h"
#include "src/reduce_internal.h"

namespace braid {
namespace {

constexpr braidDataType_t kAllTypes[] = {braidInt8,   braidUint8,   braidInt32,    braidUint32,  braidInt64,
                                         braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
constexpr braidRedOp_t kAllOps[] = {braidSum, braidProd, braidMin, braidMax, braidAvg};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 1000, 4099};
constexpr SimdLevel kAllLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};

std::vector<SimdLevel> supportedLevels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel level : kAllLevels) {
    if (simdLevelSupported(level)) levels.push_back(level);
  }
  return levels;
}

// ---- Reference fp16 / bf16 formats -------------------------------------------------------------------
// A binary format with `mantissaBits` stored mantissa bits, smallest normal exponent `minExp` and
// largest `maxExp`: fp16 is (10, -14, 15), bf16 is (7, -126, 127).
struct Format {
  int mantissaBits;
  int minExp;
  int maxExp;
  uint16_t exponentMask() const { return static_cast<uint16_t>(0x7fff & ~((1 << mantissaBits) - 1)); }
  uint16_t quietBit() const { return static_cast<uint16_t>(1 << (mantissaBits - 1)); }
};
constexpr Format kHalf{10, -14, 15};
constexpr Format kBf16{7, -126, 127};

bool isNan(Format f, uint16_t v) { return (v & f.exponentMask()) == f.exponentMask() && (v & (f.quietBit() * 2 - 1)); }

double refDecode(Format f, uint16_t v) {
  const int exponentField = (v & f.exponentMask()) >> f.mantissaBits;
  const int mantissa = v & ((1 << f.mantissaBits) - 1);
  const double sign = (v & 0x8000) ? -1.0 : 1.0;
  if ((v & f.exponentMask()) == f.exponentMask()) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  }
  if (exponentField == 0) return sign * std::ldexp(mantissa, f.minExp - f.mantissaBits);
  return sign * std::ldexp((1 << f.mantissaBits) + mantissa, exponentField + f.minExp - 1 - f.mantissaBits);
}

// x rounded to the format, nearest even; NaN -> the default quiet NaN (callers compare NaN-ness).
uint16_t refRound(Format f, double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | f.exponentMask() | f.quietBit();
  const double magnitude = std::fabs(x);
  // From halfway between the largest finite value and 2^(maxExp+1) up: infinity.
  if (magnitude >= std::ldexp(2.0 - std::ldexp(1.0, -(f.mantissaBits + 1)), f.maxExp)) return sign | f.exponentMask();
  int e = 0;
  std::frexp(magnitude, &e);                       // magnitude = m * 2^e, m in [0.5, 1)
  const int exponent = std::max(e - 1, f.minExp);  // subnormals share the smallest exponent's grid
  // Count of grid steps; nearbyint rounds ties to even in the default rounding mode.
  const auto steps = static_cast<uint32_t>(std::nearbyint(std::ldexp(magnitude, f.mantissaBits - exponent)));
  if (magnitude < std::ldexp(1.0, f.minExp)) return static_cast<uint16_t>(sign | steps);  // 2^m steps: min normal
  return static_cast<uint16_t>(sign | (((exponent - f.minExp + 1) << f.mantissaBits) + steps - (1u << f.mantissaBits)));
}

double refOp(braidRedOp_t op, double a, double b) {
  switch (op) {
    case braidSum:
    case braidAvg:
      return a + b;
    case braidProd:
      return a * b;
    case braidMin:
      return std::isnan(a) ? a : (a < b ? a : b);
    case braidMax:
      return std::isnan(a) ? a : (a > b ? a : b);
    default:
      return 0;
  }
}

template <class T>
T refIntOp(braidRedOp_t op, T a, T b) {
  // Exact in uint64 modulo 2^64; the low bits are the wrapped result in any narrower type.
  const auto ua = static_cast<uint64_t>(a);
  const auto ub = static_cast<uint64_t>(b);
  switch (op) {
    case braidSum:
    case braidAvg:
      return static_cast<T>(ua + ub);
    case braidProd:
      return static_cast<T>(ua * ub);
    case braidMin:
      return a < b ? a : b;
    case braidMax:
      return a > b ? a : b;
    default:
      return 0;
  }
}

// ---- Inputs and expected outputs as raw element bits -------------------------------------------------

// Random bit patterns cover NaN, infinities, subnormals, overflow and exact ties; half of the float
// elements are small integers and halves instead, which keeps sums and products in range.
std::vector<uint64_t> randomElements(braidDataType_t dt, size_t count, std::mt19937_64& rng) {
  std::vector<uint64_t> v(count);
  std::uniform_int_distribution<int> small(-64, 64);
  const size_t bits = 8 * dtypeSize(dt);
  for (uint64_t& x : v) {
    x = bits == 64 ? rng() : rng() & ((uint64_t{1} << bits) - 1);
    const bool nice = (rng() & 1) != 0;
    if (!nice) continue;
    const double value = small(rng) / 2.0;
    if (dt == braidFloat32) x = std::bit_cast<uint32_t>(static_cast<float>(value));
    if (dt == braidFloat64) x = std::bit_cast<uint64_t>(value);
    if (dt == braidFloat16) x = refRound(kHalf, value);
    if (dt == braidBfloat16) x = refRound(kBf16, value);
  }
  return v;
}

void storeElement(braidDataType_t dt, void* base, size_t i, uint64_t bits) {
  std::memcpy(static_cast<char*>(base) + i * dtypeSize(dt), &bits, dtypeSize(dt));  // little endian
}

uint64_t loadElement(braidDataType_t dt, const void* base, size_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(base) + i * dtypeSize(dt), dtypeSize(dt));
  return bits;
}

// The expected bits of a op b, and whether they are a NaN (any NaN then matches).
struct Expected {
  uint64_t bits;
  bool nan;
};

Expected expected(braidDataType_t dt, braidRedOp_t op, uint64_t a, uint64_t b) {
  switch (dt) {
    case braidInt8:
      return {static_cast<uint8_t>(refIntOp(op, static_cast<int8_t>(a), static_cast<int8_t>(b))), false};
    case braidUint8:
      return {refIntOp(op, static_cast<uint8_t>(a), static_cast<uint8_t>(b)), false};
    case braidInt32:
      return {static_cast<uint32_t>(refIntOp(op, static_cast<int32_t>(a), static_cast<int32_t>(b))), false};
    case braidUint32:
      return {refIntOp(op, static_cast<uint32_t>(a), static_cast<uint32_t>(b)), false};
    case braidInt64:
      return {static_cast<uint64_t>(refIntOp(op, static_cast<int64_t>(a), static_cast<int64_t>(b))), false};
    case braidUint64:
      return {refIntOp(op, a, b), false};
    case braidFloat16:
    case braidBfloat16: {
      const Format f = dt == braidFloat16 ? kHalf : kBf16;
      const double r = refOp(op, refDecode(f, static_cast<uint16_t>(a)), refDecode(f, static_cast<uint16_t>(b)));
      return {refRound(f, r), std::isnan(r)};
    }
    case braidFloat32: {
      const double r =
          refOp(op, std::bit_cast<float>(static_cast<uint32_t>(a)), std::bit_cast<float>(static_cast<uint32_t>(b)));
      // Double carries more than 2*24+2 bits: rounding the double result to float is exact rounding.
      return {std::bit_cast<uint32_t>(static_cast<float>(r)), std::isnan(r)};
    }
    case braidFloat64: {
      const double r = refOp(op, std::bit_cast<double>(a), std::bit_cast<double>(b));
      return {std::bit_cast<uint64_t>(r), std::isnan(r)};
    }
    default:
      return {0, false};
  }
}

bool isNanBits(braidDataType_t dt, uint64_t bits) {
  switch (dt) {
    case braidFloat16:
      return isNan(kHalf, static_cast<uint16_t>(bits));
    case braidBfloat16:
      return isNan(kBf16, static_cast<uint16_t>(bits));
    case braidFloat32:
      return std::isnan(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    case braidFloat64:
      return std::isnan(std::bit_cast<double>(bits));
    default:
      return false;
  }
}

enum class Alias { kNone, kOutIsA, kOutIsB };
constexpr Alias kAllAliases[] = {Alias::kNone, Alias::kOutIsA, Alias::kOutIsB};
const char* aliasName(Alias alias) {
  return alias == Alias::kNone ? "separate" : alias == Alias::kOutIsA ? "out==a" : "out==b";
}

constexpr size_t kGuardBytes = 64;
constexpr unsigned char kGuardByte = 0xa5;

// Runs one kernel on random inputs and returns a description of the first wrong element ("" if
// all are right). Buffers start one element past a 64-byte boundary, so vectors are unaligned.
std::string checkKernel(SimdLevel level, braidDataType_t dt, braidRedOp_t op, size_t count, Alias alias,
                        std::mt19937_64& rng) {
  const ReduceKernel kernel = reduceKernelFor(level, dt, op);
  if (kernel == nullptr) return "no kernel";
  const size_t size = dtypeSize(dt);
  const std::vector<uint64_t> a = randomElements(dt, count, rng);
  const std::vector<uint64_t> b = randomElements(dt, count, rng);
  std::vector<unsigned char> bufA(64 + (count + 1) * size + kGuardBytes, kGuardByte);
  std::vector<unsigned char> bufB(bufA.size(), kGuardByte);
  std::vector<unsigned char> bufOut(bufA.size(), kGuardByte);
  const auto place = [&](std::vector<unsigned char>& buf) {
    const auto address = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + ((64 - address % 64) % 64) + size;
  };
  unsigned char* pa = place(bufA);
  unsigned char* pb = place(bufB);
  unsigned char* out = place(bufOut);
  for (size_t i = 0; i < count; ++i) {
    storeElement(dt, pa, i, a[i]);
    storeElement(dt, pb, i, b[i]);
  }
  if (alias == Alias::kOutIsA) out = pa;
  if (alias == Alias::kOutIsB) out = pb;
  kernel(out, pa, pb, count);

  std::ostringstream why;
  for (size_t i = 0; i < count; ++i) {
    const Expected want = expected(dt, op, a[i], b[i]);
    const uint64_t got = loadElement(dt, out, i);
    const bool ok = want.nan ? isNanBits(dt, got) : got == want.bits;
    if (!ok) {
      why << "element " << i << ": a=0x" << std::hex << a[i] << " b=0x" << b[i] << " got 0x" << got << " want 0x"
          << want.bits << (want.nan ? " (a NaN)" : "");
      return why.str();
    }
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (out[count * size + i] != kGuardByte) return "wrote past the end";
  }
  if (alias == Alias::kNone && out[-1] != kGuardByte) return "wrote before the start";
  return "";
}

// ---- Kernels -------------------------------------------------------------------------------------------

TEST_CASE("every dtype x op x level x count x aliasing matches the reference", "[unit]") {
  std::mt19937_64 rng(20240611);
  int cases = 0;
  for (SimdLevel level : supportedLevels()) {
    for (braidDataType_t dt : kAllTypes) {
      for (braidRedOp_t op : kAllOps) {
        for (size_t count : kCounts) {
          for (Alias alias : kAllAliases) {
            const std::string failure = checkKernel(level, dt, op, count, alias, rng);
            if (!failure.empty()) {
              FAIL_CHECK(simdLevelString(level) << " " << dtypeName(dt) << " " << redopName(op) << " count " << count
                                                << " " << aliasName(alias) << ": " << failure);
            }
            ++cases;
          }
        }
      }
    }
  }
  CHECK(cases == static_cast<int>(supportedLevels().size() * 10 * 5 * std::size(kCounts) * 3));
}

TEST_CASE("large random buffers agree bit for bit across levels (non-NaN results)", "[unit]") {
  std::mt19937_64 rng(7);
  const size_t count = 100003;
  for (braidDataType_t dt : kAllTypes) {
    const std::vector<uint64_t> a = randomElements(dt, count, rng);
    const std::vector<uint64_t> b = randomElements(dt, count, rng);
    std::vector<unsigned char> pa(count * dtypeSize(dt)), pb(pa.size()), want(pa.size()), got(pa.size());
    for (size_t i = 0; i < count; ++i) {
      storeElement(dt, pa.data(), i, a[i]);
      storeElement(dt, pb.data(), i, b[i]);
    }
    for (braidRedOp_t op : kAllOps) {
      reduceKernelFor(SimdLevel::kScalar, dt, op)(want.data(), pa.data(), pb.data(), count);
      for (SimdLevel level : supportedLevels()) {
        reduceKernelFor(level, dt, op)(got.data(), pa.data(), pb.data(), count);
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
          const uint64_t w = loadElement(dt, want.data(), i);
          const uint64_t g = loadElement(dt, got.data(), i);
          if (w != g && !(isNanBits(dt, w) && isNanBits(dt, g))) ++bad;
        }
        INFO(simdLevelString(level) << " " << dtypeName(dt) << " " << redopName(op));
        CHECK(bad == 0);
      }
    }
  }
}

// max(x, -inf) and min(x, +inf) are x itself, and sum(x, -0) is x: each fp16/bf16 pattern must come
// back unchanged through the widening and narrowing of every level, and NaNs quieted with their
// payload, exactly as the software conversions do.
TEST_CASE("fp16 and bf16 patterns pass through every level's widen/narrow exactly", "[unit]") {
  for (const braidDataType_t dt : {braidFloat16, braidBfloat16}) {
    const Format f = dt == braidFloat16 ? kHalf : kBf16;
    std::vector<uint16_t> x(65536), minusInf(65536, f.exponentMask() | 0x8000), plusInf(65536, f.exponentMask()),
        minusZero(65536, 0x8000), out(65536);
    for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
    const auto want = [&](uint16_t v) { return isNan(f, v) ? static_cast<uint16_t>(v | f.quietBit()) : v; };
    for (SimdLevel level : supportedLevels()) {
      const std::pair<braidRedOp_t, const std::vector<uint16_t>*> cases[] = {
          {braidMax, &minusInf}, {braidMin, &plusInf}, {braidSum, &minusZero}};
      for (const auto& [op, other] : cases) {
        reduceKernelFor(level, dt, op)(out.data(), x.data(), other->data(), 65536);
        size_t bad = 0;
        for (uint32_t i = 0; i < 65536; ++i) bad += out[i] != want(x[i]);
        INFO(simdLevelString(level) << " " << dtypeName(dt) << " " << redopName(op));
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("integer sums and products wrap around", "[unit]") {
  for (SimdLevel level : supportedLevels()) {
    INFO(simdLevelString(level));
    int8_t i8a[] = {127, -128, 100, -1}, i8b[] = {1, -1, 3, -1}, i8[4];
    reduceKernelFor(level, braidInt8, braidSum)(i8, i8a, i8b, 4);
    CHECK((i8[0] == -128 && i8[1] == 127 && i8[2] == 103 && i8[3] == -2));
    reduceKernelFor(level, braidInt8, braidProd)(i8, i8a, i8b, 4);
    CHECK((i8[0] == 127 && i8[1] == -128 && i8[2] == 44 && i8[3] == 1));  // 300 mod 256 = 44
    uint8_t u8a[] = {255, 16}, u8b[] = {1, 16}, u8[2];
    reduceKernelFor(level, braidUint8, braidSum)(u8, u8a, u8b, 2);
    CHECK((u8[0] == 0 && u8[1] == 32));
    reduceKernelFor(level, braidUint8, braidProd)(u8, u8a, u8b, 2);
    CHECK((u8[0] == 255 && u8[1] == 0));
    int32_t i32a[] = {INT32_MAX, INT32_MIN}, i32b[] = {2, -1}, i32[2];
    reduceKernelFor(level, braidInt32, braidProd)(i32, i32a, i32b, 2);
    CHECK((i32[0] == -2 && i32[1] == INT32_MIN));
    reduceKernelFor(level, braidInt32, braidSum)(i32, i32a, i32b, 2);
    CHECK((i32[0] == INT32_MIN + 1 && i32[1] == INT32_MAX));
    uint32_t u32a[] = {UINT32_MAX, 0x10000}, u32b[] = {1, 0x10000}, u32[2];
    reduceKernelFor(level, braidUint32, braidSum)(u32, u32a, u32b, 2);
    CHECK((u32[0] == 0 && u32[1] == 0x20000));
    reduceKernelFor(level, braidUint32, braidProd)(u32, u32a, u32b, 2);
    CHECK((u32[0] == UINT32_MAX && u32[1] == 0));
    int64_t i64a[] = {INT64_MIN, INT64_MAX, 0x100000001}, i64b[] = {-1, 2, 0x100000001}, i64[3];
    reduceKernelFor(level, braidInt64, braidSum)(i64, i64a, i64b, 3);
    CHECK((i64[0] == INT64_MAX && i64[1] == INT64_MIN + 1 && i64[2] == 0x200000002));
    reduceKernelFor(level, braidInt64, braidProd)(i64, i64a, i64b, 3);
    CHECK((i64[0] == INT64_MIN && i64[1] == -2 && i64[2] == 0x200000001));  // (2^32+1)^2 mod 2^64
    uint64_t u64a[] = {UINT64_MAX, UINT64_MAX}, u64b[] = {1, UINT64_MAX}, u64[2];
    reduceKernelFor(level, braidUint64, braidSum)(u64, u64a, u64b, 2);
    CHECK((u64[0] == 0 && u64[1] == UINT64_MAX - 1));
    reduceKernelFor(level, braidUint64, braidProd)(u64, u64a, u64b, 2);
    CHECK((u64[0] == UINT64_MAX && u64[1] == 1));
    // Unsigned 64-bit min/max must compare unsigned (AVX2 has only a signed 64-bit compare).
    reduceKernelFor(level, braidUint64, braidMin)(u64, u64a, u64b, 2);
    CHECK((u64[0] == 1 && u64[1] == UINT64_MAX));
  }
}

TEST_CASE("float min/max: NaN in either input gives NaN; otherwise a < b ? a : b", "[unit]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (SimdLevel level : supportedLevels()) {
    INFO(simdLevelString(level));
    float a[] = {nan, 1.0f, nan, -0.0f, 0.0f, 2.0f}, b[] = {1.0f, nan, nan, 0.0f, -0.0f, 3.0f}, out[6];
    reduceKernelFor(level, braidFloat32, braidMin)(out, a, b, 6);
    CHECK((std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2])));
    CHECK((std::bit_cast<uint32_t>(out[3]) == 0 && std::bit_cast<uint32_t>(out[4]) == 0x80000000u && out[5] == 2.0f));
    reduceKernelFor(level, braidFloat32, braidMax)(out, a, b, 6);
    CHECK((std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2]) && out[5] == 3.0f));
  }
}

// ---- avg = sum, then scaleDivide ------------------------------------------------------------------------

TEST_CASE("avg slot is the sum kernel; scaleDivide truncates integers toward zero", "[unit]") {
  for (SimdLevel level : supportedLevels()) {
    for (braidDataType_t dt : kAllTypes) {
      CHECK(reduceKernelFor(level, dt, braidAvg) == reduceKernelFor(level, dt, braidSum));
    }
  }
  int8_t i8[] = {-7, 7, -128, 127, -1, 1};
  scaleDivide(braidInt8, i8, 6, 2);
  CHECK((i8[0] == -3 && i8[1] == 3 && i8[2] == -64 && i8[3] == 63 && i8[4] == 0 && i8[5] == 0));
  int8_t big[] = {-128, 127};
  scaleDivide(braidInt8, big, 2, 200);  // a divisor wider than the element type
  CHECK((big[0] == 0 && big[1] == 0));
  uint8_t u8[] = {255, 7};
  scaleDivide(braidUint8, u8, 2, 3);
  CHECK((u8[0] == 85 && u8[1] == 2));
  int32_t i32[] = {INT32_MIN, -5, 5};
  scaleDivide(braidInt32, i32, 3, 3);
  CHECK((i32[0] == INT32_MIN / 3 && i32[1] == -1 && i32[2] == 1));
  uint32_t u32[] = {UINT32_MAX};
  scaleDivide(braidUint32, u32, 1, 2);
  CHECK(u32[0] == UINT32_MAX / 2);
  int64_t i64[] = {INT64_MIN, -9};
  scaleDivide(braidInt64, i64, 2, 4);
  CHECK((i64[0] == INT64_MIN / 4 && i64[1] == -2));
  uint64_t u64[] = {UINT64_MAX};
  scaleDivide(braidUint64, u64, 1, 3);
  CHECK(u64[0] == UINT64_MAX / 3);
  int32_t unchanged[] = {-9};
  scaleDivide(braidInt32, unchanged, 1, 1);
  scaleDivide(braidInt32, unchanged, 0, 3);
  CHECK(unchanged[0] == -9);
}

// At every level (a power-of-two divisor multiplies by its reciprocal there), with a partial last
// vector.
TEST_CASE("scaleDivide of floats rounds the true quotient", "[unit]") {
  std::mt19937_64 rng(99);
  for (const int divisor : {2, 3, 4, 7, 10, 64, 1000}) {
    for (braidDataType_t dt : {braidFloat16, braidBfloat16, braidFloat32, braidFloat64}) {
      for (SimdLevel level : supportedLevels()) {
        INFO("divisor " << divisor << " level " << simdLevelString(level));
        const size_t count = 20000 + 13;
        const std::vector<uint64_t> values = randomElements(dt, count, rng);
        std::vector<unsigned char> buf(count * dtypeSize(dt));
        for (size_t i = 0; i < count; ++i) storeElement(dt, buf.data(), i, values[i]);
        divideKernelFor(level, dt)(buf.data(), count, divisor);
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) {
          uint64_t want = 0;
          bool nan = false;
          if (dt == braidFloat16 || dt == braidBfloat16) {
            const Format f = dt == braidFloat16 ? kHalf : kBf16;
            const double q = refDecode(f, static_cast<uint16_t>(values[i])) / divisor;
            want = refRound(f, q);
            nan = std::isnan(q);
          } else if (dt == braidFloat32) {
            const double q = std::bit_cast<float>(static_cast<uint32_t>(values[i])) / static_cast<double>(divisor);
            want = std::bit_cast<uint32_t>(static_cast<float>(q));
            nan = std::isnan(q);
          } else {
            const double q = std::bit_cast<double>(values[i]) / divisor;
            want = std::bit_cast<uint64_t>(q);
            nan = std::isnan(q);
          }
          const uint64_t got = loadElement(dt, buf.data(), i);
          bad += nan ? !isNanBits(dt, got) : got != want;
        }
        INFO(dtypeName(dt));
        CHECK(bad == 0);
      }
    }
  }
}

// Integers too: every level's division is the scalar one, bit for bit, for every count (whole
// vectors and a partial last one) and divisors that are powers of two and not; scaleDivide is the
// active level's, and 1 or less leaves the buffer alone.
TEST_CASE("every level divides as the scalar level does, every datatype", "[unit]") {
  std::mt19937_64 rng(101);
  for (braidDataType_t dt : kAllTypes) {
    for (const size_t count : kCounts) {
      for (const int divisor : {2, 3, 4, 5, 8, 9, 64, 1000, 1 << 20}) {
        const std::vector<uint64_t> values = randomElements(dt, count, rng);
        std::vector<unsigned char> want(count * dtypeSize(dt) + 1);
        for (size_t i = 0; i < count; ++i) storeElement(dt, want.data(), i, values[i]);
        const std::vector<unsigned char> input = want;
        divideKernelFor(SimdLevel::kScalar, dt)(want.data(), count, divisor);
        for (SimdLevel level : supportedLevels()) {
          std::vector<unsigned char> got = input;
          divideKernelFor(level, dt)(got.data(), count, divisor);
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) {
            const uint64_t w = loadElement(dt, want.data(), i), g = loadElement(dt, got.data(), i);
            if (w != g && !(isNanBits(dt, w) && isNanBits(dt, g))) ++bad;
          }
          INFO(simdLevelString(level) << " " << dtypeName(dt) << " count " << count << " divisor " << divisor);
          CHECK(bad == 0);
          CHECK(got.back() == input.back());  // nothing past the end
        }
        std::vector<unsigned char> viaApi = input;
        scaleDivide(dt, viaApi.data(), count, divisor);
        CHECK(std::memcmp(viaApi.data(), want.data(), count * dtypeSize(dt)) == 0);
        for (const int none : {1, 0, -2}) {
          viaApi = input;
          scaleDivide(dt, viaApi.data(), count, none);
          CHECK(viaApi == input);
        }
      }
    }
  }
}

TEST_CASE("avg over three ranks: sum twice, then divide", "[unit]") {
  const int32_t r0[] = {-7, 5, INT32_MAX}, r1[] = {-1, 5, 1}, r2[] = {0, 1, 1};
  int32_t acc[3];
  reduce(braidInt32, braidAvg, acc, r0, r1, 3);
  reduce(braidInt32, braidAvg, acc, acc, r2, 3);
  scaleDivide(braidInt32, acc, 3, 3);
  CHECK((acc[0] == -2 && acc[1] == 3 && acc[2] == (INT32_MIN + 1) / 3));  // -8/3, 11/3, wrapped sum/3
}

// ---- Conversions -----------------------------------------------------------------------------------------

TEST_CASE("fp16 and bf16 round-trip all 65536 patterns; NaNs stay NaN, quieted", "[unit]") {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto v = static_cast<uint16_t>(i);
    const float h = halfToFloat(v);
    const float b = bf16ToFloat(v);
    if (isNan(kHalf, v)) {
      REQUIRE(std::isnan(h));
      REQUIRE((std::bit_cast<uint32_t>(h) & 0x00400000u) != 0);  // quiet
      REQUIRE(floatToHalf(h) == (v | kHalf.quietBit()));
    } else {
      REQUIRE(static_cast<double>(h) == refDecode(kHalf, v));
      REQUIRE(std::signbit(h) == ((v & 0x8000) != 0));
      REQUIRE(floatToHalf(h) == v);
    }
    if (isNan(kBf16, v)) {
      REQUIRE(std::isnan(b));
      REQUIRE((std::bit_cast<uint32_t>(b) & 0x00400000u) != 0);  // quiet
      REQUIRE(floatToBf16(b) == (v | kBf16.quietBit()));
    } else {
      REQUIRE(static_cast<double>(b) == refDecode(kBf16, v));
      REQUIRE(std::signbit(b) == ((v & 0x8000) != 0));
      REQUIRE(floatToBf16(b) == v);
    }
  }
}

// Every tie between two neighbouring fp16 / bf16 values, the floats on either side of it, and a
// sweep over all float bit patterns.
TEST_CASE("float -> fp16/bf16 rounds to nearest even, subnormals and overflow included", "[unit]") {
  size_t bad = 0;
  uint32_t firstBad = 0;
  const auto checkBoth = [&](float x) {
    const bool ok = std::isnan(x) ? isNan(kHalf, floatToHalf(x)) && isNan(kBf16, floatToBf16(x))
                                  : floatToHalf(x) == refRound(kHalf, x) && floatToBf16(x) == refRound(kBf16, x);
    if (!ok && bad++ == 0) firstBad = std::bit_cast<uint32_t>(x);
  };
  for (uint32_t i = 0; i < 0x7c00; ++i) {  // positive finite halves and their upper neighbours
    for (const uint32_t sign : {0u, 0x8000u}) {
      const double lo = refDecode(kHalf, static_cast<uint16_t>(i | sign));
      const double hi =
          i + 1 == 0x7c00 ? std::copysign(65536.0, lo) : refDecode(kHalf, static_cast<uint16_t>((i + 1) | sign));
      const auto mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
      checkBoth(mid);
      checkBoth(std::nextafter(mid, 0.0f));
      checkBoth(std::nextafter(mid, std::copysign(INFINITY, mid)));
    }
  }
  for (uint32_t i = 0; i < 0x10000; ++i) {  // bf16 ties: the low 16 bits are 0x8000
    const uint32_t tie = (i << 16) | 0x8000u;
    for (const uint32_t bits : {tie - 1, tie, tie + 1, i << 16}) checkBoth(std::bit_cast<float>(bits));
  }
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4093)
    checkBoth(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  INFO("first wrong input: float bits 0x" << std::hex << firstBad);
  CHECK(bad == 0);

  CHECK(floatToHalf(65504.0f) == 0x7bff);
  CHECK(floatToHalf(65519.99f) == 0x7bff);
  CHECK(floatToHalf(65520.0f) == 0x7c00);  // tie with an odd mantissa: up, to infinity
  CHECK(floatToHalf(-1e10f) == 0xfc00);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and the smallest subnormal
  CHECK(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002);     // 1.5 ulp: tie, to even
  CHECK(floatToHalf(std::ldexp(1023.5f, -24)) == 0x0400);  // rounds up into the smallest normal
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToBf16(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // FLT_MAX overflows to infinity
  CHECK(floatToBf16(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7f);
  CHECK(floatToBf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(floatToBf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd goes up
  CHECK(floatToBf16(std::bit_cast<float>(0x00008000u)) == 0x0000);  // subnormal tie to even
  CHECK(floatToBf16(std::bit_cast<float>(0x00018000u)) == 0x0002);
  CHECK(floatToBf16(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);  // signalling NaN with low payload: quiet
}

// ---- Names, validity, selection ---------------------------------------------------------------------------

TEST_CASE("datatype and op names, sizes and validity", "[unit]") {
  const char* names[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                         "uint64", "float16", "bfloat16", "float32", "float64"};
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
  for (int i = 0; i < braidNumTypes; ++i) {
    CHECK(std::string(dtypeName(static_cast<braidDataType_t>(i))) == names[i]);
    CHECK(dtypeSize(static_cast<braidDataType_t>(i)) == sizes[i]);
    CHECK(validDtype(i));
  }
  const char* ops[] = {"sum", "prod", "min", "max", "avg"};
  for (int i = 0; i < braidNumOps; ++i) {
    CHECK(std::string(redopName(static_cast<braidRedOp_t>(i))) == ops[i]);
    CHECK(validRedop(i));
  }
  CHECK_FALSE(validDtype(-1));
  CHECK_FALSE(validDtype(braidNumTypes));
  CHECK_FALSE(validRedop(-1));
  CHECK_FALSE(validRedop(braidNumOps));
  CHECK(dtypeSize(braidNumTypes) == 0);
  CHECK(std::string(dtypeName(static_cast<braidDataType_t>(-3))) == "invalid");
  CHECK(std::string(redopName(braidNumOps)) == "invalid");
  CHECK(reduceKernel(braidNumTypes, braidSum) == nullptr);
  CHECK(reduceKernel(braidFloat32, static_cast<braidRedOp_t>(-1)) == nullptr);
  CHECK(reduceKernelFor(SimdLevel::kScalar, braidFloat32, braidNumOps) == nullptr);
}

TEST_CASE("SIMD level selection and BRAID_SIMD capping", "[unit]") {
  REQUIRE(simdLevelSupported(SimdLevel::kScalar));
  SimdLevel best = SimdLevel::kScalar;
  for (SimdLevel level : supportedLevels()) best = level;
  const SimdLevel avx2Cap = simdLevelSupported(SimdLevel::kAvx2) ? SimdLevel::kAvx2 : SimdLevel::kScalar;
  CHECK(selectSimdLevel(nullptr) == best);
  CHECK(selectSimdLevel("") == best);
  CHECK(selectSimdLevel("sse9") == best);
  CHECK(selectSimdLevel("avx512") == best);
  CHECK(selectSimdLevel("avx2") == avx2Cap);
  CHECK(selectSimdLevel("scalar") == SimdLevel::kScalar);
  // The library chose once, at load, from this process's BRAID_SIMD.
  const SimdLevel active = activeSimdLevel();
  CHECK(active == selectSimdLevel(std::getenv("BRAID_SIMD")));
  CHECK(std::string(simdLevelName()) == simdLevelString(active));
  for (braidDataType_t dt : kAllTypes) {
    for (braidRedOp_t op : kAllOps) CHECK(reduceKernel(dt, op) == reduceKernelFor(active, dt, op));
  }
  for (SimdLevel level : kAllLevels) {
    if (!simdLevelSupported(level)) CHECK(reduceKernelFor(level, braidFloat32, braidSum) == nullptr);
  }
}

// The fold to several outputs (src/direct_coll.cc's streamed folds): every output holds the inputs
// folded in rank order (avg: and divided), bit for bit what the scalar pairwise kernel gives folding
// them one by one (and the scalar division after), at every level, every count (whole lines, vectors
// and the partial tail), with outputs aligned for non-temporal stores and not; nothing before or past
// an output's range is written.
TEST_CASE("the fold to several outputs folds the inputs in order into every output, at every level", "[unit]") {
  std::mt19937_64 rng(11);
  constexpr size_t kFoldCounts[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 4099};
  constexpr unsigned char kCanary = 0xa5;
  int cases = 0;
  for (braidDataType_t dt : kAllTypes) {
    const size_t es = dtypeSize(dt);
    for (const int nins : {2, 3, 4}) {
      for (const size_t count : kFoldCounts) {
        std::vector<std::vector<unsigned char>> ins(nins, std::vector<unsigned char>(count * es + 1));
        std::vector<const void*> inPtrs;
        for (auto& in : ins) {
          const std::vector<uint64_t> values = randomElements(dt, count, rng);
          for (size_t i = 0; i < count; ++i) storeElement(dt, in.data(), i, values[i]);
          inPtrs.push_back(in.data());
        }
        for (braidRedOp_t op : kAllOps) {
          // avg divides by the input count (powers of two and not); the other ops must ignore it.
          const int divisor = op == braidAvg ? nins : 3;
          std::vector<unsigned char> want(count * es + 1);
          const ReduceKernel scalar = reduceKernelFor(SimdLevel::kScalar, dt, op);
          scalar(want.data(), ins[0].data(), ins[1].data(), count);
          for (int p = 2; p < nins; ++p) scalar(want.data(), want.data(), ins[p].data(), count);
          if (op == braidAvg) divideKernelFor(SimdLevel::kScalar, dt)(want.data(), count, divisor);
          for (SimdLevel level : supportedLevels()) {
            for (const int nouts : {1, 2, 4}) {
              // Output j starts `shift` bytes into its buffer: 64 (aligned for streaming) or, for
              // every other output, 64 + es (not 16-byte aligned unless es is 16).
              std::vector<std::vector<unsigned char>> outs(nouts);
              std::vector<void*> outPtrs;
              std::vector<size_t> shifts;
              for (int j = 0; j < nouts; ++j) {
                const size_t shift = j % 2 == 0 ? 64 : 64 + es;
                outs[j].assign(shift + count * es + 64, kCanary);
                shifts.push_back(shift);
                outPtrs.push_back(outs[j].data() + shift);
              }
              // The vectors' own allocations are 16-byte aligned at least; the shift says the rest.
              foldStreamKernelFor(level, dt, op)(outPtrs.data(), nouts, inPtrs.data(), nins, count, divisor);
              for (int j = 0; j < nouts; ++j) {
                size_t bad = 0, stray = 0;
                for (size_t i = 0; i < count; ++i) {
                  const uint64_t w = loadElement(dt, want.data(), i);
                  const uint64_t g = loadElement(dt, outs[j].data() + shifts[j], i);
                  if (w != g && !(isNanBits(dt, w) && isNanBits(dt, g))) ++bad;
                }
                for (size_t b = 0; b < outs[j].size(); ++b) {
                  const bool inside = b >= shifts[j] && b < shifts[j] + count * es;
                  if (!inside && outs[j][b] != kCanary) ++stray;
                }
                INFO(simdLevelString(level) << " " << dtypeName(dt) << " " << redopName(op) << " inputs " << nins
                                            << " outputs " << nouts << " output " << j << " count " << count);
                CHECK(bad == 0);
                CHECK(stray == 0);
              }
              ++cases;
            }
          }
        }
      }
    }
  }
  CHECK(cases == static_cast<int>(supportedLevels().size() * 10 * 3 * std::size(kFoldCounts) * 5 * 3));
}

// An output that is exactly one of the inputs (a receive folded in place: Xfer::local == data) gets
// the same bits as a separate one: each line of the inputs is read before it is written.
TEST_CASE("the fold to several outputs may write over one of its inputs exactly", "[unit]") {
  std::mt19937_64 rng(13);
  const size_t count = 1000 + 17;
  for (braidDataType_t dt : kAllTypes) {
    const size_t es = dtypeSize(dt);
    for (braidRedOp_t op : kAllOps) {
      for (SimdLevel level : supportedLevels()) {
        std::vector<std::vector<unsigned char>> ins(3, std::vector<unsigned char>(count * es));
        for (auto& in : ins) {
          const std::vector<uint64_t> values = randomElements(dt, count, rng);
          for (size_t i = 0; i < count; ++i) storeElement(dt, in.data(), i, values[i]);
        }
        std::vector<unsigned char> want(count * es), other(count * es);
        const ReduceKernel scalar = reduceKernelFor(SimdLevel::kScalar, dt, op);
        scalar(want.data(), ins[0].data(), ins[1].data(), count);
        scalar(want.data(), want.data(), ins[2].data(), count);
        if (op == braidAvg) divideKernelFor(SimdLevel::kScalar, dt)(want.data(), count, 3);
        const void* inPtrs[] = {ins[0].data(), ins[1].data(), ins[2].data()};
        void* outPtrs[] = {ins[1].data(), other.data()};
        foldStreamKernelFor(level, dt, op)(outPtrs, 2, inPtrs, 3, count, 3);
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i)
          for (const unsigned char* got : {ins[1].data(), other.data()}) {
            const uint64_t w = loadElement(dt, want.data(), i), g = loadElement(dt, got, i);
            if (w != g && !(isNanBits(dt, w) && isNanBits(dt, g))) ++bad;
          }
        INFO(simdLevelString(level) << " " << dtypeName(dt) << " " << redopName(op));
        CHECK(bad == 0);
      }
    }
  }
}

}  // namespace
}  // namespace braid
