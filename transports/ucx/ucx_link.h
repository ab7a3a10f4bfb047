// The ucx transport's data path: one UCP endpoint per peer on the communicator's one worker, and
// tagged messages. Each message's tag is (sender rank, call, per-link sequence number) matched on
// rank and number, so the k-th send of rank A to B can only land in B's k-th receive from A,
// whatever UCX's own ordering rules across lanes are. A message of another call is braidInvalidUsage
// (otherCallError); a posted receive asks for exactly the posted bytes, and a message of any other
// length (shorter, or truncated) is braidRemoteError naming the peer.
//
// Requests are UCX's own (taken from the worker's request pool, no malloc once warm) and polled in
// posting order in progress(), so no callback runs behind the executor's back and transfers
// complete in posting order per direction, as the Link contract wants.
//
// Threading: driven by one thread at a time (the executor's lock); nothing here locks. The worker
// is UCS_THREAD_MODE_SERIALIZED for that reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_api.h"

namespace braid {

// Host memory only (Debian's UCX has no CUDA transports); UCX cannot fold a message into a
// destination on arrival, so the lowering pass turns receive-reduces into receive-to-scratch plus
// a local reduce. No registration needed: UCX registers large buffers itself (its registration
// cache); a Region from registerMemory only saves it that step.
inline constexpr TransportCaps kUcxCaps{memTypeBit(MemType::kHost), false, false, false, 0};

// A tag: the sender's rank in the top 24 bits (the bootstrap allows 2^24 ranks), the message's
// call (Xfer::call, kCallBits) below, and the message's number on its link in the low kUcxSeqBits,
// which wrap after 2^20 (a million messages sent and not yet received on one link: far more than
// the executor keeps in flight). A receive matches rank and number and leaves the call out of its
// mask: a message of another call lands where it would have, and is refused there.
inline constexpr int kUcxSeqBits = 20;
inline constexpr uint64_t kUcxSeqMask = (uint64_t{1} << kUcxSeqBits) - 1;
inline constexpr int kUcxRankShift = kUcxSeqBits + kCallBits;
inline constexpr uint64_t kUcxRecvMask = ~(static_cast<uint64_t>(kCallMask) << kUcxSeqBits);

class UcxRmaLink;
struct UcxAmSlot;
struct UcxAmSlotsDeleter {
  void operator()(UcxAmSlot* p) const;  // ucx_rma_link.cc
};

// rma mode: an active message that carries no immediates (count 0) but one of these, for the
// goodbye handshake. Its first two fields are those of every message (UcxAmMsg).
struct UcxAmCtl {
  static constexpr uint32_t kFin = 1;  // "I have sent my last message"
  static constexpr uint32_t kAck = 2;  // "and I have every one of them"
  uint32_t rank = 0;
  uint32_t count = 0;
  uint32_t kind = 0;
};

// What the endpoint's error callback writes: owned by the transport, not the link, because UCX may
// still call back after the link has closed its endpoint (while the worker drains at teardown).
struct UcxEndpointState {
  ucs_status_t error = UCS_OK;
  // The link had transfers posted at its destruction, whose buffers may be gone (see ~UcxLink):
  // the worker must not progress again.
  bool abandoned = false;
  void* closing = nullptr;  // the endpoint's close request, for the transport to finish
  // rma mode (ucx_rma_link.h): the link that takes this peer's active messages (null once it is
  // gone, so late ones are dropped), and the buffers of its outgoing active messages, which UCX may
  // still read while the worker drains after the link is gone.
  UcxRmaLink* rma = nullptr;
  std::unique_ptr<UcxAmSlot[], UcxAmSlotsDeleter> amSlots;
  // rma mode asks the error callback to close the endpoint at once (forcibly, as UCX allows there):
  // UCX 1.13 emulates puts over tcp with active messages, and the handler of a put from a peer
  // that has died meanwhile aborts the process when its acknowledgement fails on the failed
  // endpoint ("ucp_request.inl: Fatal: unexpected error"), unless the endpoint is closed, which
  // makes UCX drop the put. `closed`: the callback did so; the link must not touch the endpoint.
  bool closeOnError = false;
  bool closed = false;
  // rma mode's goodbye (see ucx_rma_link.h): a healthy link leaves its endpoint open at its
  // destruction and says it has sent its last message; the transport closes the endpoint once the
  // peer acknowledged (or failed, or kGoodbyeNs passed).
  ucp_ep_h ep = nullptr;  // the open endpoint, for the goodbye and its answer; null once closing
                          // (after the link's destruction: non-null only when its goodbye went out)
  bool peerErrors = false;
  bool finAcked = false;  // the peer has every message we sent before it
  bool finSeen = false;   // the peer's goodbye came (it has finished)
  bool ackOwed = false;   // and waits for our answer
  UcxAmCtl ctl[2];        // our goodbye and our answer, which UCX may read until their requests finish
  void* ctlReq[2] = {nullptr, nullptr};
};

// Creates the endpoint to `peerAddress` on `worker`; `peerErrors` asks for UCX's peer-failure reports
// (UCP_ERR_HANDLING_MODE_PEER), which land in `state`. Shared by both data paths.
Status openUcxEndpoint(ucp_worker_h worker, UcxEndpointState* state, const ucp_address_t* peerAddress, bool peerErrors,
                       int peer, const std::string& peerHost, ucp_ep_h* out);
// Starts closing `ep` (see ~UcxLink for the rules): a flush close unless `pending`; a forced one when
// pending and `peerErrors`; none otherwise (the worker's destruction takes it down). The close request
// goes into state->closing for the transport to finish.
void closeUcxEndpoint(ucp_ep_h ep, UcxEndpointState* state, bool pending, bool peerErrors);

class UcxLink final : public Link {
 public:
  // `state` outlives the link (the transport keeps it).
  UcxLink(ucp_worker_h worker, UcxEndpointState* state, int myRank, int peerRank, std::string peerHost);
  // Starts closing the endpoint (a flush when the link is healthy, forcibly when it failed and the
  // error mode allows); the transport finishes the close (see ucx_link.cc for why).
  ~UcxLink() override;
  // Creates the endpoint to the peer's worker address. `peerErrors`: ask UCX to report the peer's
  // failure (UCP_ERR_HANDLING_MODE_PEER), which also keeps UCX to transports that can (no shared
  // memory).
  Status open(const ucp_address_t* peerAddress, bool peerErrors);
  UcxLink(const UcxLink&) = delete;
  UcxLink& operator=(const UcxLink&) = delete;

  Status postSend(Xfer* x) override;
  Status postRecv(Xfer* x) override;
  Status progress() override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }

 private:
  // Records a fatal error; every later call returns it.
  Status fail(Status s);
  Status endpointFailed();
  Status requestError(ucs_status_t st, const char* op, const Xfer* x);

  ucp_worker_h worker_;
  UcxEndpointState* state_;
  ucp_ep_h ep_ = nullptr;
  int peer_;
  std::string peerHost_;  // for error messages, built once at connect
  uint64_t sendTagBase_;  // our rank in the tag's high bits
  uint64_t recvTagBase_;  // the peer's rank in the tag's high bits
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
  bool peerErrors_ = false;  // the endpoint's error mode: UCP_ERR_HANDLING_MODE_PEER
  Status error_;             // sticky: set once the link is broken

  // Posted transfers; each one's UCX request sits in Xfer::tp[0] (0: completed when posted).
  XferQueue sends_;
  XferQueue recvs_;
  // The posted receives' requests again, in posting order from recvReqHead_ (they complete in that
  // order), for the teardown of a failed link, when the Xfers may be gone: it cancels those that no
  // message matched yet and frees them, where they would otherwise leak into the worker's
  // destruction (see ~UcxLink). Emptied whenever the head catches up, so its capacity is reused,
  // and its done front dropped once it is most of it, so that a link whose receives never all
  // finish at once (nonblocking calls posted back to back) does not grow it without bound.
  std::vector<void*> recvReqs_;
  size_t recvReqHead_ = 0;
  void recvReqDone() {
    ++recvReqHead_;
    if (recvReqHead_ == recvReqs_.size()) {
      recvReqs_.clear();
      recvReqHead_ = 0;
    } else if (recvReqHead_ >= 1024 && 2 * recvReqHead_ >= recvReqs_.size()) {
      recvReqs_.erase(recvReqs_.begin(), recvReqs_.begin() + static_cast<std::ptrdiff_t>(recvReqHead_));
      recvReqHead_ = 0;
    }
  }
};

}  // namespace braid
