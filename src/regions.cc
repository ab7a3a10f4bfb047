#include "src/regions.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include "src/cuda/memtype.h"
#include "src/handles.h"

namespace braid {

RegionTable::~RegionTable() {
  for (const auto& r : regions_) regionHandles().remove(r->slot, HandleEnd::kDestroyed);
}

Status RegionTable::add(void* buff, size_t size, void** handle) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(buff);
  std::lock_guard<std::mutex> hold(mu_);
  for (const auto& r : regions_)
    if (r->base == base && r->size == size) {
      if (r->refs == INT32_MAX)
        return errorf(braidInvalidUsage, "region %p (%zu bytes) is registered too often", buff, size);
      ++r->refs;
      *handle = reinterpret_cast<void*>(static_cast<uintptr_t>(regionHandles().handleOf(r->slot)));
      return okStatus();
    }
  auto region = std::make_unique<Region>();
  region->base = base;
  region->size = size;
  region->refs = 1;
  regions_.reserve(regions_.size() + 1);  // the push below cannot throw once the slot is published
  BRAID_TRY(regionHandles().reserve(&region->slot));
  regionHandles().publish(region->slot, region.get());
  *handle = reinterpret_cast<void*>(static_cast<uintptr_t>(regionHandles().handleOf(region->slot)));
  regions_.push_back(std::move(region));
  return okStatus();
}

Status RegionTable::remove(void* handle) {
  void* obj = nullptr;
  BRAID_TRY(regionHandles().find(reinterpret_cast<uintptr_t>(handle), &obj));
  std::lock_guard<std::mutex> hold(mu_);
  // A live handle of another communicator names a region this table does not hold: look it up
  // here rather than read it (its communicator may be freeing it right now).
  auto it = std::find_if(regions_.begin(), regions_.end(), [obj](const auto& r) { return r.get() == obj; });
  if (it == regions_.end())
    return errorf(braidInvalidArgument, "region %p was registered on another communicator", handle);
  // Another thread may have ended the region since find() and a new one taken its memory.
  if (regionHandles().handleOf((*it)->slot) != reinterpret_cast<uintptr_t>(handle))
    return errorf(braidInvalidArgument, "region %p was deregistered", handle);
  Region* r = it->get();
  if (--r->refs > 0) return okStatus();
  // The application may free the memory now: what braid learned about its kind goes too.
  forgetPointerKinds(reinterpret_cast<void*>(r->base), r->size);
  regionHandles().remove(r->slot, HandleEnd::kReleased);
  regions_.erase(it);
  return okStatus();
}

size_t RegionTable::count() const {
  std::lock_guard<std::mutex> hold(mu_);
  return regions_.size();
}

namespace {

// What hostAlloc handed out, and its mapped length, so hostFree can refuse anything else.
struct Allocations {
  std::mutex mu;
  std::unordered_map<void*, size_t> live;
};

Allocations& allocations() {
  static Allocations* a = new Allocations;  // never destroyed: frees may run while the process exits
  return *a;
}

}  // namespace

Status hostAlloc(size_t size, void** ptr) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (size > SIZE_MAX - page) return errorf(braidInvalidArgument, "size %zu is too large", size);
  const size_t len = (size + page - 1) / page * page;
  // mmap: page-aligned and zeroed, and given back to the system on free.
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return systemError(errno, "mmap of %zu bytes", len);
  Allocations& a = allocations();
  try {
    std::lock_guard<std::mutex> hold(a.mu);
    a.live.emplace(p, len);
  } catch (...) {
    munmap(p, len);
    throw;
  }
  *ptr = p;
  return okStatus();
}

Status hostFree(void* ptr) {
  Allocations& a = allocations();
  size_t len = 0;
  {
    std::lock_guard<std::mutex> hold(a.mu);
    auto it = a.live.find(ptr);
    if (it == a.live.end())
      return errorf(braidInvalidArgument, "%p was not returned by braidMemAlloc, or was freed already", ptr);
    len = it->second;
    a.live.erase(it);
  }
  forgetPointerKinds(ptr, len);
  munmap(ptr, len);
  return okStatus();
}

}  // namespace braid
