// Transport-independent memory handling: the registration cache every transport shares, and the
// scratch buffers operations use (allocated at a memory type's alignment, grown only).
#include <cstdlib>
#include <cstring>
#include <new>

#include "transports/transport.h"

namespace braid {

namespace {

// Whole cache lines (and a DMA-friendly start) for the reduce kernels and NICs alike.
constexpr size_t kScratchAlign = 64;

const char* memTypeName(MemType m) { return m == MemType::kHost ? "host" : "cuda"; }

}  // namespace

Status Transport::registerMemory(void* ptr, size_t bytes, MemType memType, const Region** out) {
  if ((caps().memTypes & memTypeBit(memType)) == 0)
    return errorf(braidInvalidArgument, "transport %s cannot touch %s memory", name(), memTypeName(memType));
  if (ptr == nullptr && bytes > 0)
    return errorf(braidInvalidArgument, "transport %s: registering %zu bytes at NULL", name(), bytes);
  for (const auto& r : regions_) {
    if (r->base == ptr && r->bytes == bytes && r->memType == memType) {
      *out = r.get();
      return okStatus();
    }
  }
  auto r = std::make_unique<Region>();
  r->base = ptr;
  r->bytes = bytes;
  r->memType = memType;
  BRAID_TRY(registerRegion(r.get()));
  regions_.push_back(std::move(r));
  *out = regions_.back().get();
  return okStatus();
}

Status Transport::deregisterMemory(const Region* region) {
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].get() != region) continue;
    deregisterRegion(regions_[i].get());
    regions_.erase(regions_.begin() + static_cast<long>(i));
    return okStatus();
  }
  return errorf(braidInvalidArgument, "transport %s did not register this region", name());
}

void Transport::releaseRegions() {
  for (const auto& r : regions_) deregisterRegion(r.get());
  regions_.clear();
}

ScratchBuffer::~ScratchBuffer() { std::free(data_); }

Status ScratchBuffer::reserve(size_t bytes, MemType memType) {
  if (memType != MemType::kHost)
    return errorf(braidInvalidArgument, "scratch of %s memory is not supported by this build", memTypeName(memType));
  if (bytes <= capacity_ && memType == memType_ && data_ != nullptr) return okStatus();
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a valid buffer.
  const size_t rounded = (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  void* p = std::aligned_alloc(kScratchAlign, rounded == 0 ? kScratchAlign : rounded);
  if (p == nullptr) return errorf(braidSystemError, "cannot allocate %zu bytes of scratch", bytes);
  std::free(data_);
  data_ = static_cast<char*>(p);
  capacity_ = bytes;
  memType_ = memType;
  return okStatus();
}

}  // namespace braid
