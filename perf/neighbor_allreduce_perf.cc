// neighbor_allreduce_perf: braidNeighborAllReduce over a named graph, chosen with
//   -G, --graph NAME   ring | exp2 | hypercube | onepeer_exp2 (default exp2)
// on top of the common flags. size = count elements. busbw = algbw * d, d = the in-degree of the
// graph (ring 2, or 1 on two ranks; exp2 ceil(log2 n); hypercube log2 n; onepeer_exp2 1): each rank
// receives d whole buffers (and sends as many), so busbw is the data one rank moves per second in
// each direction, comparable with sendrecv_perf's (d = 1).
//
// The result is a weighted average, so the redop column reads "avg" and -o accepts only avg (the
// default here). The check: rank r's input at index i is D * ((3r + i) % 5), D = 1 / the graph's
// uniform weight, and the expected value, the weighted sum over the rank and its in-neighbours, is
// computed here from the graph's definition (written apart from the library's, as the reference).
// The products are then small integers, which 16-bit types hold exactly; comparisons use the
// harness's tolerance for averages (1e-2 for 16-bit types, 1e-5 float, 1e-12 double). Wrong values
// make the exit status non-zero, as in every *_perf tool. -d takes floating types only.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

namespace braid::perf {
namespace {

enum class GraphKind { kRing, kExp2, kHypercube, kOnePeerExp2 };

struct GraphState {
  const char* name = "exp2";
  GraphKind kind = GraphKind::kExp2;
  braidGraph_t graph = nullptr;  // created at the first post (every rank posts the same sequence)
  uint64_t calls = 0;            // posts so far: onepeer_exp2 rotates once per call
} g;

int ceilLog2(int n) {
  int k = 0;
  while ((1LL << k) < n) ++k;
  return k;
}

int mod(long long a, int n) { return static_cast<int>((a % n + n) % n); }

// Rank r's in-neighbours at call t, each with weight `weight` (the graph is uniform); selfWeight is
// the same `weight`.
struct Side {
  double weight = 1;
  std::vector<int> in;
};

Side sideOf(int r, int n, uint64_t t) {
  Side s;
  if (n <= 1) return s;
  const int levels = ceilLog2(n);
  switch (g.kind) {
    case GraphKind::kRing:
      s.in = n == 2 ? std::vector<int>{1 - r} : std::vector<int>{mod(r - 1, n), mod(r + 1, n)};
      break;
    case GraphKind::kExp2:
      for (int k = 0; k < levels; ++k) s.in.push_back(mod(r - (1LL << k), n));
      break;
    case GraphKind::kHypercube:
      for (int k = 0; k < levels; ++k) s.in.push_back(r ^ (1 << k));
      break;
    case GraphKind::kOnePeerExp2:
      s.in.push_back(mod(r - (1LL << (t % static_cast<uint64_t>(levels))), n));
      break;
  }
  s.weight = 1.0 / static_cast<double>(s.in.size() + 1);
  return s;
}

double busFactor(int n) { return static_cast<double>(sideOf(0, n, 0).in.size()); }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  size_t count = bytes / ctx.eltSize;
  return Sizes{count, count, count, count * ctx.eltSize};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (g.graph == nullptr) PERF_CHECK(braidGraphCreateNamed(c.comm, g.name, &g.graph));
  if (reqs == nullptr) {
    PERF_CHECK(braidNeighborAllReduce(send, recv, c.count, c.type, g.graph, c.comm, nullptr));
  } else {
    PERF_CHECK(braidINeighborAllReduce(send, recv, c.count, c.type, g.graph, c.comm, nullptr, reqs->add()));
  }
  ++g.calls;
}

double input(const Ctx& ctx, int rank, size_t index) {
  const double d = 1.0 / sideOf(rank, ctx.nranks, 0).weight;  // the same for every rank and call
  return d * static_cast<double>((3 * static_cast<size_t>(rank) + index) % 5);
}

// Called after the check run, which was the last post: its rotation is calls - 1.
Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  const Side s = sideOf(ctx.rank, ctx.nranks, g.calls - 1);
  double want = s.weight * input(ctx, ctx.rank, index);
  for (int peer : s.in) want += s.weight * input(ctx, peer, index);
  return Expect::Value(want);
}

// Host buffers only: graph collectives take no stream (-m device is refused).
constexpr CollDesc kDesc{
    "neighbor_allreduce", /*reduces=*/true, /*rooted=*/false, 1, busFactor, sizes, post, input, expect,
    /*hostOnly=*/true};

// The value of flag -X / --long in argv[*i] ("-X v", "-Xv", "--long v", "--long=v"), advancing *i
// past a separate value. nullptr when argv[*i] is another flag.
const char* flagValue(int argc, char** argv, int* i, char shortName, const char* longName) {
  const char* a = argv[*i];
  const std::string dashed = std::string("--") + longName;
  if (a[0] == '-' && a[1] == shortName) {
    if (a[2] != '\0') return a + 2;
  } else if (dashed == a) {
  } else if (std::strncmp(a, (dashed + "=").c_str(), dashed.size() + 1) == 0) {
    return a + dashed.size() + 1;
  } else {
    return nullptr;
  }
  if (*i + 1 >= argc) return nullptr;  // the harness reports the missing value
  return argv[++*i];
}

bool isFloatName(const char* t) {
  for (const char* name : {"half", "float16", "bfloat16", "float", "float32", "double", "float64"})
    if (std::strcmp(t, name) == 0) return true;
  return false;
}

// Takes -G out of argv, checks -d and -o, and adds -o avg when absent. Exits 2 on a bad value.
std::vector<char*> preparse(int argc, char** argv) {
  static char opFlag[] = "-o", avg[] = "avg";
  std::vector<char*> out{argv[0]};
  bool sawOp = false;
  for (int i = 1; i < argc; ++i) {
    const int first = i;
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0)
      std::printf("  -G, --graph NAME        ring exp2 hypercube onepeer_exp2 (default exp2); see below\n");
    if (std::strcmp(argv[i], "--") == 0) {
      for (; i < argc; ++i) out.push_back(argv[i]);
      break;
    }
    if (const char* v = flagValue(argc, argv, &i, 'G', "graph")) {
      static const struct {
        const char* name;
        GraphKind kind;
      } kGraphs[] = {{"ring", GraphKind::kRing},
                     {"exp2", GraphKind::kExp2},
                     {"hypercube", GraphKind::kHypercube},
                     {"onepeer_exp2", GraphKind::kOnePeerExp2}};
      bool known = false;
      for (const auto& e : kGraphs) {
        if (std::strcmp(v, e.name) != 0) continue;
        g.name = e.name;
        g.kind = e.kind;
        known = true;
      }
      if (!known) {
        std::fprintf(stderr, "neighbor_allreduce_perf: unknown graph '%s' (ring, exp2, hypercube, onepeer_exp2)\n", v);
        std::exit(2);
      }
      continue;  // not passed on
    }
    if (const char* v = flagValue(argc, argv, &i, 'd', "datatype")) {
      if (!isFloatName(v)) {
        std::fprintf(stderr, "neighbor_allreduce_perf: -d %s: floating types only (half, bfloat16, float, double)\n",
                     v);
        std::exit(2);
      }
    } else if (const char* v = flagValue(argc, argv, &i, 'o', "op")) {
      if (std::strcmp(v, "avg") != 0) {
        std::fprintf(stderr, "neighbor_allreduce_perf: -o %s: the result is a weighted average, -o takes avg only\n",
                     v);
        std::exit(2);
      }
      sawOp = true;
    }
    for (int k = first; k <= i; ++k) out.push_back(argv[k]);
  }
  if (!sawOp) {
    out.push_back(opFlag);
    out.push_back(avg);
  }
  out.push_back(nullptr);
  return out;
}

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) {
  using namespace braid::perf;
  std::vector<char*> args = preparse(argc, argv);
  const int rc = benchMain(static_cast<int>(args.size()) - 1, args.data(), kDesc);
  if (g.graph != nullptr) braidGraphDestroy(g.graph);  // allowed after the communicator is gone
  return rc;
}
