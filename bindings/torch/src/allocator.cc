// braid_torch.use_shared_memory(): CPU tensors from braidMemAlloc, so that collectives on them run
// in place in the peers' buffers when every rank is on one host (README "In place on one host")
// instead of through the FIFOs. It wraps the CPU allocator torch had: allocations under the size
// given, and any braidMemAlloc refuses, still come from that one.
#include "allocator.h"

#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "braid/braid.h"
#include "c10/core/Allocator.h"

namespace braid_torch {

namespace {

// braidMemFree refuses memory that an operation in flight still uses in place; torch may drop the
// last reference to such a tensor (an abandoned nonblocking call). Those frees wait here for the
// next allocation, or for the end.
std::mutex gDeferredMu;
std::vector<void*> gDeferred;
std::atomic<size_t> gDeferredCount{0};  // gDeferred.size(), read without the lock by every allocation

void freeShared(void* p) {
  if (braidMemFree(p) == braidSuccess) return;
  std::lock_guard<std::mutex> lock(gDeferredMu);
  gDeferred.push_back(p);
  gDeferredCount.store(gDeferred.size(), std::memory_order_relaxed);
}

class SharedCpuAllocator final : public c10::Allocator {
 public:
  // torch 2.3 dropped the const of allocate (unverified here: this machine has torch 1.13 only).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    retryDeferred();
    if (enabled.load(std::memory_order_relaxed) && n != 0 && n >= minBytes.load(std::memory_order_relaxed)) {
      void* p = nullptr;
      if (braidMemAlloc(&p, n) == braidSuccess) return {p, p, &freeShared, c10::Device(c10::DeviceType::CPU)};
    }
    return previous->allocate(n);
  }
#if TORCH_VERSION_MAJOR >= 2
  // Later 2.x allocators copy storages through the allocator (plain host memory either way).
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
#endif

  static void retryDeferred() {
    if (gDeferredCount.load(std::memory_order_relaxed) == 0) return;  // the common case: no lock
    std::vector<void*> again;
    {
      std::lock_guard<std::mutex> lock(gDeferredMu);
      again.swap(gDeferred);
      gDeferredCount.store(0, std::memory_order_relaxed);
    }
    for (void* p : again) freeShared(p);
  }

  c10::Allocator* previous = nullptr;
  std::atomic<bool> enabled{false};
  std::atomic<size_t> minBytes{0};
};

// Static: storages keep a pointer to the allocator that made them, for their whole life.
SharedCpuAllocator gShared;
std::once_flag gInstalled;

}  // namespace

void useSharedMemory(bool enabled, size_t minBytes) {
  std::call_once(gInstalled, [] {
    gShared.previous = c10::GetAllocator(c10::DeviceType::CPU);
    // Above the default's priority (0), which a later registration at 0 could not undo.
    c10::SetAllocator(c10::DeviceType::CPU, &gShared, /*priority=*/1);
  });
  gShared.minBytes.store(minBytes, std::memory_order_relaxed);
  gShared.enabled.store(enabled, std::memory_order_relaxed);
}

bool usesSharedMemory() { return gShared.enabled.load(std::memory_order_relaxed); }

}  // namespace braid_torch
