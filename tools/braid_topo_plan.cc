// braid-topo --plan and --config: what the selector would choose for a cluster (real or described
// by a topology file), and every BRAID_* knob with its default, value and help.
#include "tools/braid_topo_plan.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "src/base/config.h"
#include "topology/select.h"

namespace braid::tools {

namespace {

struct CollName {
  const char* name;
  Coll coll;
  double busFactor(int n) const {  // nccl-tests' bus bandwidth factor
    switch (coll) {
      case Coll::kAllReduce:
        return 2.0 * (n - 1) / n;
      case Coll::kAllGather:
      case Coll::kReduceScatter:
      case Coll::kAllToAll:
      case Coll::kGather:
      case Coll::kScatter:
        return static_cast<double>(n - 1) / n;
      default:
        return 1.0;
    }
  }
};
const CollName kColls[] = {{"allreduce", Coll::kAllReduce},
                           {"broadcast", Coll::kBroadcast},
                           {"reduce", Coll::kReduce},
                           {"allgather", Coll::kAllGather},
                           {"reducescatter", Coll::kReduceScatter},
                           {"alltoall", Coll::kAllToAll},
                           {"gather", Coll::kGather},
                           {"scatter", Coll::kScatter}};

std::string sizeText(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

}  // namespace

int printPlan(const topo::ClusterShape& cluster, const topo::CostParams& cost, const std::string& collText,
              const std::string& algoSpec, bool approximate) {
  const CollName* cn = nullptr;
  for (const CollName& c : kColls)
    if (collText == c.name) cn = &c;
  if (cn == nullptr) {
    fprintf(stderr,
            "braid-topo: unknown collective '%s' (allreduce, broadcast, reduce, allgather, reducescatter, alltoall, "
            "gather, scatter)\n",
            collText.c_str());
    return 2;
  }
  topo::Selector sel;
  Status st = sel.init(cluster, cost, algoSpec, approximate);
  if (!st.ok()) {
    fprintf(stderr, "braid-topo: %s\n", st.message().c_str());
    return 2;
  }
  int maxHost = cluster.maxHostSize();
  // Where some host moves calls through two-copy FIFOs (ClusterShape::hostTwoCopiesFrom): from how
  // many bytes of a call's buffers, per host.
  std::string fifo = cluster.twoCopiesList(cluster.nhosts);
  if (!fifo.empty()) fifo = "; two-copy FIFOs above " + fifo + " B of a call's buffers";
  printf("# %s on %d ranks, %d host%s (up to %d ranks per host%s%s)\n", cn->name, cluster.nranks, cluster.nhosts,
         cluster.nhosts == 1 ? "" : "s", maxHost, cluster.oversubscribed() ? ", more ranks than cores" : "",
         fifo.c_str());
  printf(
      "# cost: intra %.3g us + 1/%.4g GB/s, inter %.3g us + 1/%.4g GB/s (%s), reduce %.4g GB/s, oversub %.3g us, "
      "chunk %.0f B\n",
      cost.intraAlphaUs, cost.intraGbps, cost.interAlphaUs, cost.interGbps,
      cost.interLinks > 0 ? ("links per host: " + std::to_string(cost.interLinks)).c_str() : "a link per rank",
      cost.reduceGbps, cost.oversubUs, cost.chunkBytes);
  printf("%12s  %-18s %12s %10s %10s  %-18s %12s\n", "size", "algorithm", "time(us)", "algbw", "busbw", "runner-up",
         "time(us)");
  const double bus = cn->busFactor(cluster.nranks);
  for (uint64_t bytes = 8; bytes <= (uint64_t(1) << 30); bytes <<= 1) {
    const Algo pick = sel.pick(cn->coll, bytes);
    const double t = topo::predictUs(cn->coll, pick, bytes, cluster, cost);
    Algo second = pick;
    double t2 = std::numeric_limits<double>::infinity();
    for (int a = 0; a < kNumAlgos; ++a) {
      const Algo alt = static_cast<Algo>(a);
      if (alt == pick || alt == Algo::kGossip) continue;
      double ta = topo::predictUs(cn->coll, alt, bytes, cluster, cost);
      if (ta < t2) {
        t2 = ta;
        second = alt;
      }
    }
    const double algbw = t > 0 ? bytes / (t * 1e3) : 0;  // GB/s
    char alt[32] = "-";
    if (!std::isinf(t2)) snprintf(alt, sizeof(alt), "%.2f", t2);
    printf("%12s  %-18s %12.2f %10.2f %10.2f  %-18s %12s\n", sizeText(bytes).c_str(), algoNameFor(cn->coll, pick), t,
           algbw, algbw * bus, std::isinf(t2) ? "-" : algoName(second), alt);
  }
  return 0;
}

int printConfig() {
  // The value column says when the environment's value would fail init (checkParam's message).
  printf("%-28s %-10s %-16s %-28s %s\n", "variable", "default", "value", "accepted", "help");
  int bad = 0;
  for (const ParamInfo& p : allParams()) {
    const char* env = getenv(p.name);
    std::string value = env != nullptr && env[0] != '\0' ? env : "-";
    const std::string range = paramRange(p);
    printf("%-28s %-10s %-16s %-28s %s\n", p.name, p.defaultValue[0] ? p.defaultValue : "-", value.c_str(),
           range.empty() ? "text" : range.c_str(), p.help);
    Status s = checkParam(p.name);
    if (!s.ok()) {
      printf("%-28s   ^ invalid: %s\n", "", s.message().c_str());
      ++bad;
    }
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace braid::tools
