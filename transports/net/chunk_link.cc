#include "transports/net/chunk_link.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "src/base/log.h"
#include "src/base/nt_store.h"

namespace braid::net {

namespace {

// arrived_[s] when slot s holds nothing: no 32-bit immediate can equal it.
constexpr uint64_t kEmpty = ~0ull;

// The carry buffer holds a partial element; elements larger than a slot are allowed (a test may
// use 10-byte slots for 8-byte elements), up to this many bytes, far above any datatype's size.
constexpr size_t kMinCarryBytes = 64;

size_t carryCapacity(const ChunkLinkConfig& cfg) { return std::max(cfg.slotBytes, kMinCarryBytes); }

}  // namespace

Status ChunkLink::check(const ChunkLinkConfig& cfg) {
  if (cfg.slots < 2 || cfg.slots > Imm::kMaxSlots)
    return errorf(braidInvalidArgument, "chunk link: %u slots, the immediate carries 2..%u", cfg.slots, Imm::kMaxSlots);
  if (cfg.slotBytes < 1 || cfg.slotBytes > Imm::kMaxChunkBytes)
    return errorf(braidInvalidArgument, "chunk link: slots of %zu bytes, the immediate carries 1..%u", cfg.slotBytes,
                  Imm::kMaxChunkBytes);
  if (cfg.maxWrites < 1) return errorf(braidInvalidArgument, "chunk link: a send queue of no entries");
  if (cfg.creditBatch > cfg.slots)
    return errorf(braidInvalidArgument, "chunk link: a credit batch of %u exceeds the %u slots", cfg.creditBatch,
                  cfg.slots);
  return okStatus();
}

ChunkLink::ChunkLink(const ChunkLinkConfig& cfg, Wire* wire, const uint8_t* recvRing, uint8_t* staging,
                     std::string peerName)
    : cfg_(cfg), wire_(wire), recvRing_(recvRing), staging_(staging), peer_(std::move(peerName)) {
  // A batch above 1 saves a credit message per slot; a quarter of the ring leaves the sender three
  // quarters to write into while the credit travels. Any batch up to the ring's size is free of
  // deadlock: a sender out of credits has a whole ring outstanding, which the receiver frees.
  if (cfg_.creditBatch == 0) cfg_.creditBatch = std::max<uint32_t>(1, cfg_.slots / 4);
  credits_ = cfg_.slots;
  arrived_.reset(new uint64_t[cfg_.slots]);
  std::fill(arrived_.get(), arrived_.get() + cfg_.slots, kEmpty);
  // Allocated once here: the hot path does no malloc. Elements start at offset 0, so the reduce
  // kernels see an aligned carried element.
  const size_t cap = (carryCapacity(cfg_) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, cap);
  if (p == nullptr) throw std::bad_alloc();
  carry_.reset(static_cast<uint8_t*>(p));
}

ChunkLink::~ChunkLink() = default;

Status ChunkLink::fail(Status s) {
  if (error_.ok()) {
    BRAID_WARN(kLogNet, "%s", s.message().c_str());
    error_ = std::move(s);
  }
  return error_;
}

Status ChunkLink::postSend(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->bytes > 0)
    return errorf(braidInvalidArgument, "send of %zu bytes from NULL to %s", x->bytes, peer_.c_str());
  x->progressed = 0;
  x->tp[0] = 0;
  x->tp[1] = 0;
  x->complete = false;
  sends_.push(x);
  if (sendCursor_ == nullptr) sendCursor_ = x;
  return okStatus();
}

Status ChunkLink::postRecv(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->capacity > 0)
    return errorf(braidInvalidArgument, "receive of %zu bytes into NULL from %s", x->capacity, peer_.c_str());
  if (x->reduce != nullptr) {
    const ReduceSpec& r = *x->reduce;
    if (r.fn == nullptr || r.elemSize == 0 || r.elemSize > carryCapacity(cfg_) ||
        (x->local == nullptr && x->capacity > 0))
      return errorf(braidInvalidArgument, "reduce receive from %s with an invalid reduce spec (element of %zu bytes)",
                    peer_.c_str(), r.elemSize);
    // A trailing partial element could never be reduced: refuse it here rather than drop it later.
    if (x->capacity % r.elemSize != 0)
      return errorf(braidInvalidArgument, "reduce receive of %zu bytes is not a whole number of %zu-byte elements",
                    x->capacity, r.elemSize);
  }
  x->progressed = 0;
  x->tp[0] = 0;
  x->complete = false;
  if (recvs_.empty()) carryBytes_ = 0;
  recvs_.push(x);
  return okStatus();
}

Status ChunkLink::progress() {
  if (!error_.ok()) return error_;
  BRAID_TRY(consumeArrivals());
  // Credits before new chunks: when both sides are sending, a credit stuck behind a full send
  // queue of chunks would starve the peer.
  BRAID_TRY(returnCredits());
  BRAID_TRY(postChunks());
  completeSends();
  return okStatus();
}

Status ChunkLink::onArrival(uint32_t imm) {
  if (!error_.ok()) return error_;
  if (Imm::isCredit(imm)) {
    const uint32_t n = Imm::count(imm);
    if (n == 0 || n > cfg_.slots - credits_)
      return fail(errorf(braidRemoteError, "%s broke the chunk protocol: returned %u credits with %u outstanding",
                         peer_.c_str(), n, cfg_.slots - credits_));
    credits_ += n;
    return okStatus();
  }
  const uint32_t slot = Imm::slot(imm);
  if (slot >= cfg_.slots)
    return fail(
        errorf(braidRemoteError, "%s broke the chunk protocol: wrote slot %u of %u", peer_.c_str(), slot, cfg_.slots));
  if (Imm::bytes(imm) > cfg_.slotBytes)
    return fail(errorf(braidRemoteError, "%s broke the chunk protocol: wrote %u bytes into a slot of %zu",
                       peer_.c_str(), Imm::bytes(imm), cfg_.slotBytes));
  if (arrived_[slot] != kEmpty)
    return fail(errorf(braidRemoteError, "%s broke the chunk protocol: wrote slot %u again before it was freed",
                       peer_.c_str(), slot));
  arrived_[slot] = imm;
  return okStatus();
}

Status ChunkLink::onWriteDone(uint64_t wrId) {
  if (!error_.ok()) return error_;
  if (writesInFlight_ == 0)
    return fail(errorf(braidInternalError, "a write to %s completed that was never posted", peer_.c_str()));
  --writesInFlight_;
  // A direct write from a registered buffer: its send may complete once all of them are done.
  if (wrId != kUntracked) {
    Xfer* x = reinterpret_cast<Xfer*>(wrId);
    --x->tp[0];
  }
  return okStatus();
}

Status ChunkLink::deliverArrived(bool* transfersLeft) {
  if (!error_.ok()) return error_;
  BRAID_TRY(consumeArrivals());
  completeSends();
  *transfersLeft = !sends_.empty() || !recvs_.empty();
  return okStatus();
}

Status ChunkLink::consumeArrivals() {
  while (!recvs_.empty() && arrived_[recvSlot_] != kEmpty) {
    const uint32_t imm = static_cast<uint32_t>(arrived_[recvSlot_]);
    const uint8_t* src = recvRing_ + static_cast<size_t>(recvSlot_) * cfg_.slotBytes;
    // Free the slot before delivering: a failed delivery kills the link anyway.
    arrived_[recvSlot_] = kEmpty;
    recvSlot_ = recvSlot_ + 1 == cfg_.slots ? 0 : recvSlot_ + 1;
    ++freed_;
    if (Imm::isCallChunk(imm)) {
      CallChunk c;
      memcpy(&c, src, sizeof(c));
      recvCall_ = c.shape;
      announcedNo_ = c.no;
      announced_ = true;
      continue;
    }
    BRAID_TRY(deliver(recvs_.front(), src, Imm::bytes(imm), Imm::last(imm)));
  }
  return okStatus();
}

Status ChunkLink::deliver(Xfer* x, const uint8_t* src, size_t bytes, bool last) {
  const size_t before = x->tp[0];
  // A message's first chunk: before its bytes go anywhere, whether it is of the receive's call.
  if (before == 0 && recvCall_ != 0 && x->callShape != 0) {
    const bool numberOk = announced_ ? x->callNo == announcedNo_ : x->callNo - recvNo_ <= 1;
    if (x->callShape != recvCall_ || !numberOk) return fail(otherCallError(peer_));
    recvNo_ = x->callNo;
    announced_ = false;
  }
  x->tp[0] += bytes;
  // Past the posted room: count the rest of the message without writing it, so that the error
  // names the length the peer sent.
  if (x->tp[0] <= x->capacity && bytes > 0) {
    if (x->reduce != nullptr) {
      reduceInto(x, src, bytes);
    } else if (x->stream) {  // an output past the cache: written around it, fenced when whole
      copyStreaming(static_cast<char*>(x->data) + before, reinterpret_cast<const char*>(src), bytes);
      x->progressed += bytes;
    } else {
      memcpy(static_cast<uint8_t*>(x->data) + before, src, bytes);
      x->progressed += bytes;
    }
  }
  if (!last) return okStatus();
  if (x->tp[0] != x->capacity)
    return fail(errorf(braidRemoteError, "message from %s has %llu bytes, the posted receive expects %zu",
                       peer_.c_str(), static_cast<unsigned long long>(x->tp[0]), x->capacity));
  x->bytes = x->capacity;
  recvs_.pop();
  carryBytes_ = 0;
  if (x->stream) storeFence();  // before the owner, maybe another thread, reads the output
  x->complete = true;           // last: the owner may reuse x as soon as it sees this
  return okStatus();
}

void ChunkLink::reduceInto(Xfer* x, const uint8_t* src, size_t bytes) {
  const ReduceSpec& r = *x->reduce;
  const size_t es = r.elemSize;
  // Finish an element carried over from earlier chunks first.
  if (carryBytes_ > 0) {
    const size_t take = std::min(es - carryBytes_, bytes);
    memcpy(carry_.get() + carryBytes_, src, take);
    carryBytes_ += take;
    src += take;
    bytes -= take;
    if (carryBytes_ < es) return;
    r.fn(static_cast<uint8_t*>(x->data) + x->progressed, static_cast<const uint8_t*>(x->local) + x->progressed,
         carry_.get(), 1, r.ctx);
    x->progressed += es;
    carryBytes_ = 0;
  }
  const size_t count = bytes / es;
  if (count > 0) {
    r.apply(static_cast<uint8_t*>(x->data) + x->progressed, static_cast<const uint8_t*>(x->local) + x->progressed, src,
            count, x->stream);
    x->progressed += count * es;
  }
  const size_t rest = bytes - count * es;
  if (rest > 0) {
    memcpy(carry_.get(), src + count * es, rest);
    carryBytes_ = rest;
  }
}

Status ChunkLink::returnCredits() {
  if (freed_ < cfg_.creditBatch || writesInFlight_ >= cfg_.maxWrites) return okStatus();
  Status s = wire_->postCredit(Imm::credit(freed_), kUntracked);
  if (!s.ok()) return fail(s);
  ++writesInFlight_;
  ++creditMessages_;
  freed_ = 0;
  return okStatus();
}

Status ChunkLink::postChunks() {
  while (sendCursor_ != nullptr && credits_ > 0 && writesInFlight_ < cfg_.maxWrites) {
    Xfer* x = sendCursor_;
    const bool track = cfg_.sendsAwaitWrites;
    const bool hasCall = x->progressed == 0 && x->callShape != 0 && cfg_.slotBytes >= Imm::kCallChunkBytes;
    if (hasCall && (x->callShape != sentCall_ || x->callNo - sentNo_ > 1)) {
      // The message's call first, in a slot of its own (from staging: x's buffer holds none).
      const uint32_t slot = sendSlot_;
      uint8_t* stage = staging_ + static_cast<size_t>(slot) * cfg_.slotBytes;
      CallChunk c;
      c.shape = x->callShape;
      c.no = x->callNo;
      memcpy(stage, &c, sizeof(c));
      Status s = wire_->postWrite(stage, nullptr, Imm::kCallChunkBytes, slot, Imm::callChunk(slot),
                                  track ? reinterpret_cast<uint64_t>(x) : kUntracked);
      if (!s.ok()) return fail(s);
      if (track) ++x->tp[0];
      --credits_;
      ++writesInFlight_;
      sendSlot_ = slot + 1 == cfg_.slots ? 0 : slot + 1;
      sentCall_ = x->callShape;
      sentNo_ = x->callNo;
      continue;
    }
    if (hasCall) sentNo_ = x->callNo;
    const size_t off = x->progressed;
    const size_t bytes = std::min(cfg_.slotBytes, x->bytes - off);
    const bool last = off + bytes == x->bytes;
    const uint32_t slot = sendSlot_;
    const uint32_t imm = Imm::data(slot, static_cast<uint32_t>(bytes), last);
    const uint8_t* from = static_cast<const uint8_t*>(x->data) + off;
    Status s;
    if (x->region != nullptr) {
      // Registered: the wire reads the caller's buffer, which must stay until the write is done.
      s = wire_->postWrite(from, x->region, bytes, slot, imm, reinterpret_cast<uint64_t>(x));
      if (s.ok()) ++x->tp[0];
    } else {
      uint8_t* stage = staging_ + static_cast<size_t>(slot) * cfg_.slotBytes;
      if (bytes > 0) memcpy(stage, from, bytes);
      s = wire_->postWrite(stage, nullptr, bytes, slot, imm, track ? reinterpret_cast<uint64_t>(x) : kUntracked);
      if (s.ok() && track) ++x->tp[0];
    }
    if (!s.ok()) return fail(s);
    --credits_;
    ++writesInFlight_;
    sendSlot_ = slot + 1 == cfg_.slots ? 0 : slot + 1;
    x->progressed += bytes;
    if (last) {
      x->tp[1] = 1;
      sendCursor_ = x->next;
    }
  }
  return okStatus();
}

void ChunkLink::completeSends() {
  while (!sends_.empty()) {
    Xfer* x = sends_.front();
    if (x->tp[1] == 0 || x->tp[0] != 0) return;
    sends_.pop();
    x->complete = true;  // last: the owner may reuse x as soon as it sees this
  }
}

}  // namespace braid::net
