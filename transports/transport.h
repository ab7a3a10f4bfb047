// The transport interface: how bytes move between two ranks. One Link per peer, chosen at
// communicator init by the first transport in the registry (shm, tcp; BRAID_TRANSPORTS restricts
// and reorders) whose canConnect() accepts the pair. A transport never knows which algorithm runs.
//
// Messages on a Link are matched in order: the k-th send posted on rank A's link to B is the k-th
// receive posted on B's link from A. Sends and receives are independent queues, so a rank may post
// sends and receives to the same peer in any interleaving. Zero-byte messages are allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/status.h"

namespace braid {

struct Mailboxes;  // transports/mailbox.h

// Where a buffer lives. A transport declares the kinds it can touch (TransportCaps::memTypes); the
// lowering pass (src/lower.h) keeps every other kind away from it with explicit copy steps.
enum class MemType : uint8_t {
  kHost = 0,  // pageable or pinned host memory
  kCuda = 1,  // CUDA device memory (issue "GPUs")
};
constexpr int kNumMemTypes = 2;
constexpr uint32_t memTypeBit(MemType m) { return 1u << static_cast<unsigned>(m); }

// What a transport can do; the same for all of its links. Plans are lowered against these
// (src/lower.h), so a link never sees a step it cannot run.
struct TransportCaps {
  uint32_t memTypes = memTypeBit(MemType::kHost);  // MemTypes it reads and writes directly
  bool reduceOnRecv = false;                       // folds a receive into the destination itself (kRecvReduce)
  bool needsRegistration = false;                  // buffers must be registered before a transfer
  bool oneSidedPut = false;                        // can write into a peer's registered region
  size_t inlineBytes = 0;                          // messages this small travel with their header
  // Sends may be fed by a receive on another link of this transport (Xfer::feeder): the send goes
  // out piece by piece as the receive delivers, and the receive may write the send's pieces itself.
  bool forwards = false;
};

// What every rank tells the others at init (fixed size, sent over the bootstrap).
struct PeerInfo {
  int32_t rank = -1;
  int32_t pid = 0;
  char hostname[64] = {};
  char hostId[128] = {};  // hostname + boot id, or BRAID_HOSTID
};

// "rank 3 (host vm, pid 123)": how every message names a peer (rank alone when r is outside peers).
std::string describePeer(const std::vector<PeerInfo>& peers, int r);

// How a receive folds incoming bytes into the destination: out = fn(local, incoming) elementwise.
// Transports know nothing of datatypes; they call fn on whole elements only (carry a partial element
// until its last byte arrives, or receive in multiples of elemSize).
using ReduceFn = void (*)(void* out, const void* local, const void* incoming, size_t count, const void* ctx);
struct ReduceSpec {
  ReduceFn fn = nullptr;
  const void* ctx = nullptr;
  size_t elemSize = 1;
  // The same fold with `out` written by non-temporal stores straight from the core (the transport
  // fences before the receive completes), for receives whose output may bypass the cache
  // (Xfer::stream): the shm, tcp and chunk (ucx rma, ibverbs) links take it. Null: they fold with
  // `fn` (shm into a block of its own, then streamed out; the others with plain stores).
  ReduceFn streamFn = nullptr;
  const void* streamCtx = nullptr;

  // The fold of a receive: with streamFn where its output is streamed and there is one, else fn.
  void apply(void* out, const void* local, const void* incoming, size_t count, bool stream) const {
    if (stream && streamFn != nullptr) {
      streamFn(out, local, incoming, count, streamCtx);
    } else {
      fn(out, local, incoming, count, ctx);
    }
  }
};

// A registered memory range. Returned by Transport::registerMemory and owned by the transport's
// cache until deregistered; a transport that needs no registration (shm, tcp) fills only the range.
struct Region {
  void* base = nullptr;
  size_t bytes = 0;
  MemType memType = MemType::kHost;
  uint64_t key[2] = {};  // the transport's handle (e.g. an lkey/rkey or a UCX memory handle)
};

// One posted transfer. Owned by the caller (the executor), which keeps it alive and untouched until
// `complete` is set by the transport. The transport may use `next`, `progressed` and `tp` while posted.
struct Xfer {
  // Send: the bytes to send. Receive: where the message goes.
  void* data = nullptr;
  // Send: the message length. Receive: the length received, which the transport checks against
  // `capacity` (today a message of any other length is braidRemoteError naming the peer, so the two
  // are equal; variable-length codecs will accept shorter ones).
  size_t bytes = 0;
  // Receive only: the room at `data` (the executor sets it; sends leave it unused).
  size_t capacity = 0;
  MemType memType = MemType::kHost;  // where `data` (and `local`) live
  const Region* region = nullptr;    // the registered region holding `data`; null = unregistered
  // Receive only. When `reduce` is set, data[i] = reduce->fn(local[i], incoming[i]) instead of a
  // copy; `local` may equal `data` (in-place) but must not overlap it otherwise.
  const void* local = nullptr;
  const ReduceSpec* reduce = nullptr;
  // Receive only: nothing reads `data` after this receive but the send it feeds, if any: the
  // transport may write it with non-temporal stores (a big call's final outputs).
  bool stream = false;
  // Forwarding (TransportCaps::forwards). A send's `feeder` is the receive, posted on a link of the
  // same transport, whose delivered bytes (its `progressed`) are this send's `data`; the send may not
  // go past them. That receive's `feeds` is the send, which it may fill itself as it delivers.
  const Xfer* feeder = nullptr;
  Xfer* feeds = nullptr;
  bool forwardOnly = false;  // receive: where a piece is forwarded, `data` need not get it too
  // Send: the receiver may copy straight out of `data` (single copy, where the transport has it).
  // Set for exchanges (every rank receives as it sends) that fit the cache: there a single copy
  // on each receiver beats two copies split between sender and receiver. Set too for one to many
  // (Broadcast, Scatter) under a smaller cut, where it takes the copying off the root
  // (src/api_coll.cc).
  bool singleCopy = false;
  // The collective call the message belongs to, as both ends make it (src/executor.cc callPrint:
  // the collective, its bytes, the datatype and op where it reduces and the root where it has one,
  // and its number among the communicator's collectives, folded to kCallBits; 0: not checked). A
  // transport that sends it beside the message's length (lengthWord: shm, tcp) or in its tag (ucx's
  // tag path) refuses a message whose call is not its receive's. Ranks whose calls differ in a way
  // the chunking hides (a count twice another's cut into chunks of one size) would otherwise take
  // each other's chunks, and a rank that got all it expected returned success with wrong data; the
  // number keeps a message that a mismatched call left unread (a Reduce's leaf sent to a root that
  // called a Broadcast) out of the next call of the same shape, which took it as its own.
  uint32_t call = 0;
  // The same without the number (0: not checked), and the number apart (CallRecord::no), for a
  // transport that announces a call once per change (the chunk protocol's call chunk): with the
  // number in the print, every call would take a chunk of its own.
  uint32_t callShape = 0;
  uint64_t callNo = 0;

  // Transport-owned while posted.
  size_t progressed = 0;
  Xfer* next = nullptr;
  uint64_t tp[2] = {};    // words for the transport (a work-request id, a piece count)
  uint64_t wire = 0;      // a send's header word for transports that send one (tcp: its lengthWord)
  bool complete = false;  // set by the transport (in the thread that runs progress())
};

// A message's length word, for transports that send one: the length in the low kLengthBits (a
// terabyte), the sender's Xfer::call in the kCallBits above, the top bits left for the transport's
// own flags (shm's single-copy descriptor).
constexpr int kLengthBits = 40;
constexpr int kCallBits = 20;
constexpr uint64_t kLengthMask = (uint64_t{1} << kLengthBits) - 1;
constexpr uint32_t kCallMask = (1u << kCallBits) - 1;
inline uint64_t lengthWord(uint64_t bytes, uint32_t call) {
  return bytes | static_cast<uint64_t>(call & kCallMask) << kLengthBits;
}
inline uint64_t wordLength(uint64_t w) { return w & kLengthMask; }
inline uint32_t wordCall(uint64_t w) { return static_cast<uint32_t>(w >> kLengthBits) & kCallMask; }
// Whether a message sent for call `theirs` belongs to another call than `mine`, the receive's
// Xfer::call or Xfer::callShape (either unchecked: no).
inline bool otherCall(uint32_t theirs, uint32_t mine) {
  return theirs != 0 && mine != 0 && theirs != mine;  // callPrint keeps both within kCallMask
}
// The error of such a message from `who` ("peer rank 3", or with its host).
inline Status otherCallError(const std::string& who) {
  return errorf(braidInvalidUsage,
                "a message from %s belongs to another call than the one this rank posted: the ranks' calls differ "
                "(collective, count, datatype, op or root; BRAID_CHECK_MISMATCH=1 names the difference)",
                who.c_str());
}
inline Status otherCallError(int peer) { return otherCallError("peer rank " + std::to_string(peer)); }

// A FIFO of posted transfers, linked through Xfer::next: what every link keeps per direction.
struct XferQueue {
  Xfer* head = nullptr;
  Xfer* tail = nullptr;

  bool empty() const { return head == nullptr; }
  Xfer* front() const { return head; }
  void push(Xfer* x) {
    x->next = nullptr;
    if (tail != nullptr) {
      tail->next = x;
    } else {
      head = x;
    }
    tail = x;
  }
  // Unlinks and returns the oldest transfer. Call before setting its `complete`: the owner may
  // reuse it as soon as it sees that.
  Xfer* pop() {
    Xfer* x = head;
    head = x->next;
    if (head == nullptr) tail = nullptr;
    return x;
  }
};

class Link {
 public:
  virtual ~Link() = default;
  // Queue a transfer; never blocks, never fails for lack of buffer space (back-pressure is the
  // transport's business inside progress()). Transfers complete in posting order per direction.
  virtual Status postSend(Xfer* x) = 0;
  virtual Status postRecv(Xfer* x) = 0;
  // Moves posted transfers forward as far as possible without blocking and sets `complete` on the
  // finished ones. Returns braidRemoteError when the peer is gone or broke the protocol (e.g. a
  // message length differs from the posted receive), naming the peer. Not thread-safe: one thread
  // at a time per communicator (the executor's lock). Called through Transport::progress().
  virtual Status progress() = 0;
  // True when something is posted and not complete.
  virtual bool busy() const = 0;
  // The link's mailboxes (transports/mailbox.h), where its transport has them: null otherwise.
  virtual const Mailboxes* mailboxes() const { return nullptr; }
  // For a waiter that waits on the peer outside the link's queues (the mailboxes): the check that
  // progress() makes while idle, whether the peer still exists (braidRemoteError naming it when
  // not). Cheap enough to call on every idle pass.
  virtual Status peerCheck() { return okStatus(); }
  // How the messages this link receives reach this rank, for the cost model (topology/cost.h,
  // ClusterShape::hostTwoCopiesFrom): through a buffer both processes map, copied in by the sender
  // and out by this rank (kTwo: the shm FIFO), or read where they lie by this rank for the calls
  // that ask for single copy and through the FIFO for the rest (kOne: shm with CMA); kOther for
  // anything else (sockets, RDMA).
  enum class Copies : uint8_t { kOther, kTwo, kOne };
  virtual Copies receiveCopies() const { return Copies::kOther; }
  // The communicator failed: its operations end with this rank's error, and the caller may reuse
  // their buffers at once, so a peer that can reach into this rank's memory by itself (shm's single
  // copy: it writes pieces of our receives, and reads what we send) must be out of it first.
  // stopPeerAccess() closes the ways in and tells the peer that this rank no longer reads its
  // buffers (no waiting); peerAccessEnded() then says, without waiting, whether the peer is out (or
  // gone). Called by the engine's thread once progress() has stopped for good; the default: nothing
  // of the kind.
  virtual void stopPeerAccess() {}
  virtual bool peerAccessEnded() { return true; }
};

// What a transport publishes about this rank before connecting (its fabric id, GID, GPU UUID;
// shm: the host identity), gathered from every rank so that canConnect can compare two of them.
struct TransportRecord {
  static constexpr size_t kBytes = 128;
  uint8_t bytes[kBytes] = {};
};

// One rank as canConnect sees it: the fixed identity plus the transport's own record.
struct Endpoint {
  const PeerInfo* info = nullptr;
  const TransportRecord* record = nullptr;
};

// What a transport needs from the communicator while it connects.
struct TransportContext {
  int rank = 0;
  int nranks = 0;
  const std::vector<PeerInfo>* peers = nullptr;  // indexed by rank
  uint8_t secret[16] = {};                       // proves membership to peers
  uint64_t commId = 0;                           // distinguishes communicators
  Deadline deadline;
  // Collective over all ranks of the communicator, blocking until the deadline: every rank
  // contributes `bytes` bytes; `all` receives nranks*bytes bytes in rank order.
  std::function<Status(const void* mine, size_t bytes, void* all)> allGather;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual const TransportCaps& caps() const = 0;
  // This rank's record for the peer exchange, filled before connect (default: all zeros).
  virtual void localRecord(const PeerInfo& me, TransportRecord* out) const {
    (void)me;
    (void)out;
  }
  // Whether this transport can connect the two ranks, from their identities and records. Must be
  // symmetric and deterministic: every rank evaluates it for every pair and must reach the same
  // answer.
  virtual bool canConnect(const Endpoint& a, const Endpoint& b) const = 0;
  // Why canConnect refuses the pair, in words for the init error when no transport can connect
  // it ("rank 1: no RDMA device (...)"); empty when it accepts or has nothing to add. `a` is the
  // asking rank itself, `b` its peer.
  virtual std::string whyNot(const Endpoint& a, const Endpoint& b) const {
    (void)a;
    (void)b;
    return {};
  }
  // Collective: called on every rank (also ranks with no peers for this transport: they still
  // take part in ctx.allGather the same number of times). Fills out[i] with the link to peers[i].
  // The transport keeps plain pointers to them for progress(); the caller owns them and destroys
  // them before the transport.
  virtual Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                         std::vector<std::unique_ptr<Link>>* out) = 0;
  // Drives every busy link of this transport once (one pass, bounded work per link). On a link's
  // failure returns its error (which names the peer) and sets *failedPeer to the peer's rank.
  virtual Status progress(int* failedPeer) = 0;
  // One descriptor that becomes readable when progress() has work to do, for sleeping waiters
  // (edge-style: new data makes it readable again); -1 when the transport can only be polled (shm).
  virtual int waitFd() const { return -1; }
  // Forgets the link to `peer` ahead of its destruction (at init only: it failed the link
  // self-test, src/link_check.h, and the pair moves to another transport): progress() must not
  // touch it again, though transfers may still be posted on it. The default does nothing, which is
  // right only for a transport that keeps no pointers to its links; one that keeps them must
  // override this. A later connect() may connect the same peer again.
  virtual void dropLink(int peer) { (void)peer; }

  // Registers [ptr, ptr+bytes) of memType for transfers; registering the same range again returns
  // the cached region. Fails (braidInvalidArgument) for a memory type this transport cannot touch.
  // The region stays valid until deregisterMemory or the transport's destruction.
  Status registerMemory(void* ptr, size_t bytes, MemType memType, const Region** out);
  // Drops a region from registerMemory (braidInvalidArgument for one this transport did not make).
  Status deregisterMemory(const Region* region);

 protected:
  // Pins or keys the range for the hardware (default: nothing to do, the region is the range).
  virtual Status registerRegion(Region* region) {
    (void)region;
    return okStatus();
  }
  virtual void deregisterRegion(Region* region) { (void)region; }
  // Deregisters every region still registered. A transport whose regions hold keys of a device
  // context calls it in its destructor, before the context goes: the base destructor cannot, since
  // deregisterRegion is virtual.
  void releaseRegions();

 private:
  std::vector<std::unique_ptr<Region>> regions_;  // registration is setup, not hot path: a scan is fine
};

// The host name of `rank` from the context's peer table ("?" outside it), for messages.
std::string peerHostname(const TransportContext& ctx, int rank);
// Whether ranks a and b run on one host (their host ids agree).
bool onSameHost(const TransportContext& ctx, int a, int b);

// Drives the busy links of one transport: what each transport's progress() does over its own
// concrete (final) link type, so the calls need no virtual dispatch.
template <class L>
struct LinkEntry {
  L* link;
  int peer;
};
template <class L>
Status progressLinks(const std::vector<LinkEntry<L>>& links, int* failedPeer) {
  for (const LinkEntry<L>& e : links) {
    if (e.link == nullptr || !e.link->busy()) continue;  // null: dropped, its entry kept (ibverbs)
    Status s = e.link->progress();
    if (!s.ok()) {
      *failedPeer = e.peer;
      return s;
    }
  }
  return okStatus();
}

// Scratch memory for operations, of one memory type: host memory is 64-byte aligned (whole cache
// lines for the reduce kernels, and what a NIC's DMA prefers); CUDA memory comes with the CUDA
// issue. Grows only: reserve() keeps the buffer when it is already large enough.
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  // Ensures at least `bytes` of `memType`; braidInvalidArgument for a type this build cannot
  // allocate, braidSystemError when out of memory (the old buffer is kept then).
  Status reserve(size_t bytes, MemType memType);
  char* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  MemType memType() const { return memType_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
  MemType memType_ = MemType::kHost;
};

// The transports compiled into this build, in the registry's priority order (the order
// BRAID_TRANSPORTS defaults to).
struct TransportEntry {
  const char* name;
  std::unique_ptr<Transport> (*make)();
};
const std::vector<TransportEntry>& transportRegistry();

// Factories, one per transport folder.
std::unique_ptr<Transport> makeShmTransport();
std::unique_ptr<Transport> makeTcpTransport();
std::unique_ptr<Transport> makeIbverbsTransport();  // built when BRAID_HAVE_IBVERBS
std::unique_ptr<Transport> makeUcxTransport();      // only in builds with BRAID_HAVE_UCX

}  // namespace braid
