// The chunk/credit protocol of a link over an RDMA-like wire, with no verbs in it: the ibverbs
// transport runs it over RC queue pairs, and tests/unit/test_chunk_link.cc over an in-process wire
// that delivers, delays, reorders and corrupts at will.
//
// The wire moves bytes one way only, by writing into the peer's memory:
//   - Each endpoint owns a receive ring of `slots` slots of `slotBytes` each, which its peer writes
//     into, and a send staging ring of the same shape, which it writes from.
//   - A message is cut into chunks of at most slotBytes. Every chunk takes one credit (a free slot
//     in the peer's receive ring) and travels as one write into that slot with a 32-bit immediate
//     (see Imm below): the slot, the chunk's bytes and whether it ends the message. A zero-byte
//     message is one chunk of zero bytes. Slots are used in ring order.
//   - The receiver, on arrival, copies (or reduces, whole elements only) from the slot into the
//     posted receive, checks the message length against it, and frees the slot.
//   - A message is preceded by a call chunk, which takes a slot like any other and holds its call
//     (Xfer::callShape, the call without its number, and Xfer::callNo, the number), where the
//     shape differs from the one the link last announced or the number is neither the last
//     message's nor the next (the sender sent nothing for a call between them). The receiver
//     refuses (otherCallError) a message whose receive names another shape, a message right
//     after a call chunk whose receive has another number, and any other whose receive's number
//     is neither the last message's nor the next. Consecutive messages of calls of one shape (a
//     training loop's) announce nothing after the first, and a call's messages that a mismatched
//     call left unread, where the receiver took nothing from that call, are refused by the next
//     call (announced with their old number, or two numbers behind the receive). Slots under
//     Imm::kCallChunkBytes carry no calls. Freed slots go
//     back to the sender in batches as a credit immediate (no payload) carrying a count: slots are
//     freed in ring order, so a count says which.
// Arrivals are consumed in ring order even if the wire reports them out of order, so messages
// complete in posting order per direction, whatever the completion order. A staging slot is
// reused only after its credit came back, which means the peer has the bytes: the staged copy
// needs no write completion of its own. A wire that needs this side's progress to finish a write
// (ucx: the write is announced only after a flush completes here) sets sendsAwaitWrites, so that a
// staged send completes only once its writes are done and the executor keeps progressing until
// then.
//
// Threading: driven by one thread at a time (the executor's lock, through Transport::progress());
// nothing here locks. Nothing on the per-message path allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/status.h"
#include "transports/transport.h"

namespace braid::net {

// The 32-bit immediate of every write.
//   bit 31:       0 = data chunk, 1 = credit return
//   data chunk:   bits 0..9 slot, bit 10 last chunk of its message, bits 11..30 the chunk's bytes
//   credit:       bits 0..30 the number of slots freed (in ring order)
// A data chunk of no bytes that does not end a message (no message has one) is a call chunk: its
// slot holds the call (CallChunk, kCallChunkBytes) of the messages after it (see ChunkLink).
struct Imm {
  static constexpr uint32_t kCreditBit = 1u << 31;
  static constexpr uint32_t kSlotBits = 10;
  static constexpr uint32_t kMaxSlots = 1u << kSlotBits;  // 1024
  static constexpr uint32_t kLastBit = 1u << kSlotBits;
  static constexpr uint32_t kBytesShift = kSlotBits + 1;
  static constexpr uint32_t kMaxChunkBytes = (1u << (31 - kBytesShift)) - 1;  // 1 MiB - 1

  static uint32_t data(uint32_t slot, uint32_t bytes, bool last) {
    return slot | (last ? kLastBit : 0u) | (bytes << kBytesShift);
  }
  static uint32_t credit(uint32_t count) { return kCreditBit | count; }
  static bool isCredit(uint32_t imm) { return (imm & kCreditBit) != 0; }
  static uint32_t slot(uint32_t imm) { return imm & (kMaxSlots - 1); }
  static bool last(uint32_t imm) { return (imm & kLastBit) != 0; }
  static uint32_t bytes(uint32_t imm) { return (imm & ~kCreditBit) >> kBytesShift; }
  static uint32_t count(uint32_t imm) { return imm & ~kCreditBit; }
  static constexpr uint32_t kCallChunkBytes = 16;  // sizeof(CallChunk)
  static uint32_t callChunk(uint32_t slot) { return data(slot, 0, false); }
  static bool isCallChunk(uint32_t imm) { return !isCredit(imm) && (imm & ~(kMaxSlots - 1)) == 0; }
  // The bytes written into the chunk's slot.
  static uint32_t written(uint32_t imm) { return isCallChunk(imm) ? kCallChunkBytes : bytes(imm); }
};

// What a call chunk's slot holds.
struct CallChunk {
  uint32_t shape = 0;  // Xfer::callShape
  uint32_t unused = 0;
  uint64_t no = 0;  // Xfer::callNo
};
static_assert(sizeof(CallChunk) == Imm::kCallChunkBytes);

// What the protocol asks of the wire. Both calls only queue work; the wire reports what finished
// through ChunkLink::onWriteDone (every postWrite and postCredit, once each, in any order) and
// delivers the peer's writes through the peer's ChunkLink::onArrival. A failed post (the queue
// pair broke) is returned as is and breaks the link.
class Wire {
 public:
  virtual ~Wire() = default;
  // Writes `bytes` from `src` into the peer's receive slot `slot`, with immediate `imm`. `src` lies
  // in `srcRegion` (a caller's registered buffer) or, when srcRegion is null, in this endpoint's
  // staging ring. `wrId` comes back in onWriteDone.
  virtual Status postWrite(const void* src, const Region* srcRegion, size_t bytes, uint32_t slot, uint32_t imm,
                           uint64_t wrId) = 0;
  // Sends immediate `imm` alone (no payload, no slot): a credit return.
  virtual Status postCredit(uint32_t imm, uint64_t wrId) = 0;
};

struct ChunkLinkConfig {
  uint32_t slots = 0;             // slots per ring, 2..Imm::kMaxSlots
  size_t slotBytes = 0;           // bytes per slot, 1..Imm::kMaxChunkBytes
  uint32_t maxWrites = 0;         // writes (and credits) posted but not done, at most (the send queue's depth)
  uint32_t creditBatch = 0;       // freed slots returned in one credit, 1..slots (0 = a quarter of the ring)
  bool sendsAwaitWrites = false;  // a staged send completes when its writes are done, not when posted
};

class ChunkLink {
 public:
  // `recvRing` and `staging` hold cfg.slots * cfg.slotBytes bytes each and outlive the link;
  // `peerName` ("peer rank 3 (host h)") goes into every error.
  ChunkLink(const ChunkLinkConfig& cfg, Wire* wire, const uint8_t* recvRing, uint8_t* staging, std::string peerName);
  ~ChunkLink();
  ChunkLink(const ChunkLink&) = delete;
  ChunkLink& operator=(const ChunkLink&) = delete;

  // Checks a configuration (a message naming the bad field, or ok).
  static Status check(const ChunkLinkConfig& cfg);

  // The Link contract (transports/transport.h).
  Status postSend(Xfer* x);
  Status postRecv(Xfer* x);
  // Consumes arrivals into receives, returns credits, posts chunks of queued sends; completes
  // transfers in posting order.
  Status progress();
  // Also while credits are owed: a full send queue may have deferred their return after the last
  // transfer completed, and a link that is not busy is not progressed (progressLinks).
  bool busy() const { return hasTransfers() || freed_ >= cfg_.creditBatch; }
  bool hasTransfers() const { return !sends_.empty() || !recvs_.empty(); }

  // The wire's reports. A protocol violation (a slot out of range or delivered twice, a chunk
  // larger than a slot, more credits than outstanding, a completion nobody posted) breaks the link.
  Status onArrival(uint32_t imm);
  Status onWriteDone(uint64_t wrId);
  // Breaks the link with `s` (the wire saw an error); every later call returns it.
  Status fail(Status s);
  // For a wire whose peer is gone: delivers the chunks that arrived before it went into the posted
  // receives (completing them), posting nothing; then says whether transfers are still posted, which
  // the peer's departure fails (a peer that finished and left fails nothing).
  Status deliverArrived(bool* transfersLeft);
  const Status& error() const { return error_; }

  // Observers for tests and logs.
  uint32_t credits() const { return credits_; }
  uint32_t writesInFlight() const { return writesInFlight_; }
  uint64_t creditMessages() const { return creditMessages_; }

  // wrId of writes that need no bookkeeping on completion (staged chunks, credits).
  static constexpr uint64_t kUntracked = 0;

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  Status consumeArrivals();
  // Places one arrived chunk into the head receive; completes it on the last chunk.
  Status deliver(Xfer* x, const uint8_t* src, size_t bytes, bool last);
  void reduceInto(Xfer* x, const uint8_t* src, size_t bytes);
  Status returnCredits();
  Status postChunks();
  void completeSends();

  ChunkLinkConfig cfg_;  // creditBatch resolved
  Wire* wire_;
  const uint8_t* recvRing_;
  uint8_t* staging_;
  std::string peer_;
  Status error_;  // sticky

  // Send side. sends_ holds every posted send not yet complete; sendCursor_ is the first whose
  // chunks are not all posted (it may be behind the head: a send from a registered buffer, or any
  // send under sendsAwaitWrites, stays at the head until its writes are done). Per send: progressed = bytes posted,
  // tp[0] = tracked writes not yet done, tp[1] = 1 once its last chunk is posted.
  XferQueue sends_;
  Xfer* sendCursor_ = nullptr;
  uint32_t credits_ = 0;   // free slots in the peer's ring
  uint32_t sendSlot_ = 0;  // the next slot to write
  uint32_t sentCall_ = 0;  // the call shape last announced (a call chunk)
  uint64_t sentNo_ = 0;    // the number of the last message sent that had a call
  uint32_t writesInFlight_ = 0;

  // Receive side. arrived_[s] is the immediate of the chunk waiting in slot s, kEmpty when none;
  // recvSlot_ is the next slot in ring order. Per receive: progressed = bytes placed (copied or
  // reduced), tp[0] = bytes announced so far (may exceed capacity: the overflow is counted, not
  // written, so the error can say how long the message was). carry_ holds a partial element.
  XferQueue recvs_;
  std::unique_ptr<uint64_t[]> arrived_;
  uint32_t recvSlot_ = 0;
  uint32_t freed_ = 0;        // slots freed since the last credit return
  uint32_t recvCall_ = 0;     // the call shape the peer last announced
  uint64_t announcedNo_ = 0;  // ... and the number it announced with it
  bool announced_ = false;    // a call chunk came since the last message that had a call
  uint64_t recvNo_ = 0;       // the number of the last message received that had a call
  uint64_t creditMessages_ = 0;
  std::unique_ptr<uint8_t[], FreeDeleter> carry_;  // slotBytes, 64-byte aligned
  size_t carryBytes_ = 0;
};

}  // namespace braid::net
