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

int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

uint64_t forwardedPieces() { return gForwarded.load(std::memory_order_relaxed); }
uint64_t singleCopyReceives() { return gSingleCopies.load(std::memory_order_relaxed); }

Mapping::~Mapping() {
  if (addr_ != nullptr) munmap(addr_, bytes_);
}

ShmLink::ShmLink(LinkSetup setup)
    : out_(std::move(setup.out)),
      in_(std::move(setup.in)),
      mail_(setup.mail),
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
    pidfd_ = openPidfd(peerPid_);
    if (pidfd_ < 0 && errno == ESRCH) {
      // The pid the peer reported is not visible here (another pid namespace): a liveness check by
      // pid would report a live peer as dead, so rely on the executor's deadline instead.
      BRAID_INFO(kLogShm, "peer rank %d: pid %d not visible here; shm peer-death detection off", peerRank_,
                 static_cast<int>(peerPid_));
      peerPid_ = 0;
    }
  }
}

ShmLink::~ShmLink() {
  if (pidfd_ >= 0) close(pidfd_);
  std::free(bounce_);
}

Status ShmLink::postSend(Xfer* x) {
  if (failed_) return failure_;
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
    s->msgBytes = x->bytes | kCmaFlag;
  } else if (x->bytes <= kInlineBytes) {
    if (x->bytes != 0) memcpy(s->inlineData, x->data, x->bytes);
    s->msgBytes = x->bytes;
  } else {
    const size_t piece = std::min(out_.slotSize, x->bytes - off);
    memcpy(FifoView::payload(s), static_cast<const unsigned char*>(x->data) + off, piece);
    s->msgBytes = x->bytes;
    progressed = off + piece;
  }
  publish(s, x, progressed);
  return true;
}

bool ShmLink::completeSends() {
  bool any = false;
  while (sends_.front() != sendCur_) {
    Xfer* x = sends_.front();
    if (usesCma(x)) {
      // Pairs with the receiver's release store after its last read of this buffer: from here on
      // the peer never touches it, so the caller may reuse it.
      if (out_.control()->cmaAcks.load(std::memory_order_acquire) <= cmaSendsDone_) break;
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
    const uint64_t bytes = msg & ~kCmaFlag;
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
      return 1;
    }
    recvStarted_ = true;
  } else if (msg != x->bytes) {
    return failStep(errorf(braidRemoteError,
                           "peer rank %d broke the shm protocol (slot %llu says %llu bytes, expected %zu)", peerRank_,
                           static_cast<unsigned long long>(recvSeq_), static_cast<unsigned long long>(msg), x->bytes));
  }
  const size_t off = x->progressed;
  if (x->bytes <= kInlineBytes) {
    deliver(x, 0, s->inlineData, x->bytes);
    x->progressed = x->bytes;
  } else {
    const size_t piece = std::min(in_.slotSize, x->bytes - off);
    if (!forward(x, off, FifoView::payload(s), piece)) deliver(x, off, FifoView::payload(s), piece);
    x->progressed = off + piece;
  }
  releaseSlot();
  if (x->progressed == x->bytes) finishRecv(x);
  return 1;
}

int ShmLink::cmaStep(Xfer* x) {
  const size_t off = x->progressed;
  size_t want = x->bytes - off;
  iovec local;
  if (x->reduce != nullptr) {
    want = std::min(want, bounceBytes_);
    local = {bounce_, want};
  } else {
    want = std::min(want, kCmaChunk);
    local = {static_cast<unsigned char*>(x->data) + off, want};
  }
  iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(recvCmaAddr_ + off)), want};
  ssize_t n = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0);
  if (n < 0) {
    int e = errno;
    if (e == EINTR || e == EAGAIN) return 0;
    if (e == ESRCH) return failStep(diedError());
    return failStep(errorf(braidRemoteError, "single-copy read of %zu bytes from peer rank %d (pid %d) failed: %s",
                           want, peerRank_, static_cast<int>(peerPid_), strerror(e)));
  }
  if (n == 0)
    return failStep(errorf(braidRemoteError, "single-copy read from peer rank %d returned no data", peerRank_));
  size_t got = static_cast<size_t>(n);
  if (x->reduce != nullptr) {
    // A short read can split an element; reduce whole ones and read the rest again.
    got -= got % x->reduce->elemSize;
    if (got != 0) deliver(x, off, bounce_, got);
  }
  x->progressed = off + got;
  if (x->progressed == x->bytes) {
    // Pairs with the sender's acquire load in completeSends(): we no longer read its buffer.
    in_.control()->cmaAcks.store(++cmaRecvDone_, std::memory_order_release);
    gSingleCopies.fetch_add(1, std::memory_order_relaxed);
    finishRecv(x);
  }
  return 1;
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
  for (size_t o = 0; o < piece; o += kStreamBlock) {
    const size_t len = std::min(kStreamBlock, piece - o);
    if (r != nullptr) {
      r->fn(slot + o, local + o, src + o, len / r->elemSize, r->ctx);
    } else {
      memcpy(slot + o, src + o, len);
    }
    if (x->forwardOnly) continue;
    if (x->stream) {
      copyStreaming(reinterpret_cast<char*>(dst + o), reinterpret_cast<const char*>(slot + o), len);
    } else {
      memcpy(dst + o, slot + o, len);
    }
  }
  if (x->stream) storeFence();
  s->msgBytes = y->bytes;
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
  if (pidfd_ >= 0) {
    pollfd p = {pidfd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
  }
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
