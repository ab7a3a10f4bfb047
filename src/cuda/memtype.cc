#include "src/cuda/memtype.h"

#include <atomic>

#include "braid_build_config.h"
#include "src/cuda/runtime.h"

#if BRAID_HAVE_CUDA
#include <cuda.h>  // driver types only: the driver is reached through the runtime's entry points
#include <cuda_runtime_api.h>

#include "src/cuda/check.h"
#endif

namespace braid {

const char* ptrKindName(PtrKind kind) {
  switch (kind) {
    case PtrKind::kHost:
      return "host";
    case PtrKind::kPinnedHost:
      return "pinned host";
    case PtrKind::kDevice:
      return "device";
    case PtrKind::kManaged:
      return "managed";
  }
  return "invalid";
}

namespace {

// Bumped by forgetPointerKinds; a thread whose cache is of an older epoch empties it first.
std::atomic<uint64_t> gEpoch{0};

// A few entries: a training step passes the same handful of buffers (gradient buckets, their
// scratch) again and again, and a linear scan of 16 ranges costs less than any hashing would.
constexpr int kCacheEntries = 16;

struct Entry {
  uintptr_t lo = 0;
  uintptr_t hi = 0;  // exclusive
  PtrInfo info;
};

struct ThreadCache {
  uint64_t epoch = 0;
  int used = 0;
  int next = 0;  // the entry a miss overwrites once all are used (round robin)
  Entry entries[kCacheEntries];
  PtrKindStats stats;
};

thread_local ThreadCache tCache;

#if BRAID_HAVE_CUDA

// cuMemGetAddressRange (src/cuda/check.h: driverEntryPoint); null when the driver lacks it.
using GetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);

GetAddressRange addressRangeFn() {
  static const GetAddressRange fn = reinterpret_cast<GetAddressRange>(driverEntryPoint("cuMemGetAddressRange"));
  return fn;
}

// Whether this process has a CUDA context: the calling thread's current one, or a device's primary
// context (the runtime's). Every device, managed or pinned allocation needs one, so without one every
// pointer is host memory; and asking cudaPointerGetAttributes would create the primary context, which
// costs a process that never used the GPU hundreds of MB of device memory and a tenth of a second.
// Once a context was seen the answer stays yes (contexts outlive the buffers braid is asked about).
// When the driver functions cannot be found, the answer is yes (ask the driver, as before).
bool anyContext() {
  static std::atomic<bool> seen{false};
  if (seen.load(std::memory_order_relaxed)) return true;
  using GetCurrent = CUresult (*)(CUcontext*);
  using DeviceGet = CUresult (*)(CUdevice*, int);
  using PrimaryState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const auto getCurrent = reinterpret_cast<GetCurrent>(driverEntryPoint("cuCtxGetCurrent"));
  static const auto deviceGet = reinterpret_cast<DeviceGet>(driverEntryPoint("cuDeviceGet"));
  static const auto primaryState = reinterpret_cast<PrimaryState>(driverEntryPoint("cuDevicePrimaryCtxGetState"));
  bool found = getCurrent == nullptr || deviceGet == nullptr || primaryState == nullptr;
  CUcontext current = nullptr;
  if (!found && getCurrent(&current) == CUDA_SUCCESS && current != nullptr) found = true;
  for (int d = 0; !found && d < gpuDeviceCount(); ++d) {
    CUdevice dev = 0;
    unsigned int flags = 0;
    int active = 0;
    if (deviceGet(&dev, d) == CUDA_SUCCESS && primaryState(dev, &flags, &active) == CUDA_SUCCESS && active != 0)
      found = true;
  }
  if (found) seen.store(true, std::memory_order_relaxed);
  return found;
}

// Asks the driver about `ptr`; *lo/*hi get the range the answer holds for.
Status askDriver(const void* ptr, size_t bytes, PtrInfo* info, uintptr_t* lo, uintptr_t* hi) {
  if (!anyContext()) {
    *info = PtrInfo{};
    *lo = reinterpret_cast<uintptr_t>(ptr);
    *hi = *lo + bytes;
    return okStatus();
  }
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {
    // Older drivers answered this for memory they do not know; it is host memory.
    (void)cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  } else if (err != cudaSuccess) {
    const Status s = cudaStatus(err, "cudaPointerGetAttributes");
    return errorf(s.code(), "memory type of %p: %s", ptr, s.message().c_str());
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  *lo = p;
  *hi = p + bytes;
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      info->kind = PtrKind::kDevice;
      break;
    case cudaMemoryTypeManaged:
      info->kind = PtrKind::kManaged;
      break;
    case cudaMemoryTypeHost:
      info->kind = PtrKind::kPinnedHost;
      break;
    case cudaMemoryTypeUnregistered:
    default:
      *info = PtrInfo{};
      return okStatus();
  }
  info->device = attr.device;
  // A device or managed allocation is cached whole, so that every chunk of a large buffer (and the
  // buffer's later calls at other offsets) hits one entry.
  if (info->kind != PtrKind::kPinnedHost) {
    if (GetAddressRange range = addressRangeFn()) {
      CUdeviceptr base = 0;
      size_t size = 0;
      if (range(&base, &size, static_cast<CUdeviceptr>(p)) == CUDA_SUCCESS && base <= p && p + bytes <= base + size) {
        *lo = static_cast<uintptr_t>(base);
        *hi = static_cast<uintptr_t>(base + size);
      }
    }
  }
  return okStatus();
}

#endif

}  // namespace

Status pointerKind(const void* ptr, size_t bytes, PtrInfo* out) {
  // No device (or no CUDA in this build): everything is host memory, and nothing else is asked.
  if (gpuDeviceCount() == 0) {
    *out = PtrInfo{};
    return okStatus();
  }
#if BRAID_HAVE_CUDA
  if (bytes == 0) bytes = 1;
  ThreadCache& c = tCache;
  const uint64_t epoch = gEpoch.load(std::memory_order_acquire);
  if (c.epoch != epoch) {
    c.epoch = epoch;
    c.used = 0;
    c.next = 0;
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  for (int i = 0; i < c.used; ++i) {
    const Entry& e = c.entries[i];
    if (e.lo <= p && p + bytes <= e.hi) {
      ++c.stats.hits;
      *out = e.info;
      return okStatus();
    }
  }
  ++c.stats.misses;
  Entry fresh;
  BRAID_TRY(askDriver(ptr, bytes, &fresh.info, &fresh.lo, &fresh.hi));
  if (c.used < kCacheEntries) {
    c.entries[c.used++] = fresh;
  } else {
    c.entries[c.next] = fresh;
    c.next = (c.next + 1) % kCacheEntries;
  }
  *out = fresh.info;
  return okStatus();
#else
  return okStatus();
#endif
}

void forgetPointerKinds(const void* base, size_t bytes) {
  // Every thread's cache goes, not just the entries that overlap: frees and deregistrations are rare
  // (setup and teardown), and a per-thread cache cannot be edited from another thread without a lock
  // on every lookup.
  (void)base;
  (void)bytes;
  gEpoch.fetch_add(1, std::memory_order_acq_rel);
}

PtrKindStats pointerKindStats() { return tCache.stats; }

uint64_t pointerKindEpoch() { return gEpoch.load(std::memory_order_acquire); }

}  // namespace braid
