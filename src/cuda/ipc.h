// CUDA IPC, the first layer of the cuda_ipc transport (issue "GPUs"): a rank exports a range of its
// device memory as a handle of fixed size that travels over any link (as bytes in a host message),
// and another process of the same host opens it and reaches that range with copies or kernels of its
// own: over NVLink or PCIe when the two ranks use two GPUs that can reach each other, within the
// device when they share one (several processes on one GPU work: the GPU machine has one).
//
// What can be exported: memory of cudaMalloc (braidMemAllocDevice's included), any range inside one
// allocation; the handle names the allocation and the offset of the range in it, because a peer
// maps whole allocations (CUDA IPC knows nothing smaller). Managed memory, memory of cudaMallocAsync
// pools and of cuMemCreate are refused saying so (the transport stages those instead).
//
// Device ordinals name a GPU only within one process (CUDA_VISIBLE_DEVICES may differ between
// ranks), so a handle also carries its device's PCI bus id, and ipcLocalDevice finds which of the
// importer's devices that is.
//
// Without CUDA compiled in, or without a device, every call is refused saying why; nothing here
// needs a GPU to build.
//
// Threads: ipcExport and ipcReachable are thread-safe; an IpcImports belongs to one thread at a time
// (the executor's engine lock, once the transport uses it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "src/base/status.h"

namespace braid {

// The wire form of one exported range. Plain bytes: no pointer, the same layout in every process of
// one build (the transport checks the build at init like every other link).
struct IpcHandle {
  unsigned char handle[64];  // cudaIpcMemHandle_t of the allocation
  uint64_t offset;           // of the range from the allocation's base
  uint64_t bytes;            // of the range
  uint64_t allocBytes;       // of the whole allocation
  int32_t device;            // the exporter's CUDA ordinal (as the exporter sees it)
  int32_t pid;               // the exporter's process: CUDA refuses to open a handle in its own process
  char busId[24];            // the device's PCI bus id ("0000:65:00.0"), NUL-terminated
  uint64_t bufferId;         // the allocation's CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in its process's life
};
static_assert(std::is_trivially_copyable_v<IpcHandle>, "IPC handles travel as bytes");
static_assert(sizeof(IpcHandle) == 128, "the wire form of an IPC handle is fixed");

// Exports bytes (> 0) of device memory at ptr, which must lie inside one cudaMalloc allocation.
// *out written on success only.
Status ipcExport(const void* ptr, size_t bytes, IpcHandle* out);

// The importer's ordinal of the device whose memory `h` names (by its PCI bus id): the exporter's
// device as this process sees it. braidInvalidUsage when this process does not see that device.
// *device written on success only.
Status ipcLocalDevice(const IpcHandle& h, int* device);

// Whether a kernel or copy on `device` can reach memory of `peerDevice`: the same device always, two
// devices when cudaDeviceCanAccessPeer says so (NVLink or PCIe peer-to-peer). *reachable written on
// success only.
Status ipcReachable(int device, int peerDevice, bool* reachable);

// The peers' allocations this holder opened, each once however many of its ranges are asked for,
// let go when the IpcImports ends (or by closeAll). The mappings themselves are the process's, shared
// by every holder (CUDA maps a handle once per process and device) and closed when the last holder
// lets go. The transport keeps one holder per communicator (src/cuda/ipc_coll.h says why it closes
// nothing before the communicator ends). Threads: one holder is used by one thread at a time;
// different holders may be used at once.
class IpcImports {
 public:
  IpcImports() = default;
  ~IpcImports() { (void)closeAll(); }
  IpcImports(const IpcImports&) = delete;
  IpcImports& operator=(const IpcImports&) = delete;

  // The address in this process of the range `h` names, mapped into `device`'s context (the
  // importer's device, made current for the call and put back). *ptr written on success only.
  Status open(const IpcHandle& h, int device, void** ptr);
  // Closes every allocation opened here; the first failure is returned, the others still closed.
  Status closeAll();
  // How many allocations are open.
  size_t openCount() const { return open_.size(); }

 private:
  Status openChecked(const IpcHandle& h, int device, void** ptr);  // open() after its checks

  struct Opened {
    void* base = nullptr;
    int device = -1;  // the importer's device it was opened on
  };
  // By the handle's bytes, the exporter's pid, the allocation's buffer id and the importer's device:
  // an allocation made where a freed one was is another entry, whatever CUDA's handle bytes for it
  // are. The process's mappings (src/cuda/ipc.cc) have the same keys.
  std::unordered_map<std::string, Opened> open_;
};

}  // namespace braid
