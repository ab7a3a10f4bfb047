#include "transports/shm/shm_link.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "src/base/clock.h"
#include "src/base/log.h"
#include "src/base/nt_store.h"

namespace braid {
namespace shm {

namespace {

// Work one progress() call may do per direction, in slots (or CMA pieces). Bounded so that a link
// with a long stream cannot starve the executor's other links; 16 x 256 KiB = 4 MiB per call.
constexpr int kMaxStepsPerProgress = 16;
// Bytes read by one process_vm_readv for a plain receive. Large enough that the syscall (~1 us) is
// noise, small enough that one step stays comparable to a FIFO slot step.
constexpr size_t kCmaChunk = 1 << 20;
// A split single copy (BRAID_SHM_CMA_SPLIT) goes in pieces of about an eighth of the message, from
// 64 KiB to kCmaChunk; a message of fewer than two pieces is not split.
constexpr size_t kSplitMinPiece = 64 << 10;
constexpr uint64_t kClaimMask = 0xffffffffu;
// How a message of `bytes` is cut for a split: the same on both sides, from the bytes alone.
struct SplitCut {
  size_t piece;
  uint64_t pieces;
};
SplitCut splitCut(size_t bytes) {
  const size_t piece = std::clamp((bytes / 8 + 4095) & ~size_t{4095}, kSplitMinPiece, kCmaChunk);
  return {piece, (bytes + piece - 1) / piece};
}
constexpr size_t kSlotChoiceMin = StoreChoice::kMinBytes;  // slot fills chosen for (fillSlot)
// Reduce receives by CMA read into a bounce buffer this size first (stays in L2), then reduce.
constexpr size_t kCmaBounceBytes = 256 << 10;
constexpr size_t kStreamBlock = ShmLink::kBlockBytes;
// A busy link that moved nothing for this long checks whether the peer process still exists, and
// checks again at most this often.
constexpr int64_t kStallNs = 100 * 1000 * 1000;
// The clock is read once per this many idle progress() calls (a power of two), keeping an idle
// call at a few loads.
constexpr uint32_t kIdleCallsPerClock = 64;

std::atomic<uint64_t> gForwarded{0};
std::atomic<uint64_t> gSingleCopies{0};
std::atomic<uint64_t> gSplits{0};
std::atomic<uint64_t> gSplitPieces{0};
std::atomic<uint64_t> gPlainFills{0};
std::atomic<uint64_t> gStreamedFills{0};

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

bool pidfdExited(int fd) {
  pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

// One pidfd per peer process, shared by every link of this process to it: communicators over the
// same local ranks (a framework's process groups, splits) each held one descriptor per peer, and 70
// communicators of 8 local ranks took half of a 1024-descriptor limit in pidfds alone. A cached
// pidfd whose process exited is not handed out again (the pid may name a new process by now).
// Null with errno set where pidfd_open fails.
std::shared_ptr<const Fd> sharedPidfd(pid_t pid) {
  static std::mutex mu;
  static auto* cache = new std::map<pid_t, std::weak_ptr<const Fd>>();  // never freed: links may outlive statics
  std::lock_guard<std::mutex> lock(mu);
  std::weak_ptr<const Fd>& slot = (*cache)[pid];
  if (std::shared_ptr<const Fd> fd = slot.lock(); fd != nullptr && !pidfdExited(fd->get())) return fd;
  const int raw = openPidfd(pid);
  if (raw < 0) {
    const int err = errno;
    cache->erase(pid);
    errno = err;
    return nullptr;
  }
  auto fd = std::make_shared<const Fd>(raw);
  slot = fd;
  if (cache->size() > 256) std::erase_if(*cache, [](const auto& e) { return e.second.expired(); });
  return fd;
}

}  // namespace

uint64_t forwardedPieces() { return gForwarded.load(std::memory_order_relaxed); }
uint64_t singleCopyReceives() { return gSingleCopies.load(std::memory_order_relaxed); }
uint64_t splitReceives() { return gSplits.load(std::memory_order_relaxed); }
uint64_t splitPiecesWritten() { return gSplitPieces.load(std::memory_order_relaxed); }
uint64_t plainSlotFills() { return gPlainFills.load(std::memory_order_relaxed); }
uint64_t streamedSlotFills() { return gStreamedFills.load(std::memory_order_relaxed); }

Mapping::~Mapping() {
  if (addr_ != nullptr) munmap(addr_, bytes_);
}

ShmLink::ShmLink(LinkSetup setup)
    : out_(std::move(setup.out)),
      in_(std::move(setup.in)),
      mail_(setup.mail),
      slotStores_(setup.slotStores),
      peerRank_(setup.peerRank),
      peerPid_(setup.peerPid),
      peerHost_(std::move(setup.peerHost)) {
  if (setup.cmaRecv) {
    bounce_ = static_cast<unsigned char*>(std::aligned_alloc(kCacheLine, kCmaBounceBytes));
    // Without the bounce buffer, tell the peer (through cmaRecv()) to use the FIFO.
    cmaRecv_ = bounce_ != nullptr;
    bounceBytes_ = cmaRecv_ ? kCmaBounceBytes : 0;
  }
  // A pidfd names this very process (no pid reuse) and polls readable as soon as it exits, even
  // while it is an unreaped zombie, which kill(pid, 0) still reports alive.
  if (peerPid_ > 0) {
    pidfd_ = sharedPidfd(peerPid_);
    if (pidfd_ == nullptr && errno == ESRCH) {
      // The pid the peer reported is not visible here (another pid namespace): a liveness check by
      // pid would report a live peer as dead, so rely on the executor's deadline instead.
      BRAID_INFO(kLogShm, "peer rank %d: pid %d not visible here; shm peer-death detection off", peerRank_,
                 static_cast<int>(peerPid_));
      peerPid_ = 0;
    }
  }
}

ShmLink::~ShmLink() { std::free(bounce_); }

Status ShmLink::postSend(Xfer* x) {
  if (failed_) return failure_;
  if (x->bytes > kLengthMask) return errorf(braidInvalidArgument, "shm send of %zu bytes: over a terabyte", x->bytes);
  x->progressed = 0;
  x->complete = false;
  x->tp[0] = reinterpret_cast<uintptr_t>(this);  // a feeding receive on another link finds us here
  sends_.push(x);
  if (sendCur_ == nullptr) sendCur_ = x;
  return okStatus();
}

Status ShmLink::postRecv(Xfer* x) {
  if (failed_) return failure_;
  assert(x->reduce == nullptr || (x->reduce->elemSize > 0 && x->capacity % x->reduce->elemSize == 0));
  x->progressed = 0;
  x->complete = false;
  recvs_.push(x);
  return okStatus();
}

Status ShmLink::progress() {
  if (failed_) return failure_;
  bool any = false;
  // Alternate one send slot and one receive slot: with two ranks exchanging (every collective's
  // steady state), both rings stay partly full and each slot is read while still in cache.
  for (int i = 0; i < kMaxStepsPerProgress; ++i) {
    bool moved = sendStep();
    if (!recvs_.empty()) {
      int r = recvStep();
      if (r < 0) return failure_;
      moved |= r > 0;
    }
    if (!moved) break;
    any = true;
  }
  if (sends_.front() != sendCur_) any |= completeSends();
  if (any) {
    idleCalls_ = 0;
    idleSinceNs_ = 0;
    return okStatus();
  }
  if (!busy()) return okStatus();
  return checkPeerAlive();
}

bool ShmLink::slotFree() {
  const uint32_t n = out_.nslots;
  if (sendSeq_ - headCache_ < n) return true;
  // Pairs with the receiver's release store of head: slots below head have been read entirely,
  // so the one we are about to overwrite is free. Reloaded only when the ring looks full.
  headCache_ = out_.control()->head.load(std::memory_order_acquire);
  return sendSeq_ - headCache_ < n;
}

void ShmLink::publish(SlotHeader* s, Xfer* x, size_t progressed) {
  // Publishes the payload and msgBytes written before: pairs with the receiver's acquire load of seq.
  s->seq.store(sendSeq_ + 1, std::memory_order_release);
  ++sendSeq_;
  if (++sendSlot_ == out_.nslots) sendSlot_ = 0;
  x->progressed = progressed;
  if (progressed == x->bytes) sendCur_ = x->next;
}

bool ShmLink::sendStep() {
  Xfer* x = sendCur_;
  if (x == nullptr || !slotFree()) return false;
  SlotHeader* s = out_.slot(sendSlot_);
  const size_t off = x->progressed;
  // A forwarded chunk goes no further than its receive has delivered.
  if (x->feeder != nullptr && !x->feeder->complete &&
      x->feeder->progressed <
          (x->bytes <= kInlineBytes || usesCma(x) ? x->bytes : std::min(x->bytes, off + out_.slotSize)))
    return false;
  size_t progressed = x->bytes;
  if (usesCma(x)) {
    CmaDescriptor d{reinterpret_cast<uintptr_t>(x->data)};
    memcpy(s->inlineData, &d, sizeof(d));
    s->msgBytes = lengthWord(x->bytes, x->call) | kCmaFlag;
  } else if (x->bytes <= kInlineBytes) {
    if (x->bytes != 0) memcpy(s->inlineData, x->data, x->bytes);
    s->msgBytes = lengthWord(x->bytes, x->call);
  } else {
    const size_t piece = std::min(out_.slotSize, x->bytes - off);
    s->inlineData[0] = fillSlot(FifoView::payload(s), static_cast<const unsigned char*>(x->data) + off, piece);
    s->msgBytes = lengthWord(x->bytes, x->call);
    progressed = off + piece;
  }
  publish(s, x, progressed);
  return true;
}

// The kind of stores by BRAID_SHM_SLOT_STORES, in auto by what each costs (src/base/store_choice.h:
// our fill plus the receiver's read, which it reports in FifoControl::readCost). Streamed bytes are
// fenced before publish(): the release store of seq does not order streaming stores.
bool ShmLink::fillSlot(unsigned char* slot, const unsigned char* src, size_t len) {
  const bool stream = slotStores_.copy(slot, src, len, out_.control()->readCost);
  if (len >= kSlotChoiceMin) (stream ? gStreamedFills : gPlainFills).fetch_add(1, std::memory_order_relaxed);
  return stream;
}

bool ShmLink::completeSends() {
  bool any = false;
  while (sends_.front() != sendCur_) {
    Xfer* x = sends_.front();
    if (usesCma(x)) {
      // Pairs with the receiver's release store after its last read of this buffer: from here on
      // the peer never touches it, so the caller may reuse it.
      if (out_.control()->cmaAcks.load(std::memory_order_acquire) <= cmaSendsDone_) {
        any |= helpSplit(x);  // waiting: some of the peer's reading may be ours to do
        break;
      }
      ++cmaSendsDone_;
    }
    sends_.pop()->complete = true;  // popped first: the caller may reuse x at once
    any = true;
  }
  return any;
}

void ShmLink::releaseSlot() {
  // Pairs with the sender's acquire load of head: we are done reading the slot, it may be reused.
  in_.control()->head.store(++recvSeq_, std::memory_order_release);
  if (++recvSlot_ == in_.nslots) recvSlot_ = 0;
}

int ShmLink::recvStep() {
  Xfer* x = recvs_.front();
  if (recvCma_) return cmaStep(x);
  SlotHeader* s = in_.slot(recvSlot_);
  // Pairs with the sender's release store of seq: once it shows the number we expect, msgBytes and
  // the payload of this slot are visible.
  if (s->seq.load(std::memory_order_acquire) != recvSeq_ + 1) return 0;
  const uint64_t msg = s->msgBytes;
  if (!recvStarted_) {
    if (otherCall(wordCall(msg), x->call)) return failStep(otherCallError(peerRank_));
    const uint64_t bytes = wordLength(msg);
    if (bytes != x->capacity) {
      return failStep(errorf(braidRemoteError,
                             "message from peer rank %d has %llu bytes, the posted receive expects %zu", peerRank_,
                             static_cast<unsigned long long>(bytes), x->capacity));
    }
    x->bytes = bytes;
    if ((msg & kCmaFlag) != 0) {
      if (!cmaRecv_) {
        return failStep(
            errorf(braidRemoteError, "peer rank %d sent a single-copy descriptor this rank did not accept", peerRank_));
      }
      CmaDescriptor d;
      memcpy(&d, s->inlineData, sizeof(d));
      recvCmaAddr_ = d.address;
      recvCma_ = true;
      releaseSlot();  // the descriptor is copied; the sender may reuse the slot
      // Split where only the sender's side carries data: where both do (AllGather, AllToAll), each
      // side reading its own whole measured faster (2 ranks, 256 KiB blocks: 20 us against 26).
      if (cmaSplit_ && x->reduce == nullptr && x->bytes >= 2 * kSplitMinPiece && sends_.empty()) offerSplit(x);
      return 1;
    }
    recvStarted_ = true;
  } else if (wordLength(msg) != x->bytes) {
    return failStep(errorf(
        braidRemoteError, "peer rank %d broke the shm protocol (slot %llu says %llu bytes, expected %zu)", peerRank_,
        static_cast<unsigned long long>(recvSeq_), static_cast<unsigned long long>(wordLength(msg)), x->bytes));
  }
  const size_t off = x->progressed;
  if (x->bytes <= kInlineBytes) {
    deliver(x, 0, s->inlineData, x->bytes);
    x->progressed = x->bytes;
  } else {
    const size_t piece = std::min(in_.slotSize, x->bytes - off);
    const int64_t start = piece >= kSlotChoiceMin ? nowNs() : 0;
    if (!forward(x, off, FifoView::payload(s), piece)) deliver(x, off, FifoView::payload(s), piece);
    if (start != 0) readCosts_.add(s->inlineData[0] != 0, piece, nowNs() - start, in_.control()->readCost);
    x->progressed = off + piece;
  }
  releaseSlot();
  if (x->progressed == x->bytes) finishRecv(x);
  return 1;
}

int ShmLink::readWhole(unsigned char* dst, size_t off, size_t len) {
  if (cmaDelayUs_ > 0) usleep(static_cast<useconds_t>(cmaDelayUs_));
  while (len > 0) {
    iovec local = {dst, len};
    iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(recvCmaAddr_ + off)), len};
    const ssize_t n = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR || e == EAGAIN) continue;
      if (e == ESRCH) return failStep(diedError());
      return failStep(errorf(braidRemoteError, "single-copy read of %zu bytes from peer rank %d (pid %d) failed: %s",
                             len, peerRank_, static_cast<int>(peerPid_), strerror(e)));
    }
    if (n == 0)
      return failStep(errorf(braidRemoteError, "single-copy read from peer rank %d returned no data", peerRank_));
    dst += n;
    off += static_cast<size_t>(n);
    len -= static_cast<size_t>(n);
  }
  return 1;
}

int ShmLink::cmaStep(Xfer* x) {
  if (recvSplit_) return splitStep(x);
  const size_t off = x->progressed;
  const size_t want = std::min(x->bytes - off, x->reduce != nullptr ? bounceBytes_ : kCmaChunk);
  unsigned char* dst = x->reduce != nullptr ? bounce_ : static_cast<unsigned char*>(x->data) + off;
  if (readWhole(dst, off, want) < 0) return -1;
  if (x->reduce != nullptr) deliver(x, off, bounce_, want);  // whole elements: want is a multiple of 64
  x->progressed = off + want;
  if (x->progressed == x->bytes) finishCma(x);
  return 1;
}

void ShmLink::finishCma(Xfer* x) {
  // Pairs with the sender's acquire load in completeSends(): nobody reads its buffer any more.
  in_.control()->cmaAcks.store(++cmaRecvDone_, std::memory_order_release);
  gSingleCopies.fetch_add(1, std::memory_order_relaxed);
  x->progressed = x->bytes;
  recvSplit_ = false;
  finishRecv(x);
}

// A split single copy: the sender of a CMA message only waits for the receiver to be done with its
// buffer, so it writes some of the pieces into the receiver's buffer meanwhile (process_vm_writev,
// the permission that lets it read ours), two cores copying instead of one. Pieces are claimed from
// one counter in the FIFO's control block (FifoControl::coopClaim), so whichever side is free takes
// the next; the receive completes when its own pieces and the sender's add up.
void ShmLink::offerSplit(Xfer* x) {
  FifoControl* c = in_.control();
  const uint64_t m = cmaRecvDone_ + 1;
  c->coopAddr.store(reinterpret_cast<uintptr_t>(x->data), std::memory_order_relaxed);
  c->coopDone.store(0, std::memory_order_relaxed);
  c->coopLost.store(0, std::memory_order_relaxed);
  c->coopClaim.store((m & kClaimMask) << 32, std::memory_order_relaxed);
  // Publishes the four above: pairs with the sender's acquire load in helpSplit().
  c->coopOffer.store(m, std::memory_order_release);
  recvSplit_ = true;
  splitOwn_ = 0;
  gSplits.fetch_add(1, std::memory_order_relaxed);
}

int ShmLink::splitStep(Xfer* x) {
  FifoControl* c = in_.control();
  const auto [piece, pieces] = splitCut(x->bytes);
  uint64_t i = c->coopClaim.load(std::memory_order_relaxed) & kClaimMask;
  if (i < pieces) i = c->coopClaim.fetch_add(1, std::memory_order_relaxed) & kClaimMask;
  if (i >= pieces) {
    // All claimed: a piece the sender gave back is ours to read; else wait for the sender's.
    const uint64_t lost = c->coopLost.exchange(0, std::memory_order_acquire);
    if (lost == 0) {
      // Pairs with the sender's release add after its write: its pieces are in our buffer.
      if (splitOwn_ + c->coopDone.load(std::memory_order_acquire) < x->bytes) return 0;
      finishCma(x);
      return 1;
    }
    i = lost - 1;
  }
  const size_t off = i * piece, len = std::min(piece, x->bytes - off);
  if (readWhole(static_cast<unsigned char*>(x->data) + off, off, len) < 0) return -1;
  splitOwn_ += len;
  if (splitOwn_ + c->coopDone.load(std::memory_order_acquire) == x->bytes) finishCma(x);
  return 1;
}

bool ShmLink::helpSplit(Xfer* x) {
  if (helpOff_ || !cmaRecv_) return false;
  FifoControl* c = out_.control();
  const uint64_t m = cmaSendsDone_ + 1;  // x is our next CMA send to complete: the peer's message m
  if (c->coopOffer.load(std::memory_order_acquire) != m) return false;
  const auto [piece, pieces] = splitCut(x->bytes);
  uint64_t w = c->coopClaim.load(std::memory_order_relaxed);
  if ((w >> 32) != (m & kClaimMask) || (w & kClaimMask) >= pieces) return false;  // nothing left to claim
  // Counted busy before the claim (both seq_cst): a receiver that takes the claims away after it
  // (stopPeerAccess) sees us busy until the write is over.
  c->coopBusy.fetch_add(1, std::memory_order_seq_cst);
  struct Idle {
    FifoControl* c;
    ~Idle() { c->coopBusy.fetch_sub(1, std::memory_order_release); }
  } idle{c};
  w = c->coopClaim.load(std::memory_order_seq_cst);
  do {
    if ((w >> 32) != (m & kClaimMask) || (w & kClaimMask) >= pieces) return false;
  } while (!c->coopClaim.compare_exchange_weak(w, w + 1, std::memory_order_seq_cst));
  const uint64_t i = w & kClaimMask;
  if (cmaDelayUs_ > 0) usleep(static_cast<useconds_t>(cmaDelayUs_));
  // The piece is ours until counted: the receiver cannot finish message m, nor offer m + 1.
  const uint64_t addr = c->coopAddr.load(std::memory_order_relaxed);
  const size_t off = i * piece, len = std::min(piece, x->bytes - off);
  for (size_t done = 0; done < len;) {
    iovec local = {const_cast<unsigned char*>(static_cast<const unsigned char*>(x->data)) + off + done, len - done};
    iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(addr + off + done)), len - done};
    const ssize_t n = process_vm_writev(peerPid_, &local, 1, &remote, 1, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      // The receiver reads the piece itself (and any later one: we take no more).
      BRAID_INFO(kLogShm, "split single copy to peer rank %d off: process_vm_writev: %s", peerRank_,
                 n < 0 ? strerror(errno) : "no data written");
      helpOff_ = true;
      c->coopLost.store(i + 1, std::memory_order_release);
      return true;
    }
    done += static_cast<size_t>(n);
  }
  c->coopDone.fetch_add(len, std::memory_order_release);
  gSplitPieces.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ShmLink::stopPeerAccess() {
  if (stopped_) return;
  stopped_ = true;
  helpOff_ = true;  // nor do we write into the peer's buffers any more
  FifoControl* in = in_.control();
  // A split receive in flight: the sender's claims end here (every piece taken), and the writes of
  // those it holds are waited for in peerAccessEnded.
  if (recvSplit_)
    in->coopClaim.exchange((((cmaRecvDone_ + 1) & kClaimMask) << 32) | kClaimMask, std::memory_order_seq_cst);
  // We read none of the sender's buffers any more (progress() never runs again).
  in->readerStopped.store(1, std::memory_order_release);
}

bool ShmLink::peerAccessEnded() {
  if (!stopped_ || peerGone()) return true;
  if (recvSplit_ && in_.control()->coopBusy.load(std::memory_order_seq_cst) != 0) return false;
  // Our CMA sends the peer may still be reading: the published ones it has not acked.
  uint64_t published = cmaSendsDone_;
  for (Xfer* x = sends_.front(); x != nullptr && x != sendCur_; x = x->next) published += usesCma(x) ? 1 : 0;
  FifoControl* out = out_.control();
  return out->cmaAcks.load(std::memory_order_acquire) >= published ||
         out->readerStopped.load(std::memory_order_acquire) != 0;
}

void ShmLink::deliver(Xfer* x, size_t offset, const unsigned char* src, size_t bytes) {
  if (bytes == 0) return;
  unsigned char* dst = static_cast<unsigned char*>(x->data) + offset;
  const ReduceSpec* r = x->reduce;
  // Pieces are whole elements: messages are (executor contract), slot sizes are multiples of 64,
  // and CMA pieces are trimmed above.
  assert(r == nullptr || bytes % r->elemSize == 0);
  if (!x->stream || bytes < kStreamBlock) {
    if (r == nullptr) {
      memcpy(dst, src, bytes);
    } else {
      r->fn(dst, static_cast<const unsigned char*>(x->local) + offset, src, bytes / r->elemSize, r->ctx);
    }
    return;
  }
  if (r == nullptr) {
    copyStreaming(reinterpret_cast<char*>(dst), reinterpret_cast<const char*>(src), bytes);
  } else if (r->streamFn != nullptr) {
    r->streamFn(dst, static_cast<const unsigned char*>(x->local) + offset, src, bytes / r->elemSize, r->streamCtx);
  } else {
    // Folded a block at a time in the bounce block (it stays in L1), then streamed out.
    const unsigned char* local = static_cast<const unsigned char*>(x->local) + offset;
    for (size_t o = 0; o < bytes; o += kStreamBlock) {
      const size_t len = std::min(kStreamBlock, bytes - o);
      r->fn(block_, local + o, src + o, len / r->elemSize, r->ctx);
      copyStreaming(reinterpret_cast<char*>(dst + o), reinterpret_cast<const char*>(block_), len);
    }
  }
  storeFence();  // before the receive completes, which may publish the output to another thread
}

// The receive x feeds a send on a link of ours (Xfer::feeds): when that send is next to go out on
// its link, and the piece lines up with a free slot there, x's piece is written into that slot and
// its own output in one pass, a block at a time: the fold (or copy) into the outgoing slot, and the
// block copied from there (still in L1) into x's output. Returns false when it could not (the send
// then copies from x's output once it is delivered).
bool ShmLink::forward(Xfer* x, size_t off, const unsigned char* src, size_t piece) {
  Xfer* y = x->feeds;
  if (y == nullptr) return false;
  auto* out = reinterpret_cast<ShmLink*>(static_cast<uintptr_t>(y->tp[0]));
  if (out == nullptr || out->sendCur_ != y || y->progressed != off || out->usesCma(y) || y->bytes != x->bytes ||
      out->out_.slotSize != in_.slotSize || out->failed_ || !out->slotFree())
    return false;
  SlotHeader* s = out->out_.slot(out->sendSlot_);
  unsigned char* slot = FifoView::payload(s);
  unsigned char* dst = static_cast<unsigned char*>(x->data) + off;
  const ReduceSpec* r = x->reduce;
  const unsigned char* local = r != nullptr ? static_cast<const unsigned char*>(x->local) + off : nullptr;
  // Where the outgoing link fills its slots with streaming stores (fillSlot), a block is folded or
  // copied in our L1 block first and streamed into the slot from there.
  const bool streamSlot = piece >= kSlotChoiceMin && out->slotStores_.streaming();
  for (size_t o = 0; o < piece; o += kStreamBlock) {
    const size_t len = std::min(kStreamBlock, piece - o);
    unsigned char* to = streamSlot ? block_ : slot + o;
    if (r != nullptr) {
      r->fn(to, local + o, src + o, len / r->elemSize, r->ctx);
    } else {
      memcpy(to, src + o, len);
    }
    if (streamSlot) copyStreaming(reinterpret_cast<char*>(slot + o), reinterpret_cast<const char*>(to), len);
    if (x->forwardOnly) continue;
    if (x->stream) {
      copyStreaming(reinterpret_cast<char*>(dst + o), reinterpret_cast<const char*>(to), len);
    } else {
      memcpy(dst + o, to, len);
    }
  }
  if (x->stream || streamSlot) storeFence();
  s->msgBytes = lengthWord(y->bytes, y->call);
  s->inlineData[0] = streamSlot;
  out->publish(s, y, off + piece);
  gForwarded.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ShmLink::finishRecv(Xfer* x) {
  recvs_.pop();  // before `complete`: the caller may reuse x at once
  x->complete = true;
  recvStarted_ = false;
  recvCma_ = false;
}

Status ShmLink::checkPeerAlive() {
  if (peerPid_ <= 0) return okStatus();
  if ((++idleCalls_ & (kIdleCallsPerClock - 1)) != 0) return okStatus();
  const int64_t now = nowNs();
  if (idleSinceNs_ == 0) {
    idleSinceNs_ = now;
    return okStatus();
  }
  if (now - idleSinceNs_ < kStallNs || now - lastCheckNs_ < kStallNs) return okStatus();
  lastCheckNs_ = now;
  if (peerGone()) return fail(diedError());
  return okStatus();
}

bool ShmLink::peerGone() const {
  if (pidfd_ != nullptr) return pidfdExited(pidfd_->get());
  return kill(peerPid_, 0) == -1 && errno == ESRCH;
}

Status ShmLink::diedError() const {
  return errorf(braidRemoteError, "peer rank %d (host %s, pid %d) died", peerRank_, peerHost_.c_str(),
                static_cast<int>(peerPid_));
}

Status ShmLink::fail(Status s) {
  BRAID_WARN(kLogShm, "%s", s.message().c_str());
  failed_ = true;
  failure_ = s;
  return s;
}

int ShmLink::failStep(Status s) {
  (void)fail(std::move(s));
  return -1;
}

}  // namespace shm
}  // namespace braid
