// The *_perf harness: see common.h. Flags and output follow nccl-tests, so that numbers and scripts
// carry over; the datatype helpers here are independent of the library's own (they check it).
#include "common.h"

#include <getopt.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace braid::perf {
namespace {

constexpr unsigned char kPoison = 0xA5;  // fills recvbuff before a check; no input byte looks like it
constexpr size_t kGuardBytes = 64;       // poisoned bytes after each buffer, checked for stray writes
constexpr size_t kAlign = 4096;
constexpr int kHostBytes = 64;

braidComm_t g_comm = nullptr;  // for failCall, which aborts it so that peers fail fast
int g_rank = -1;

// ---- Datatypes ---------------------------------------------------------------------------------

struct TypeInfo {
  braidDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
};
constexpr TypeInfo kTypes[] = {
    {braidInt8, "int8", 1, false},      {braidUint8, "uint8", 1, false},     {braidInt32, "int32", 4, false},
    {braidUint32, "uint32", 4, false},  {braidInt64, "int64", 8, false},     {braidUint64, "uint64", 8, false},
    {braidFloat16, "half", 2, true},    {braidBfloat16, "bfloat16", 2, true}, {braidFloat32, "float", 4, true},
    {braidFloat64, "double", 8, true},
};
const TypeInfo& typeInfo(braidDataType_t t) { return kTypes[static_cast<int>(t)]; }
constexpr const char* kOpNames[] = {"sum", "prod", "min", "max", "avg"};

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 from float, round to nearest even; NaN stays NaN, overflow goes to infinity.
uint16_t toHalfBits(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs < 0x38800000u) {  // below 2^-14: subnormal in half, counted in units of 2^-24
    auto units = static_cast<uint32_t>(std::nearbyint(bitsFloat(abs) * 16777216.0f));
    return static_cast<uint16_t>(sign | units);  // 0x400 carries into the smallest normal, as it should
  }
  int32_t exp = static_cast<int32_t>(abs >> 23) - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | ((abs >> 13) & 0x3ffu);
  uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may reach infinity: correct
  return static_cast<uint16_t>(sign | h);
}
float fromHalfBits(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}
uint16_t toBf16Bits(float f) {
  uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
float fromBf16Bits(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

// Converts a reference value to element type T. Integers wrap (two's complement) like the library's
// integer arithmetic; the value is integral for them (avg is truncated by reduceExpected).
template <typename T>
T toElem(double v) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{toHalfBits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{toBf16Bits(static_cast<float>(v))};
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(v)));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double toDouble(T x) {
  if constexpr (std::is_same_v<T, Half>) {
    return fromHalfBits(x.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return fromBf16Bits(x.bits);
  } else {
    return static_cast<double>(x);
  }
}
template <typename T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Calls f(T{}) with T the C++ type of `t`.
template <typename F>
void withType(braidDataType_t t, F&& f) {
  switch (t) {
    case braidInt8: return f(int8_t{});
    case braidUint8: return f(uint8_t{});
    case braidInt32: return f(int32_t{});
    case braidUint32: return f(uint32_t{});
    case braidInt64: return f(int64_t{});
    case braidUint64: return f(uint64_t{});
    case braidFloat16: return f(Half{});
    case braidBfloat16: return f(BFloat16{});
    case braidFloat32: return f(float{});
    default: return f(double{});
  }
}

void fillInputs(const Ctx& ctx, const CollDesc& desc, void* buf, size_t n) {
  withType(ctx.type, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    for (size_t j = 0; j < n; ++j) p[j] = toElem<T>(desc.input(ctx, ctx.rank, j));
  });
}

size_t countWrong(const Ctx& ctx, const CollDesc& desc, const void* buf, size_t n, bool inPlace) {
  const TypeInfo& ti = typeInfo(ctx.type);
  const bool tolerant = desc.reduces && ctx.op == braidAvg && ti.isFloat;  // avg divides: not exact
  const double tol = ti.size == 2 ? 1e-2 : ti.size == 4 ? 1e-5 : 1e-12;
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
        wrong += !(diff <= tol * std::max(1.0, std::fabs(e.value)));  // NaN counts as wrong
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

// ---- Options -----------------------------------------------------------------------------------

struct Options {
  size_t minBytes = 32 << 20;
  size_t maxBytes = 32 << 20;
  size_t stepFactor = 2;
  size_t stepBytes = 0;  // > 0: additive steps instead of the factor
  int iters = 20;
  int warmup = 5;
  int agg = 1;
  bool check = true;
  bool blocking = false;
  int average = 1;  // 0 rank 0's time, 1 mean, 2 min, 3 max
  std::vector<braidDataType_t> types{braidFloat32};
  std::vector<braidRedOp_t> ops{braidSum};
  int root = 0;
  bool allRoots = false;
  std::string json;
  std::string algo;
};
constexpr const char* kAverageNames[] = {"rank0", "avg", "min", "max"};

[[noreturn]] void badFlag(const char* prog, int flag, const char* value) {
  std::fprintf(stderr, "%s: invalid value '%s' for -%c (see -h)\n", prog, value ? value : "", flag);
  std::exit(2);
}

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return false;
  int shift = 0;
  switch (*end) {
    case 'K': case 'k': shift = 10; ++end; break;
    case 'M': case 'm': shift = 20; ++end; break;
    case 'G': case 'g': shift = 30; ++end; break;
    default: break;
  }
  if (*end != '\0' || (shift && v > (~0ull >> shift))) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

bool parseInt(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseTypes(const char* s, std::vector<braidDataType_t>* out) {
  out->clear();
  if (std::strcmp(s, "all") == 0) {
    for (const TypeInfo& t : kTypes) out->push_back(t.type);
    return true;
  }
  static const struct {
    const char* name;
    braidDataType_t type;
  } kAliases[] = {{"float16", braidFloat16}, {"float32", braidFloat32}, {"float64", braidFloat64}};
  for (const TypeInfo& t : kTypes) {
    if (std::strcmp(s, t.name) == 0) out->push_back(t.type);
  }
  for (const auto& a : kAliases) {
    if (std::strcmp(s, a.name) == 0) out->push_back(a.type);
  }
  return !out->empty();
}

bool parseOps(const char* s, std::vector<braidRedOp_t>* out) {
  out->clear();
  for (int i = 0; i < braidNumOps; ++i) {
    if (std::strcmp(s, "all") == 0 || std::strcmp(s, kOpNames[i]) == 0) out->push_back(static_cast<braidRedOp_t>(i));
  }
  return !out->empty();
}

void printHelp(const char* prog) {
  std::printf(
      "usage: %s [flags]   (one process per rank, started by braidrun, mpirun, srun or torchrun)\n"
      "  -b, --minbytes N        smallest size, K/M/G suffixes (default 32M)\n"
      "  -e, --maxbytes N        largest size (default 32M)\n"
      "  -f, --stepfactor N      multiply the size by N between rows (default 2)\n"
      "  -i, --stepbytes N       add N bytes between rows instead\n"
      "  -n, --iters N           timed iterations (default 20)\n"
      "  -w, --warmup_iters N    untimed iterations before (default 5)\n"
      "  -m, --agg_iters N       operations posted per iteration before waiting (default 1)\n"
      "  -c, --check 0|1         check results (default 1)\n"
      "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16\n"
      "                          float|float32 double|float64 or all (default float)\n"
      "  -o, --op OP             sum prod min max avg or all (default sum)\n"
      "  -r, --root R            root rank, or all (default 0)\n"
      "  -z, --blocking 0|1      1: blocking calls; 0: nonblocking + wait (default 0)\n"
      "  -a, --average 0..3      time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max (default 1)\n"
      "  -J, --json FILE         also write the results as JSON\n"
      "  -A, --algo NAME         set BRAID_ALGO before initialization\n"
      "  -h, --help              this text\n",
      prog);
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'}, {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'},    {"warmup_iters", required_argument, nullptr, 'w'},
      {"agg_iters", required_argument, nullptr, 'm'}, {"check", required_argument, nullptr, 'c'},
      {"datatype", required_argument, nullptr, 'd'}, {"op", required_argument, nullptr, 'o'},
      {"root", required_argument, nullptr, 'r'},     {"blocking", required_argument, nullptr, 'z'},
      {"average", required_argument, nullptr, 'a'},  {"json", required_argument, nullptr, 'J'},
      {"algo", required_argument, nullptr, 'A'},     {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  const char* prog = argc > 0 ? argv[0] : "perf";
  if (const char* slash = std::strrchr(prog, '/')) prog = slash + 1;
  Options o;
  int flag = 0;
  int v = 0;
  opterr = 0;  // one line of our own instead of getopt's
  while ((flag = getopt_long(argc, argv, ":b:e:f:i:n:w:m:c:d:o:r:z:a:J:A:h", kLong, nullptr)) != -1) {
    const char* arg = optarg;
    bool ok = true;
    switch (flag) {
      case 'b': ok = parseSize(arg, &o.minBytes); break;
      case 'e': ok = parseSize(arg, &o.maxBytes); break;
      case 'f': ok = parseInt(arg, 2, 1 << 20, &v), o.stepFactor = v, o.stepBytes = 0; break;
      case 'i': ok = parseSize(arg, &o.stepBytes) && o.stepBytes > 0; break;
      case 'n': ok = parseInt(arg, 1, 1 << 30, &o.iters); break;
      case 'w': ok = parseInt(arg, 0, 1 << 30, &o.warmup); break;
      case 'm': ok = parseInt(arg, 1, 1 << 20, &o.agg); break;
      case 'c': ok = parseInt(arg, 0, 1, &v), o.check = v; break;
      case 'z': ok = parseInt(arg, 0, 1, &v), o.blocking = v; break;
      case 'a': ok = parseInt(arg, 0, 3, &o.average); break;
      case 'd': ok = parseTypes(arg, &o.types); break;
      case 'o': ok = parseOps(arg, &o.ops); break;
      case 'r': o.allRoots = std::strcmp(arg, "all") == 0, ok = o.allRoots || parseInt(arg, 0, 1 << 30, &o.root); break;
      case 'J': o.json = arg; break;
      case 'A': ok = *arg != '\0', o.algo = arg; break;
      case 'h': printHelp(prog), std::exit(0);
      case ':': std::fprintf(stderr, "%s: -%c needs a value (see -h)\n", prog, optopt), std::exit(2);
      default: std::fprintf(stderr, "%s: unknown flag '%s' (see -h)\n", prog, argv[optind - 1]), std::exit(2);
    }
    if (!ok) badFlag(prog, flag, arg);
  }
  if (optind < argc) std::fprintf(stderr, "%s: unexpected argument '%s' (see -h)\n", prog, argv[optind]), std::exit(2);
  if (o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "%s: -b (%zu) is larger than -e (%zu)\n", prog, o.minBytes, o.maxBytes);
    std::exit(2);
  }
  return o;
}

}  // namespace
