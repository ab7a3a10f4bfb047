#include "src/regions.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>

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

// What hostAlloc handed out, by address, so hostFree can refuse anything else and the shm
// transport can find the memory file behind a buffer.
struct Allocation {
  size_t len = 0;
  int fd = -1;       // the memfd behind it (-1: anonymous memory, which peers cannot map)
  uint64_t ino = 0;  // its inode: how a peer knows it opened this file and not another
  int pins = 0;      // operations in flight that let peers use it
};

struct Allocations {
  std::mutex mu;
  std::map<uintptr_t, Allocation> live;
};

std::atomic<uint32_t> g_frees{0};

Allocations& allocations() {
  static Allocations* a = new Allocations;  // never destroyed: frees may run while the process exits
  return *a;
}

// A memory file of len bytes mapped shared, so that peers on this host can map it too
// (src/peer_maps.h); false when the system has no memfd or no fd to spare (then the memory is
// anonymous and calls on it take the FIFOs).
bool mapShared(size_t len, void** p, int* fd, uint64_t* ino) {
  const int f = memfd_create("braid-mem", MFD_CLOEXEC);
  if (f < 0) return false;
  struct stat st;
  void* m = MAP_FAILED;
  if (ftruncate(f, static_cast<off_t>(len)) == 0 && fstat(f, &st) == 0)
    m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  if (m == MAP_FAILED) {
    close(f);
    return false;
  }
  *p = m;
  *fd = f;
  *ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

}  // namespace

Status hostAlloc(size_t size, void** ptr) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (size > SIZE_MAX - page) return errorf(braidInvalidArgument, "size %zu is too large", size);
  const size_t len = (size + page - 1) / page * page;
  // mmap: page-aligned and zeroed, and given back to the system on free.
  Allocation a;
  a.len = len;
  void* p = nullptr;
  if (!mapShared(len, &p, &a.fd, &a.ino)) {
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return systemError(errno, "mmap of %zu bytes", len);
  }
  Allocations& all = allocations();
  try {
    std::lock_guard<std::mutex> hold(all.mu);
    all.live.emplace(reinterpret_cast<uintptr_t>(p), a);
  } catch (...) {
    munmap(p, len);
    if (a.fd >= 0) close(a.fd);
    throw;
  }
  *ptr = p;
  return okStatus();
}

Status hostFree(void* ptr) {
  Allocations& all = allocations();
  Allocation a;
  {
    std::lock_guard<std::mutex> hold(all.mu);
    auto it = all.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == all.live.end())
      return errorf(braidInvalidArgument, "%p was not returned by braidMemAlloc, or was freed already", ptr);
    if (it->second.pins > 0)
      return errorf(braidInvalidUsage,
                    "%p is in use by an operation in flight that peers read or write in place: wait for it before "
                    "braidMemFree",
                    ptr);
    a = it->second;
    all.live.erase(it);
  }
  forgetPointerKinds(ptr, a.len);
  munmap(ptr, a.len);
  if (a.fd >= 0) close(a.fd);
  g_frees.fetch_add(1, std::memory_order_relaxed);
  return okStatus();
}

uint32_t hostFrees() { return g_frees.load(std::memory_order_relaxed); }

bool pinShared(const void* p, size_t bytes, SharedRange* out) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  Allocations& all = allocations();
  std::lock_guard<std::mutex> hold(all.mu);
  auto it = all.live.upper_bound(at);
  if (it == all.live.begin()) return false;
  --it;
  Allocation& a = it->second;
  if (a.fd < 0 || at - it->first >= a.len || bytes > a.len - (at - it->first)) return false;
  ++a.pins;
  out->fd = a.fd;
  out->ino = a.ino;
  out->offset = at - it->first;
  out->base = it->first;
  return true;
}

void unpinShared(const SharedRange& r) {
  Allocations& all = allocations();
  std::lock_guard<std::mutex> hold(all.mu);
  auto it = all.live.find(r.base);
  if (it != all.live.end() && it->second.pins > 0) --it->second.pins;
}

}  // namespace braid
