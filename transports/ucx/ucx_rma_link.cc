#include "transports/ucx/ucx_rma_link.h"

#include <cstring>
#include <utility>

#include "src/base/log.h"

namespace braid {

namespace {

// Bytes of a UcxAmMsg carrying n immediates.
constexpr size_t amHeaderBytes(uint32_t n) { return offsetof(UcxAmMsg, imm) + sizeof(uint32_t) * n; }

}  // namespace

void UcxAmSlotsDeleter::operator()(UcxAmSlot* p) const { delete[] p; }

UcxRmaLink::UcxRmaLink(ucp_worker_h worker, UcxEndpointState* state, const net::ChunkLinkConfig& cfg,
                       size_t inlineBytes, int myRank, int peerRank, std::string peerHost, const UcxLocalRings& rings)
    : worker_(worker),
      state_(state),
      cfg_(cfg),
      inlineBytes_(inlineBytes),
      myRank_(myRank),
      peer_(peerRank),
      peerHost_(std::move(peerHost)),
      rings_(rings) {
  cfg_.sendsAwaitWrites = true;
  pend_.reset(new PendingPut[cfg_.maxWrites]);
  flushes_.reset(new Flush[cfg_.maxWrites]);
  state_->amSlots.reset(new UcxAmSlot[cfg_.maxWrites]);
  proto_ = std::make_unique<net::ChunkLink>(cfg_, this, rings_.recv, rings_.staging,
                                            "peer rank " + std::to_string(peer_) + " (host " + peerHost_ + ")");
}

Status UcxRmaLink::open(const ucp_address_t* peerAddress, bool peerErrors, const UcxRemoteRing& remote) {
  state_->closeOnError = true;
  BRAID_TRY(openUcxEndpoint(worker_, state_, peerAddress, peerErrors, peer_, peerHost_, &ep_));
  peerErrors_ = peerErrors;
  state_->ep = ep_;
  state_->peerErrors = peerErrors;
  ucs_status_t st = ucx().ucp_ep_rkey_unpack(ep_, remote.packedRkey, &rkey_);
  if (st != UCS_OK) {
    rkey_ = nullptr;
    return errorf(braidSystemError, "ucx: cannot unpack the ring key of peer rank %d (host %s): %s", peer_,
                  peerHost_.c_str(), ucx().ucs_status_string(st));
  }
  remoteRing_ = remote.addr;
  // From here on the peer's immediates reach this link (until its destruction).
  state_->rma = this;
  return okStatus();
}

bool sendUcxCtl(UcxEndpointState* state, int myRank, uint32_t kind) {
  const int i = kind == UcxAmCtl::kFin ? 0 : 1;
  if (state->ep == nullptr || state->closed || state->ctlReq[i] != nullptr) return false;
  state->ctl[i] = {static_cast<uint32_t>(myRank), 0, kind};
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  void* r = ucx().ucp_am_send_nbx(state->ep, kUcxAmId, &state->ctl[i], sizeof(UcxAmCtl), nullptr, 0, &p);
  if (UCS_PTR_IS_ERR(r)) return false;
  state->ctlReq[i] = r;
  return true;
}

// Teardown. UCX never writes into a caller's buffer on this path (puts land in the transport's
// rings or are copied there by onMessage, receives copy out of them), so the worker may drain after
// a failure too, unless a write from a caller's registered buffer is still under way (UCX would
// read memory its owner may have freed): only then is the worker abandoned, as the tag path
// abandons it for any posted receive. Requests still under way are released to UCX (which
// completes them internally); their buffers (rings, active-message slots) belong to the transport
// and outlive the drain. The rkey goes before the endpoint, as UCX asks, but only when no put that
// uses it is left; else it is left to the worker's destruction, the price of a failure.
UcxRmaLink::~UcxRmaLink() {
  state_->rma = nullptr;
  if (ep_ == nullptr) return;
  // Credits the link sent last may have completed unreaped (nothing progresses an idle link). Not
  // with transfers still posted: the communicator failed and its engine, gone before the links,
  // took the transfers along, which the messages' reports would touch (a segfault in
  // ChunkLink::onWriteDone when a survivor aborted). Their requests are freed below.
  if (proto_->error().ok() && state_->error == UCS_OK && !proto_->hasTransfers()) (void)reapAms(true);
  const bool putsLeft = putSeq_ != announced_;
  for (uint32_t i = 0; i < flushCount_; ++i) {
    void* r = flushes_[(flushHead_ + i) % cfg_.maxWrites].req;
    if (r != nullptr) ucx().ucp_request_free(r);
  }
  for (uint32_t i = 0; i < amUsed_; ++i) {
    UcxAmSlot& s = state_->amSlots[(amHead_ + i) % cfg_.maxWrites];
    if (s.req != nullptr) ucx().ucp_request_free(s.req);
    s.req = nullptr;
  }
  // An endpoint the error callback closed may be gone already: the callback dropped the rkey first,
  // or left it to the worker's destruction (dropRkey).
  if (!state_->closed) dropRkey();
  const bool broken = !proto_->error().ok() || state_->error != UCS_OK;
  const bool pending = putsLeft || amUsed_ > 0 || broken;
  // Transfers still posted: the communicator failed (a healthy one completes them first).
  const bool failed = broken || proto_->hasTransfers();
  // A healthy link's last messages may still be on their way (a send completes when UCX has taken
  // its message, not when the peer has it): the endpoint stays open for the goodbye handshake, which
  // follows them on the endpoint, and the transport closes it (flushing) once the peer answered.
  // Credits still under way need no care: their buffers are the transport's. A link broken by the
  // protocol or a failure still says goodbye when its endpoint works, so that the peer does not wait for it, but
  // closes at once: what it sent no longer matters, and the peer may be dead.
  const bool said = !state_->closed && state_->error == UCS_OK && !putsLeft && directWrites_ == 0 &&
                    sendUcxCtl(state_, myRank_, UcxAmCtl::kFin);
  if (!state_->closed && (!said || failed)) {
    closeUcxEndpoint(ep_, state_, pending, peerErrors_);
    state_->ep = nullptr;
  }
  state_->abandoned = directWrites_ > 0;
  ep_ = nullptr;
}

void UcxRmaLink::dropRkey() {
  if (rkey_ == nullptr || putSeq_ != announced_) return;
  ucx().ucp_rkey_destroy(rkey_);
  rkey_ = nullptr;
}

Status UcxRmaLink::endpointFailed() {
  return proto_->fail(errorf(braidRemoteError, "ucx: connection to peer rank %d (host %s) failed: %s", peer_,
                             peerHost_.c_str(), ucx().ucs_status_string(state_->error)));
}

Status UcxRmaLink::wireError(ucs_status_t st, const char* what) {
  if (state_->error != UCS_OK) return endpointFailed();  // the root cause, when UCX reported one
  return proto_->fail(errorf(braidRemoteError, "ucx: %s to peer rank %d (host %s) failed: %s", what, peer_,
                             peerHost_.c_str(), ucx().ucs_status_string(st)));
}

UcxAmSlot* UcxRmaLink::takeAmSlot() {
  // Never full: every slot in use carries at least one of the protocol's writes in flight, and the
  // protocol keeps at most maxWrites of those.
  if (amUsed_ == cfg_.maxWrites) return nullptr;
  UcxAmSlot* s = &state_->amSlots[(amHead_ + amUsed_) % cfg_.maxWrites];
  ++amUsed_;
  s->msg.rank = static_cast<uint32_t>(myRank_);
  s->msg.count = 0;
  s->req = nullptr;
  s->direct = false;
  return s;
}

Status UcxRmaLink::sendAm(UcxAmSlot* slot, const void* data, size_t bytes) {
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  // Eager only: a rendezvous would hand the receiver a descriptor instead of the bytes.
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  p.memory_type = UCS_MEMORY_TYPE_HOST;
  void* r = ucx().ucp_am_send_nbx(ep_, kUcxAmId, &slot->msg, amHeaderBytes(slot->msg.count), data, bytes, &p);
  if (UCS_PTR_IS_ERR(r)) return wireError(UCS_PTR_STATUS(r), "an active message");
  slot->req = r;  // NULL: done already; reported by reapAms in ring order
  return okStatus();
}

Status UcxRmaLink::postWrite(const void* src, const Region* srcRegion, size_t bytes, uint32_t slot, uint32_t imm,
                             uint64_t wrId) {
  if (bytes <= inlineBytes_) {
    UcxAmSlot* s = takeAmSlot();
    if (s == nullptr) return errorf(braidInternalError, "ucx rma: more writes in flight than the send queue holds");
    s->msg.count = 1;
    s->msg.imm[0] = imm;
    s->wrId[0] = wrId;
    if (srcRegion != nullptr && bytes > 0) {
      s->direct = true;
      ++directWrites_;
    }
    return sendAm(s, src, bytes);
  }
  if (putSeq_ - announced_ >= cfg_.maxWrites)
    return errorf(braidInternalError, "ucx rma: more puts in flight than the send queue holds");
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  p.memory_type = UCS_MEMORY_TYPE_HOST;
  // The registration of the source: the staging ring's, or the caller's region (zero copy).
  ucp_mem_h memh = srcRegion != nullptr ? reinterpret_cast<ucp_mem_h>(srcRegion->key[0]) : rings_.stagingMemh;
  if (memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh;
  }
  void* r = ucx().ucp_put_nbx(ep_, src, bytes, remoteRing_ + static_cast<uint64_t>(slot) * cfg_.slotBytes, rkey_, &p);
  if (UCS_PTR_IS_ERR(r)) return wireError(UCS_PTR_STATUS(r), "a put");
  // The flush that follows reports this put's completion: its own request is not needed.
  if (r != nullptr) ucx().ucp_request_free(r);
  pend_[putSeq_ % cfg_.maxWrites] = {imm, wrId, srcRegion != nullptr};
  ++putSeq_;
  if (srcRegion != nullptr) ++directWrites_;
  return okStatus();
}

Status UcxRmaLink::postCredit(uint32_t imm, uint64_t wrId) {
  UcxAmSlot* s = takeAmSlot();
  if (s == nullptr) return errorf(braidInternalError, "ucx rma: more writes in flight than the send queue holds");
  s->msg.count = 1;
  s->msg.imm[0] = imm;
  s->wrId[0] = wrId;
  return sendAm(s, nullptr, 0);
}

Status UcxRmaLink::flushPuts() {
  if (flushed_ == putSeq_) return okStatus();
  ucp_request_param_t p;
  p.op_attr_mask = 0;
  void* r = ucx().ucp_ep_flush_nbx(ep_, &p);
  if (UCS_PTR_IS_ERR(r)) return wireError(UCS_PTR_STATUS(r), "a flush of puts");
  flushes_[(flushHead_ + flushCount_) % cfg_.maxWrites] = {r, putSeq_};
  ++flushCount_;
  flushed_ = putSeq_;
  return okStatus();
}

Status UcxRmaLink::announce(uint64_t end) {
  while (announced_ < end) {
    UcxAmSlot* s = takeAmSlot();
    if (s == nullptr) return errorf(braidInternalError, "ucx rma: more writes in flight than the send queue holds");
    while (announced_ < end && s->msg.count < kUcxImmsPerAm) {
      const PendingPut& pp = pend_[announced_ % cfg_.maxWrites];
      s->msg.imm[s->msg.count] = pp.imm;
      s->wrId[s->msg.count] = pp.wrId;
      if (pp.direct) --directWrites_;  // flushed: UCX reads the caller's buffer no more
      ++s->msg.count;
      ++announced_;
    }
    BRAID_TRY(sendAm(s, nullptr, 0));
  }
  return okStatus();
}

Status UcxRmaLink::reapFlushes() {
  while (flushCount_ > 0) {
    Flush& f = flushes_[flushHead_];
    if (f.req != nullptr) {
      const ucs_status_t st = ucx().ucp_request_check_status(f.req);
      if (st == UCS_INPROGRESS) return okStatus();
      ucx().ucp_request_free(f.req);
      f.req = nullptr;
      if (st != UCS_OK) return wireError(st, "a flush of puts");
    }
    flushHead_ = (flushHead_ + 1) % cfg_.maxWrites;
    --flushCount_;
    // The puts up to f.end are in the peer's ring now: their immediates may go.
    BRAID_TRY(announce(f.end));
  }
  return okStatus();
}

Status UcxRmaLink::reapAms(bool untilFailure) {
  while (amUsed_ > 0) {
    UcxAmSlot& s = state_->amSlots[amHead_];
    if (s.req != nullptr) {
      const ucs_status_t st = ucx().ucp_request_check_status(s.req);
      if (st == UCS_INPROGRESS || (untilFailure && st != UCS_OK)) return okStatus();
      ucx().ucp_request_free(s.req);
      s.req = nullptr;
      if (st != UCS_OK) return wireError(st, "an active message");
    }
    amHead_ = (amHead_ + 1) % cfg_.maxWrites;
    --amUsed_;
    if (s.direct) --directWrites_;
    for (uint32_t i = 0; i < s.msg.count; ++i) BRAID_TRY(proto_->onWriteDone(s.wrId[i]));
  }
  return okStatus();
}

Status UcxRmaLink::progress() {
  if (!proto_->error().ok()) return proto_->error();
  if (state_->error != UCS_OK) {
    // A peer that finished and left closes its endpoint, and UCX may report that in the same
    // worker progress that delivered its last messages: those still complete our receives, and
    // only a transfer left waiting makes the departure an error. So do our messages that UCX had
    // taken before the failure: the sends they finish were done (a peer that needed them got them).
    BRAID_TRY(reapAms(true));
    bool left = true;
    BRAID_TRY(proto_->deliverArrived(&left));
    return left ? endpointFailed() : okStatus();
  }
  // Completions first (they free writes for the protocol), then the protocol's pass (arrivals into
  // receives, credits, new chunks), then one flush for the puts of this pass, announced at once
  // when it completed on the spot (shared memory).
  BRAID_TRY(reapFlushes());
  BRAID_TRY(reapAms(false));
  BRAID_TRY(proto_->progress());
  BRAID_TRY(flushPuts());
  return reapFlushes();
}

void UcxRmaLink::onMessage(const void* header, size_t headerBytes, const void* data, size_t dataBytes) {
  if (!proto_->error().ok()) return;
  UcxAmMsg m;
  if (headerBytes < amHeaderBytes(1) || headerBytes > sizeof(m)) {
    (void)proto_->fail(errorf(braidRemoteError, "ucx: peer rank %d (host %s) sent an active message of %zu bytes",
                              peer_, peerHost_.c_str(), headerBytes));
    return;
  }
  memcpy(&m, header, headerBytes);
  if (m.count == 0 || amHeaderBytes(m.count) != headerBytes || (dataBytes > 0 && m.count != 1)) {
    (void)proto_->fail(errorf(braidRemoteError,
                              "ucx: peer rank %d (host %s) sent a malformed active message (%u immediates in %zu "
                              "bytes, %zu bytes of data)",
                              peer_, peerHost_.c_str(), m.count, headerBytes, dataBytes));
    return;
  }
  if (dataBytes > 0) {
    // A chunk in its message: its bytes go into our own slot before the protocol hears of it. The
    // slot and length are checked here, since the copy comes first.
    const uint32_t imm = m.imm[0];
    const uint32_t slot = net::Imm::slot(imm);
    if (net::Imm::isCredit(imm) || slot >= cfg_.slots || net::Imm::written(imm) != dataBytes ||
        dataBytes > cfg_.slotBytes) {
      (void)proto_->fail(errorf(braidRemoteError,
                                "ucx: peer rank %d (host %s) broke the chunk protocol: %zu bytes of data for "
                                "immediate 0x%08x",
                                peer_, peerHost_.c_str(), dataBytes, imm));
      return;
    }
    memcpy(rings_.recv + static_cast<size_t>(slot) * cfg_.slotBytes, data, dataBytes);
  }
  for (uint32_t i = 0; i < m.count; ++i)
    if (!proto_->onArrival(m.imm[i]).ok()) return;
}

}  // namespace braid
