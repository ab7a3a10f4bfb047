// One shm Link: two FIFOs (transports/shm/shm_layout.h), ours for sending and the peer's for
// receiving, plus the single-copy (CMA) path for large messages. Built by ShmTransport::connect
// (transports/shm/shm.cc); used by one thread at a time (the executor's lock).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/socket.h"
#include "src/base/store_choice.h"
#include "transports/mailbox.h"
#include "transports/shm/shm_layout.h"
#include "transports/transport.h"

namespace braid {
namespace shm {

// An mmap()ed range, unmapped on destruction. Shared by the links that point into it.
class Mapping {
 public:
  Mapping(void* addr, size_t bytes) : addr_(addr), bytes_(bytes) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(addr_); }
  size_t size() const { return bytes_; }

 private:
  void* addr_;
  size_t bytes_;
};

// One FIFO as seen from this process.
struct FifoView {
  std::shared_ptr<Mapping> mapping;  // keeps `base` valid
  unsigned char* base = nullptr;     // the FifoControl
  size_t slotSize = 0;
  uint32_t nslots = 0;

  FifoControl* control() const { return reinterpret_cast<FifoControl*>(base); }
  SlotHeader* slot(uint32_t i) const {
    return reinterpret_cast<SlotHeader*>(base + sizeof(FifoControl) + i * slotStride(slotSize));
  }
  static unsigned char* payload(SlotHeader* s) { return reinterpret_cast<unsigned char*>(s + 1); }
};

struct LinkSetup {
  int peerRank = -1;
  pid_t peerPid = 0;
  std::string peerHost;
  FifoView out;                             // we send: the FIFO lives in our segment
  FifoView in;                              // we receive: the FIFO lives in the peer's segment
  bool cmaRecv = false;                     // we may accept CMA descriptors (probe passed, BRAID_SHM_CMA allows)
  Mailboxes mail;                           // beside the FIFOs (capacity 0: none)
  StoreKind slotStores = StoreKind::kAuto;  // BRAID_SHM_SLOT_STORES (ShmLink::fillSlot)
};

// Pieces that receives of this process wrote straight into a forwarded send's slot (tests).
uint64_t forwardedPieces();
// Receives of this process that read the sender's buffer by process_vm_readv (tests).
uint64_t singleCopyReceives();
// Single-copy receives of this process offered to their senders as split copies, and pieces this
// process wrote into its peers' split receives (tests).
uint64_t splitReceives();
uint64_t splitPiecesWritten();
// Slot payloads this process wrote with plain and with streaming stores, of those fillSlot chooses
// for (tests).
uint64_t plainSlotFills();
uint64_t streamedSlotFills();

// Host memory only; a receive folds into its destination as the slots arrive.
inline constexpr TransportCaps kShmCaps{memTypeBit(MemType::kHost), true, false, false, 0, true};

class ShmLink final : public Link {
 public:
  // Streamed and forwarded pieces are folded and copied this much at a time (stays in L1).
  static constexpr size_t kBlockBytes = 16 << 10;
  explicit ShmLink(LinkSetup setup);
  ~ShmLink() override;

  Status postSend(Xfer* x) override;
  Status postRecv(Xfer* x) override;
  Status progress() override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }
  const Mailboxes* mailboxes() const override { return mail_.capacity > 0 ? &mail_ : nullptr; }
  Status peerCheck() override { return checkPeerAlive(); }
  Copies receiveCopies() const override { return cmaIn_ ? Copies::kOne : Copies::kTwo; }
  void stopPeerAccess() override;
  bool peerAccessEnded() override;

  FifoControl* inControl() const { return in_.control(); }
  FifoControl* outControl() const { return out_.control(); }
  // Whether this link accepts CMA descriptors (what connect() tells the peer).
  bool cmaRecv() const { return cmaRecv_; }
  // Whether this link sends by single copy (enableCmaSend was called).
  bool cmaSend() const { return cmaSend_; }
  // Called by connect() before first use: whether the peer sends to us by single copy (our probe
  // passed and the host decided for CMA), for receiveCopies.
  void setCmaIn(bool on) { cmaIn_ = on; }
  // Called by connect() before first use when the peer accepts CMA: messages of at least `minBytes`
  // (>= 1) are then sent by single copy. The peer may then also write into our buffers (the same
  // permission): with `split`, our single-copy receives offer it some of their pieces (cmaStep).
  void enableCmaSend(size_t minBytes, bool split) {
    cmaSend_ = true;
    cmaMin_ = minBytes < 1 ? 1 : minBytes;
    cmaSplit_ = split;
  }
  // BRAID_SHM_TEST_CMA_DELAY_US: the tests' stand-in for a rank descheduled right before a
  // single-copy read, or between claiming a piece of the peer's split receive and writing it.
  void setCmaTestDelay(int64_t us) { cmaDelayUs_ = us; }

 private:
  bool usesCma(const Xfer* x) const { return cmaSend_ && x->singleCopy && x->bytes >= cmaMin_; }
  // One slot's (or CMA piece's) worth of work. sendStep: true when a slot was filled. recvStep and
  // cmaStep: 1 when something moved, 0 when not, -1 on failure (failure_ is set).
  bool sendStep();
  // Whether the outgoing ring has a free slot (head reloaded only when it looks full).
  bool slotFree();
  // Publishes slot s (payload and msgBytes written) as x's next piece: x->progressed becomes
  // `progressed`, and the next send becomes current once x is all out.
  void publish(SlotHeader* s, Xfer* x, size_t progressed);
  // Copies a piece of a send into a slot's payload, with the stores slotStores_ says; true when
  // they were streaming stores.
  bool fillSlot(unsigned char* slot, const unsigned char* src, size_t len);
  int recvStep();
  int cmaStep(Xfer* x);
  // A split single-copy receive (cmaStep): offers the sender its pieces, reads one it claims, and
  // completes once the sender's are written too.
  void offerSplit(Xfer* x);
  int splitStep(Xfer* x);
  // Reads [off, off + len) of the front CMA message to dst, whole: 1, or -1 (failure_ set).
  int readWhole(unsigned char* dst, size_t off, size_t len);
  // The sender's side: writes one piece of the peer's split receive of x; true when it did.
  bool helpSplit(Xfer* x);
  void finishCma(Xfer* x);
  void releaseSlot();
  // Sets `complete` on finished sends, in posting order; true when any completed.
  bool completeSends();
  void finishRecv(Xfer* x);
  void deliver(Xfer* x, size_t offset, const unsigned char* src, size_t bytes);
  bool forward(Xfer* x, size_t offset, const unsigned char* src, size_t bytes);
  Status checkPeerAlive();
  bool peerGone() const;
  Status diedError() const;
  Status fail(Status s);   // records the link's failure, logs it once, returns it
  int failStep(Status s);  // the same for the steps: returns -1

  // --- hot state, touched by every progress() call ---
  XferQueue sends_;          // incomplete sends, oldest first
  Xfer* sendCur_ = nullptr;  // first send not yet entirely in the FIFO (or published by CMA)
  XferQueue recvs_;          // incomplete receives; the front is the one being filled
  bool failed_ = false;
  bool recvStarted_ = false;  // the front receive's first slot was checked
  bool recvCma_ = false;      // the front receive reads from recvCmaAddr_ by CMA
  bool cmaSend_ = false;
  bool cmaRecv_ = false;
  bool cmaIn_ = false;
  uint32_t idleCalls_ = 0;

  uint64_t sendSeq_ = 0;    // absolute number of the next slot to fill
  uint64_t headCache_ = 0;  // last value read from out_.control()->head
  uint32_t sendSlot_ = 0;   // sendSeq_ % nslots
  uint32_t recvSlot_ = 0;   // recvSeq_ % nslots
  uint64_t recvSeq_ = 0;    // absolute number of the next slot to read
  FifoView out_;
  FifoView in_;
  Mailboxes mail_;
  size_t cmaMin_ = SIZE_MAX;

  // --- CMA ---
  uint64_t recvCmaAddr_ = 0;
  uint64_t cmaRecvDone_ = 0;         // CMA messages received (our value of in_.control()->cmaAcks)
  uint64_t cmaSendsDone_ = 0;        // CMA sends completed
  bool cmaSplit_ = false;            // our CMA receives may be split (BRAID_SHM_CMA_SPLIT, peer can write)
  bool recvSplit_ = false;           // the front CMA receive is split
  bool helpOff_ = false;             // a write into the peer failed: we no longer take pieces
  bool stopped_ = false;             // stopPeerAccess ran: the peer is kept out of our buffers
  int64_t cmaDelayUs_ = 0;           // BRAID_SHM_TEST_CMA_DELAY_US
  size_t splitOwn_ = 0;              // bytes of the split receive this side read
  unsigned char* bounce_ = nullptr;  // reduce receives by CMA read pieces here first
  size_t bounceBytes_ = 0;
  // Streamed reduce receives fold here first (deliver).
  alignas(kCacheLine) unsigned char block_[kBlockBytes];

  // --- slot stores (fillSlot) ---
  StoreChoice slotStores_;
  ReadCosts readCosts_;  // what reading the peer's slots costs us (FifoControl::readCost)

  // --- peer death detection ---
  int64_t idleSinceNs_ = 0;
  int64_t lastCheckNs_ = 0;
  std::shared_ptr<const Fd> pidfd_;  // the peer process's, shared with this process's other links to it
  int peerRank_;
  pid_t peerPid_;
  std::string peerHost_;
  Status failure_;
};

}  // namespace shm
}  // namespace braid
