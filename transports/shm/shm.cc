// The shared-memory transport: ranks on one host exchange messages through FIFOs in POSIX shared
// memory (layout in transports/shm/shm_layout.h, data path in transports/shm/shm_link.cc), and large
// messages by single copy with process_vm_readv (CMA) where the kernel allows it.
//
// Each rank creates one segment per shm peer, holding the FIFO toward that peer (we are its
// sender), named /braid-<our pid>-<communicator id>-<random>-<peer rank>. A name in /dev/shm
// outlives a process that is killed, so connect() keeps names short-lived and removable by others:
//   1. create the segments;
//   2. allGather #1: the names' prefix, setup status, pid, and a CMA probe address + token;
//   3. open each peer's segment for us and unlink its name at once (we are its only reader), verify
//      the header (magic, version, communicator, rank, secret), probe process_vm_readv on the
//      peer's token, and tell the peer in the FIFO whether we accept CMA descriptors;
//   4. allGather #2: everyone's status (a barrier: all peers attached and probed); where the peer
//      accepts CMA, enable it on the send side.
// On any way out of connect() a rank unlinks its own names and those its peers made for it: known
// from #1, or, when #1 failed (a peer died before its record went out), found in /dev/shm by the
// peer's pid (from the rank table), the communicator and our rank. So a name stays behind only if
// its creator and its reader both die during setup; braidrun removes those by the creator's pid.
// Any failure anywhere makes every rank return an error naming the rank, instead of some ranks
// waiting for peers that gave up.
//
// Why CMA only where it pays: process_vm_readv pins every 4 KiB page it copies and copies in the
// kernel, without vector registers, so its rate against a memcpy is a property of the machine. On an
// Intel 2-core VM a cache-hot 256 KiB read ran at 0.54 of a memcpy, and reading the peer's buffer
// once beat the FIFO's two copies; on an AMD EPYC one it ran at 0.12, and the FIFO beat it by 1.6-2x
// in every collective that used it. So in auto mode each rank times both at setup
// (measureCmaSpeed), the records carry the figure, and every rank of the host takes the same
// decision from their median against BRAID_SHM_CMA_SPEED. The plans ask for single copy only for
// exchanges and one-to-many calls that fit the cache (src/api_coll.cc), and only from
// BRAID_SHM_CMA_MIN (64K) up; the FIFO keeps reductions, whose receives fold straight out of it.
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/shm/shm_layout.h"
#include "transports/shm/shm_link.h"
#include "transports/transport.h"

namespace braid {
namespace shm {
namespace {

enum class CmaMode { kOff, kAuto, kOn };

// Touches every cache line of a link's two mail rings' header lines and near payloads once, at
// setup: ours with a write that changes nothing (no peer writes there, and none reads before the
// barrier that follows), the peer's with a read. On the AMD VM of
// perf/results/2026-12-05-small-calls.md the first accesses to shared memory are slow whatever was
// populated (MAP_POPULATE, MADV_POPULATE_WRITE): untouched, the first 64 calls of a communicator that
// use a near payload (41-512 bytes) took 1-2 us each instead of 0.3-0.6 (2 ranks, 64-byte
// AllReduce, 30 calls after 20 warm-up ones: 2.26-2.48 us; touched 0.43-0.63). Touching one line a
// page was not enough: the calls around the ring's first turn stayed slow (2-rank 256-byte
// AllGather, calls 41-70: 1.04-1.23 us a page, 0.56-0.66 every line). 36 KiB a ring; on that VM
// the touch moves ~8 ms of a 4-rank run into its init (136-138 -> 143-147 ms a run), what the first
// calls would have paid anyway. The 16 payloads behind them (1 MiB a ring by default) stay
// untouched: there the first 16 calls of a size pay (~23 us each at 64 KiB), and touching them a
// line a page already cost 4 ranks 20 ms more at init on that VM (133-136 -> 153-157 ms a run), for
// memory that calls of up to 512 bytes never use.
void touchMail(const Mailboxes& m) {
  const size_t bytes = mailRingBytes(0), line = 64;  // the header lines and near payloads
  auto* out = reinterpret_cast<unsigned char*>(m.out);
  const auto* in = reinterpret_cast<const unsigned char*>(m.in);
  for (size_t o = 0; o < bytes; o += line) {
    __atomic_fetch_or(out + o, static_cast<unsigned char>(0), __ATOMIC_RELAXED);
    (void)__atomic_load_n(in + o, __ATOMIC_RELAXED);
  }
}

struct Config {
  size_t slotSize = 0;
  uint32_t nslots = 0;
  CmaMode cma = CmaMode::kAuto;
  size_t cmaMin = 0;
  bool cmaSplit = true;                     // BRAID_SHM_CMA_SPLIT
  int64_t cmaDelayUs = 0;                   // BRAID_SHM_TEST_CMA_DELAY_US
  uint32_t cmaSpeedMin = 0;                 // BRAID_SHM_CMA_SPEED: thousandths of memcpy's rate
  StoreKind slotStores = StoreKind::kAuto;  // BRAID_SHM_SLOT_STORES
  StoreKind mailStores = StoreKind::kAuto;  // BRAID_SHM_MAIL_STORES
  size_t mailBytes = 0;  // payload bytes per mail slot: BRAID_SHM_SMALL_BYTES rounded up to a cache line
};

// One of the spellings BRAID_SHM_SLOT_STORES and BRAID_SHM_MAIL_STORES allow: plain, stream or auto.
StoreKind storeKind(const std::string& mode) {
  return mode == "plain" ? StoreKind::kPlain : mode == "stream" ? StoreKind::kStream : StoreKind::kAuto;
}

// nfifos: this rank's shm peers, one FIFO each in its segment.
Status loadConfig(size_t nfifos, Config* out) {
  Config c;
  // The readers hold both to their declared ranges (src/base/config.cc: 64..64M, within kMaxSlotSize,
  // and 1..kMaxSlots); what the table cannot say is the alignment.
  BRAID_TRY(paramSize("BRAID_SHM_SLOT_SIZE", &c.slotSize));
  if (c.slotSize % kCacheLine != 0)
    return errorf(braidInvalidArgument, "BRAID_SHM_SLOT_SIZE=%zu must be a multiple of %zu", c.slotSize, kCacheLine);
  int64_t slots = 0;
  BRAID_TRY(paramInt("BRAID_SHM_SLOTS", &slots));
  c.nslots = static_cast<uint32_t>(slots);
  size_t small = 0;
  BRAID_TRY(paramSize("BRAID_SHM_SMALL_BYTES", &small));  // the table holds it to [0, kMaxMailBytes]
  c.mailBytes = roundUp(small, kCacheLine);
  // Every rank of this host (this one and its nfifos shm peers) creates and populates a segment of
  // nfifos FIFOs. Half the host's memory for all of them leaves room for the job's own buffers;
  // beyond that a slot size such as 1G pushes the host into swap or the OOM killer.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const long physPages = sysconf(_SC_PHYS_PAGES);
  const size_t hostBytes = physPages > 0 ? static_cast<size_t>(physPages) * page : SIZE_MAX;
  size_t perRank = 0, needed = 0;
  if (__builtin_mul_overflow(fifoBytes(c.slotSize, c.nslots, page, c.mailBytes), nfifos, &perRank) ||
      __builtin_mul_overflow(perRank, nfifos + 1, &needed) || needed > hostBytes / 2)
    return errorf(braidInvalidArgument,
                  "BRAID_SHM_SLOT_SIZE=%zu x BRAID_SHM_SLOTS=%u x %zu FIFOs per rank x %zu ranks on this host needs "
                  "more than half of this host's %zu MiB of memory",
                  c.slotSize, c.nslots, nfifos, nfifos + 1, hostBytes >> 20);
  BRAID_TRY(paramSize("BRAID_SHM_CMA_MIN", &c.cmaMin));
  std::string mode;
  BRAID_TRY(paramEnum("BRAID_SHM_CMA", &mode));
  // paramEnum gives one of the table's spellings: 0, 1 or auto.
  c.cma = mode == "auto" ? CmaMode::kAuto : mode == "1" ? CmaMode::kOn : CmaMode::kOff;
  BRAID_TRY(paramBool("BRAID_SHM_CMA_SPLIT", &c.cmaSplit));
  BRAID_TRY(paramInt("BRAID_SHM_TEST_CMA_DELAY_US", &c.cmaDelayUs));
  int64_t speed = 0;
  BRAID_TRY(paramInt("BRAID_SHM_CMA_SPEED", &speed));  // the table holds it to [0, 100000]
  c.cmaSpeedMin = static_cast<uint32_t>(speed);
  BRAID_TRY(paramEnum("BRAID_SHM_SLOT_STORES", &mode));  // plain, stream or auto
  c.slotStores = storeKind(mode);
  BRAID_TRY(paramEnum("BRAID_SHM_MAIL_STORES", &mode));
  c.mailStores = storeKind(mode);
  *out = c;
  return okStatus();
}

// What each rank contributes to allGather #1 (fixed size, whatever the number of shm peers).
struct ConnectRecord {
  char prefix[64];     // our segments' names less "-<peer rank>", "" when we have no shm peers
  int32_t status;      // braidResult_t of our setup so far
  int32_t pid;         // for process_vm_readv and liveness checks
  uint64_t probeAddr;  // where probeToken lives in our address space
  uint64_t probeToken[2];
  uint32_t cmaSpeed;  // measureCmaSpeed(), 0 when not measured (BRAID_SHM_CMA=0)
  uint32_t pad;
};

// Closes a descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

// Removes a segment name unless it is gone already (its reader unlinks it as soon as it opened it).
void unlinkName(const std::string& name) {
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT)
    BRAID_WARN(kLogShm, "shm_unlink /dev/shm%s: %s", name.c_str(), strerror(errno));
}

// One segment we created: the FIFO toward one peer.
struct OwnSegment {
  std::string name;
  std::shared_ptr<Mapping> mapping;
  size_t headerBytes = 0;
  bool linked = false;

  void unlink() {
    if (linked) unlinkName(name);
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

// "/braid-<pid>-<communicator id>-" starts every name that process `pid` creates for a communicator;
// "/braid-<pid>-" is what braidrun looks for.
std::string commPrefix(int pid, uint64_t commId) {
  char id[17];
  snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(commId));
  return "/braid-" + std::to_string(pid) + "-" + id + "-";
}

constexpr size_t kRandomHex = 24;  // 96 bits: another user cannot guess a name to take it before us

// commPrefix + 96 random bits.
Status randomPrefix(uint64_t commId, std::string* prefix) {
  unsigned char r[kRandomHex / 2];
  BRAID_TRY(randomBytes(r, sizeof(r)));
  std::string out = commPrefix(static_cast<int>(getpid()), commId);
  char hex[3];
  for (unsigned char c : r) {
    snprintf(hex, sizeof(hex), "%02x", c);
    out += hex;
  }
  *prefix = out;
  return okStatus();
}

// Whether a peer's record names segments the way randomPrefix does, with the peer's own pid and
// our communicator: we unlink names built from it, so it must not point anywhere else.
bool validPrefix(const ConnectRecord& r, uint64_t commId) {
  const std::string want = commPrefix(r.pid, commId);
  const size_t len = strnlen(r.prefix, sizeof(r.prefix));
  if (len != want.size() + kRandomHex || strncmp(r.prefix, want.c_str(), want.size()) != 0) return false;
  for (size_t i = want.size(); i < len; ++i)
    if (!isxdigit(static_cast<unsigned char>(r.prefix[i]))) return false;
  return true;
}

std::string segmentName(const char* prefix, int receiver) {
  std::string name(prefix);
  name += '-';
  name += std::to_string(receiver);
  return name;
}

// Unlinks the segments that process creatorPid made for rank `receiver` of this communicator,
// whatever their random part: for when its record, which says the name, never arrived.
void unlinkFoundNames(int creatorPid, uint64_t commId, int receiver) {
  const std::string head = commPrefix(creatorPid, commId).substr(1);  // entries have no leading '/'
  std::string tail(1, '-');
  tail += std::to_string(receiver);
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* e = readdir(dir)) {
    const size_t len = strlen(e->d_name);
    if (len == head.size() + kRandomHex + tail.size() && strncmp(e->d_name, head.c_str(), head.size()) == 0 &&
        strcmp(e->d_name + len - tail.size(), tail.c_str()) == 0)
      unlinkName(std::string("/") + e->d_name);
  }
  closedir(dir);
}

// The names that peers created for us, unlinked when connect() returns: the peer may have made
// one and then failed or died, or we never got as far as opening it.
struct PeerNames {
  const TransportContext* ctx = nullptr;
  std::vector<int> peers;          // empty when the peer list was invalid: then we know no one
  std::vector<std::string> names;  // by peer index, from allGather #1
  bool gathered = false;           // allGather #1 completed (else the names are to be found)
  ~PeerNames() {
    for (size_t i = 0; i < peers.size(); ++i) {
      if (gathered && !names[i].empty())
        unlinkName(names[i]);
      else if (!gathered)
        unlinkFoundNames((*ctx->peers)[peers[i]].pid, ctx->commId, ctx->rank);
    }
  }
};

// Creates, sizes and maps the segment holding our FIFO toward `peer`, then writes its header.
Status createSegment(const TransportContext& ctx, int peer, const Config& cfg, OwnSegment* seg) {
  const size_t page = pageSize();
  seg->headerBytes = headerBytes(1, page);
  const size_t fifo = fifoBytes(cfg.slotSize, cfg.nslots, page, cfg.mailBytes);
  const size_t total = seg->headerBytes + fifo;
  // No retry under another name: with our pid and 96 random bits in it, EEXIST means that someone
  // took the name on purpose.
  int fd = shm_open(seg->name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return systemError(errno,
                       "cannot create shared memory /dev/shm%s for peer rank %d (is /dev/shm mounted and writable?)",
                       seg->name.c_str(), peer);
  FdCloser closer{fd};
  seg->linked = true;
  // Reserve the pages now: tmpfs would otherwise fail a later page fault with SIGBUS when full.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (err != 0)
    return systemError(err,
                       "cannot allocate %zu bytes of shared memory for peer rank %d in /dev/shm%s (is /dev/shm "
                       "full or too small? see `df /dev/shm`; lower BRAID_SHM_SLOTS, BRAID_SHM_SLOT_SIZE or "
                       "BRAID_SHM_SMALL_BYTES)",
                       total, peer, seg->name.c_str());
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
  h->fifoBytes = fifo;
  h->slotSize = static_cast<uint32_t>(cfg.slotSize);
  h->nslots = cfg.nslots;
  h->nfifos = 1;
  h->mailBytes = static_cast<uint32_t>(cfg.mailBytes);
  auto* dir = reinterpret_cast<FifoEntry*>(h + 1);
  dir[0] = FifoEntry{peer, 0, seg->headerBytes};
  unsigned char* base = seg->mapping->data() + seg->headerBytes;
  new (base) FifoControl{};
  for (uint32_t k = 0; k < cfg.nslots; ++k)
    new (base + sizeof(FifoControl) + k * slotStride(cfg.slotSize)) SlotHeader{};
  if (cfg.mailBytes > 0) {
    auto* mail = reinterpret_cast<MailSlot*>(base + mailOffset(cfg.slotSize, cfg.nslots));
    for (uint32_t k = 0; k < kMailDepth; ++k) new (mail + k) MailSlot{};
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
Status attachPeer(const TransportContext& ctx, int peer, const char* name, FifoView* view, uint32_t* mailBytes) {
  int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0)
    return systemError(errno,
                       "cannot open shared memory /dev/shm%s of peer rank %d (same host id, but not the same "
                       "/dev/shm? set BRAID_HOSTID or BRAID_TRANSPORTS)",
                       name, peer);
  FdCloser closer{fd};
  // We are the segment's only reader: from now on the descriptor and the mapping keep it alive, and
  // the name would only be left behind if both of us died. (Not ours to remove if the checks below
  // find a stranger's file: then /dev/shm's sticky bit refuses, and the checks fail.)
  unlinkName(name);
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
  *mailBytes = place.mailBytes;
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

// process_vm_readv's rate in thousandths of memcpy's, on this process's own 256 KiB (the kernel pins
// and copies our pages as it would a peer's), both cache-hot, the best of several tries each; 0 when
// the call fails. Measured once per process: about 0.3 ms.
uint32_t measureCmaSpeed() {
  static const uint32_t speed = [] {
    constexpr size_t kBytes = 256 << 10;
    constexpr int kTries = 12;
    std::vector<unsigned char> src(kBytes, 1), dst(kBytes, 0);
    using Clock = std::chrono::steady_clock;
    Clock::duration copy = Clock::duration::max(), cma = Clock::duration::max();
    for (int t = 0; t < kTries; ++t) {  // interleaved, so a disturbance hits both alike
      const auto t0 = Clock::now();
      memcpy(dst.data(), src.data(), kBytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // the copy happens here, not later or never
      const auto t1 = Clock::now();
      iovec local = {dst.data(), kBytes}, remote = {src.data(), kBytes};
      if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(kBytes)) return 0u;
      const auto t2 = Clock::now();
      copy = std::min(copy, t1 - t0);
      cma = std::min(cma, t2 - t1);
    }
    const double ratio = static_cast<double>(copy.count()) / static_cast<double>(std::max<Clock::rep>(cma.count(), 1));
    return static_cast<uint32_t>(std::clamp(ratio * 1000, 1.0, 1e6));
  }();
  return speed;
}

// The host's figure: the median of this rank's and its shm peers' (the same set on every rank of
// the host, so every rank finds the same value); 0 when none measured.
uint32_t hostCmaSpeed(const std::vector<ConnectRecord>& all, int self, const std::vector<int>& peers) {
  std::vector<uint32_t> v;
  if (all[self].cmaSpeed != 0) v.push_back(all[self].cmaSpeed);
  for (int p : peers)
    if (all[p].cmaSpeed != 0) v.push_back(all[p].cmaSpeed);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }
  const TransportCaps& caps() const override { return kShmCaps; }

  // The record is the host identity (hostname + boot id, or BRAID_HOSTID): ranks that share it
  // share /dev/shm.
  void localRecord(const PeerInfo& me, TransportRecord* out) const override {
    static_assert(sizeof(me.hostId) <= TransportRecord::kBytes, "the host id fits the record");
    memcpy(out->bytes, me.hostId, sizeof(me.hostId));
    out->bytes[sizeof(me.hostId) - 1] = 0;
  }
  bool canConnect(const Endpoint& a, const Endpoint& b) const override {
    return a.info->rank != b.info->rank && a.record->bytes[0] != 0 &&
           memcmp(a.record->bytes, b.record->bytes, TransportRecord::kBytes) == 0;
  }

  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
  Status progress(int* failedPeer) override { return progressLinks(links_, failedPeer); }
  void dropLink(int peer) override {
    std::erase_if(links_, [peer](const LinkEntry<ShmLink>& e) { return e.peer == peer; });
  }

 private:
  std::vector<LinkEntry<ShmLink>> links_;  // owned by the communicator, which destroys them first
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

// "rank 3 (host vm, pid 123)", from the rank table.
std::string who(const TransportContext& ctx, int r) { return describePeer(*ctx.peers, r); }

Status ShmTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Link>>* out) {
  const size_t n = peers.size();
  Config cfg;
  Status local = checkPeerList(ctx, peers);
  const bool peersValid = local.ok();  // only then may peers[] index the records below
  if (local.ok()) local = loadConfig(n, &cfg);
  if (local.ok()) local = randomBytes(probeToken_, sizeof(probeToken_));
  std::string prefix;
  if (local.ok() && n > 0) local = randomPrefix(ctx.commId, &prefix);
  std::vector<OwnSegment> own(n);
  for (size_t i = 0; i < n && local.ok(); ++i) {
    own[i].name = segmentName(prefix.c_str(), peers[i]);
    local = createSegment(ctx, peers[i], cfg, &own[i]);
  }
  // From here every way out unlinks what it can: our names (OwnSegment) and our peers' for us.
  PeerNames theirs;
  theirs.ctx = &ctx;
  if (peersValid) theirs.peers = peers;
  theirs.names.resize(n);

  ConnectRecord mine{};
  snprintf(mine.prefix, sizeof(mine.prefix), "%s", prefix.c_str());
  mine.status = local.code();
  mine.pid = static_cast<int32_t>(getpid());
  mine.probeAddr = reinterpret_cast<uintptr_t>(probeToken_);
  memcpy(mine.probeToken, probeToken_, sizeof(probeToken_));
  mine.cmaSpeed = local.ok() && n > 0 && cfg.cma != CmaMode::kOff ? measureCmaSpeed() : 0;
  std::vector<ConnectRecord> all(ctx.nranks);
  BRAID_TRY(ctx.allGather(&mine, sizeof(mine), all.data()).withContext("shm setup: exchanging segment names"));
  theirs.gathered = true;
  for (size_t i = 0; i < theirs.peers.size(); ++i) {
    ConnectRecord& r = all[peers[i]];
    r.prefix[sizeof(r.prefix) - 1] = '\0';
    // A peer that failed may still have made ours before it did: its prefix counts either way.
    const bool named = validPrefix(r, ctx.commId);
    if (named) theirs.names[i] = segmentName(r.prefix, ctx.rank);
    if (local.ok() && r.status != braidSuccess)
      local = errorf(braidRemoteError, "shm setup failed on peer %s", who(ctx, peers[i]).c_str());
    else if (local.ok() && !named)
      local = errorf(braidRemoteError, "peer %s announced a malformed shm segment name", who(ctx, peers[i]).c_str());
  }

  std::vector<std::unique_ptr<ShmLink>> links(n);
  for (size_t i = 0; i < n && local.ok(); ++i) {
    const int p = peers[i];
    const ConnectRecord& r = all[p];
    LinkSetup s;
    s.peerRank = p;
    s.peerPid = r.pid;
    s.peerHost = (*ctx.peers)[p].hostname;
    uint32_t peerMail = 0;
    local = attachPeer(ctx, p, theirs.names[i].c_str(), &s.in, &peerMail);
    if (!local.ok()) break;
    // Small collectives run on mailboxes only where every rank has them alike (src/comm.cc agrees on
    // it), so a difference is a setting that differs: refused here, naming both ranks' values.
    if (peerMail != cfg.mailBytes) {
      local = errorf(braidInvalidUsage,
                     "BRAID_SHM_SMALL_BYTES differs: %zu on rank %d, %u on peer %s (rounded up to 64; set it alike "
                     "on every rank)",
                     cfg.mailBytes, ctx.rank, peerMail, who(ctx, p).c_str());
      break;
    }
    s.out.mapping = own[i].mapping;
    s.out.base = own[i].mapping->data() + own[i].headerBytes;
    s.out.slotSize = cfg.slotSize;
    s.out.nslots = cfg.nslots;
    if (cfg.mailBytes > 0) {
      s.mail.out = reinterpret_cast<MailSlot*>(s.out.base + mailOffset(s.out.slotSize, s.out.nslots));
      s.mail.outData = reinterpret_cast<unsigned char*>(s.mail.out + kMailDepth);
      s.mail.in = reinterpret_cast<const MailSlot*>(s.in.base + mailOffset(s.in.slotSize, s.in.nslots));
      s.mail.inData = reinterpret_cast<const unsigned char*>(s.mail.in + kMailDepth);
      s.mail.capacity = cfg.mailBytes;
      s.mail.stores = cfg.mailStores;
      s.mail.outReadCost = s.out.control()->mailReadCost;
      s.mail.inReadCost = s.in.control()->mailReadCost;
      touchMail(s.mail);
    }
    const bool probed = cfg.cma != CmaMode::kOff && probeCma(p, r);
    if (cfg.cma == CmaMode::kOn && !probed) {
      local = errorf(braidSystemError,
                     "BRAID_SHM_CMA=1 but process_vm_readv from peer %s does not work here "
                     "(ptrace restrictions or another pid namespace); use BRAID_SHM_CMA=auto",
                     who(ctx, p).c_str());
      break;
    }
    s.cmaRecv = probed;
    s.slotStores = cfg.slotStores;
    links[i] = std::make_unique<ShmLink>(std::move(s));
    // Read by the peer after allGather #2 (the barrier orders it; release/acquire for the record).
    links[i]->inControl()->cmaAccept.store(links[i]->cmaRecv() ? 1 : 0, std::memory_order_release);
  }

  int32_t myStatus = local.code();
  std::vector<int32_t> statuses(ctx.nranks);
  BRAID_TRY(ctx.allGather(&myStatus, sizeof(myStatus), statuses.data())
                .withContext("shm setup: waiting for every rank to attach"));
  if (!local.ok()) {
    BRAID_WARN(kLogShm, "%s", local.message().c_str());
    return local;
  }
  for (int r = 0; r < ctx.nranks; ++r) {
    if (all[r].status != braidSuccess || statuses[r] != braidSuccess)
      return errorf(braidRemoteError, "shm transport setup failed on %s", who(ctx, r).c_str());
  }

  out->clear();
  out->resize(n);
  int cmaLinks = 0;
  const uint32_t speed = hostCmaSpeed(all, ctx.rank, peers);
  const bool fastEnough = cfg.cma == CmaMode::kOn || (cfg.cma == CmaMode::kAuto && speed >= cfg.cmaSpeedMin);
  for (size_t i = 0; i < n; ++i) {
    // Pairs with the peer's release store before the barrier.
    if (fastEnough && links[i]->outControl()->cmaAccept.load(std::memory_order_acquire) == 1) {
      links[i]->enableCmaSend(cfg.cmaMin, cfg.cmaSplit);
      ++cmaLinks;
    }
    // The peer took the same host-wide decision (BRAID_SHM_CMA alike on both), so it sends to us
    // by single copy exactly when we accept it.
    links[i]->setCmaIn(fastEnough && links[i]->cmaRecv());
    links[i]->setCmaTestDelay(cfg.cmaDelayUs);
    links_.push_back({links[i].get(), peers[i]});
    (*out)[i] = std::move(links[i]);
  }
  BRAID_INFO(kLogShm,
             "shm: %zu peers, %u slots of %zu bytes per FIFO, single copy to %d peers from %zu bytes "
             "(process_vm_readv at %u/1000 of memcpy's rate here, BRAID_SHM_CMA_SPEED=%u), mailboxes of %zu bytes",
             n, cfg.nslots, cfg.slotSize, cmaLinks, cfg.cmaMin, speed, cfg.cmaSpeedMin, cfg.mailBytes);
  return okStatus();
}

}  // namespace
}  // namespace shm

std::unique_ptr<Transport> makeShmTransport() { return std::make_unique<shm::ShmTransport>(); }

}  // namespace braid
