#include "transports/tcp/tcp_link.h"

#include <linux/errqueue.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

#include "src/base/log.h"
#include "src/base/nt_store.h"

namespace braid {

// The send path puts Xfer::wire (the message's lengthWord) on the wire as the header as is, and the
// receive path reads the header into a uint64_t: both are the little-endian 8-byte word only on
// these hosts.
static_assert(std::endian::native == std::endian::little, "the tcp wire header is little-endian");
static_assert(sizeof(Xfer::wire) == kTcpHeaderBytes, "Xfer::wire is the wire header");

namespace {

// What one queued receive contributes to a recvmsg batch.
struct RecvSlot {
  Xfer* x;
  size_t hdrWant;  // header bytes asked for (0 when the head's header was already read)
  size_t payWant;  // payload bytes asked for
};

}  // namespace

TcpStripe stripeOf(size_t bytes, int lanes) {
  TcpStripe st;
  st.stride = bytes;
  if (lanes <= 1 || bytes < 2 * TcpStripe::kMinPart) return st;
  const size_t parts = std::min(static_cast<size_t>(lanes), bytes / TcpStripe::kMinPart);
  const size_t per = (bytes + parts - 1) / parts;
  st.stride = (per + TcpStripe::kAlign - 1) / TcpStripe::kAlign * TcpStripe::kAlign;
  // Rounding the stride up can leave the last lanes nothing: count the lanes that have bytes.
  st.parts = static_cast<int>((bytes + st.stride - 1) / st.stride);
  return st;
}

TcpLink::TcpLink(std::vector<Fd> fds, int peerRank, std::string peerHost, const TcpLinkOptions& opt)
    : lanes_(fds.size()),
      nlanes_(static_cast<int>(fds.size())),
      allDone_(fds.size() >= 64 ? ~0ull : (1ull << fds.size()) - 1),
      peer_(peerRank),
      peerHost_(std::move(peerHost)),
      chunk_(std::max(opt.chunkBytes, kMinChunk)),
      shaping_(opt.shaping),
      zeroCopy_(opt.zeroCopy),
      tokensAtNs_(nowNs()),
      crowd_(opt.crowd) {
  if (fds.empty() || fds.size() > static_cast<size_t>(kTcpMaxLanes)) throw std::invalid_argument("tcp lane count");
  // Allocated once here, not per message: the hot path does no malloc. Incoming elements always
  // start at offset 0 of staging, so the reduce kernels see them cache-line aligned.
  const size_t bytes = (chunk_ + 63) / 64 * 64;
  for (size_t i = 0; i < fds.size(); ++i) {
    lanes_[i].fd = std::move(fds[i]);
    closeInForkedChild(lanes_[i].fd);  // its end tells the peer that this process is gone
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    lanes_[i].staging.reset(static_cast<uint8_t*>(p));
  }
  ahead_ = std::make_unique<uint8_t[]>(kAheadBytes);
}

TcpLink::~TcpLink() {
  leaveCrowd();
  if (zcCalls_ > 0)
    BRAID_INFO(kLogNet, "tcp: peer rank %d: %llu zero-copy sends, %llu of them copied by the kernel anyway", peer_,
               static_cast<unsigned long long>(zcCalls_), static_cast<unsigned long long>(zcCopied_));
}

Status TcpLink::fail(Status s) {
  if (error_.ok()) {
    BRAID_WARN(kLogNet, "tcp: %s", s.message().c_str());
    error_ = s;
    leaveCrowd();  // its queued sends will never drain: they must not keep the other links small
  }
  return error_;
}

void TcpLink::leaveCrowd() {
  if (crowd_ != nullptr) setHeavy(false);
  crowd_ = nullptr;
}

void TcpLink::setHeavy(bool heavy) {
  if (heavy == heavy_) return;
  heavy_ = heavy;
  if (heavy)
    crowd_->heavy.fetch_add(1, std::memory_order_relaxed);
  else if (crowd_->heavy.fetch_sub(1, std::memory_order_relaxed) == 1)
    crowd_->calm.fetch_add(1, std::memory_order_relaxed);
}

void TcpLink::followCrowd() {
  const uint64_t calm = crowd_->calm.load(std::memory_order_relaxed);
  const bool crowded = crowd_->heavy.load(std::memory_order_relaxed) >= TcpCrowd::kCrowdLinks;
  const bool shrink = crowded || (shrunk_ && calm == shrunkCalm_);
  if (crowded) shrunkCalm_ = calm;  // small until the next time no link is heavy
  if (shrink == shrunk_) return;
  // Takes effect on the next write: a socket holding more than the new size takes no more until
  // it drained below it.
  const int want = static_cast<int>(shrink ? crowd_->crowded : crowd_->normal);
  for (Lane& ln : lanes_) {
    if (setsockopt(ln.fd.get(), SOL_SOCKET, SO_SNDBUF, &want, sizeof(want)) != 0) {
      BRAID_WARN(kLogNet, "tcp: peer rank %d: setsockopt(SO_SNDBUF, %d) failed (%s): its send buffers stay as they are",
                 peer_, want, strerror(errno));
      leaveCrowd();
      return;
    }
  }
  shrunk_ = shrink;
}

Status TcpLink::closedError() {
  return fail(errorf(braidRemoteError, "peer rank %d (host %s) closed the connection", peer_, peerHost_.c_str()));
}

Status TcpLink::socketError(int err, const char* op) {
  if (err == EPIPE || err == ECONNRESET) return closedError();
  if (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == ECONNABORTED)
    return fail(errorf(braidRemoteError, "connection to peer rank %d (host %s) failed (%s): %s", peer_,
                       peerHost_.c_str(), op, strerror(err)));
  return fail(systemError(err, "%s peer rank %d (host %s)", op, peer_, peerHost_.c_str()));
}

size_t TcpLink::partOf(size_t bytes, int l, size_t* off) const {
  if (nlanes_ == 1 || bytes < 2 * TcpStripe::kMinPart) {  // the common case, without divisions
    *off = 0;
    return l == 0 ? bytes : 0;
  }
  const size_t stride = stripeOf(bytes, nlanes_).stride;
  const size_t begin = std::min(bytes, static_cast<size_t>(l) * stride);
  *off = begin;
  return std::min(bytes, begin + stride) - begin;
}

uint64_t TcpLink::initialMask(size_t bytes) const {
  if (nlanes_ == 1 || bytes < 2 * TcpStripe::kMinPart) return allDone_ & ~1ull;
  return allDone_ & ~((1ull << stripeOf(bytes, nlanes_).parts) - 1);
}

Status TcpLink::postSend(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->bytes > 0)
    return errorf(braidInvalidArgument, "tcp send of %zu bytes from NULL", x->bytes);
  if (x->bytes > kLengthMask) return errorf(braidInvalidArgument, "tcp send of %zu bytes: over a terabyte", x->bytes);
  x->progressed = 0;
  x->complete = false;
  x->wire = lengthWord(x->bytes, x->call);
  x->tp[0] = initialMask(x->bytes);
  x->tp[1] = shaping_.delayNs > 0 ? static_cast<uint64_t>(nowNs() + shaping_.delayNs) : 0;
  if (x->tp[0] != (allDone_ & ~1ull)) ++sendStriped_;
  if (sends_.empty()) {
    sendHdrDone_ = 0;
    for (Lane& ln : lanes_) ln.sendDone = 0;
  }
  sends_.push(x);
  sendQueued_ += x->bytes;
  if (crowd_ != nullptr) setHeavy(sendQueued_ >= TcpCrowd::kHeavyBytes);
  return okStatus();
}

Status TcpLink::postRecv(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->capacity > 0)
    return errorf(braidInvalidArgument, "tcp receive of %zu bytes into NULL", x->capacity);
  x->tp[0] = initialMask(x->capacity);
  const bool striped = x->tp[0] != (allDone_ & ~1ull);
  if (x->reduce != nullptr) {
    const ReduceSpec& r = *x->reduce;
    if (r.fn == nullptr || r.elemSize == 0 || r.elemSize > chunk_ || (x->local == nullptr && x->capacity > 0))
      return errorf(braidInvalidArgument, "tcp reduce receive with an invalid reduce spec (element of %zu bytes)",
                    r.elemSize);
    // A trailing partial element could never be reduced: refuse it here rather than drop it later.
    if (x->capacity % r.elemSize != 0)
      return errorf(braidInvalidArgument, "tcp reduce receive of %zu bytes is not a whole number of %zu-byte elements",
                    x->capacity, r.elemSize);
    // Lanes cut messages at multiples of TcpStripe::kAlign: an element must not straddle two.
    if (striped && TcpStripe::kAlign % r.elemSize != 0)
      return errorf(braidInvalidArgument, "tcp reduce receive of %zu-byte elements across %d sockets (BRAID_NSOCKS)",
                    r.elemSize, nlanes_);
  }
  x->progressed = 0;
  x->complete = false;
  if (striped) ++recvStriped_;
  if (recvs_.empty()) {
    recvHdrDone_ = 0;
    for (Lane& ln : lanes_) {
      ln.recvDone = 0;
      ln.carry = 0;
    }
  }
  recvs_.push(x);
  return okStatus();
}

Status TcpLink::progress() {
  if (!error_.ok()) return error_;
  if (crowd_ != nullptr) followCrowd();
  // Each lane and direction: socket calls of one chunk until the socket is full (send) or drained
  // (recv), at most kChunksPerProgress of them. An idle direction costs no system call, and lanes
  // 1.. are skipped while no striped message is queued. (Alternating one call per direction measured
  // slower for bidirectional 1 MiB messages on loopback, 2.2 vs 3.0 GB/s: the longer runs cost fewer
  // switches between the two halves of the TCP stack.)
  const int sendLanes = sendStriped_ > 0 ? nlanes_ : 1;
  const int recvLanes = recvStriped_ > 0 ? nlanes_ : 1;
  for (int l = 0; l < std::max(sendLanes, recvLanes); ++l) {
    for (size_t round = 0; l < sendLanes && round < kChunksPerProgress && !sends_.empty(); ++round) {
      bool more = false;
      BRAID_TRY(sendOnce(l, &more));
      if (!more) break;
    }
    for (size_t round = 0; l < recvLanes && round < kChunksPerProgress && !recvs_.empty(); ++round) {
      bool more = false;
      BRAID_TRY(recvOnce(l, &more));
      if (!more) break;
    }
  }
  return okStatus();
}

void TcpLink::completeDone(XferQueue& q, size_t* striped) {
  while (!q.empty() && q.front()->tp[0] == allDone_) {
    Xfer* x = q.pop();
    const size_t len = &q == &sends_ ? x->bytes : x->capacity;
    if (initialMask(len) != (allDone_ & ~1ull)) --*striped;
    if (&q == &sends_) {
      sendQueued_ -= len;
      if (crowd_ != nullptr) setHeavy(sendQueued_ >= TcpCrowd::kHeavyBytes);
    }
    x->progressed = len;
    x->complete = true;  // last: the caller may reuse x as soon as it sees this
  }
}

void TcpLink::partSent(int l, Xfer* x) {
  Lane& ln = lanes_[l];
  const uint64_t bit = 1ull << l;
  // Every zero-copy call of this lane so far may still read pages of x: wait for the last one.
  // (Copied sends in between are done as soon as the socket took them, but cannot complete x
  // before the zero-copy ones ahead of them.)
  if (!zeroCopy_ || ln.zcDone == ln.zcIssued) {
    x->tp[0] |= bit;
    return;
  }
  // Room: sendOnce sends only while fewer than kMaxHeld are held, and a call finishes at most one
  // part per iovec entry (kMaxIov).
  ln.held[ln.nheld++] = {x, ln.zcIssued - 1};
  x->progressed |= bit;
}

Status TcpLink::reapZeroCopy(int l) {
  Lane& ln = lanes_[l];
  for (;;) {
    alignas(cmsghdr) char control[128];
    msghdr m{};
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(ln.fd.get(), &m, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return socketError(errno, "reading the zero-copy notifications of");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      const bool err = (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                       (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
      if (!err) continue;
      sock_extended_err e;
      memcpy(&e, CMSG_DATA(c), sizeof(e));
      if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) {
        if (e.ee_errno != 0) return socketError(static_cast<int>(e.ee_errno), "send to");
        continue;
      }
      // [ee_info, ee_data] are the ids of the calls done.
      zeroCopyDone(ln, e.ee_info, e.ee_data);
      if ((e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0) zcCopied_ += e.ee_data - e.ee_info + 1;
    }
  }
  int kept = 0;
  const uint64_t bit = 1ull << l;
  for (int i = 0; i < ln.nheld; ++i) {
    Held h = ln.held[i];
    if (static_cast<int32_t>(ln.zcDone - h.id) > 0) {
      h.x->progressed &= ~bit;
      h.x->tp[0] |= bit;
    } else {
      ln.held[kept++] = h;
    }
  }
  ln.nheld = kept;
  completeDone(sends_, &sendStriped_);
  return okStatus();
}

void TcpLink::zeroCopyDone(Lane& ln, uint32_t lo, uint32_t hi) {
  // A range spans no more calls than were unreported (ids wrap around at 2^32, as the kernel's do).
  const uint32_t n = std::min(hi - lo, 2 * kMaxZeroCopyCalls) + 1;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t ahead = lo + k - ln.zcDone;  // 0: the next call due
    // Below zcDone: reported already. Past the window: never issued (sendOnce keeps at most
    // kMaxZeroCopyCalls unreported), so nothing of ours.
    if (static_cast<int32_t>(ahead) >= 0 && ahead < kMaxZeroCopyCalls) {
      if (ahead == 0) {
        ++ln.zcDone;
        for (; (ln.zcAhead & 1) != 0; ln.zcAhead >>= 1) ++ln.zcDone;
        ln.zcAhead >>= 1;
      } else {
        ln.zcAhead |= 1ull << (ahead - 1);
      }
    }
  }
}

size_t TcpLink::shapedAllowance(const Xfer* first) {
  const int64_t now = nowNs();
  if (shaping_.delayNs > 0 && now < static_cast<int64_t>(first->tp[1])) return 0;
  if (shaping_.bytesPerSec <= 0) return SIZE_MAX;
  // A bucket of 2 ms at the rate (at least one packet's worth), so that a slow rate still moves
  // whole segments and a fast one is not cut into tiny writes.
  const double burst = std::max(1500.0, shaping_.bytesPerSec * 0.002);
  tokens_ = std::min(burst, tokens_ + static_cast<double>(now - tokensAtNs_) * 1e-9 * shaping_.bytesPerSec);
  tokensAtNs_ = now;
  return tokens_ < 1 ? 0 : static_cast<size_t>(tokens_);
}

Status TcpLink::sendOnce(int l, bool* more) {
  *more = false;
  Lane& ln = lanes_[l];
  const uint64_t bit = 1ull << l;
  if (zeroCopy_ && ln.nheld > 0) {
    BRAID_TRY(reapZeroCopy(l));
    if (ln.nheld >= kMaxHeld) return okStatus();  // back-pressure: the kernel still reads our pages
  }
  // Parts done (tp[0]) or on the wire waiting for a notification (progressed) are not ours to send.
  Xfer* first = sends_.front();
  while (first != nullptr && ((first->tp[0] | first->progressed) & bit) != 0) first = first->next;
  if (first == nullptr) return okStatus();
  const bool shaped = shaping_.delayNs > 0 || shaping_.bytesPerSec > 0;
  const size_t cap = shaped ? std::min(chunk_, shapedAllowance(first)) : chunk_;
  if (cap == 0) return okStatus();
  // This lane's part of the first pending message and, while they fit in one chunk, of the queued
  // messages behind it (shaped: the first alone, each message has its own release time): header
  // (lane 0) and payload of each go out in one sendmsg.
  iovec iov[kMaxIov];
  int niov = 0;
  size_t want = 0;
  for (Xfer* x = first; x != nullptr && niov + 2 <= kMaxIov && want < cap; x = x->next) {
    if (((x->tp[0] | x->progressed) & bit) != 0) continue;
    if (shaped && x != first) break;
    if (l == 0) {
      const size_t hdrDone = x == first ? sendHdrDone_ : 0;
      const size_t h = std::min(kTcpHeaderBytes - hdrDone, cap - want);
      if (h > 0) iov[niov++] = {reinterpret_cast<char*>(&x->wire) + hdrDone, h};
      want += h;
      if (hdrDone + h < kTcpHeaderBytes) break;
    }
    size_t off = 0;
    const size_t part = partOf(x->bytes, l, &off);
    const size_t done = x == first ? ln.sendDone : 0;
    const size_t left = part - done;
    const size_t take = std::min(left, cap > want ? cap - want : 0);
    if (take > 0) {
      iov[niov++] = {static_cast<char*>(x->data) + off + done, take};
      want += take;
    }
    if (take < left) break;
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(niov);
  int flags = MSG_NOSIGNAL | MSG_DONTWAIT;
  if (zeroCopy_ && want >= kZeroCopyMin && ln.zcIssued - ln.zcDone < kMaxZeroCopyCalls) flags |= MSG_ZEROCOPY;
  ssize_t n;
  for (;;) {
    n = sendmsg(ln.fd.get(), &msg, flags);
    if (n >= 0 || errno == EINTR) {
      if (n >= 0) break;
      continue;
    }
    // Out of the memory that pins pages for zero-copy (net.core.optmem_max): copy this time.
    if (errno == ENOBUFS && (flags & MSG_ZEROCOPY) != 0) {
      flags &= ~MSG_ZEROCOPY;
      continue;
    }
    break;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
    return socketError(errno, "send to");
  }
  if ((flags & MSG_ZEROCOPY) != 0) {
    ++ln.zcIssued;
    ++zcCalls_;
  }
  if (shaping_.bytesPerSec > 0) tokens_ -= static_cast<double>(n);
  // Walk this lane's messages over what the socket took, marking the parts it finished.
  size_t left = static_cast<size_t>(n);
  for (Xfer* x = first; x != nullptr && left > 0; x = x->next) {
    if (((x->tp[0] | x->progressed) & bit) != 0) continue;
    if (l == 0) {
      const size_t h = std::min(left, kTcpHeaderBytes - sendHdrDone_);
      sendHdrDone_ += h;
      left -= h;
      if (sendHdrDone_ < kTcpHeaderBytes) break;
    }
    size_t off = 0;
    const size_t part = partOf(x->bytes, l, &off);
    const size_t p = std::min(left, part - ln.sendDone);
    ln.sendDone += p;
    left -= p;
    if (ln.sendDone < part) break;
    partSent(l, x);
    ln.sendDone = 0;
    if (l == 0) sendHdrDone_ = 0;
  }
  completeDone(sends_, &sendStriped_);
  // A short write means the socket buffer is full: asking again now would only get EAGAIN.
  *more = static_cast<size_t>(n) == want && !sends_.empty() && !shaped;
  return okStatus();
}

Status TcpLink::recvOnce(int l, bool* more) {
  *more = false;
  Lane& ln = lanes_[l];
  const uint64_t bit = 1ull << l;
  // Ask for this lane's remainder of the first pending receive and, behind it, the headers (lane 0)
  // and parts of further queued receives: with the sizes agreed, each lane's stream splits exactly
  // at part boundaries, so a burst of small messages arrives in one recvmsg. When a header turns
  // out to disagree, the bytes read behind it (and on the other lanes) are garbage in a receive
  // that fails anyway (the link is dead after that).
  iovec iov[kMaxIov];
  RecvSlot slots[kMaxBatch];
  int niov = 0;
  int nslots = 0;
  size_t want = 0;
  bool wholeTail = false;  // the batch's last receive ends within it (the next bytes are a header)
  for (Xfer* x = recvs_.front(); x != nullptr && nslots < kMaxBatch && want < chunk_; x = x->next) {
    if ((x->tp[0] & bit) != 0) continue;
    const bool head = nslots == 0;
    RecvSlot s{x, 0, 0};
    if (l == 0 && (!head || recvHdrDone_ < kTcpHeaderBytes)) {
      s.hdrWant = head ? kTcpHeaderBytes - recvHdrDone_ : kTcpHeaderBytes;
      char* h = head ? reinterpret_cast<char*>(&recvHdr_) + recvHdrDone_ : reinterpret_cast<char*>(&batchHdr_[nslots]);
      iov[niov++] = {h, s.hdrWant};
      want += s.hdrWant;
    }
    // Only the head can have a partial element in staging; a reduce slot ends the batch, so a
    // later reduce slot sees an empty staging buffer.
    const size_t carry = head ? ln.carry : 0;
    const size_t done = head ? ln.recvDone : 0;
    size_t off = 0;
    const size_t left = partOf(x->capacity, l, &off) - done - carry;
    const size_t room = x->reduce != nullptr ? chunk_ - carry : (chunk_ > want ? chunk_ - want : 0);
    s.payWant = std::min(left, room);
    if (s.payWant > 0) {
      char* dst = x->reduce != nullptr ? reinterpret_cast<char*>(ln.staging.get()) + carry
                                       : static_cast<char*>(x->data) + off + done;
      iov[niov++] = {dst, s.payWant};
      want += s.payWant;
    }
    slots[nslots++] = s;
    wholeTail = s.payWant == left;
    if (s.payWant < left || x->reduce != nullptr) break;
  }
  if (nslots == 0) return okStatus();
  size_t n;
  const bool fromAhead = l == 0 && aheadAt_ < aheadEnd_;  // only lane 0 reads ahead
  if (fromAhead) {
    n = drainAhead(iov, niov);
  } else {
    // Behind the last posted receive's end comes the next message: read ahead into ahead_.
    const bool readAhead = l == 0 && wholeTail && niov < kMaxIov;
    if (readAhead) iov[niov] = {ahead_.get(), kAheadBytes};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(niov + (readAhead ? 1 : 0));
    ssize_t got;
    do {
      got = recvmsg(ln.fd.get(), &msg, MSG_DONTWAIT);
    } while (got < 0 && errno == EINTR);
    if (got == 0) return closedError();
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return okStatus();
      return socketError(errno, "recv from");
    }
    n = std::min(static_cast<size_t>(got), want);
    if (readAhead) {
      aheadAt_ = 0;
      aheadEnd_ = static_cast<size_t>(got) - n;
    }
  }
  // Walk the slots over what arrived, checking each header as it completes.
  size_t left = n;
  for (int k = 0; k < nslots; ++k) {
    const RecvSlot& s = slots[k];
    Xfer* x = s.x;  // the lane's first pending receive: the slots before it finished their parts
    if (s.hdrWant > 0) {
      const size_t h = std::min(left, s.hdrWant);
      // A later slot's header was read into batchHdr_; it is now the current one, so move it.
      if (k > 0 && h > 0) memcpy(&recvHdr_, &batchHdr_[k], h);
      recvHdrDone_ += h;
      left -= h;
      if (recvHdrDone_ < kTcpHeaderBytes) break;
      BRAID_TRY(checkHeader(recvHdr_, x));
    }
    const size_t p = std::min(left, s.payWant);
    left -= p;
    size_t off = 0;
    const size_t part = partOf(x->capacity, l, &off);
    if (x->reduce != nullptr) {
      // Reduce whole elements; keep the tail of a partial element at the front of staging
      // (elements then always start at staging offset 0, keeping them aligned).
      const ReduceSpec& r = *x->reduce;
      const size_t avail = ln.carry + p;
      const size_t count = avail / r.elemSize;
      const size_t whole = count * r.elemSize;
      if (count > 0) {
        const size_t at = off + ln.recvDone;
        // An output past the cache (Xfer::stream) takes the fold that streams it, fenced once the
        // receive is whole.
        r.apply(static_cast<char*>(x->data) + at, static_cast<const char*>(x->local) + at, ln.staging.get(), count,
                x->stream);
        ln.recvDone += whole;
        if (avail > whole) memmove(ln.staging.get(), ln.staging.get() + whole, avail - whole);
      }
      ln.carry = avail - whole;
    } else {
      ln.recvDone += p;
    }
    if (ln.recvDone < part) break;
    if (x->stream && x->reduce != nullptr) storeFence();
    x->tp[0] |= bit;
    ln.recvDone = 0;
    ln.carry = 0;
    if (l == 0) recvHdrDone_ = 0;
  }
  completeDone(recvs_, &recvStriped_);
  // A short read means the socket is drained for now: asking again would only get EAGAIN. Not so
  // when the read-ahead ran dry: the socket may hold the rest.
  *more = (n == want || fromAhead) && !recvs_.empty();
  return okStatus();
}

size_t TcpLink::drainAhead(const iovec* iov, int niov) {
  size_t copied = 0;
  for (int i = 0; i < niov && aheadAt_ < aheadEnd_; ++i) {
    const size_t c = std::min(iov[i].iov_len, aheadEnd_ - aheadAt_);
    memcpy(iov[i].iov_base, ahead_.get() + aheadAt_, c);
    aheadAt_ += c;
    copied += c;
  }
  return copied;
}

Status TcpLink::checkHeader(uint64_t header, Xfer* x) {
  if (otherCall(wordCall(header), x->call)) return fail(otherCallError(peer_));
  const uint64_t announced = wordLength(header);
  if (announced == x->capacity) {
    x->bytes = announced;
    return okStatus();
  }
  return fail(errorf(braidRemoteError, "message from peer rank %d has %llu bytes, the posted receive expects %zu",
                     peer_, static_cast<unsigned long long>(announced), x->capacity));
}

}  // namespace braid
