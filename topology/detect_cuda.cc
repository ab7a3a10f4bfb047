// What CUDA and NVML add to the machine hwloc found: each CUDA device's name, memory and CUDA
// ordinal on its GPU node (matched by PCI bus id; a device hwloc did not see gets a node of its own
// under the machine), and the NVLinks between GPUs, read from NVML when the driver's
// libnvidia-ml.so.1 loads. Nothing is guessed: what cannot be read goes to Machine::missing.
//
// NVML is opened with dlopen, not linked: the build needs no NVML header or library, and a machine
// without the driver runs without it. The few NVML entry points and the one structure used are
// declared here from NVML's documented ABI (nvmlPciInfo_t as of the _v2 calls).
//
// Links. A GPU's active NVLinks whose far end is another GPU count toward that pair. Links whose
// far end is no GPU of this machine lead to NVSwitches: GPUs that both have such links reach each
// other through the switches, with the smaller of their two link counts. Per-link bandwidth (GB/s
// per direction) follows the NVLink version: 20 (1), 25 (2, 3, 4), 50 (5); unknown versions leave
// it 0 (unknown).
//
// Runs once per detection (communicator init, braid-topo), never on a hot path. Compile-only until a
// machine with GPUs runs it; tests/gpu/test_gpu_topology.cc checks it there.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid_build_config.h"
#include "src/cuda/runtime.h"
#include "topology/topology.h"

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace braid::topo {

#if BRAID_HAVE_CUDA
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

// "0000:3b:00.0" from a domain/bus/device triple (CUDA and NVML both name functions 0).
std::string busIdOf(unsigned domain, unsigned bus, unsigned device) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", domain, bus, device);
  return buf;
}

// NVML, as far as this file uses it.
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS of current drivers

class Nvml {
 public:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      why_ = "libnvidia-ml.so.1 does not load";
      return;
    }
    init_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
    byBusId_ = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    linkState_ = reinterpret_cast<int (*)(NvmlDevice, unsigned, int*)>(dlsym(lib_, "nvmlDeviceGetNvLinkState"));
    linkVersion_ =
        reinterpret_cast<int (*)(NvmlDevice, unsigned, unsigned*)>(dlsym(lib_, "nvmlDeviceGetNvLinkVersion"));
    remotePci_ = reinterpret_cast<int (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
        dlsym(lib_, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    if (!init_ || !shutdown_ || !byBusId_ || !linkState_ || !linkVersion_ || !remotePci_) {
      why_ = "libnvidia-ml.so.1 lacks the NVLink queries";
      return;
    }
    const int rc = init_();
    if (rc != kNvmlSuccess) {
      why_ = "nvmlInit failed (NVML error " + std::to_string(rc) + ")";
      return;
    }
    up_ = true;
  }
  ~Nvml() {
    if (up_) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool up() const { return up_; }
  const std::string& why() const { return why_; }

  // One GPU's active NVLinks: the far end's bus id (lower case) and the link version, per link.
  // False when NVML does not know the device.
  struct LinkEnd {
    std::string peerBusId;
    unsigned version = 0;
  };
  bool links(const std::string& busId, std::vector<LinkEnd>* out) {
    NvmlDevice dev = nullptr;
    if (byBusId_(busId.c_str(), &dev) != kNvmlSuccess) return false;
    for (unsigned l = 0; l < kNvmlMaxLinks; ++l) {
      int active = 0;
      // Past the device's last link NVML answers an error: not an active link either way.
      if (linkState_(dev, l, &active) != kNvmlSuccess || active != 1) continue;
      NvmlPciInfo pci{};
      if (remotePci_(dev, l, &pci) != kNvmlSuccess) continue;
      LinkEnd e;
      e.peerBusId = busIdOf(pci.domain, pci.bus, pci.device);
      if (linkVersion_(dev, l, &e.version) != kNvmlSuccess) e.version = 0;
      out->push_back(e);
    }
    return true;
  }

 private:
  void* lib_ = nullptr;
  bool up_ = false;
  std::string why_;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*byBusId_)(const char*, NvmlDevice*) = nullptr;
  int (*linkState_)(NvmlDevice, unsigned, int*) = nullptr;
  int (*linkVersion_)(NvmlDevice, unsigned, unsigned*) = nullptr;
  int (*remotePci_)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
};

double linkGBps(unsigned version) {
  switch (version) {
    case 1:
      return 20;
    case 2:
    case 3:
    case 4:
      return 25;
    case 5:
      return 50;
    default:
      return 0;
  }
}

// The NVLinks among the GPU nodes `gpus` (node ids, their busIds lower case) from NVML.
void addNvlinks(Machine* m, const std::vector<int>& gpus) {
  if (gpus.size() < 2) return;  // no pair to link
  Nvml nvml;
  if (!nvml.up()) {
    m->missing.push_back("NVLinks unknown: " + nvml.why());
    return;
  }
  const size_t n = gpus.size();
  std::vector<int> direct(n * n, 0);
  std::vector<double> directGBps(n * n, 0);
  std::vector<int> switchLinks(n, 0);
  std::vector<double> switchGBps(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node& g = m->nodes[gpus[i]];
    std::vector<Nvml::LinkEnd> ends;
    if (!nvml.links(g.busId, &ends)) {
      m->missing.push_back("GPU" + std::to_string(g.index) + " " + g.busId +
                           ": NVML does not know it, NVLinks unknown");
      continue;
    }
    for (const Nvml::LinkEnd& e : ends) {
      size_t j = n;
      for (size_t k = 0; k < n; ++k)
        if (k != i && m->nodes[gpus[k]].busId == e.peerBusId) j = k;
      if (j < n) {
        ++direct[i * n + j];
        directGBps[i * n + j] += linkGBps(e.version);
      } else {
        ++switchLinks[i];
        switchGBps[i] += linkGBps(e.version);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      // Each side counts the links it sees; they should agree, and the smaller is what both have.
      int count = std::min(direct[i * n + j], direct[j * n + i]);
      double gbps = std::min(directGBps[i * n + j], directGBps[j * n + i]);
      if (switchLinks[i] > 0 && switchLinks[j] > 0) {
        count += std::min(switchLinks[i], switchLinks[j]);
        gbps += std::min(switchGBps[i], switchGBps[j]);
      }
      if (count == 0) continue;
      Link l;
      l.a = gpus[i];
      l.b = gpus[j];
      l.kind = LinkKind::kNvlink;
      l.count = count;
      l.gbps = gbps;
      m->links.push_back(l);
    }
  }
}

}  // namespace

void addCudaDevices(Machine* m) {
  const int hwlocGpus = m->count(NodeKind::kGpu);
  const int n = gpuDeviceCount();
  if (n == 0) {
    if (hwlocGpus > 0)
      m->missing.push_back(std::to_string(hwlocGpus) + " GPUs found, but CUDA sees none (" +
                           std::string(gpuAbsentReason()) + "): GPU memory and NVLinks unknown");
    return;
  }
  // CUDA ordinals (what cudaSetDevice takes) become the GPU nodes' indices; GPUs CUDA does not show
  // (CUDA_VISIBLE_DEVICES, another vendor) are numbered after them.
  std::vector<bool> matched(m->nodes.size(), false);
  std::vector<int> cudaNodes;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      m->missing.push_back("CUDA device " + std::to_string(d) + ": properties unknown");
      continue;
    }
    const std::string busId = busIdOf(static_cast<unsigned>(p.pciDomainID), static_cast<unsigned>(p.pciBusID),
                                      static_cast<unsigned>(p.pciDeviceID));
    int id = -1;
    for (const Node& node : m->nodes)
      if (node.kind == NodeKind::kGpu && lower(node.busId) == busId) id = node.id;
    if (id < 0) {
      Node g;
      g.id = static_cast<int>(m->nodes.size());
      g.kind = NodeKind::kGpu;
      g.parent = 0;
      g.busId = busId;
      m->nodes.push_back(g);
      matched.push_back(false);
      id = g.id;
      m->missing.push_back("GPU" + std::to_string(d) + " " + busId +
                           ": not in hwloc's PCI tree, its PCI path and NUMA node unknown");
    }
    Node& g = m->nodes[id];
    g.index = d;
    g.name = p.name;
    g.bytes = p.totalGlobalMem;
    matched[id] = true;
    cudaNodes.push_back(id);
  }
  int next = n;
  for (Node& node : m->nodes)
    if (node.kind == NodeKind::kGpu && !matched[node.id]) {
      node.index = next++;
      m->missing.push_back("GPU " + node.busId + ": CUDA does not show it (CUDA_VISIBLE_DEVICES?)");
    }
  for (int id : cudaNodes) m->nodes[id].busId = lower(m->nodes[id].busId);
  addNvlinks(m, cudaNodes);
}

#else

void addCudaDevices(Machine* m) {
  const int gpus = m->count(NodeKind::kGpu);
  if (gpus > 0)
    m->missing.push_back(std::to_string(gpus) +
                         " GPUs found but braid was built without CUDA: GPU memory and NVLinks unknown");
}

#endif

}  // namespace braid::topo
