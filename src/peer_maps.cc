#include "src/peer_maps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace braid {

namespace {

// Opens the peer's file and maps all of it; *len its size.
Status openPeerFile(int64_t pid, int fd, uint64_t ino, char** base, size_t* len) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%lld/fd/%d", static_cast<long long>(pid), fd);
  const int f = open(path, O_RDWR | O_CLOEXEC);
  if (f < 0) return systemError(errno, "open of %s (a peer's braidMemAlloc memory)", path);
  struct stat st;
  if (fstat(f, &st) != 0) {
    const int e = errno;
    close(f);
    return systemError(e, "fstat of %s", path);
  }
  if (static_cast<uint64_t>(st.st_ino) != ino || st.st_size <= 0) {
    close(f);
    return errorf(braidInvalidUsage,
                  "%s is not the memory the peer named (inode %llu, expected %llu): it freed the buffer during the "
                  "call",
                  path, static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(ino));
  }
  void* m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
  const int e = errno;
  close(f);  // the mapping holds the file
  if (m == MAP_FAILED) return systemError(e, "mmap of %s (%lld bytes)", path, static_cast<long long>(st.st_size));
  *base = static_cast<char*>(m);
  *len = static_cast<size_t>(st.st_size);
  return okStatus();
}

}  // namespace

PeerMaps::~PeerMaps() {
  for (const Entry& e : entries_) munmap(e.base, e.len);
}

bool PeerMaps::canMap(int64_t pid, int fd, uint64_t ino) {
  char* base = nullptr;
  size_t len = 0;
  if (!openPeerFile(pid, fd, ino, &base, &len).ok()) return false;
  munmap(base, len);
  return true;
}

void PeerMaps::forget(int peer, int64_t pid) {
  for (size_t i = 0; i < entries_.size();) {
    Entry& e = entries_[i];
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%lld/fd/%d", static_cast<long long>(pid), e.fd);
    if (e.peer != peer || (stat(path, &st) == 0 && static_cast<uint64_t>(st.st_ino) == e.ino)) {
      ++i;
      continue;
    }
    munmap(e.base, e.len);
    e = entries_.back();
    entries_.pop_back();
  }
}

Status PeerMaps::map(int peer, int64_t pid, int fd, uint64_t ino, uint64_t offset, size_t bytes, uint64_t use,
                     char** out) {
  Entry* hit = nullptr;
  for (Entry& e : entries_)
    if (e.peer == peer && e.ino == ino) hit = &e;
  if (hit == nullptr) {
    Entry e;
    e.peer = peer;
    e.fd = fd;
    e.ino = ino;
    BRAID_TRY(openPeerFile(pid, fd, ino, &e.base, &e.len));
    if (entries_.size() >= kMaxEntries) {
      // The least recently used entry that the current call does not hold.
      Entry* victim = nullptr;
      for (Entry& x : entries_)
        if (x.used != use && (victim == nullptr || x.used < victim->used)) victim = &x;
      if (victim != nullptr) {
        munmap(victim->base, victim->len);
        *victim = entries_.back();
        entries_.pop_back();
      }
    }
    entries_.push_back(e);
    hit = &entries_.back();
  }
  // The file may have grown since (a new allocation under the same inode cannot happen while it is
  // mapped here, but the peer's range must still lie inside what was mapped).
  if (offset > hit->len || bytes > hit->len - offset)
    return errorf(braidInvalidUsage, "a peer named %zu bytes at offset %llu of its memory of %zu bytes", bytes,
                  static_cast<unsigned long long>(offset), hit->len);
  hit->used = use;
  *out = hit->base + offset;
  return okStatus();
}

}  // namespace braid
