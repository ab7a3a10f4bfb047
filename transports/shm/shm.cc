// The shared-memory transport: ranks on one host exchange messages through FIFOs in POSIX shared
// memory (layout in transports/shm/shm_layout.h, data path in transports/shm/shm_link.cc), and large
// messages by single copy with process_vm_readv (CMA) where the kernel allows it.
//
// connect(), on every rank (also ranks without shm peers, so that allGather counts match):
//   1. create one segment holding a FIFO to each shm peer (we are the sender of those FIFOs);
//   2. allGather #1: segment name, creation status, pid, and a CMA probe address + token;
//   3. attach each peer's FIFO toward us, verify the header (magic, version, communicator, rank,
//      secret), probe process_vm_readv on the peer's token, and tell the peer in the FIFO whether
//      we accept CMA descriptors;
//   4. allGather #2: everyone's status (a barrier: all peers attached and probed);
//   5. unlink our segment (nothing stays in /dev/shm even if a process dies later) and, where the
//      peer accepts CMA, enable it on the send side.
// Any failure anywhere makes every rank return an error naming the rank, instead of some ranks
// waiting for peers that gave up.
//
// Why CMA is only for large messages: on the 2-core reference VM process_vm_readv copies 7-11 GB/s
// (page pinning, kernel copy without vector registers) while the FIFO's two pipelined memcpys move
// 12-15 GB/s, and a 2-rank AllReduce with CMA for 256 KiB chunks ran at half the FIFO's bandwidth.
// BRAID_SHM_CMA_MIN (1M) above the executor's chunk size keeps it out of collectives by default.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "src/config.h"
#include "src/log.h"
#include "transports/shm/shm_layout.h"
#include "transports/shm/shm_link.h"
#include "transports/transport.h"

namespace braid {
namespace shm {
namespace {

constexpr int kNameAttempts = 4;

enum class CmaMode { kOff, kAuto, kOn };

struct Config {
  size_t slotSize = 0;
  uint32_t nslots = 0;
  CmaMode cma = CmaMode::kAuto;
  size_t cmaMin = 0;
};

// nfifos: this rank's shm peers, one FIFO each in its segment.
Status loadConfig(size_t nfifos, Config* out) {
  Config c;
  BRAID_TRY(paramSize("BRAID_SHM_SLOT_SIZE", &c.slotSize));
  if (c.slotSize < kCacheLine || c.slotSize % kCacheLine != 0 || c.slotSize > kMaxSlotSize)
    return errorf(braidInvalidArgument, "BRAID_SHM_SLOT_SIZE=%zu must be a multiple of %zu between %zu and %zu",
                  c.slotSize, kCacheLine, kCacheLine, kMaxSlotSize);
  int64_t slots = 0;
  BRAID_TRY(paramInt("BRAID_SHM_SLOTS", &slots));
  if (slots < 1 || slots > kMaxSlots)
    return errorf(braidInvalidArgument, "BRAID_SHM_SLOTS=%lld must be between 1 and %lld",
                  static_cast<long long>(slots), static_cast<long long>(kMaxSlots));
  c.nslots = static_cast<uint32_t>(slots);
  // Every rank of this host (this one and its nfifos shm peers) creates and populates a segment of
  // nfifos FIFOs. Half the host's memory for all of them leaves room for the job's own buffers;
  // beyond that a slot size such as 1G pushes the host into swap or the OOM killer.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const long physPages = sysconf(_SC_PHYS_PAGES);
  const size_t hostBytes = physPages > 0 ? static_cast<size_t>(physPages) * page : SIZE_MAX;
  size_t perRank = 0, needed = 0;
  if (__builtin_mul_overflow(fifoBytes(c.slotSize, c.nslots, page), nfifos, &perRank) ||
      __builtin_mul_overflow(perRank, nfifos + 1, &needed) || needed > hostBytes / 2)
    return errorf(braidInvalidArgument,
                  "BRAID_SHM_SLOT_SIZE=%zu x BRAID_SHM_SLOTS=%u x %zu FIFOs per rank x %zu ranks on this host needs "
                  "more than half of this host's %zu MiB of memory",
                  c.slotSize, c.nslots, nfifos, nfifos + 1, hostBytes >> 20);
  BRAID_TRY(paramSize("BRAID_SHM_CMA_MIN", &c.cmaMin));
  std::string mode;
  BRAID_TRY(paramEnum("BRAID_SHM_CMA", &mode));
  if (mode == "auto") {
    c.cma = CmaMode::kAuto;
  } else if (mode == "0") {
    c.cma = CmaMode::kOff;
  } else if (mode == "1") {
    c.cma = CmaMode::kOn;
  } else {
    return errorf(braidInvalidArgument, "BRAID_SHM_CMA=%s must be auto, 0 or 1", mode.c_str());
  }
  *out = c;
  return okStatus();
}

// What each rank contributes to allGather #1 (fixed size, whatever the number of shm peers).
struct ConnectRecord {
  char name[48];       // our segment, "" when we have no shm peers
  int32_t status;      // braidResult_t of our setup so far
  int32_t pid;         // for process_vm_readv and liveness checks
  uint64_t probeAddr;  // where probeToken lives in our address space
  uint64_t probeToken[2];
};

// Closes a descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// Our own segment; unlinked on destruction if connect() did not get that far.
struct OwnSegment {
  std::string name;
  std::shared_ptr<Mapping> mapping;
  size_t headerBytes = 0;
  size_t fifoBytes = 0;
  bool linked = false;

  void unlink() {
    if (linked && shm_unlink(name.c_str()) != 0)
      BRAID_WARN(kLogShm, "shm_unlink /dev/shm%s: %s", name.c_str(), strerror(errno));
    linked = false;
  }
  ~OwnSegment() { unlink(); }
};

size_t pageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

Status randomBytes(void* buf, size_t n) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return systemError(errno, "getrandom");
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return okStatus();
}

Status randomName(std::string* name) {
  unsigned char r[16];
  BRAID_TRY(randomBytes(r, sizeof(r)));
  char buf[8 + 2 * sizeof(r)] = "/braid-";
  for (size_t i = 0; i < sizeof(r); ++i) snprintf(buf + 7 + 2 * i, 3, "%02x", r[i]);
  *name = buf;
  return okStatus();
}

Status createSegment(const TransportContext& ctx, const std::vector<int>& peers, const Config& cfg, OwnSegment* seg) {
  const size_t page = pageSize();
  seg->headerBytes = headerBytes(peers.size(), page);
  seg->fifoBytes = fifoBytes(cfg.slotSize, cfg.nslots, page);
  const size_t total = seg->headerBytes + peers.size() * seg->fifoBytes;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    BRAID_TRY(randomName(&seg->name));
    fd = shm_open(seg->name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno != EEXIST || attempt + 1 == kNameAttempts))
      return systemError(errno, "cannot create shared memory /dev/shm%s (is /dev/shm mounted and writable?)",
                         seg->name.c_str());
  }
  FdCloser closer{fd};
  seg->linked = true;
  // Reserve the pages now: tmpfs would otherwise fail a later page fault with SIGBUS when full.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (err != 0)
    return systemError(err,
                       "cannot allocate %zu bytes of shared memory for %zu shm peer(s) in /dev/shm%s (is /dev/shm "
                       "full or too small? see `df /dev/shm`; lower BRAID_SHM_SLOTS or BRAID_SHM_SLOT_SIZE)",
                       total, peers.size(), seg->name.c_str());
  void* addr = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) return systemError(errno, "mmap %zu bytes of /dev/shm%s", total, seg->name.c_str());
  seg->mapping = std::make_shared<Mapping>(addr, total);

  auto* h = new (addr) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kSegmentVersion;
  h->creatorRank = ctx.rank;
  h->commId = ctx.commId;
  memcpy(h->secret, ctx.secret, sizeof(h->secret));
  h->segmentBytes = total;
  h->fifoBytes = seg->fifoBytes;
  h->slotSize = static_cast<uint32_t>(cfg.slotSize);
  h->nslots = cfg.nslots;
  h->nfifos = static_cast<uint32_t>(peers.size());
  auto* dir = reinterpret_cast<FifoEntry*>(h + 1);
  for (size_t i = 0; i < peers.size(); ++i) {
    dir[i] = FifoEntry{peers[i], 0, seg->headerBytes + i * seg->fifoBytes};
    unsigned char* fifo = seg->mapping->data() + dir[i].offset;
    new (fifo) FifoControl{};
    for (uint32_t k = 0; k < cfg.nslots; ++k)
      new (fifo + sizeof(FifoControl) + k * slotStride(cfg.slotSize)) SlotHeader{};
  }
  return okStatus();
}

Status readExactly(int fd, void* buf, size_t n, off_t at, int peer) {
  ssize_t got = pread(fd, buf, n, at);
  if (got < 0) return systemError(errno, "read shm segment of peer rank %d", peer);
  if (static_cast<size_t>(got) != n)
    return errorf(braidRemoteError, "shm segment of peer rank %d is truncated (%zd of %zu bytes at %lld)", peer, got, n,
                  static_cast<long long>(at));
  return okStatus();
}

// Maps the FIFO that peer `peer` created for us and checks that the segment is what it claims.
// Another process wrote it: the header is read once into our memory and checked there
// (checkSegmentHeader), and only the FIFO it locates is mapped.
Status attachPeer(const TransportContext& ctx, int peer, const char* name, FifoView* view) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0)
    return systemError(errno,
                       "cannot open shared memory /dev/shm%s of peer rank %d (same host id, but not the same "
                       "/dev/shm? set BRAID_HOSTID or BRAID_TRANSPORTS)",
                       name, peer);
  FdCloser closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return systemError(errno, "fstat /dev/shm%s of peer rank %d", name, peer);
  // Ours is created 0600 by our own user: anything else was not made by a peer of this communicator.
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0 || st.st_size < 0)
    return errorf(braidRemoteError, "shm segment /dev/shm%s of peer rank %d: owner %u, mode %03o (want ours, 0600)",
                  name, peer, static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 0777));
  SegmentExpect want;
  want.commId = ctx.commId;
  want.secret = ctx.secret;
  want.creatorRank = peer;
  want.receiverRank = ctx.rank;
  want.nranks = ctx.nranks;
  want.fileBytes = static_cast<uint64_t>(st.st_size);
  want.page = pageSize();
  std::vector<uint8_t> head(std::min<uint64_t>(segmentHeadBytes(ctx.nranks), want.fileBytes));
  BRAID_TRY(readExactly(fd, head.data(), head.size(), 0, peer));
  FifoPlace place;
  Status s = checkSegmentHeader(head.data(), head.size(), want, &place);
  if (!s.ok())
    return s.withContext("shm segment /dev/shm" + std::string(name) + " of peer rank " + std::to_string(peer));
  void* addr = mmap(nullptr, place.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                    static_cast<off_t>(place.offset));
  if (addr == MAP_FAILED) return systemError(errno, "mmap shm FIFO of peer rank %d", peer);
  view->mapping = std::make_shared<Mapping>(addr, place.bytes);
  view->base = view->mapping->data();
  view->slotSize = place.slotSize;
  view->nslots = place.nslots;
  return okStatus();
}

// Whether we can read the peer's memory with process_vm_readv: read its token where it says it
// is. Also proves that the pid names that very process (a pid from another pid namespace does not).
bool probeCma(int peer, const ConnectRecord& r) {
  uint64_t got[2] = {0, 0};
  iovec local = {got, sizeof(got)};
  iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(r.probeAddr)), sizeof(got)};
  ssize_t n = process_vm_readv(r.pid, &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(sizeof(got))) {
    BRAID_INFO(kLogShm, "single-copy (CMA) from peer rank %d unavailable: process_vm_readv: %s", peer,
               n < 0 ? strerror(errno) : "short read");
    return false;
  }
  return memcmp(got, r.probeToken, sizeof(got)) == 0;
}

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }

  bool canConnect(const PeerInfo& a, const PeerInfo& b) const override {
    return a.rank != b.rank && a.hostId[0] != '\0' && strncmp(a.hostId, b.hostId, sizeof(a.hostId)) == 0;
  }

  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;

 private:
  // Read by peers with process_vm_readv during connect().
  uint64_t probeToken_[2] = {0, 0};
};

Status checkPeerList(const TransportContext& ctx, const std::vector<int>& peers) {
  std::vector<bool> seen(ctx.nranks, false);
  for (int p : peers) {
    if (p < 0 || p >= ctx.nranks || p == ctx.rank || seen[p])
      return errorf(braidInternalError, "shm connect: bad peer list (rank %d)", p);
    seen[p] = true;
  }
  if (ctx.peers == nullptr || ctx.peers->size() != static_cast<size_t>(ctx.nranks))
    return errorf(braidInternalError, "shm connect: peer table missing");
  return okStatus();
}

Status ShmTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Link>>* out) {
  const size_t n = peers.size();
  Config cfg;
  Status local = loadConfig(n, &cfg);
  if (local.ok()) local = checkPeerList(ctx, peers);
  if (local.ok()) local = randomBytes(probeToken_, sizeof(probeToken_));
  OwnSegment own;
  if (local.ok() && n > 0) local = createSegment(ctx, peers, cfg, &own);

  ConnectRecord mine{};
  snprintf(mine.name, sizeof(mine.name), "%s", own.name.c_str());
  mine.status = local.code();
  mine.pid = static_cast<int32_t>(getpid());
  mine.probeAddr = reinterpret_cast<uintptr_t>(probeToken_);
  memcpy(mine.probeToken, probeToken_, sizeof(probeToken_));
  std::vector<ConnectRecord> all(ctx.nranks);
  BRAID_TRY(ctx.allGather(&mine, sizeof(mine), all.data()));

  std::vector<std::unique_ptr<ShmLink>> links(n);
  for (size_t i = 0; i < n && local.ok(); ++i) {
    const int p = peers[i];
    ConnectRecord& r = all[p];
    r.name[sizeof(r.name) - 1] = '\0';
    if (r.status != braidSuccess) {
      local = errorf(braidRemoteError, "shm setup failed on peer rank %d", p);
      break;
    }
    LinkSetup s;
    s.peerRank = p;
    s.peerPid = r.pid;
    s.peerHost = (*ctx.peers)[p].hostname;
    local = attachPeer(ctx, p, r.name, &s.in);
    if (!local.ok()) break;
    s.out.mapping = own.mapping;
    s.out.base = own.mapping->data() + own.headerBytes + i * own.fifoBytes;
    s.out.slotSize = cfg.slotSize;
    s.out.nslots = cfg.nslots;
    const bool probed = cfg.cma != CmaMode::kOff && probeCma(p, r);
    if (cfg.cma == CmaMode::kOn && !probed) {
      local = errorf(braidSystemError,
                     "BRAID_SHM_CMA=1 but process_vm_readv from peer rank %d (pid %d) does not work here "
                     "(ptrace restrictions or another pid namespace); use BRAID_SHM_CMA=auto",
                     p, static_cast<int>(r.pid));
      break;
    }
    s.cmaRecv = probed;
    links[i] = std::make_unique<ShmLink>(std::move(s));
    // Read by the peer after allGather #2 (the barrier orders it; release/acquire for the record).
    links[i]->inControl()->cmaAccept.store(links[i]->cmaRecv() ? 1 : 0, std::memory_order_release);
  }

  int32_t myStatus = local.code();
  std::vector<int32_t> statuses(ctx.nranks);
  BRAID_TRY(ctx.allGather(&myStatus, sizeof(myStatus), statuses.data()));
  own.unlink();  // every peer has it mapped now (or gave up)
  if (!local.ok()) {
    BRAID_WARN(kLogShm, "%s", local.message().c_str());
    return local;
  }
  for (int r = 0; r < ctx.nranks; ++r) {
    if (all[r].status != braidSuccess || statuses[r] != braidSuccess)
      return errorf(braidRemoteError, "shm transport setup failed on rank %d", r);
  }

  out->clear();
  out->resize(n);
  int cmaLinks = 0;
  for (size_t i = 0; i < n; ++i) {
    // Pairs with the peer's release store before the barrier.
    if (cfg.cma != CmaMode::kOff && links[i]->outControl()->cmaAccept.load(std::memory_order_acquire) == 1) {
      links[i]->enableCmaSend(cfg.cmaMin);
      ++cmaLinks;
    }
    (*out)[i] = std::move(links[i]);
  }
  BRAID_INFO(kLogShm, "shm: %zu peers, %u slots of %zu bytes per FIFO, single copy to %d peers from %zu bytes", n,
             cfg.nslots, cfg.slotSize, cmaLinks, cfg.cmaMin);
  return okStatus();
}

}  // namespace
}  // namespace shm

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<shm::ShmTransport>(); }

}  // namespace braid
