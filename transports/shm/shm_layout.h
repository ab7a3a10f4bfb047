// The layout of a shm transport segment: plain structs placed in POSIX shared memory and read by
// two processes. Nothing here may contain pointers (each process maps the segment at its own
// address); cross-process synchronization uses lock-free, address-free std::atomic<uint64_t>.
//
// One segment per rank, created by that rank, holding one FIFO per shm peer in which the creator is
// the SENDER. A FIFO is a ring of `nslots` slots; the k-th slot filled (k counts from 0 forever) is
// slot k % nslots and carries the k-th piece of the message stream from sender to receiver:
//
//   FIFO:  [ FifoControl: 128 B, written by the receiver only            ]
//          [ slot 0: SlotHeader (64 B, sender) | payload (slotSize B)    ]
//          [ slot 1: ...                                                 ]
//          [ mailboxes: kMailDepth MailSlots, then their payload          ]
//            (transports/mailbox.h; absent when BRAID_SHM_SMALL_BYTES=0)
//
// Messages: a message of N bytes takes ceil(N / slotSize) slots (one slot when N <= kInlineBytes or
// N == 0: the payload then rides in the header line itself, so a small message costs the receiver a
// single cache-line transfer). Every slot header repeats N, so the receiver can check the posted
// size at the first slot and sanity-check the others; piece sizes follow from N and slotSize. A
// message sent by single copy (CMA) takes one slot: N | kCmaFlag and the sender's address.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/base/secret.h"
#include "src/base/status.h"
#include "transports/mailbox.h"

namespace braid {
namespace shm {

constexpr uint64_t kSegmentMagic = 0x6d68736469617262ull;  // "braidshm" in memory order
// Bump on any change of the structs below: peers with another version refuse to attach.
constexpr uint32_t kSegmentVersion = 4;
constexpr size_t kCacheLine = 64;
// Payload bytes that fit in a slot's header line after seq and msgBytes.
constexpr size_t kInlineBytes = 48;
// Set in SlotHeader::msgBytes when the slot carries a CMA descriptor instead of data.
constexpr uint64_t kCmaFlag = 1ull << 63;
// Limits of a segment's geometry (BRAID_SHM_SLOT_SIZE, BRAID_SHM_SLOTS); a peer's header beyond
// them is refused.
constexpr size_t kMaxSlotSize = size_t{1} << 30;  // SegmentHeader::slotSize is 32 bits
constexpr int64_t kMaxSlots = 4096;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");

// The first line of every slot; written by the sender only.
struct alignas(kCacheLine) SlotHeader {
  // Absolute slot number + 1 once the slot is full (0 in a fresh segment = empty). Stored last, with
  // release, after msgBytes and the payload; the receiver's acquire load of the value it expects
  // makes them visible. Sequence numbers never repeat, so a stale slot is never mistaken for a new one.
  std::atomic<uint64_t> seq;
  uint64_t msgBytes;  // the message's lengthWord: its bytes and call (| kCmaFlag for a descriptor)
  // The message itself up to kInlineBytes, or a CMA descriptor; in a slot with a payload of 16 KiB
  // and up, inlineData[0] is 1 when the sender wrote the payload with streaming stores (the
  // receiver's reading cost is kept apart for each kind: FifoControl::readCost).
  unsigned char inlineData[kInlineBytes];
};
static_assert(sizeof(SlotHeader) == kCacheLine);

// The CMA descriptor, stored in SlotHeader::inlineData.
struct CmaDescriptor {
  uint64_t address;  // in the sender's address space
};
static_assert(sizeof(CmaDescriptor) <= kInlineBytes);

// Receiver-written control words of one FIFO. The second line is padding so that the adjacent-line
// prefetcher on the sender's side does not pull slot 0's header into this line's coherence traffic.
struct alignas(kCacheLine) FifoControl {
  // Slots consumed. Stored (release) after the receiver finished reading a slot; the sender's
  // acquire load before it overwrites slot k - nslots pairs with it.
  std::atomic<uint64_t> head;
  // CMA messages completely read. Stored (release) after the last process_vm_readv of a message;
  // the sender's acquire load pairs with it before it completes the send (the user may then reuse
  // the buffer).
  std::atomic<uint64_t> cmaAcks;
  // 1 when the receiver will accept CMA descriptors (probe passed and BRAID_SHM_CMA allows it).
  // Written at connect before the barrier allGather, read by the sender after it.
  std::atomic<uint64_t> cmaAccept;
  // What reading a slot of 16 KiB and up costs the receiver, ns per KiB (a double's bits; 0: not
  // measured yet), for slots the sender filled with plain [0] and with streaming [1] stores: the
  // sender's half of the choice is its own (ShmLink::fillSlot). Relaxed: an estimate.
  std::atomic<uint64_t> readCost[2];
  // The same for the mails of 16 KiB and up of the mailbox ring beside this FIFO (the sender's
  // toward the receiver, src/small_coll.cc).
  std::atomic<uint64_t> mailReadCost[2];
  unsigned char pad[kCacheLine - 7 * sizeof(uint64_t)];
  // A split single copy (ShmLink::cmaStep): the receiver of CMA message m offers the sender to write
  // some of it into its buffer. coopOffer: m once coopAddr, coopClaim, coopDone and coopLost are set
  // for it (release; the sender's acquire load pairs with it). coopClaim: m in its high 32 bits, the
  // next unclaimed piece in the low ones; both sides claim pieces from it (the sender by CAS, so a
  // claim for an earlier message cannot land on this one). coopDone: bytes the sender wrote (release,
  // after its write). coopLost: 1 + a piece the sender claimed but could not write (the receiver
  // reads it itself), 0 for none.
  std::atomic<uint64_t> coopOffer;
  std::atomic<uint64_t> coopAddr;  // the receiver's buffer, in its address space
  std::atomic<uint64_t> coopClaim;
  std::atomic<uint64_t> coopDone;
  std::atomic<uint64_t> coopLost;
  // The sender's writes in flight: raised before it claims a piece, lowered after its write. A
  // receiver that fails takes the claims away (coopClaim past every piece) and waits for this to be
  // 0: no write of the sender's lands in its buffer after its error (Link::stopPeerAccess).
  std::atomic<uint64_t> coopBusy;
  // 1 once the receiver failed: it reads none of the sender's buffers any more (what the sender's
  // own failure waits for, where its CMA sends are not acked).
  std::atomic<uint64_t> readerStopped;
  unsigned char pad2[kCacheLine - 7 * sizeof(uint64_t)];
};
static_assert(sizeof(FifoControl) == 2 * kCacheLine);

// Where the creator's FIFO for one receiver starts.
struct FifoEntry {
  int32_t receiverRank;
  uint32_t reserved;
  uint64_t offset;  // from the segment start; page aligned
};

// The segment's first bytes, written by the creator before the first allGather and read-only after.
struct SegmentHeader {
  uint64_t magic;
  uint32_t version;
  int32_t creatorRank;
  uint64_t commId;
  uint8_t secret[kSecretBytes];
  uint64_t segmentBytes;
  uint64_t fifoBytes;  // bytes per FIFO, page aligned
  uint32_t slotSize;   // payload bytes per slot, a multiple of kCacheLine
  uint32_t nslots;
  uint32_t nfifos;     // FifoEntry records follow the header
  uint32_t mailBytes;  // payload bytes per mail slot (0: no mailboxes after the FIFO's slots)
};

inline size_t slotStride(size_t slotSize) { return sizeof(SlotHeader) + slotSize; }

inline size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Bytes of one FIFO with its mailboxes (mailBytes per slot, 0: none), rounded to `page`.
inline size_t fifoBytes(size_t slotSize, size_t nslots, size_t page, size_t mailBytes) {
  return roundUp(sizeof(FifoControl) + nslots * slotStride(slotSize) + (mailBytes > 0 ? mailRingBytes(mailBytes) : 0),
                 page);
}
// Where the mailboxes start in a FIFO.
inline size_t mailOffset(size_t slotSize, size_t nslots) { return sizeof(FifoControl) + nslots * slotStride(slotSize); }

// Bytes of the header plus directory, rounded to `page`.
inline size_t headerBytes(size_t nfifos, size_t page) {
  return roundUp(sizeof(SegmentHeader) + nfifos * sizeof(FifoEntry), page);
}

// What the receiver knows when it attaches a peer's segment.
struct SegmentExpect {
  uint64_t commId = 0;
  const uint8_t* secret = nullptr;  // kSecretBytes
  int creatorRank = 0;              // the peer
  int receiverRank = 0;             // us
  int nranks = 0;
  uint64_t fileBytes = 0;  // the segment's size (fstat)
  size_t page = 4096;
};
// Where our FIFO lies in the peer's segment, and its geometry.
struct FifoPlace {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t slotSize = 0;
  uint32_t nslots = 0;
  uint32_t mailBytes = 0;
};
// How many leading bytes of a segment checkSegmentHeader needs at most (header + directory).
inline size_t segmentHeadBytes(int nranks) {
  return sizeof(SegmentHeader) + static_cast<size_t>(nranks > 0 ? nranks : 0) * sizeof(FifoEntry);
}
// Checks the first `len` bytes of a peer's segment (another process writes them: anything may be
// there): magic, version, the secret (constant time) before anything else, communicator, creator,
// a geometry within the limits that fits the file, and a page-aligned FIFO for us inside it.
Status checkSegmentHeader(const uint8_t* data, size_t len, const SegmentExpect& want, FifoPlace* out);

}  // namespace shm
}  // namespace braid
