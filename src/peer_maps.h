// The memory of this host's peers that this process mapped: the braidMemAlloc files (src/regions.h)
// behind the buffers of collectives that read and write in place (src/direct_coll.cc).
//
// A peer names a buffer by its file's descriptor in the peer's process and the file's inode; this
// process opens /proc/<pid>/fd/<fd> (which the kernel allows a process of the same user), checks the
// inode and the size, and maps the whole file once. A mapping outlives the peer's own: memory a
// peer freed stays valid here (never a crash) until forget() finds it gone, which the caller asks
// for when the peer's count of frees (hostFrees, in its mail) moved. The cache keeps at most the
// kMaxEntries files used last; an inode cannot name another file while we hold a mapping of it, so
// an entry never goes stale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/base/status.h"

namespace braid {

class PeerMaps {
 public:
  PeerMaps() = default;
  PeerMaps(const PeerMaps&) = delete;
  PeerMaps& operator=(const PeerMaps&) = delete;
  ~PeerMaps();

  // The address here of `bytes` at `offset` of the file `ino` that `peer` (process `pid`) holds open
  // as `fd`. `use`: the caller's call number; entries used by the current call are never evicted.
  Status map(int peer, int64_t pid, int fd, uint64_t ino, uint64_t offset, size_t bytes, uint64_t use, char** out);
  size_t size() const { return entries_.size(); }
  // Unmaps what `peer` (process `pid`) no longer holds open: its memory freed.
  void forget(int peer, int64_t pid);

  // Whether this process may open and map a file that `pid` holds open as `fd` with inode `ino`
  // (init's probe: /proc may be mounted hidepid, or the peer undumpable).
  static bool canMap(int64_t pid, int fd, uint64_t ino);

  static constexpr size_t kMaxEntries = 64;

 private:
  struct Entry {
    int peer = -1;
    int fd = -1;  // in the peer's process
    uint64_t ino = 0;
    char* base = nullptr;
    size_t len = 0;
    uint64_t used = 0;
  };
  std::vector<Entry> entries_;
};

}  // namespace braid
