// Machine detection: hwloc for packages, NUMA nodes, caches, cores and the PCI tree; sysfs for NIC
// link speeds and, where hwloc cannot place a device, its NUMA node. What cannot be found goes to
// Machine::missing, one line each; nothing is guessed. GPU names, memory, CUDA ordinals and NVLinks
// come from CUDA and NVML afterwards (detect_cuda.cc).
//
// The model keeps the objects braid reasons about and drops the rest: L1 caches, Groups, Dies and
// memory-side caches are passed through (their children attach to the nearest kept ancestor), PUs
// become the cpu lists of cores, and OS devices (eth0, mlx5_0, cuda0) name the PCI device above them.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid_build_config.h"
#include "src/base/log.h"
#include "src/cuda/runtime.h"
#include "topology/topology.h"

#if BRAID_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace braid::topo {
namespace {

// The first line of a small sysfs file, without the newline; false when it cannot be read.
[[maybe_unused]] bool readSysfsLine(const std::string& path, std::string* out) {
  FILE* f = fopen(path.c_str(), "re");
  if (!f) return false;
  char buf[256];
  bool ok = fgets(buf, sizeof(buf), f) != nullptr;
  fclose(f);
  if (!ok) return false;
  out->assign(buf);
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
  return true;
}

// Interface and device names come from the kernel; refuse anything that could leave /sys/class.
[[maybe_unused]] bool safePathComponent(const std::string& s) {
  return !s.empty() && s.size() < 64 && s.find('/') == std::string::npos && s != "." && s != "..";
}

std::string hostName(std::vector<std::string>* missing) {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
    missing->push_back("hostname unknown (gethostname failed)");
    return "";
  }
  return buf;
}

#if BRAID_HAVE_HWLOC

constexpr uint32_t kVendorVirtio = 0x1af4;
// Display controllers of baseboard management controllers: PCI class 0x03xx but not GPUs.
constexpr uint32_t kVendorAspeed = 0x1a03;
constexpr uint32_t kVendorMatrox = 0x102b;

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::string cpuList(hwloc_const_bitmap_t set) {
  if (!set || hwloc_bitmap_iszero(set)) return "";
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || !s) return "";
  std::string r(s);
  free(s);
  return r;
}

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
  return buf;
}

// What the OS devices under a PCI device say about it.
struct OsDevices {
  std::string net;    // first network interface: "eth0"
  std::string ib;     // first OpenFabrics device: "mlx5_0"
  std::string model;  // GPUModel info (NVML, RSMI, LevelZero backends)
  uint64_t memBytes = 0;
};

OsDevices osDevicesOf(hwloc_obj_t pci) {
  OsDevices d;
  for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
    switch (c->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_NETWORK:
        if (d.net.empty()) d.net = c->name;
        break;
      case HWLOC_OBJ_OSDEV_OPENFABRICS:
        if (d.ib.empty()) d.ib = c->name;
        break;
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC: {
        const char* model = hwloc_obj_get_info_by_name(c, "GPUModel");
        if (model && d.model.empty()) d.model = model;
        const char* kb = hwloc_obj_get_info_by_name(c, "CUDAGlobalMemorySize");  // KiB
        if (kb && d.memBytes == 0) d.memBytes = strtoull(kb, nullptr, 10) * 1024;
        break;
      }
      default:
        break;
    }
  }
  return d;
}

class Detector {
 public:
  Detector(hwloc_topology_t topo, Machine* m) : topo_(topo), m_(*m) {}

  void run() {
    struct Item {
      hwloc_obj_t obj;
      int parent;
    };
    std::vector<Item> stack{{hwloc_get_root_obj(topo_), -1}};
    std::vector<hwloc_obj_t> kids;
    while (!stack.empty()) {
      const Item it = stack.back();
      stack.pop_back();
      bool descend = true;
      const int here = visit(it.obj, it.parent, &descend);
      if (!descend) continue;
      // Memory children (NUMA) first, then normal (caches, cores), then I/O; pushed in reverse so
      // they come off the stack in that order and node ids follow hwloc's order.
      kids.clear();
      for (hwloc_obj_t c = it.obj->memory_first_child; c; c = c->next_sibling) kids.push_back(c);
      for (hwloc_obj_t c = it.obj->first_child; c; c = c->next_sibling) kids.push_back(c);
      for (hwloc_obj_t c = it.obj->io_first_child; c; c = c->next_sibling) kids.push_back(c);
      for (auto k = kids.rbegin(); k != kids.rend(); ++k) stack.push_back({*k, here});
    }
    m_.cores = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_CORE);
    m_.pus = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PU);
    summarize();
  }

 private:
  int add(Node n) {
    n.id = static_cast<int>(m_.nodes.size());
    m_.nodes.push_back(std::move(n));
    return m_.nodes.back().id;
  }

  static int osIndex(hwloc_obj_t obj) {
    return obj->os_index == HWLOC_UNKNOWN_INDEX ? -1 : static_cast<int>(obj->os_index);
  }

  // Returns the node children attach to: a new node, or `parent` for objects passed through.
  int visit(hwloc_obj_t obj, int parent, bool* descend) {
    Node n;
    n.parent = parent;
    switch (obj->type) {
      case HWLOC_OBJ_MACHINE:
        n.kind = NodeKind::kMachine;
        n.bytes = obj->total_memory;
        n.cpus = cpuList(obj->cpuset);
        return add(std::move(n));
      case HWLOC_OBJ_PACKAGE:
        n.kind = NodeKind::kPackage;
        n.index = osIndex(obj);
        n.cpus = cpuList(obj->cpuset);
        return add(std::move(n));
      case HWLOC_OBJ_NUMANODE:
        n.kind = NodeKind::kNuma;
        n.index = osIndex(obj);
        n.bytes = obj->attr->numanode.local_memory;
        n.cpus = cpuList(obj->cpuset);
        return add(std::move(n));
      case HWLOC_OBJ_L2CACHE:
      case HWLOC_OBJ_L3CACHE:
      case HWLOC_OBJ_L4CACHE:
      case HWLOC_OBJ_L5CACHE:
        if (obj->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) return parent;
        n.kind = NodeKind::kCache;
        n.index = static_cast<int>(obj->attr->cache.depth);
        n.name = std::string("L").append(std::to_string(obj->attr->cache.depth));
        n.bytes = obj->attr->cache.size;
        return add(std::move(n));
      case HWLOC_OBJ_CORE:
        n.kind = NodeKind::kCore;
        n.index = osIndex(obj);
        n.cpus = cpuList(obj->cpuset);
        return add(std::move(n));
      case HWLOC_OBJ_BRIDGE:
        return bridge(obj, std::move(n));
      case HWLOC_OBJ_PCI_DEVICE:
        return pciDevice(obj, std::move(n));
      case HWLOC_OBJ_PU:
      case HWLOC_OBJ_OS_DEVICE:  // read by pciDevice from its parent
      case HWLOC_OBJ_MISC:
        *descend = false;
        return parent;
      default:  // L1 caches, Group, Die, MemCache: pass through
        return parent;
    }
  }

  int bridge(hwloc_obj_t obj, Node n) {
    const auto& b = obj->attr->bridge;
    n.kind = NodeKind::kPciBridge;
    if (b.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
      n.busId = busIdOf(b.upstream.pci);
      n.pciClass = b.upstream.pci.class_id;
      n.vendor = b.upstream.pci.vendor_id;
      n.device = b.upstream.pci.device_id;
      if (b.upstream.pci.linkspeed > 0) n.gbps = b.upstream.pci.linkspeed;  // GB/s, as hwloc reports it
    }
    n.numa = numaOf(obj, n.busId);
    return add(std::move(n));
  }

  int pciDevice(hwloc_obj_t obj, Node n) {
    const auto& p = obj->attr->pcidev;
    n.busId = busIdOf(p);
    n.pciClass = p.class_id;
    n.vendor = p.vendor_id;
    n.device = p.device_id;
    n.numa = numaOf(obj, n.busId);
    const OsDevices os = osDevicesOf(obj);
    const bool display = (p.class_id >> 8) == 0x03;
    if (display && p.vendor_id != kVendorAspeed && p.vendor_id != kVendorMatrox) {
      n.kind = NodeKind::kGpu;
      n.index = gpus_++;
      n.bytes = os.memBytes;
      n.name = os.model;
      if (n.name.empty() && obj->name) n.name = obj->name;
      if (n.name.empty()) {
        const char* dev = hwloc_obj_get_info_by_name(obj, "PCIDevice");
        if (dev) n.name = dev;
      }
      if (n.name.empty())
        m_.missing.push_back("GPU" + std::to_string(n.index) + " " + n.busId + ": model name unknown");
      if (n.numa < 0) m_.missing.push_back("GPU" + std::to_string(n.index) + " " + n.busId + ": NUMA node unknown");
    } else if (!os.net.empty() || !os.ib.empty()) {
      n.kind = NodeKind::kNic;
      n.index = nics_++;
      n.name = os.net.empty() ? os.ib : os.net;
      n.gbps = nicSpeed(os, p.vendor_id);
      if (n.numa < 0) m_.missing.push_back(n.name + " " + n.busId + ": NUMA node unknown");
    } else {
      n.kind = NodeKind::kPciDevice;
      if (obj->name) n.name = obj->name;
      if ((p.class_id >> 8) == 0x02) {
        m_.missing.push_back("network controller " + n.busId + " has no network interface");
      }
    }
    return add(std::move(n));
  }

  // Gbit/s from sysfs: the netdev's speed (Mb/s; -1 when the driver does not know, as for virtio),
  // else the first port rate of the OpenFabrics device ("400 Gb/sec (4X NDR)"). 0 = unknown.
  double nicSpeed(const OsDevices& os, uint32_t vendor) {
    std::string v;
    if (!os.net.empty() && safePathComponent(os.net)) {
      const std::string path = "/sys/class/net/" + os.net + "/speed";
      if (readSysfsLine(path, &v)) {
        char* end = nullptr;
        long mbps = strtol(v.c_str(), &end, 10);
        if (end != v.c_str() && *end == '\0' && mbps > 0) return static_cast<double>(mbps) / 1000.0;
      }
    }
    if (!os.ib.empty() && safePathComponent(os.ib)) {
      std::string rate;
      if (readSysfsLine("/sys/class/infiniband/" + os.ib + "/ports/1/rate", &rate)) {
        char* end = nullptr;
        double g = strtod(rate.c_str(), &end);
        if (end != rate.c_str() && g > 0 && g < 1e6) return g;
      }
    }
    const std::string name = os.net.empty() ? os.ib : os.net;
    if (vendor == kVendorVirtio) {
      m_.missing.push_back(name + ": link speed unknown (virtio NIC)");
    } else {
      m_.missing.push_back(name + ": link speed unknown (sysfs reports " + (v.empty() ? "nothing" : v) + ")");
    }
    return 0;
  }

  // The NUMA node (OS index) a PCI object hangs off: the single NUMA node of its CPU-side ancestor,
  // else what the kernel says in sysfs; -1 when neither knows.
  int numaOf(hwloc_obj_t obj, const std::string& busId) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, obj);
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) return hwloc_bitmap_first(anc->nodeset);
    std::string v;
    if (safePathComponent(busId) && readSysfsLine("/sys/bus/pci/devices/" + busId + "/numa_node", &v)) {
      char* end = nullptr;
      long n = strtol(v.c_str(), &end, 10);
      if (end != v.c_str() && *end == '\0' && n >= 0 && n < 65536) return static_cast<int>(n);
    }
    return -1;
  }

  void summarize() {
    if (m_.count(NodeKind::kPackage) == 0) m_.missing.push_back("no packages reported by hwloc");
    if (m_.cores == 0) m_.missing.push_back("no cores reported by hwloc");
    if (m_.count(NodeKind::kNuma) == 0) m_.missing.push_back("no NUMA nodes reported by hwloc");
    if (m_.count(NodeKind::kPciBridge) + m_.count(NodeKind::kPciDevice) + gpus_ + nics_ == 0) {
      m_.missing.push_back("no PCI devices found by hwloc");
    }
    // GPUs hwloc found are completed from CUDA afterwards (addCudaDevices), which may also add some.
    if (gpus_ == 0 && gpuDeviceCount() == 0) m_.missing.push_back("no GPUs found");
    if (nics_ == 0) m_.missing.push_back("no NICs found");
  }

  hwloc_topology_t topo_;
  Machine& m_;
  int gpus_ = 0, nics_ = 0;
};

#endif  // BRAID_HAVE_HWLOC

}  // namespace

Status detectMachine(Machine* out) {
  Machine m;
  m.hostname = hostName(&m.missing);
#if BRAID_HAVE_HWLOC
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return systemError(errno, "hwloc_topology_init");
  TopologyPtr topo(raw);
  // Bridges and PCI devices that lead to GPUs, NICs, storage and the like; OS devices name them.
  hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo.get()) != 0) return systemError(errno, "hwloc_topology_load");
  Detector(topo.get(), &m).run();
#else
  Node n;
  n.kind = NodeKind::kMachine;
  m.nodes.push_back(n);
  long pus = sysconf(_SC_NPROCESSORS_ONLN);
  m.pus = pus > 0 ? static_cast<int>(pus) : 0;
  m.missing.push_back("built without hwloc: packages, NUMA nodes, cores, caches and PCI devices unknown");
#endif
  addCudaDevices(&m);
  BRAID_INFO(kLogTopo, "topology: host %s, %d cores, %d PUs, %d GPUs, %d NICs, %zu missing", m.hostname.c_str(),
             m.cores, m.pus, m.count(NodeKind::kGpu), m.count(NodeKind::kNic), m.missing.size());
  *out = std::move(m);
  return okStatus();
}

}  // namespace braid::topo
