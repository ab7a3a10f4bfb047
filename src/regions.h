// Memory the application tells braid about: a communicator's registered regions
// (braidCommRegister) and host memory braid allocated (braidMemAlloc).
//
// Today a registration is only a record: shm and tcp need none. The transports that do (RDMA
// verbs, UCX, CUDA IPC) will register each region with Transport::registerMemory and keep their
// keys beside it. A region handle is a handle of src/handles.h (generation-checked), so a handle
// that was deregistered, or whose communicator was destroyed, is refused without reading anything
// it points to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "src/base/status.h"

namespace braid {

class RegionTable {
 public:
  RegionTable() = default;
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;
  // Ends every handle still registered (the communicator is being destroyed).
  ~RegionTable();

  // Registers [buff, buff + size) and sets *handle. The same range again returns the same handle
  // and counts one more registration (as NCCL's registration cache does); an overlapping range is
  // a region of its own.
  Status add(void* buff, size_t size, void** handle);
  // Undoes one registration of a handle that add() of this table returned. A handle that ended, of
  // another table, or never handed out: braidInvalidArgument, nothing changes.
  Status remove(void* handle);
  // Live regions, for tests and logs.
  size_t count() const;

 private:
  struct Region {
    uintptr_t base = 0;
    size_t size = 0;
    int refs = 0;
    uint32_t slot = 0;
  };
  // Registration happens at setup, a few times per buffer: a mutex and a linear search are fine.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Region>> regions_;
};

// Page-aligned, zeroed host memory (braidMemAlloc); *ptr set on success only. It is a memory file
// (memfd) mapped shared, which peers on this host map to read and write it in place (src/peer_maps.h,
// src/direct_coll.cc); anonymous memory where the system gives no memfd.
Status hostAlloc(size_t size, void** ptr);
// Frees what hostAlloc returned; anything else (a foreign pointer, a second free) is
// braidInvalidArgument, and memory that an operation in flight lets peers use (pinShared) is
// braidInvalidUsage: both free nothing.
Status hostFree(void* ptr);

// Where a buffer lies in hostAlloc's shared memory: the file's descriptor in this process, its
// inode, and the buffer's offset in it.
struct SharedRange {
  int fd = -1;
  uint64_t ino = 0;
  uint64_t offset = 0;
  uintptr_t base = 0;  // the allocation (for unpinShared)
};
// Whether [p, p + bytes) lies within one shared allocation of hostAlloc; if so sets *out and pins
// the allocation (hostFree refuses it) until unpinShared(*out).
bool pinShared(const void* p, size_t bytes, SharedRange* out);
void unpinShared(const SharedRange& r);
// How many hostAlloc allocations this process freed so far: a peer that maps them looks again at
// what it holds of ours when this changes (src/peer_maps.h).
uint32_t hostFrees();

}  // namespace braid
