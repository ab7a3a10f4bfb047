#include "src/cuda/device_mem.h"

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "braid_build_config.h"
#include "src/cuda/memtype.h"
#include "src/cuda/runtime.h"

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "src/cuda/check.h"
#endif

namespace braid {

namespace {

struct DeviceAllocations {
  std::mutex mu;
  std::unordered_map<uintptr_t, size_t> bytes;  // by address
};

DeviceAllocations& allocations() {
  static DeviceAllocations* a = new DeviceAllocations;  // never destroyed: frees may come at exit
  return *a;
}

}  // namespace

#if BRAID_HAVE_CUDA

Status deviceAlloc(size_t size, void** ptr) {
  int device = -1;
  BRAID_TRY(gpuCurrentDevice(&device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess)
    return cudaStatus(err, "cudaMalloc")
        .withContext("braidMemAllocDevice of " + std::to_string(size) + " bytes on CUDA device " +
                     std::to_string(device));
  {
    std::lock_guard<std::mutex> hold(allocations().mu);
    allocations().bytes[reinterpret_cast<uintptr_t>(p)] = size;
  }
  *ptr = p;
  return okStatus();
}

bool deviceFree(void* ptr, Status* status) {
  size_t size = 0;
  {
    std::lock_guard<std::mutex> hold(allocations().mu);
    auto it = allocations().bytes.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocations().bytes.end()) return false;
    size = it->second;
    allocations().bytes.erase(it);
  }
  *status = cudaStatus(cudaFree(ptr), "cudaFree");
  // The address may come back as another kind of memory: no cached answer may outlive it (dropped
  // after the free, so that no other thread's lookup caches the range again in between).
  forgetPointerKinds(ptr, size);
  return true;
}

#else  // !BRAID_HAVE_CUDA

Status deviceAlloc(size_t, void**) {
  (void)allocations;
  return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
}

bool deviceFree(void*, Status*) { return false; }

#endif

}  // namespace braid
