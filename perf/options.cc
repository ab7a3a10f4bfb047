// Flag parsing for the *_perf benchmarks: nccl-tests' short flags, plus long spellings.
#include "options.h"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace braid::perf {
namespace {

struct TypeInfo {
  braidDataType_t type;
  const char* name;
  size_t size;
  bool isFloat;
};
// Indexed by braidDataType_t.
constexpr TypeInfo kTypes[] = {
    {braidInt8, "int8", 1, false},     {braidUint8, "uint8", 1, false},      {braidInt32, "int32", 4, false},
    {braidUint32, "uint32", 4, false}, {braidInt64, "int64", 8, false},      {braidUint64, "uint64", 8, false},
    {braidFloat16, "half", 2, true},   {braidBfloat16, "bfloat16", 2, true}, {braidFloat32, "float", 4, true},
    {braidFloat64, "double", 8, true},
};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == braidNumTypes);
constexpr const char* kOpNames[] = {"sum", "prod", "min", "max", "avg"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == braidNumOps);
constexpr const char* kAverageNames[] = {"rank0", "avg", "min", "max"};

bool parseTypes(const char* s, std::vector<braidDataType_t>* out) {
  static const struct {
    const char* name;
    braidDataType_t type;
  } kAliases[] = {{"float16", braidFloat16}, {"float32", braidFloat32}, {"float64", braidFloat64}};
  out->clear();
  for (const TypeInfo& t : kTypes) {
    if (std::strcmp(s, "all") == 0 || std::strcmp(s, t.name) == 0) out->push_back(t.type);
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

bool parseFlag(int flag, const char* arg, Options* o) {
  int v = 0;
  switch (flag) {
    case 'b':
      return parseSize(arg, &o->minBytes);
    case 'e':
      return parseSize(arg, &o->maxBytes);
    case 'f':
      if (!parseInt(arg, 2, 1 << 20, &v)) return false;
      o->stepFactor = static_cast<size_t>(v);
      o->stepBytes = 0;
      return true;
    case 'i':
      return parseSize(arg, &o->stepBytes) && o->stepBytes > 0;
    case 'n':
      return parseInt(arg, 1, 1 << 30, &o->iters);
    case 'w':
      return parseInt(arg, 0, 1 << 30, &o->warmup);
    case 'B':
      return parseSize(arg, &o->budget) && o->budget > 0;
    case 'm':  // nccl-tests' aggregation count, or where the buffers live
      if (std::strcmp(arg, "device") == 0 || std::strcmp(arg, "host") == 0) {
        o->device = std::strcmp(arg, "device") == 0;
        return true;
      }
      return parseInt(arg, 1, 1 << 20, &o->agg);
    case 'g':
      return parseInt(arg, 0, 1023, &o->gpu);
    case 'c':
      if (!parseInt(arg, 0, 1, &v)) return false;
      o->check = v != 0;
      return true;
    case 'z':
      if (!parseInt(arg, 0, 1, &v)) return false;
      o->blocking = v != 0;
      return true;
    case 'R':
      if (!parseInt(arg, 0, 1, &v)) return false;
      o->registered = v != 0;
      return true;
    case 'a':
      return parseInt(arg, 0, 3, &o->average);
    case 'd':
      return parseTypes(arg, &o->types);
    case 'o':
      return parseOps(arg, &o->ops);
    case 'r':
      o->allRoots = std::strcmp(arg, "all") == 0;
      return o->allRoots || parseInt(arg, 0, 1 << 30, &o->root);
    case 'J':
      o->json = arg;
      return !o->json.empty();
    case 'A':
      o->algo = arg;
      return !o->algo.empty();
    default:
      return false;
  }
}

void printHelp(const char* prog) {
  std::printf(
      "usage: %s [flags]   (one process per rank, started by braidrun, mpirun, srun or torchrun)\n"
      "  -b, --minbytes N        smallest size, K/M/G suffixes (default 32M)\n"
      "  -e, --maxbytes N        largest size (default 32M)\n"
      "  -f, --stepfactor N      multiply the size by N from row to row (default 2)\n"
      "  -i, --stepbytes N       add N bytes from row to row instead\n"
      "  -n, --iters N           timed iterations (default 20)\n"
      "  -w, --warmup_iters N    untimed iterations before them (default 5)\n"
      "  -B, --budget N          iterations per size from a byte budget instead of -n/-w: min(1000,\n"
      "                          max(5, N / size)), a tenth of that (at least 5) to warm up: the\n"
      "                          rule of the Open MPI programs in ../shared/peers, so that both\n"
      "                          sides of a comparison average as many calls (default: off)\n"
      "  -m, --agg_iters N       operations posted per iteration before waiting (default 1)\n"
      "  -m device|host          buffers in CUDA device memory, calls on a stream (default host)\n"
      "  -g, --gpu DEV           the CUDA device of -m device (default: the current one)\n"
      "  -c, --check 0|1         check the results (default 1)\n"
      "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16\n"
      "                          float|float32 double|float64, or all (default float)\n"
      "  -o, --op OP             sum prod min max avg, or all (default sum)\n"
      "  -r, --root R            root rank of rooted collectives, or all (default 0)\n"
      "  -z, --blocking 0|1      1: blocking calls; 0: nonblocking calls and waits (default 0)\n"
      "  -R, --local_register 0|1 1: host buffers from braidMemAlloc, registered with braidCommRegister\n"
      "                          (on one host they are read and written in place; default 0)\n"
      "  -a, --average 0..3      time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max (default 1)\n"
      "  -J, --json FILE         also write the header and rows as JSON (rank 0)\n"
      "  -A, --algo NAME         set BRAID_ALGO before initialization\n"
      "  -h, --help              this text\n",
      prog);
}

}  // namespace

bool parseInt(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

void budgetIters(size_t budget, size_t bytes, int* iters, int* warmup) {
  const size_t it = budget / std::max<size_t>(bytes, 1);
  *iters = static_cast<int>(std::clamp<size_t>(it, 5, 1000));
  *warmup = std::max(*iters / 10, 5);
}

Options parseOptions(int argc, char** argv) {
  static const option kLong[] = {{"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"budget", required_argument, nullptr, 'B'},
                                 {"agg_iters", required_argument, nullptr, 'm'},
                                 {"gpu", required_argument, nullptr, 'g'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"root", required_argument, nullptr, 'r'},
                                 {"blocking", required_argument, nullptr, 'z'},
                                 {"local_register", required_argument, nullptr, 'R'},
                                 {"average", required_argument, nullptr, 'a'},
                                 {"json", required_argument, nullptr, 'J'},
                                 {"algo", required_argument, nullptr, 'A'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  const char* prog = argc > 0 ? argv[0] : "perf";
  if (const char* slash = std::strrchr(prog, '/')) prog = slash + 1;
  Options o;
  opterr = 0;  // one line of our own instead of getopt's
  int flag = 0;
  while ((flag = getopt_long(argc, argv, ":b:e:f:i:n:w:B:m:g:c:d:o:r:z:R:a:J:A:h", kLong, nullptr)) != -1) {
    if (flag == 'h') {
      printHelp(prog);
      std::exit(0);
    }
    if (flag == ':') {
      std::fprintf(stderr, "%s: %s needs a value (see -h)\n", prog, argv[optind - 1]);
      std::exit(2);
    }
    if (flag == '?') {
      if (optopt != 0) {
        std::fprintf(stderr, "%s: unknown flag '-%c' (see -h)\n", prog, optopt);
      } else {
        std::fprintf(stderr, "%s: unknown flag '%s' (see -h)\n", prog, argv[optind - 1]);
      }
      std::exit(2);
    }
    if (!parseFlag(flag, optarg, &o)) {
      std::fprintf(stderr, "%s: invalid value '%s' for -%c (see -h)\n", prog, optarg, flag);
      std::exit(2);
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s' (see -h)\n", prog, argv[optind]);
    std::exit(2);
  }
  if (o.minBytes > o.maxBytes) {
    std::fprintf(stderr, "%s: -b %zu is larger than -e %zu\n", prog, o.minBytes, o.maxBytes);
    std::exit(2);
  }
  return o;
}

const char* typeName(braidDataType_t type) { return kTypes[type].name; }
size_t typeSize(braidDataType_t type) { return kTypes[type].size; }
bool typeIsFloat(braidDataType_t type) { return kTypes[type].isFloat; }
const char* opName(braidRedOp_t op) { return kOpNames[op]; }
const char* averageName(int average) { return kAverageNames[average]; }

bool parseSize(const char* s, size_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return false;
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) ++end;
  if (*end != '\0' || (shift != 0 && v > (~0ull >> shift))) return false;
  *out = static_cast<size_t>(v << shift);
  return true;
}

}  // namespace braid::perf
