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

#include "src/clock.h"
#include "src/status.h"

namespace braid {

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
};

// One posted transfer. Owned by the caller (the executor), which keeps it alive and untouched until
// `complete` is set by the transport. The transport may use `next` and `progressed` while posted.
struct Xfer {
  // Send: the bytes to send. Receive: where the message goes.
  void* data = nullptr;
  size_t bytes = 0;
  // Receive only. When `reduce` is set, data[i] = reduce->fn(local[i], incoming[i]) instead of a
  // copy; `local` may equal `data` (in-place) but must not overlap it otherwise.
  const void* local = nullptr;
  const ReduceSpec* reduce = nullptr;

  // Transport-owned while posted.
  size_t progressed = 0;
  Xfer* next = nullptr;
  bool complete = false;  // set by the transport (in the thread that runs progress())
};

class Link {
 public:
  virtual ~Link() = default;
  // The capabilities of the transport this link belongs to.
  virtual const TransportCaps& caps() const = 0;
  // Queue a transfer; never blocks, never fails for lack of buffer space (back-pressure is the
  // transport's business inside progress()). Transfers complete in posting order per direction.
  virtual Status postSend(Xfer* x) = 0;
  virtual Status postRecv(Xfer* x) = 0;
  // Moves posted transfers forward as far as possible without blocking and sets `complete` on the
  // finished ones. Returns braidRemoteError when the peer is gone or broke the protocol (e.g. a
  // message length differs from the posted receive), naming the peer. Not thread-safe: one thread
  // at a time per communicator (the executor's lock).
  virtual Status progress() = 0;
  // True when something is posted and not complete.
  virtual bool busy() const = 0;
  // A descriptor that becomes readable when progress() has work to do, for sleeping waiters; -1 for
  // transports that can only be polled (shm).
  virtual int waitFd() const { return -1; }
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
  // Whether this transport can connect the two ranks. Must be symmetric and deterministic: every
  // rank evaluates it for every pair and must reach the same answer.
  virtual bool canConnect(const PeerInfo& a, const PeerInfo& b) const = 0;
  // Collective: called on every rank (also ranks with no peers for this transport: they still
  // take part in ctx.allGather the same number of times). Fills out[i] with the link to peers[i].
  virtual Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                         std::vector<std::unique_ptr<Link>>* out) = 0;
};

// Factories, one per transport folder.
std::unique_ptr<Transport> makeShmTransport();
std::unique_ptr<Transport> makeTcpTransport();

}  // namespace braid
