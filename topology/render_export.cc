// braid-topo's machine-readable renderings: JSON (every field of the topology file, for scripts) and
// a Graphviz digraph (the tree as edges, one cluster per package, NVLinks and other links as
// undirected edges between devices).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "topology/text_util.h"
#include "topology/topology.h"

namespace braid::topo {

namespace {

std::string jsonNumber(double v) { return std::isfinite(v) ? text::formatDouble(v) : "null"; }

std::string hexString(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "\"0x%04x\"", v);
  return buf;
}

const char* linkKindJson(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlink:
      return "\"nvlink\"";
    case LinkKind::kPcie:
      return "\"pcie\"";
    case LinkKind::kNet:
      return "\"net\"";
  }
  return "\"?\"";
}

template <typename T>
std::string jsonIntArray(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

}  // namespace

std::string renderJson(const TopoFile& f) {
  using text::jsonString;
  const Machine& m = f.machine;
  std::string out = "{\n  \"version\": " + std::to_string(f.version) + ",\n";
  out += "  \"machine\": {\"hostname\": " + jsonString(m.hostname) + ", \"cores\": " + std::to_string(m.cores) +
         ", \"pus\": " + std::to_string(m.pus) + "},\n";
  out += "  \"nodes\": [";
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const Node& n = m.nodes[i];
    out += i ? ",\n    " : "\n    ";
    out += "{\"id\": " + std::to_string(i) + ", \"kind\": \"" + nodeKindName(n.kind) +
           "\", \"parent\": " + std::to_string(n.parent) + ", \"index\": " + std::to_string(n.index) +
           ", \"name\": " + jsonString(n.name) + ", \"busid\": " + jsonString(n.busId) +
           ", \"class\": " + hexString(n.pciClass) + ", \"vendor\": " + hexString(n.vendor) +
           ", \"device\": " + hexString(n.device) + ", \"bytes\": " + std::to_string(n.bytes) +
           ", \"gbps\": " + jsonNumber(n.gbps) + ", \"numa\": " + std::to_string(n.numa) +
           ", \"cpus\": " + jsonString(n.cpus) + "}";
  }
  out += m.nodes.empty() ? "],\n" : "\n  ],\n";
  out += "  \"links\": [";
  for (size_t i = 0; i < m.links.size(); ++i) {
    const Link& l = m.links[i];
    out += i ? ",\n    " : "\n    ";
    out += "{\"a\": " + std::to_string(l.a) + ", \"b\": " + std::to_string(l.b) +
           ", \"kind\": " + linkKindJson(l.kind) + ", \"count\": " + std::to_string(l.count) +
           ", \"gbps\": " + jsonNumber(l.gbps) + "}";
  }
  out += m.links.empty() ? "],\n" : "\n  ],\n";
  out += "  \"missing\": [";
  for (size_t i = 0; i < m.missing.size(); ++i) out += (i ? ",\n    " : "\n    ") + jsonString(m.missing[i]);
  out += m.missing.empty() ? "],\n" : "\n  ],\n";
  out += "  \"cost\": ";
  if (f.hasCost) {
    out += "{";
    bool first = true;
    for (const CostField& fld : costFields()) {
      out += std::string(first ? "" : ", ") + jsonString(fld.name) + ": " + jsonNumber(f.cost.*(fld.member));
      first = false;
    }
    out += "},\n";
  } else {
    out += "null,\n";
  }
  out += "  \"cluster\": ";
  if (f.hasCluster) {
    const ClusterShape& c = f.cluster;
    out += "{\"ranks\": " + std::to_string(c.nranks) + ", \"hosts\": " + jsonIntArray(c.hostOf) +
           ", \"cores\": " + jsonIntArray(c.hostCores) + "}\n";
  } else {
    out += "null\n";
  }
  return out + "}\n";
}

namespace {

// A DOT double-quoted string: quotes and backslashes escaped, control bytes dropped.
std::string dotString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

const char* dotShape(NodeKind k) {
  switch (k) {
    case NodeKind::kGpu:
      return "box3d";
    case NodeKind::kNic:
      return "cds";
    case NodeKind::kPciBridge:
      return "diamond";
    case NodeKind::kNuma:
      return "cylinder";
    default:
      return "box";
  }
}

}  // namespace

std::string renderDot(const Machine& m) {
  const int n = static_cast<int>(m.nodes.size());
  // The package each node sits in (-1: none), from the parent chain; parents come first, so one
  // forward pass suffices.
  std::vector<int> pkg(n, -1);
  for (int i = 0; i < n; ++i) {
    if (m.nodes[i].kind == NodeKind::kPackage) {
      pkg[i] = i;
    } else if (text::validParent(m, i)) {
      pkg[i] = pkg[m.nodes[i].parent];
    }
  }
  std::string out = "digraph braid_topology {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  auto nodeLine = [&](int i, const char* indent) {
    out += std::string(indent) + "n" + std::to_string(i) + " [label=" + dotString(text::nodeLabel(m, i)) +
           ", shape=" + dotShape(m.nodes[i].kind) + "];\n";
  };
  std::vector<std::vector<int>> members(n);
  for (int i = 0; i < n; ++i) {
    if (pkg[i] >= 0) members[pkg[i]].push_back(i);
  }
  for (int p = 0; p < n; ++p) {
    if (m.nodes[p].kind != NodeKind::kPackage) continue;
    out += "  subgraph cluster_package" + std::to_string(p) +
           " {\n    label=" + dotString("Package #" + std::to_string(m.nodes[p].index)) + ";\n    style=rounded;\n";
    for (int i : members[p]) nodeLine(i, "    ");
    out += "  }\n";
  }
  for (int i = 0; i < n; ++i) {
    if (pkg[i] < 0) nodeLine(i, "  ");
  }
  for (int i = 0; i < n; ++i) {
    if (text::validParent(m, i)) out += "  n" + std::to_string(m.nodes[i].parent) + " -> n" + std::to_string(i) + ";\n";
  }
  for (const Link& l : m.links) {
    if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n) continue;
    std::string label = l.kind == LinkKind::kNvlink ? "NV" + std::to_string(l.count)
                                                    : std::string(l.kind == LinkKind::kPcie ? "PCIe" : "net");
    if (l.gbps > 0) label.append(" ").append(text::formatDouble(l.gbps)).append(" GB/s");
    out += "  n" + std::to_string(l.a) + " -> n" + std::to_string(l.b) +
           " [dir=none, constraint=false, color=" + (l.kind == LinkKind::kNvlink ? "green4" : "blue") +
           ", label=" + dotString(label) + "];\n";
  }
  return out + "}\n";
}

}  // namespace braid::topo
