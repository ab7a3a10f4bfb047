// The ucx transport's data path: one UCP endpoint per peer on the communicator's one worker, and
// tagged messages. Each message's tag is (sender rank, per-link sequence number) matched with a
// full mask, so the k-th send of rank A to B can only land in B's k-th receive from A, whatever
// UCX's own ordering rules across lanes are. A posted receive asks for exactly the posted bytes;
// a message of any other length (shorter, or truncated) is braidRemoteError naming the peer.
//
// Requests are UCX's own (taken from the worker's request pool, no malloc once warm) and polled in
// posting order in progress(), so no callback runs behind the executor's back and transfers
// complete in posting order per direction, as the Link contract wants.
//
// Threading: driven by one thread at a time (the executor's lock); nothing here locks. The worker
// is UCS_THREAD_MODE_SERIALIZED for that reason.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <string>

#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

// Host memory only (Debian's UCX has no CUDA transports); UCX cannot fold a message into a
// destination on arrival, so the lowering pass turns receive-reduces into receive-to-scratch plus
// a local reduce. No registration needed: UCX registers large buffers itself (its registration
// cache); a Region from registerMemory only saves it that step.
inline constexpr TransportCaps kUcxCaps{memTypeBit(MemType::kHost), false, false, false, 0};

// Bits of a tag that hold the sender's rank (the bootstrap allows 2^24 ranks); the rest count
// messages, which wrap after 2^40 per link (far more than can be in flight at once).
inline constexpr int kUcxSeqBits = 40;
inline constexpr uint64_t kUcxSeqMask = (uint64_t{1} << kUcxSeqBits) - 1;

// What the endpoint's error callback writes: owned by the transport, not the link, because UCX may
// still call back after the link has closed its endpoint (while the worker drains at teardown).
struct UcxEndpointState {
  ucs_status_t error = UCS_OK;
  // The link had transfers posted at its destruction, whose buffers may be gone (see ~UcxLink):
  // the worker must not progress again.
  bool abandoned = false;
  void* closing = nullptr;  // the endpoint's close request, for the transport to finish
};

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
  // The endpoint's error callback (peer-failure mode): the peer is gone or unreachable. Runs inside
  // ucp_worker_progress, so in the thread that drives the worker; progress() turns it into error_.
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
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
};

}  // namespace braid
