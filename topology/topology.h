// The machine as braid sees it: a tree of hardware objects detected with hwloc and sysfs (and CUDA
// when built with it), plus GPU/NIC links; and the versioned text file it dumps to and loads from
// (BRAID_TOPO_DUMP_FILE, BRAID_TOPO_FILE, braid-topo --load). Format: topology/FORMAT.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "topology/cost.h"

namespace braid::topo {

enum class NodeKind : uint8_t { kMachine, kPackage, kNuma, kCache, kCore, kPciBridge, kPciDevice, kGpu, kNic };
const char* nodeKindName(NodeKind k);  // "machine", "package", "numa", "cache", "core", "bridge", "pci", "gpu", "nic"

struct Node {
  int id = 0;  // index in Machine::nodes
  NodeKind kind = NodeKind::kMachine;
  int parent = -1;    // index in Machine::nodes; -1 for the machine
  int index = -1;     // OS index (package, NUMA, core), cache level, GPU/NIC ordinal
  std::string name;   // "eth0", "NVIDIA H100 80GB HBM3", "L3"
  std::string busId;  // PCI "0000:3b:00.0" for PCI objects
  uint32_t pciClass = 0, vendor = 0, device = 0;
  uint64_t bytes = 0;  // NUMA memory, cache size, GPU memory
  double gbps = 0;     // NIC: link speed in Gbit/s (0 = unknown); bridge: link bandwidth if known
  int numa = -1;       // NUMA node (OS index) a device hangs off, -1 = unknown
  std::string cpus;    // cpuset as a list, e.g. "0-15,32-47" (packages, NUMA, cores)
};

enum class LinkKind : uint8_t { kNvlink, kPcie, kNet };
struct Link {
  int a = -1, b = -1;  // node ids (GPUs, NICs)
  LinkKind kind = LinkKind::kNvlink;
  int count = 1;    // e.g. number of NVLinks
  double gbps = 0;  // GB/s per direction, all `count` together
};

struct Machine {
  std::string hostname;
  int cores = 0, pus = 0;   // physical cores, hardware threads
  std::vector<Node> nodes;  // nodes[0] is the machine; parents come before children
  std::vector<Link> links;
  std::vector<std::string> missing;  // what detection could not find, one line each (never guessed)

  int count(NodeKind k) const;
  double nicGbpsTotal() const;  // sum of known NIC speeds, Gbit/s
};

// Detects this machine. Never fails for missing pieces (they go to `missing`); fails only when hwloc
// itself cannot load a topology.
Status detectMachine(Machine* out);
// Part of detectMachine (detect_cuda.cc): completes and adds GPU nodes from CUDA, NVLinks from NVML.
void addCudaDevices(Machine* m);

// What a topology file holds: the machine, the cost constants in effect, and optionally the cluster
// layout the dump was taken in (ranks and their hosts), so a load reproduces the same choices.
struct TopoFile {
  int version = 1;
  // The '#' lines right after the version line, without the '#': kept through load and dump (other
  // comments are dropped).
  std::vector<std::string> comments;
  Machine machine;
  bool hasCost = false;
  CostParams cost;
  bool hasCluster = false;
  ClusterShape cluster;
};

// Limits of the parser (hostile input): bigger files or more nodes are braidInvalidArgument.
constexpr size_t kMaxTopoFileBytes = size_t{4} << 20;
constexpr int kMaxTopoNodes = 65536;

std::string formatTopoFile(const TopoFile& f);
// Strict: unknown version, unknown keys, bad numbers, dangling parents or over-long input are
// braidInvalidArgument with the line number. `origin` names the source in messages.
Status parseTopoFile(std::string_view text, const std::string& origin, TopoFile* out);
Status loadTopoFile(const std::string& path, TopoFile* out);
Status dumpTopoFile(const std::string& path, const TopoFile& f);

// Renderings for braid-topo.
std::string renderTree(const Machine& m);    // indented tree: packages, NUMA, cores, caches, GPUs, NICs
std::string renderMatrix(const Machine& m);  // GPU/NIC matrix like `nvidia-smi topo -m` (X NV# PIX PXB PHB NODE SYS)
std::string renderJson(const TopoFile& f);   // machine + cost (+ cluster)
std::string renderDot(const Machine& m);     // Graphviz digraph

}  // namespace braid::topo
