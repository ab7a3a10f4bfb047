#include "src/cuda/ipc.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "braid_build_config.h"
#include "src/cuda/runtime.h"

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

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

// cuMemGetAddressRange (CUresult (CUdeviceptr* base, size_t* size, CUdeviceptr ptr); CUdeviceptr is
// an unsigned long long on every 64-bit platform), through the runtime (src/cuda/check.h).
using GetAddressRange = int (*)(unsigned long long*, size_t*, unsigned long long);

GetAddressRange addressRangeFn() {
  static const GetAddressRange fn = reinterpret_cast<GetAddressRange>(driverEntryPoint("cuMemGetAddressRange"));
  return fn;
}

}  // namespace

namespace {

Status exportRange(const void* ptr, size_t bytes, IpcHandle* out) {
  cudaPointerAttributes attr{};
  BRAID_CUDA_TRY(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type != cudaMemoryTypeDevice)
    return errorf(braidInvalidArgument, "CUDA IPC exports device memory only; %p is %s memory", ptr,
                  attr.type == cudaMemoryTypeManaged ? "managed" : "host");
  const GetAddressRange range = addressRangeFn();
  if (range == nullptr)
    return errorf(braidSystemError, "the CUDA driver has no cuMemGetAddressRange: cannot find %p's allocation", ptr);
  unsigned long long base = 0;
  size_t allocBytes = 0;
  const unsigned long long at = reinterpret_cast<uintptr_t>(ptr);
  if (range(&base, &allocBytes, at) != 0)
    return errorf(braidInvalidArgument, "cuMemGetAddressRange failed for %p: not memory of this process's CUDA context",
                  ptr);
  const uint64_t offset = at - base;
  if (bytes > allocBytes - offset)
    return errorf(braidInvalidArgument,
                  "%zu bytes at %p run past the end of its allocation (%zu bytes at offset %llu): a range exported "
                  "with CUDA IPC lies inside one cudaMalloc allocation",
                  bytes, ptr, allocBytes, static_cast<unsigned long long>(offset));
  DeviceScope scope(attr.device);
  BRAID_TRY(scope.status());
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (e != cudaSuccess) {
    char where[256];
    snprintf(where, sizeof(where),
             "exporting the allocation at %p (memory of cudaMallocAsync pools and of cuMemCreate cannot be exported "
             "this way)",
             reinterpret_cast<void*>(base));
    return cudaStatus(e, "cudaIpcGetMemHandle").withContext(where);
  }
  IpcHandle w{};
  BRAID_CUDA_TRY(cudaDeviceGetPCIBusId(w.busId, sizeof(w.busId), attr.device));
  memcpy(w.handle, &h, sizeof(h));
  w.offset = offset;
  w.bytes = bytes;
  w.allocBytes = allocBytes;
  w.device = attr.device;
  w.pid = static_cast<int32_t>(getpid());
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

Status IpcImports::openChecked(const IpcHandle& h, int device, void** ptr) {
  const std::string key(reinterpret_cast<const char*>(h.handle), sizeof(h.handle));
  auto it = open_.find(key);
  if (it != open_.end() && it->second.device != device)
    return errorf(braidInvalidUsage, "peer memory already opened on CUDA device %d is asked for on device %d",
                  it->second.device, device);
  if (it == open_.end()) {
    DeviceScope scope(device);
    BRAID_TRY(scope.status());
    cudaIpcMemHandle_t ch;
    memcpy(&ch, h.handle, sizeof(ch));
    void* base = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&base, ch, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess)
      return cudaStatus(e, "cudaIpcOpenMemHandle")
          .withContext("opening device memory of process " + std::to_string(h.pid) + " (its CUDA device " +
                       std::to_string(h.device) + ") on CUDA device " + std::to_string(device));
    it = open_.emplace(key, Opened{base, device}).first;
  }
  *ptr = static_cast<char*>(it->second.base) + h.offset;
  return okStatus();
}

Status IpcImports::closeAll() {
  Status first;
  for (auto& [key, o] : open_) {
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
