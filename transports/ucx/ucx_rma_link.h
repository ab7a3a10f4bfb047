// The ucx transport's rma data path (BRAID_UCX_PROTO=rma): the chunk/credit protocol of
// transports/net/chunk_link.h, the one ibverbs runs, over a UCX wire. Each receiver's slot ring is
// ucp_mem_map'ed (one mapping per connect for all its peers, ucx.cc); its address and packed rkey
// travel through the bootstrap. A chunk is written with ucp_put_nbx into the peer's slot; its
// "immediate" (slot, bytes, last) follows as an active message.
//
// Ordering. UCX 1.13 promises nothing about the order of a put and a later active message: a put's
// completion is local only (the source may be reused), ucp_worker_fence orders "communication
// operations" but the AM and RMA lanes of an endpoint may be different transports' endpoints, and
// there is no ucp_ep_fence. What it does promise is ucp_ep_flush_nbx: once it completes, every put
// issued before it is "completed both at the origin and at the target". So the wire flushes the
// puts of each progress pass with one ucp_ep_flush_nbx and sends their immediates (batched, up to
// kUcxImmsPerAm per message) only when that flush has completed. Immediates may then arrive in any
// order, which the protocol allows (it consumes slots in ring order).
//
// Small chunks (up to BRAID_UCX_RMA_INLINE bytes) skip the put and the flush's round trip: the
// bytes travel in the active message itself and the receiver copies them into its own slot before
// it reports the arrival, as ibverbs inlines small writes. Credits travel as active messages
// without payload.
//
// Where UCX has no RMA of its own it emulates puts with active messages (UCX 1.13 over tcp:
// "software emulation" in UCX_PROTO_INFO), and the emulation's handler aborts the process when it
// acknowledges a put from a peer that has just died ("ucp_request.inl: Fatal: unexpected error",
// seen in the kill tests). There every chunk travels in its active message instead
// (BRAID_UCX_RMA_WRITE=am, the default unless UCX_TLS names shared-memory transports only): the
// same protocol, slots and credits, with UCX moving the bytes as it would for the emulated put, no
// flush round trip, and a dead peer's last messages merely dropped.
//
// A write is "done" (ChunkLink::onWriteDone) when the active message carrying its immediate has
// completed locally: nothing of it is left for this side's progress. Sends wait for that
// (ChunkLinkConfig::sendsAwaitWrites), since the executor stops progressing a link whose transfers
// have all completed, and a flush or announcement still queued here would then never go out.
//
// Leaving. A send completes before the peer has its bytes, so a rank that finished may leave while
// its last messages are still on their way, and a peer that sees the endpoint fail would drop them
// (CI once failed a good AllReduce with "rank 1 left the communicator while an operation of this
// rank still needed it"). A healthy link therefore ends with a goodbye handshake: its destruction
// sends a UcxAmCtl kFin after its last message, leaves the endpoint open, and the transport's
// teardown waits (progressing the worker, at most kGoodbyeNs) until the peer answered kAck, which
// the peer sends from its next progress once the fin, and so everything before it, was delivered
// to its link; or until the peer's own fin came (it finished and needs nothing more), or the
// endpoint failed. Only then is the endpoint closed. A link that broke, or has transfers left (its
// communicator failed), sends its fin too, so that the peer does not wait for it, but closes at
// once. On the receiving side, a link whose endpoint failed first still counts the active messages
// UCX had completed before the failure: the sends they finish were done.
//
// Threading: driven by one thread at a time (the executor's lock); the active-message handler runs
// inside ucp_worker_progress, in that thread. Nothing here locks, nothing on the per-message path
// allocates (requests are UCX's own, from its pool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "src/base/status.h"
#include "transports/net/chunk_link.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_api.h"
#include "transports/ucx/ucx_link.h"

namespace braid {

// The receive reduces from the slot as each chunk lands (as ibverbs): no scratch, no local reduce.
inline constexpr TransportCaps kUcxRmaCaps{memTypeBit(MemType::kHost), true, false, false, 0};

// The active-message id of the protocol's immediates on the communicator's worker.
inline constexpr unsigned kUcxAmId = 0x42;
// Immediates per active message: 8 + 4 * 16 = 72 bytes, within the 100 bytes UCX's shared-memory
// transports send in one short message.
inline constexpr uint32_t kUcxImmsPerAm = 16;

// The active message's header: who sends and the immediates it carries. A chunk that travels in
// its message is one immediate with its bytes as the message's data, sent from where the protocol
// keeps them (the staging slot, reused only once the peer's credit says it has them, or the
// caller's registered buffer, kept until the write is done).
struct UcxAmMsg {
  uint32_t rank = 0;
  uint32_t count = 0;
  uint32_t imm[kUcxImmsPerAm] = {};
};

// One outgoing active message and what it reports when UCX is done with it.
struct UcxAmSlot {
  UcxAmMsg msg;
  uint64_t wrId[kUcxImmsPerAm] = {};
  void* req = nullptr;  // UCX's request; null once complete
  bool direct = false;  // its data is a caller's registered buffer (UCX reads it until completion)
};

// Where the link writes: the peer's ring for this rank, and the key to it.
struct UcxRemoteRing {
  uint64_t addr = 0;
  const void* packedRkey = nullptr;  // ucp_rkey_pack's bytes, unpacked against the endpoint
};

// This end's memory: its ring for the peer (written by the peer) and its staging ring (what it puts
// from). Both are owned by the transport and outlive the link (see ucx.cc).
struct UcxLocalRings {
  uint8_t* recv = nullptr;
  uint8_t* staging = nullptr;
  ucp_mem_h stagingMemh = nullptr;
};

// Sends the goodbye handshake's message `kind` (UcxAmCtl) to the peer of `state` from rank myRank,
// at most one of each kind; false when it cannot (the endpoint is gone, or the send failed).
bool sendUcxCtl(UcxEndpointState* state, int myRank, uint32_t kind);

class UcxRmaLink final : public Link, public net::Wire {
 public:
  // `state` outlives the link (the transport keeps it) and gets this link's active-message slots.
  // Chunks of up to `inlineBytes` travel inside their active message, larger ones as puts
  // (SIZE_MAX: every chunk in its message, no puts).
  UcxRmaLink(ucp_worker_h worker, UcxEndpointState* state, const net::ChunkLinkConfig& cfg, size_t inlineBytes,
             int myRank, int peerRank, std::string peerHost, const UcxLocalRings& rings);
  ~UcxRmaLink() override;
  UcxRmaLink(const UcxRmaLink&) = delete;
  UcxRmaLink& operator=(const UcxRmaLink&) = delete;
  // Creates the endpoint (see openUcxEndpoint) and unpacks the peer's rkey against it.
  Status open(const ucp_address_t* peerAddress, bool peerErrors, const UcxRemoteRing& remote);

  // The Link contract.
  Status postSend(Xfer* x) override { return proto_->postSend(x); }
  Status postRecv(Xfer* x) override { return proto_->postRecv(x); }
  Status progress() override;
  bool busy() const override { return proto_->busy() || amUsed_ > 0 || putSeq_ != announced_; }

  // The wire.
  Status postWrite(const void* src, const Region* srcRegion, size_t bytes, uint32_t slot, uint32_t imm,
                   uint64_t wrId) override;
  Status postCredit(uint32_t imm, uint64_t wrId) override;

  // The endpoint's error callback, before it closes the endpoint: the peer's rkey goes first, as
  // UCX asks of an rkey and its endpoint, unless a put that uses it is under way (then UCX reclaims
  // it with the worker, the price of a failure). Before, when a peer that left first failed our
  // endpoint while our link lived, UCX's log said "not returned to mpool ucp_rkeys" at teardown
  // (mp-ucx-rma's healthy-teardown test under TSan).
  void dropRkey();

  // An active message from the peer (the transport's handler found this link by its rank). Checks
  // what it can before anything is written; the protocol checks the rest.
  void onMessage(const void* header, size_t headerBytes, const void* data, size_t dataBytes);

 private:
  Status endpointFailed();
  Status wireError(ucs_status_t st, const char* what);
  UcxAmSlot* takeAmSlot();
  Status sendAm(UcxAmSlot* slot, const void* data, size_t bytes);
  // Announces the flushed puts up to sequence number `end`.
  Status announce(uint64_t end);
  Status flushPuts();
  Status reapFlushes();
  // untilFailure: stops at the first message that failed, leaving it (the endpoint failed).
  Status reapAms(bool untilFailure);

  ucp_worker_h worker_;
  UcxEndpointState* state_;
  ucp_ep_h ep_ = nullptr;
  ucp_rkey_h rkey_ = nullptr;
  net::ChunkLinkConfig cfg_;
  size_t inlineBytes_;
  int myRank_;
  int peer_;
  std::string peerHost_;
  UcxLocalRings rings_;
  uint64_t remoteRing_ = 0;
  bool peerErrors_ = false;
  std::unique_ptr<net::ChunkLink> proto_;

  // Puts posted, by sequence number: [announced_, flushed_) are covered by a flush under way,
  // [flushed_, putSeq_) by none yet. pend_ holds their immediates and wrIds (maxWrites entries: a
  // put is a write in flight until its announcement completes).
  struct PendingPut {
    uint32_t imm;
    uint64_t wrId;
    bool direct;  // from a caller's registered buffer
  };
  std::unique_ptr<PendingPut[]> pend_;
  uint64_t putSeq_ = 0, flushed_ = 0, announced_ = 0;
  // Writes whose bytes UCX may still read from a caller's registered buffer: puts until their flush
  // completed, chunks in active messages until the message did.
  uint32_t directWrites_ = 0;
  // Flushes under way, oldest first: each one's request and the sequence number it covers up to.
  struct Flush {
    void* req;
    uint64_t end;
  };
  std::unique_ptr<Flush[]> flushes_;
  uint32_t flushHead_ = 0, flushCount_ = 0;
  // Active messages under way, oldest first, in state_->amSlots (maxWrites of them: each carries at
  // least one write in flight).
  uint32_t amHead_ = 0, amUsed_ = 0;
};

}  // namespace braid
