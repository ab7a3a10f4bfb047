// The selector's table and BRAID_ALGO. Built once per communicator: for each collective and each
// power-of-two size bucket, the algorithm the cost model predicts fastest at the bucket's upper
// bound. Ties go to the earlier algorithm in Algo order (ring first).
#include "topology/select.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace braid::topo {

namespace {

struct CollName {
  const char* name;
  Coll coll;
};
const CollName kCollNames[] = {
    {"allreduce", Coll::kAllReduce},
    {"broadcast", Coll::kBroadcast},
    {"reduce", Coll::kReduce},
    {"allgather", Coll::kAllGather},
    {"reducescatter", Coll::kReduceScatter},
    {"reduce_scatter", Coll::kReduceScatter},
    {"alltoall", Coll::kAllToAll},
    {"barrier", Coll::kBarrier},
    {"gather", Coll::kGather},
    {"scatter", Coll::kScatter},
};
constexpr Coll kTabled[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather, Coll::kReduceScatter,
                            Coll::kAllToAll,  Coll::kBarrier,   Coll::kGather, Coll::kScatter};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string knownAlgos() {
  std::string out;
  for (int i = 0; i < kNumAlgos; ++i) out += std::string(i ? ", " : "") + algoName(static_cast<Algo>(i));
  return out;
}

std::string algosOf(Coll c) {
  std::string out;
  for (int i = 0; i < kNumAlgos; ++i)
    if (algoAvailable(c, static_cast<Algo>(i)))
      out += std::string(out.empty() ? "" : ", ") + algoName(static_cast<Algo>(i));
  return out;
}

std::string sizeText(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%g %s", bytes, units[u]);
  return buf;
}

}  // namespace

Status parseAlgoSpec(const std::string& spec, std::array<Algo, kNumColls>* algo, std::array<bool, kNumColls>* set) {
  set->fill(false);
  std::array<Algo, kNumColls> perColl{};
  std::array<bool, kNumColls> perSet{};
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find_first_of(";,", pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = trim(spec.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    size_t colon = item.find(':');
    std::string collText = colon == std::string::npos ? "" : trim(item.substr(0, colon));
    std::string name = trim(colon == std::string::npos ? item : item.substr(colon + 1));
    Algo a;
    if (!parseAlgo(name.c_str(), &a))
      return errorf(braidInvalidArgument, "BRAID_ALGO: unknown algorithm '%s' (known: %s)", name.c_str(),
                    knownAlgos().c_str());
    if (colon == std::string::npos) {  // a name for every collective that has it
      bool any = false;
      for (Coll c : kTabled)
        if (algoAvailable(c, a)) {
          (*algo)[static_cast<int>(c)] = a;
          (*set)[static_cast<int>(c)] = true;
          any = true;
        }
      if (!any) return errorf(braidInvalidArgument, "BRAID_ALGO: no collective has algorithm '%s'", name.c_str());
      continue;
    }
    const CollName* found = nullptr;
    for (const CollName& cn : kCollNames)
      if (strcasecmp(cn.name, collText.c_str()) == 0) found = &cn;
    if (found == nullptr)
      return errorf(braidInvalidArgument,
                    "BRAID_ALGO: unknown collective '%s' (known: allreduce, broadcast, reduce, allgather, "
                    "reducescatter, alltoall, barrier, gather, scatter)",
                    collText.c_str());
    if (!algoAvailable(found->coll, a))
      return errorf(braidInvalidArgument, "BRAID_ALGO: %s has no algorithm '%s' (it has: %s)", found->name,
                    name.c_str(), algosOf(found->coll).c_str());
    perColl[static_cast<int>(found->coll)] = a;
    perSet[static_cast<int>(found->coll)] = true;
  }
  for (int i = 0; i < kNumColls; ++i)  // per-collective entries win over a global name, wherever written
    if (perSet[i]) {
      (*algo)[i] = perColl[i];
      (*set)[i] = true;
    }
  return okStatus();
}

Status Selector::init(const ClusterShape& cluster, const CostParams& cost, const std::string& algoSpec,
                      bool approximate) {
  std::array<Algo, kNumColls> forcedAlgo{};
  std::array<bool, kNumColls> forced{};
  BRAID_TRY(parseAlgoSpec(algoSpec, &forcedAlgo, &forced));
  const int ar = static_cast<int>(Coll::kAllReduce);
  if (forced[ar] && forcedAlgo[ar] == Algo::kGossip && !approximate)
    return errorf(braidInvalidArgument,
                  "BRAID_ALGO: gossip gives an approximate average; set BRAID_APPROXIMATE=1 to allow it");
  cluster_ = cluster;
  cost_ = cost;
  spec_ = algoSpec;
  approximate_ = approximate;
  forced_ = forced;
  for (Coll c : kTabled) {
    const int ci = static_cast<int>(c);
    for (int b = 0; b <= kMaxLog2; ++b) {
      const uint64_t bytes = b == 0 ? 1 : uint64_t(1) << b;
      Algo best = Algo::kRing, bestAvg = Algo::kRing;
      double bestT = std::numeric_limits<double>::infinity(), bestAvgT = bestT;
      // Two algorithms that the model prices alike (the chain and the trees of a large Broadcast
      // or Reduce on 4 ranks: n - 2 + K chunk steps each) must not take turns from one size to the
      // next on the last bits of their sums: one has to be faster by more than rounding, and a
      // tie keeps what the size below chose (ring first at the smallest).
      auto better = [](double t, double than) { return t < than * (1 - 1e-9); };
      const Entry below = b > 0 ? table_[ci][b - 1] : Entry{};
      for (int i = 0; i < kNumAlgos; ++i) {
        const Algo a = static_cast<Algo>(i);
        if (!algoAvailable(c, a)) continue;
        const double t = predictUs(c, a, bytes, cluster, cost);
        if (a != Algo::kGossip && (better(t, bestT) || (a == below.exact && !better(bestT, t)))) {
          bestT = t;
          best = a;
        }
        if ((a != Algo::kGossip || approximate) &&
            (better(t, bestAvgT) || (a == below.avgFloat && !better(bestAvgT, t)))) {
          bestAvgT = t;
          bestAvg = a;
        }
      }
      if (forced[ci]) {
        const Algo f = forcedAlgo[ci];
        bestAvg = f;
        if (f != Algo::kGossip) best = f;  // gossip serves only avg on floats; the rest keep the model's choice
      }
      table_[ci][b] = Entry{best, bestAvg};
    }
  }
  return okStatus();
}

std::string Selector::describe() const {
  std::string out;
  char line[256];
  for (Coll c : kTabled) {
    const int ci = static_cast<int>(c);
    for (int pass = 0; pass < 2; ++pass) {
      const bool avg = pass == 1;
      if (avg) {  // a second block only where avg on floats differs
        bool differs = false;
        for (int b = 0; b <= kMaxLog2; ++b) differs |= table_[ci][b].avgFloat != table_[ci][b].exact;
        if (!differs) continue;
      }
      int start = 0;
      for (int b = 0; b <= kMaxLog2; ++b) {
        const Algo a = avg ? table_[ci][b].avgFloat : table_[ci][b].exact;
        const bool last = b == kMaxLog2 || (avg ? table_[ci][b + 1].avgFloat : table_[ci][b + 1].exact) != a;
        if (!last) continue;
        std::string range = start == 0 ? "[0 B" : "(";
        if (start != 0) range += sizeText(std::ldexp(1.0, start - 1));
        range += ", ";
        range += b == kMaxLog2 ? "inf)" : sizeText(std::ldexp(1.0, b)) + "]";
        // Predicted at the range's ends (the open end at 1 GiB).
        const uint64_t lo = start == 0 ? 1 : uint64_t(1) << start, hi = uint64_t(1) << std::min(b, 30);
        snprintf(line, sizeof(line), "%-13s %-3s %-24s %-18s predicted %.3g us at %s, %.3g us at %s%s\n", collName(c),
                 avg ? "avg" : "", range.c_str(), algoNameFor(c, a), predictUs(c, a, lo, cluster_, cost_),
                 sizeText(static_cast<double>(lo)).c_str(), predictUs(c, a, std::max(lo, hi), cluster_, cost_),
                 sizeText(static_cast<double>(std::max(lo, hi))).c_str(), forced_[ci] ? " [BRAID_ALGO]" : "");
        out += line;
        start = b + 1;
      }
    }
  }
  return out;
}

}  // namespace braid::topo
