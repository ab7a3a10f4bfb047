// Memory-type detection: where a buffer the caller passed lives (host, pinned host, device or
// managed memory), from cudaPointerGetAttributes, and the transports' MemType it maps to.
//
// Cost. A build without CUDA, or a process without a CUDA device, answers "host" at once (one
// load of a cached flag). Otherwise answers are cached per thread by address range: device, managed
// and pinned allocations by the whole allocation (the driver's range), pageable host buffers by the
// range the caller asked about. A hit is a scan of a few entries and no CUDA call; a miss asks the
// driver (about a microsecond) and fills an entry. A process with no CUDA context yet (one that
// never used the GPU: a host-only job on a GPU machine) answers "host" without asking
// cudaPointerGetAttributes, which would create a context for it.
//
// Staleness. An entry lives until braid hears that its memory went away: braidMemFree and the last
// braidCommDeregister of a range call forgetPointerKinds(), which empties every thread's cache. Memory
// the application frees itself (cudaFree, free) and then gets back at the same address as another
// kind is not seen: register buffers, or allocate them with braidMemAlloc, to be told apart. (UCX's
// memory-type cache has the same limit without its allocation hooks.)
//
// Threads: thread-safe; the caches are per thread, so lookups take no lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

enum class PtrKind : uint8_t {
  kHost = 0,        // pageable host memory, or memory CUDA does not know
  kPinnedHost = 1,  // page-locked host memory (cudaHostAlloc, cudaHostRegister, cudaMallocHost)
  kDevice = 2,      // device memory (cudaMalloc, cuMemCreate)
  kManaged = 3,     // unified memory (cudaMallocManaged)
};

struct PtrInfo {
  PtrKind kind = PtrKind::kHost;
  int device = -1;  // the device that owns device/managed memory or mapped pinned memory; -1 for host
};

// "host", "pinned host", "device", "managed".
const char* ptrKindName(PtrKind kind);

// The transports' view: host and pinned host memory are kHost (a CPU can touch both); device and
// managed memory are kCuda (kept behind device copies and kernels; managed memory could be read by
// the CPU but would page-fault its way back and forth).
constexpr MemType memTypeOf(PtrKind kind) {
  return kind == PtrKind::kDevice || kind == PtrKind::kManaged ? MemType::kCuda : MemType::kHost;
}

// Where [ptr, ptr + bytes) lives (bytes 0 counts as 1). A pointer CUDA does not know is host
// memory. A failure of the driver other than "not a CUDA pointer" is braidSystemError naming the
// pointer; *out is set on success only.
Status pointerKind(const void* ptr, size_t bytes, PtrInfo* out);

// Forgets every cached answer that overlaps [base, base + bytes), in every thread (each thread
// empties its cache at its next lookup). For memory braid frees or deregisters.
void forgetPointerKinds(const void* base, size_t bytes);

// Cache statistics of the calling thread, for tests: lookups answered from the cache and lookups
// that asked the driver.
struct PtrKindStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
};
PtrKindStats pointerKindStats();
// How many times forgetPointerKinds ran in this process (for tests of who calls it).
uint64_t pointerKindEpoch();

}  // namespace braid
