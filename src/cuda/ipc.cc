#include "src/cuda/ipc.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "braid_build_config.h"
#include "src/cuda/runtime.h"

#if BRAID_HAVE_CUDA
#include <cuda.h>  // driver types only: cuPointerGetAttributes is reached through the runtime's entry points
#include <cuda_runtime_api.h>

#include <mutex>

#include "src/cuda/check.h"
#endif

namespace braid {

#if BRAID_HAVE_CUDA

namespace {

// The first failure of several.
void keepFirst(Status* first, Status s) {
  if (first->ok() && !s.ok()) *first = std::move(s);
}

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcHandle::handle), "cudaIpcMemHandle_t is 64 bytes");

// cuPointerGetAttributes (CUresult (unsigned n, CUpointer_attribute* attrs, void** data, CUdeviceptr
// ptr)), through the runtime (src/cuda/check.h): every fact an export needs in one driver call, and
// for a pointer CUDA does not know, zeros rather than an error.
using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

GetAttributes attributesFn() {
  static const GetAttributes fn = reinterpret_cast<GetAttributes>(driverEntryPoint("cuPointerGetAttributes"));
  return fn;
}

// What an export learns of a pointer. Each field is written by the driver in its own width (one to
// eight bytes) into zeroed 8-byte storage: read as a whole, a flag is non-zero and a number is its
// value on this (little-endian) machine.
struct PointerFacts {
  uint64_t memoryType = 0, managed = 0, device = 0, bufferId = 0, ipcCapable = 0, base = 0, size = 0;
};

Status pointerFacts(const void* ptr, PointerFacts* f) {
  const GetAttributes get = attributesFn();
  if (get == nullptr) return errorf(braidSystemError, "the CUDA driver has no cuPointerGetAttributes");
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&f->memoryType, &f->managed, &f->device, &f->bufferId, &f->ipcCapable, &f->base, &f->size};
  const CUresult r = get(sizeof(attrs) / sizeof(attrs[0]), attrs, data, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS)
    return errorf(braidInvalidArgument, "cuPointerGetAttributes failed for %p (CUresult %d)", ptr, static_cast<int>(r));
  return okStatus();
}

// The handles made so far, with their device's bus id, by the allocation's buffer id (unique among
// the process's allocations for its whole life, so a freed allocation's handle is never handed out
// for a new one at the same address): an export of a known allocation makes one driver call.
struct Exported {
  cudaIpcMemHandle_t handle;
  uint64_t base = 0, size = 0;
  char busId[sizeof(IpcHandle::busId)] = {};
};
std::mutex gExportMu;
std::unordered_map<uint64_t, Exported> gExports;
// A program that makes and frees allocations without end would grow the table without end: past
// this many it starts again (the handles are made anew at the next export).
constexpr size_t kMaxExports = 4096;

}  // namespace

namespace {

Status exportRange(const void* ptr, size_t bytes, IpcHandle* out) {
  PointerFacts f;
  BRAID_TRY(pointerFacts(ptr, &f));
  if (f.managed != 0 || f.memoryType != CU_MEMORYTYPE_DEVICE)
    return errorf(braidInvalidArgument, "CUDA IPC exports device memory only; %p is %s memory", ptr,
                  f.managed != 0 ? "managed" : "host");
  if (f.ipcCapable == 0)
    return errorf(braidInvalidArgument,
                  "%p cannot be exported with CUDA IPC (memory of cudaMallocAsync pools and of cuMemCreate cannot)",
                  ptr);
  const uint64_t at = reinterpret_cast<uintptr_t>(ptr), offset = at - f.base;
  if (at < f.base || bytes > f.size - offset)
    return errorf(braidInvalidArgument,
                  "%zu bytes at %p run past the end of its allocation (%llu bytes at offset %llu): a range exported "
                  "with CUDA IPC lies inside one cudaMalloc allocation",
                  bytes, ptr, static_cast<unsigned long long>(f.size), static_cast<unsigned long long>(offset));
  const int device = static_cast<int>(f.device);
  Exported e;
  bool known = false;
  {
    std::lock_guard<std::mutex> hold(gExportMu);
    auto it = gExports.find(f.bufferId);
    if (it != gExports.end() && it->second.base == f.base && it->second.size == f.size) {
      e = it->second;
      known = true;
    }
  }
  if (!known) {
    DeviceScope scope(device);
    BRAID_TRY(scope.status());
    e.base = f.base;
    e.size = f.size;
    BRAID_CUDA_TRY(cudaIpcGetMemHandle(&e.handle, reinterpret_cast<void*>(f.base)));
    BRAID_CUDA_TRY(cudaDeviceGetPCIBusId(e.busId, static_cast<int>(sizeof(e.busId)), device));
    std::lock_guard<std::mutex> hold(gExportMu);
    if (gExports.size() >= kMaxExports) gExports.clear();
    gExports[f.bufferId] = e;
  }
  IpcHandle w{};
  memcpy(w.handle, &e.handle, sizeof(w.handle));
  memcpy(w.busId, e.busId, sizeof(w.busId));
  w.offset = offset;
  w.bytes = bytes;
  w.allocBytes = f.size;
  w.device = device;
  w.pid = static_cast<int32_t>(getpid());
  w.bufferId = f.bufferId;
  *out = w;
  return okStatus();
}

Status localDevice(const IpcHandle& h, int* device) {
  int d = -1;
  const cudaError_t e = cudaDeviceGetByPCIBusId(&d, h.busId);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return errorf(braidInvalidUsage,
                  "the peer's GPU %s (its CUDA device %d) is not among this process's CUDA devices "
                  "(cudaDeviceGetByPCIBusId: %s)",
                  h.busId, static_cast<int>(h.device), cudaGetErrorString(e));
  }
  *device = d;
  return okStatus();
}

Status canAccessPeer(int device, int peerDevice, bool* reachable) {
  int can = 0;
  BRAID_CUDA_TRY(cudaDeviceCanAccessPeer(&can, device, peerDevice));
  *reachable = can != 0;
  return okStatus();
}

}  // namespace

namespace {

// The peer allocations this process has open, shared by all its IpcImports (every communicator's):
// CUDA maps an allocation's handle once per process and device, and a second cudaIpcOpenMemHandle
// of it fails (cudaErrorAlreadyMapped) while the first mapping stands; a process with two
// communicators whose calls use one peer allocation (two process groups on tensors of one segment
// of PyTorch's caching allocator) asks for that. Counted by holder, closed when the last lets go.
struct Mapping {
  void* base = nullptr;
  int holders = 0;
};
std::mutex gMappingsMu;
std::unordered_map<std::string, Mapping>& mappings() {
  static auto* m = new std::unordered_map<std::string, Mapping>;  // never destroyed: used at exit
  return *m;
}

}  // namespace

Status IpcImports::openChecked(const IpcHandle& h, int device, void** ptr) {
  // The allocation: its handle, and its process and buffer id, which no later allocation shares;
  // and the device it is mapped into here (each device's context maps it once).
  std::string key(reinterpret_cast<const char*>(h.handle), sizeof(h.handle));
  key.append(reinterpret_cast<const char*>(&h.pid), sizeof(h.pid));
  key.append(reinterpret_cast<const char*>(&h.bufferId), sizeof(h.bufferId));
  key.append(reinterpret_cast<const char*>(&device), sizeof(device));
  auto it = open_.find(key);
  if (it == open_.end()) {
    std::lock_guard<std::mutex> g(gMappingsMu);
    Mapping& m = mappings()[key];
    if (m.holders == 0) {
      DeviceScope scope(device);
      Status s = scope.status();
      cudaIpcMemHandle_t ch;
      memcpy(&ch, h.handle, sizeof(ch));
      void* base = nullptr;
      const cudaError_t e = s.ok() ? cudaIpcOpenMemHandle(&base, ch, cudaIpcMemLazyEnablePeerAccess) : cudaSuccess;
      if (s.ok() && e != cudaSuccess) {
        s = cudaStatus(e, "cudaIpcOpenMemHandle")
                .withContext("opening device memory of process " + std::to_string(h.pid) + " (its CUDA device " +
                             std::to_string(h.device) + ") on CUDA device " + std::to_string(device));
        if (e == cudaErrorAlreadyMapped)
          s = s.withContext(
              "this process still maps an allocation of that process which it freed since, and CUDA gave the "
              "new one the same handle; mappings are let go when the communicators that opened them end");
      }
      if (!s.ok()) {
        mappings().erase(key);
        return s;
      }
      m.base = base;
    }
    ++m.holders;
    it = open_.emplace(key, Opened{m.base, device}).first;
  }
  *ptr = static_cast<char*>(it->second.base) + h.offset;
  return okStatus();
}

Status IpcImports::closeAll() {
  Status first;
  std::lock_guard<std::mutex> g(gMappingsMu);
  for (auto& [key, o] : open_) {
    auto m = mappings().find(key);
    if (m == mappings().end() || --m->second.holders > 0) continue;
    mappings().erase(m);
    DeviceScope scope(o.device);
    keepFirst(&first, scope.status());
    if (scope.status().ok()) keepFirst(&first, cudaStatus(cudaIpcCloseMemHandle(o.base), "cudaIpcCloseMemHandle"));
  }
  open_.clear();
  return first;
}

#else  // no CUDA compiled in: the checks below refuse every call before these are reached

namespace {
Status exportRange(const void*, size_t, IpcHandle*) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }
Status localDevice(const IpcHandle&, int*) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }
Status canAccessPeer(int, int, bool*) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }
}  // namespace

Status IpcImports::openChecked(const IpcHandle&, int, void**) {
  return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
}

Status IpcImports::closeAll() {
  open_.clear();  // nothing can have been opened
  return okStatus();
}

#endif

// The checks every build makes, CUDA or not: bad arguments first, then a missing device.

Status ipcExport(const void* ptr, size_t bytes, IpcHandle* out) {
  if (ptr == nullptr || bytes == 0 || out == nullptr)
    return errorf(braidInvalidArgument, "ipcExport needs a pointer, a size > 0 and somewhere to write the handle");
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  return exportRange(ptr, bytes, out);
}

Status ipcLocalDevice(const IpcHandle& h, int* device) {
  if (device == nullptr) return errorf(braidInvalidArgument, "ipcLocalDevice needs somewhere to write the device");
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (memchr(h.busId, 0, sizeof(h.busId)) == nullptr || h.busId[0] == 0)
    return errorf(braidInvalidArgument, "a CUDA IPC handle without a PCI bus id");
  return localDevice(h, device);
}

Status ipcReachable(int device, int peerDevice, bool* reachable) {
  if (reachable == nullptr) return errorf(braidInvalidArgument, "ipcReachable needs somewhere to write its answer");
  const int n = gpuDeviceCount();
  if (n == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (device < 0 || device >= n || peerDevice < 0 || peerDevice >= n)
    return errorf(braidInvalidArgument, "CUDA devices %d and %d: this process sees devices 0..%d", device, peerDevice,
                  n - 1);
  if (device == peerDevice) {
    *reachable = true;
    return okStatus();
  }
  return canAccessPeer(device, peerDevice, reachable);
}

Status IpcImports::open(const IpcHandle& h, int device, void** ptr) {
  if (ptr == nullptr) return errorf(braidInvalidArgument, "IpcImports::open needs somewhere to write the address");
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (h.pid == static_cast<int32_t>(getpid()))
    return errorf(braidInvalidUsage,
                  "a CUDA IPC handle cannot be opened in the process that exported it (pid %d): use the memory itself",
                  static_cast<int>(h.pid));
  if (h.bytes == 0 || h.offset > h.allocBytes || h.bytes > h.allocBytes - h.offset)
    return errorf(braidInvalidArgument, "a CUDA IPC handle of %llu bytes at offset %llu of a %llu-byte allocation",
                  static_cast<unsigned long long>(h.bytes), static_cast<unsigned long long>(h.offset),
                  static_cast<unsigned long long>(h.allocBytes));
  return openChecked(h, device, ptr);
}

}  // namespace braid
