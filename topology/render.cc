// braid-topo's text renderings: the tree (lstopo's console shape, compact) and the GPU/NIC
// connectivity matrix (nvidia-smi topo -m's shape). Both take any Machine, detected or loaded, and
// walk it without recursion; a node whose parent is not an earlier node is shown at the top level.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "topology/text_util.h"
#include "topology/topology.h"

namespace braid::topo {

namespace text {

std::string nodeLabel(const Machine& m, int id) {
  const Node& n = m.nodes[id];
  char buf[64];
  std::string s;
  auto ordinal = [&](const char* what) { return std::string(what) + (n.index >= 0 ? std::to_string(n.index) : "?"); };
  auto pciIds = [&] {
    snprintf(buf, sizeof(buf), "%04x:%04x", n.vendor, n.device);
    return std::string(buf);
  };
  auto numa = [&] { return std::string("NUMA ").append(n.numa >= 0 ? std::to_string(n.numa) : "?"); };
  switch (n.kind) {
    case NodeKind::kMachine:
      s = "Machine";
      if (!m.hostname.empty()) s.append(" ").append(shown(m.hostname, 64));
      s += " (";
      if (n.bytes) s += humanBytes(n.bytes) + ", ";
      s += std::to_string(m.cores) + " cores, " + std::to_string(m.pus) + " PUs)";
      return s;
    case NodeKind::kPackage:
      s = ordinal("Package #");
      if (!n.cpus.empty()) s += " (cpus " + n.cpus + ")";
      return s;
    case NodeKind::kNuma:
      s = ordinal("NUMA #") + " (" + humanBytes(n.bytes);
      if (!n.cpus.empty()) s += ", cpus " + n.cpus;
      return s + ")";
    case NodeKind::kCache:
      s = n.name.empty() ? ordinal("L") : n.name;
      return s + " (" + humanBytes(n.bytes) + ")";
    case NodeKind::kCore:
      s = ordinal("Core #");
      if (!n.cpus.empty()) s += (n.cpus.find_first_of(",-") == std::string::npos ? " (PU " : " (PUs ") + n.cpus + ")";
      return s;
    case NodeKind::kPciBridge:
      s = isHostBridge(m, id) ? "HostBridge" : "PCIBridge";
      if (!n.busId.empty()) s += " " + n.busId;
      if (n.gbps > 0) s += " (" + formatDouble(n.gbps) + " GB/s)";
      return s;
    case NodeKind::kPciDevice:
      snprintf(buf, sizeof(buf), " (%04x:%04x, class %04x)", n.vendor, n.device, n.pciClass);
      s = "PCI " + n.busId + buf;
      if (!n.name.empty()) s += " \"" + shown(n.name, 80) + "\"";
      return s;
    case NodeKind::kGpu:
      s = ordinal("GPU") + " " + n.busId;
      if (!n.name.empty()) s += " \"" + shown(n.name, 80) + "\"";
      s += " (" + pciIds();
      if (n.bytes) s += ", " + humanBytes(n.bytes);
      return s + ", " + numa() + ")";
    case NodeKind::kNic:
      s = ordinal("NIC") + " " + shown(n.name, 80);
      if (!n.busId.empty()) s += " " + n.busId;
      s += " (" + pciIds() + ", " + numa() + ", ";
      s += n.gbps > 0 ? formatDouble(n.gbps) + " Gb/s" : std::string("speed unknown");
      return s + ")";
  }
  return "?";
}

bool validParent(const Machine& m, int id) {
  const int p = m.nodes[id].parent;
  return p >= 0 && p < id;
}

bool isHostBridge(const Machine& m, int id) {
  const Node& n = m.nodes[id];
  if (n.kind != NodeKind::kPciBridge) return false;
  if (!validParent(m, id)) return true;
  const NodeKind pk = m.nodes[n.parent].kind;
  return pk != NodeKind::kPciBridge && pk != NodeKind::kPciDevice && pk != NodeKind::kGpu && pk != NodeKind::kNic;
}

}  // namespace text

namespace {

using text::validParent;

constexpr size_t kCollapseRun = 3;  // this many identical cache/core siblings or more print as one + a summary
constexpr size_t kMaxSignature = 4096;
constexpr int kMaxIndent = 64;  // deeper levels print at this indentation (a hostile file could nest 65536)
// Beyond this many GPUs and NICs the matrix is not drawn: no machine has that many, and the matrix
// costs devices^2 * PCI depth.
constexpr size_t kMaxMatrixDevices = 128;
// Ancestor chains are cut here; real PCI trees are a handful of levels deep.
constexpr size_t kMaxDepth = 256;

std::vector<std::vector<int>> childrenOf(const Machine& m) {
  std::vector<std::vector<int>> kids(m.nodes.size());
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    if (validParent(m, static_cast<int>(i))) kids[m.nodes[i].parent].push_back(static_cast<int>(i));
  }
  return kids;
}

// The shape of a cache/core subtree without its indices and cpus: equal signatures print once. Empty
// for anything else (never collapsed). Children have larger ids than parents, so one pass from the
// last node up sees every child before its parent.
std::vector<std::string> signatures(const Machine& m, const std::vector<std::vector<int>>& kids) {
  std::vector<std::string> sig(m.nodes.size());
  for (size_t i = m.nodes.size(); i-- > 0;) {
    const Node& n = m.nodes[i];
    if (n.kind == NodeKind::kCore && kids[i].empty()) {
      sig[i] = "core:" + std::to_string(text::cpuCount([&] {
                 text::CpuRanges r;
                 std::string why;
                 text::parseCpuList(n.cpus, &r, &why);
                 return r;
               }()));
    } else if (n.kind == NodeKind::kCache) {
      // Bounded: a cache with a huge subtree is simply never collapsed.
      std::string s = "cache:" + n.name + ":" + std::to_string(n.bytes) + "{";
      bool ok = true;
      for (size_t k = 0; k < kids[i].size() && ok; ++k) {
        const std::string& ks = sig[kids[i][k]];
        ok = !ks.empty() && s.size() + ks.size() < kMaxSignature;
        s.append(ks).append(";");
      }
      if (ok) sig[i] = s + "}";
    }
  }
  return sig;
}

// "+ 55 more alike: 55 cores, PUs 1-55,113-167" for siblings first..last of a collapsed run.
std::string runSummary(const Machine& m, const std::vector<std::vector<int>>& kids, const std::vector<int>& run) {
  text::CpuRanges all;
  size_t cores = 0;
  std::vector<int> stack(run.begin(), run.end());
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (m.nodes[id].kind == NodeKind::kCore) {
      ++cores;
      text::CpuRanges r;
      std::string why;
      if (text::parseCpuList(m.nodes[id].cpus, &r, &why)) all.insert(all.end(), r.begin(), r.end());
    }
    stack.insert(stack.end(), kids[id].begin(), kids[id].end());
  }
  const text::CpuRanges pus = text::mergeCpuRanges(all, {});  // one sort, not one merge per core
  std::string s = "+ " + std::to_string(run.size()) + " more alike: " + std::to_string(cores) + " cores";
  if (!pus.empty()) s += ", PUs " + text::formatCpuList(pus);
  return s;
}

}  // namespace

std::string renderTree(const Machine& m) {
  const auto kids = childrenOf(m);
  const auto sig = signatures(m, kids);
  struct Item {
    int id;  // node to print, or -1 for `line`
    int depth;
    std::string line;  // a run summary
  };
  std::vector<Item> stack;
  for (size_t i = m.nodes.size(); i-- > 0;) {
    if (!validParent(m, static_cast<int>(i))) stack.push_back({static_cast<int>(i), 0, {}});
  }
  std::string out;
  std::vector<Item> next;
  while (!stack.empty()) {
    Item it = std::move(stack.back());
    stack.pop_back();
    out.append(2 * std::min(it.depth, kMaxIndent), ' ');
    if (it.id < 0) {
      out += it.line + "\n";
      continue;
    }
    out += text::nodeLabel(m, it.id) + "\n";
    // Children in order; a run of >= kCollapseRun siblings with one signature becomes its first
    // member and a summary line.
    const std::vector<int>& ks = kids[it.id];
    next.clear();
    for (size_t a = 0; a < ks.size();) {
      size_t b = a + 1;
      while (b < ks.size() && !sig[ks[a]].empty() && sig[ks[b]] == sig[ks[a]]) ++b;
      next.push_back({ks[a], it.depth + 1, {}});
      if (b - a >= kCollapseRun) {
        next.push_back({-1, it.depth + 1, runSummary(m, kids, std::vector<int>(ks.begin() + a + 1, ks.begin() + b))});
      } else {
        b = a + 1;
      }
      a = b;
    }
    for (auto n = next.rbegin(); n != next.rend(); ++n) stack.push_back(std::move(*n));
  }
  return out;
}

// ---- the GPU/NIC matrix ----

namespace {

// The node and its ancestors, nearest first. Parents are earlier nodes, so the chain ends; it is cut
// at kMaxDepth.
std::vector<int> ancestry(const Machine& m, int id) {
  std::vector<int> chain{id};
  while (validParent(m, chain.back()) && chain.size() < kMaxDepth) chain.push_back(m.nodes[chain.back()].parent);
  return chain;
}

int packageOf(const Machine& m, const std::vector<int>& chain) {
  for (int id : chain) {
    if (m.nodes[id].kind == NodeKind::kPackage) return id;
  }
  return -1;
}

// For one row of the matrix: where each node sits in the row device's ancestor chain.
class ChainIndex {
 public:
  explicit ChainIndex(size_t nodes) : row_(nodes, -1), pos_(nodes, 0) {}
  void mark(int row, const std::vector<int>& chain) {
    for (size_t k = 0; k < chain.size(); ++k) {
      row_[chain[k]] = row;
      pos_[chain[k]] = k;
    }
  }
  // Position in the marked chain, or -1.
  long find(int row, int node) const { return row_[node] == row ? static_cast<long>(pos_[node]) : -1; }

 private:
  std::vector<int> row_;
  std::vector<size_t> pos_;
};

// How traffic between devices a and b (ancestor chains ca, cb; ca marked in `idx` as `row`) travels,
// in nvidia-smi's vocabulary.
std::string relation(const Machine& m, const std::vector<int>& ca, const std::vector<int>& cb, const ChainIndex& idx,
                     int row, int nvlinks) {
  if (ca[0] == cb[0]) return "X";
  if (nvlinks > 0) return "NV" + std::to_string(nvlinks);
  long ia = -1;
  size_t ib = 0;
  for (; ib < cb.size() && ia < 0; ++ib) ia = idx.find(row, cb[ib]);
  if (ia >= 0) {  // lowest common ancestor ca[ia] == cb[ib - 1]
    --ib;
    const int lca = ca[ia];
    const Node& l = m.nodes[lca];
    if (l.kind == NodeKind::kPciBridge && text::isHostBridge(m, lca)) return "PHB";
    if (l.kind == NodeKind::kPciBridge || l.kind == NodeKind::kPciDevice) {
      // Within one PCIe switch: its upstream port is the common bridge and each side crosses at most
      // one more bridge (its downstream port). Anything deeper is PXB.
      auto bridgesBelow = [&](const std::vector<int>& c, size_t upto) {
        int n = 0;
        for (size_t i = 1; i < upto; ++i) n += m.nodes[c[i]].kind == NodeKind::kPciBridge;
        return n;
      };
      return bridgesBelow(ca, ia) <= 1 && bridgesBelow(cb, ib) <= 1 ? "PIX" : "PXB";
    }
  }
  // No common PCI ancestor: different host bridges (or devices placed without a PCI tree).
  const Node &na = m.nodes[ca[0]], &nb = m.nodes[cb[0]];
  if (na.numa >= 0 && nb.numa >= 0) return na.numa == nb.numa ? "NODE" : "SYS";
  const int pa = packageOf(m, ca), pb = packageOf(m, cb);
  return pa >= 0 && pa == pb ? "NODE" : "SYS";
}

std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

}  // namespace

std::string renderMatrix(const Machine& m) {
  std::vector<int> dev;
  std::vector<std::string> names;
  for (NodeKind k : {NodeKind::kGpu, NodeKind::kNic}) {
    int ord = 0;
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      if (m.nodes[i].kind != k) continue;
      dev.push_back(static_cast<int>(i));
      names.push_back((k == NodeKind::kGpu ? "GPU" : "NIC") + std::to_string(ord++));
    }
  }
  const int gpus = m.count(NodeKind::kGpu);
  const size_t d = dev.size();
  if (d == 0) return "no GPUs or NICs: no connectivity matrix\n";
  if (d > kMaxMatrixDevices) return std::to_string(d) + " GPUs and NICs: too many for a matrix\n";
  // NVLinks per device pair, in one pass over the links.
  std::vector<int> devOf(m.nodes.size(), -1);
  for (size_t i = 0; i < d; ++i) devOf[dev[i]] = static_cast<int>(i);
  std::vector<std::vector<int>> nv(d, std::vector<int>(d, 0));
  for (const Link& l : m.links) {
    const bool inRange =
        l.a >= 0 && l.b >= 0 && l.a < static_cast<int>(m.nodes.size()) && l.b < static_cast<int>(m.nodes.size());
    if (l.kind != LinkKind::kNvlink || !inRange || devOf[l.a] < 0 || devOf[l.b] < 0) continue;
    nv[devOf[l.a]][devOf[l.b]] += l.count;
    nv[devOf[l.b]][devOf[l.a]] += l.count;
  }
  std::vector<std::vector<int>> chains(d);
  for (size_t i = 0; i < d; ++i) chains[i] = ancestry(m, dev[i]);
  ChainIndex idx(m.nodes.size());
  size_t w = 6;
  std::vector<std::vector<std::string>> cell(d, std::vector<std::string>(d));
  for (size_t i = 0; i < d; ++i) {
    w = std::max(w, names[i].size() + 2);
    idx.mark(static_cast<int>(i), chains[i]);
    for (size_t j = 0; j < d; ++j) {
      cell[i][j] = relation(m, chains[i], chains[j], idx, static_cast<int>(i), nv[i][j]);
      w = std::max(w, cell[i][j].size() + 2);
    }
  }
  std::string out = pad("", w);
  for (const std::string& n : names) out += pad(n, w);
  out += "CPU affinity    NUMA\n";
  for (size_t i = 0; i < dev.size(); ++i) {
    out += pad(names[i], w);
    for (size_t j = 0; j < dev.size(); ++j) out += pad(cell[i][j], w);
    const Node& d = m.nodes[dev[i]];
    std::string cpus = "?";
    for (const Node& n : m.nodes) {
      if (n.kind == NodeKind::kNuma && d.numa >= 0 && n.index == d.numa && !n.cpus.empty()) cpus = n.cpus;
    }
    out += pad(cpus, 16) + (d.numa >= 0 ? std::to_string(d.numa) : "?") + "\n";
  }
  out +=
      "\nLegend:\n"
      "  X     the device itself\n"
      "  NV#   NVLink: # links bonded between the two GPUs\n"
      "  PIX   PCIe within one switch or bridge\n"
      "  PXB   PCIe across several bridges or switches, below one host bridge\n"
      "  PHB   PCIe through a host bridge (the CPU's root complex)\n"
      "  NODE  PCIe through two host bridges of one NUMA node\n"
      "  SYS   PCIe and the link between NUMA nodes / sockets\n";
  if (dev.size() > static_cast<size_t>(gpus)) {
    out += "\nNICs:\n";
    for (size_t i = gpus; i < dev.size(); ++i)
      out += "  " + names[i] + ": " + text::shown(m.nodes[dev[i]].name, 80) + "\n";
  }
  if (gpus == 0) out += "\nnote: no GPUs on this machine: the matrix shows the NICs only\n";
  return out;
}

}  // namespace braid::topo
