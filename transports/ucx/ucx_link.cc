#include "transports/ucx/ucx_link.h"

#include <utility>

#include "src/base/log.h"
#include "transports/ucx/ucx_rma_link.h"

namespace braid {

namespace {

// Every transfer is host memory (kUcxCaps): saying so spares UCX a memory-type lookup per message.
constexpr uint32_t kHostMemAttr = UCP_OP_ATTR_FIELD_MEMORY_TYPE;

// The endpoint's error callback (peer-failure mode): the peer is gone or unreachable. Runs inside
// ucp_worker_progress, so in the thread that drives the worker; the link's progress() turns it into
// its error.
void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* state = static_cast<UcxEndpointState*>(arg);
  state->error = status == UCS_OK ? UCS_ERR_ENDPOINT_TIMEOUT : status;
  if (state->closeOnError && !state->closed) {
    if (state->rma != nullptr) state->rma->dropRkey();  // before its endpoint, as UCX asks
    closeUcxEndpoint(ep, state, true, true);
    state->closed = true;
    state->ep = nullptr;
  }
}

}  // namespace

UcxLink::UcxLink(ucp_worker_h worker, UcxEndpointState* state, int myRank, int peerRank, std::string peerHost)
    : worker_(worker),
      state_(state),
      peer_(peerRank),
      peerHost_(std::move(peerHost)),
      sendTagBase_(static_cast<uint64_t>(myRank) << kUcxRankShift),
      recvTagBase_(static_cast<uint64_t>(peerRank) << kUcxRankShift) {}

Status openUcxEndpoint(ucp_worker_h worker, UcxEndpointState* state, const ucp_address_t* peerAddress, bool peerErrors,
                       int peer, const std::string& peerHost, ucp_ep_h* out) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = peerAddress;
  p.err_mode = peerErrors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (peerErrors) {
    p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_handler.cb = &onEndpointError;
    p.err_handler.arg = state;
  }
  ucp_ep_h ep = nullptr;
  ucs_status_t st = ucx().ucp_ep_create(worker, &p, &ep);
  if (st != UCS_OK)
    return errorf(braidSystemError, "ucx: cannot create the endpoint to peer rank %d (host %s): %s%s", peer,
                  peerHost.c_str(), ucx().ucs_status_string(st),
                  peerErrors ? " (peer-failure reports need a UCX transport that has them, such as tcp: see UCX_TLS "
                               "and BRAID_UCX_ERR_MODE)"
                             : "");
  *out = ep;
  return okStatus();
}

void closeUcxEndpoint(ucp_ep_h ep, UcxEndpointState* state, bool pending, bool peerErrors) {
  if (!pending || peerErrors) {
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = pending ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucx().ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) state->closing = r;
  }
}

Status UcxLink::open(const ucp_address_t* peerAddress, bool peerErrors) {
  BRAID_TRY(openUcxEndpoint(worker_, state_, peerAddress, peerErrors, peer_, peerHost_, &ep_));
  peerErrors_ = peerErrors;
  return okStatus();
}

Status UcxLink::endpointFailed() {
  return fail(errorf(braidRemoteError, "ucx: connection to peer rank %d (host %s) failed: %s", peer_, peerHost_.c_str(),
                     ucx().ucs_status_string(state_->error)));
}

Status UcxLink::fail(Status s) {
  if (error_.ok()) {
    BRAID_WARN(kLogNet, "%s", s.message().c_str());
    error_ = std::move(s);
  }
  return error_;
}

Status UcxLink::requestError(ucs_status_t st, const char* op, const Xfer* x) {
  return fail(errorf(braidRemoteError, "ucx: %s of %zu bytes with peer rank %d (host %s) failed: %s", op,
                     op[0] == 's' ? x->bytes : x->capacity, peer_, peerHost_.c_str(), ucx().ucs_status_string(st)));
}

Status UcxLink::postSend(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->bytes > 0)
    return errorf(braidInvalidArgument, "ucx send of %zu bytes from NULL", x->bytes);
  x->progressed = 0;
  x->complete = false;
  ucp_request_param_t p;
  p.op_attr_mask = kHostMemAttr;
  p.memory_type = UCS_MEMORY_TYPE_HOST;
  if (x->region != nullptr && x->region->key[0] != 0) {
    // Registered by registerMemory: UCX can skip its own registration of the buffer.
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = reinterpret_cast<ucp_mem_h>(x->region->key[0]);
  }
  const uint64_t tag =
      sendTagBase_ | static_cast<uint64_t>(x->call & kCallMask) << kUcxSeqBits | (sendSeq_++ & kUcxSeqMask);
  void* r = ucx().ucp_tag_send_nbx(ep_, x->data, x->bytes, tag, &p);
  if (UCS_PTR_IS_ERR(r)) return requestError(UCS_PTR_STATUS(r), "send", x);
  // NULL: the message left at once (small and eager); completed in order by progress().
  x->tp[0] = reinterpret_cast<uintptr_t>(r);
  sends_.push(x);
  return okStatus();
}

Status UcxLink::postRecv(Xfer* x) {
  if (!error_.ok()) return error_;
  if (x->data == nullptr && x->capacity > 0)
    return errorf(braidInvalidArgument, "ucx receive of %zu bytes into NULL", x->capacity);
  // kUcxCaps says no reduce on receive: the lowering pass never hands us one.
  if (x->reduce != nullptr) return errorf(braidInternalError, "ucx link got a receive-reduce (it cannot reduce)");
  x->progressed = 0;
  x->complete = false;
  ucp_request_param_t p;
  // Always a request, even for a message already waiting: its length is read from the request in
  // progress(), one path for every receive.
  p.op_attr_mask = kHostMemAttr | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.memory_type = UCS_MEMORY_TYPE_HOST;
  if (x->region != nullptr && x->region->key[0] != 0) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = reinterpret_cast<ucp_mem_h>(x->region->key[0]);
  }
  const uint64_t tag = recvTagBase_ | (recvSeq_++ & kUcxSeqMask);
  void* r = ucx().ucp_tag_recv_nbx(worker_, x->data, x->capacity, tag, kUcxRecvMask, &p);
  if (UCS_PTR_IS_ERR(r)) return requestError(UCS_PTR_STATUS(r), "receive", x);
  x->tp[0] = reinterpret_cast<uintptr_t>(r);
  recvs_.push(x);
  recvReqs_.push_back(r);
  return okStatus();
}

Status UcxLink::progress() {
  if (!error_.ok()) return error_;
  // A peer that sent its last messages and closed (it left the communicator) fails the endpoint
  // while those messages may still wait in the worker: hand over the receives they complete first,
  // and report the failure once a posted transfer can no longer complete.
  const bool failed = state_->error != UCS_OK;
  if (failed && !sends_.empty()) return endpointFailed();
  while (!sends_.empty()) {
    Xfer* x = sends_.front();
    if (x->tp[0] != 0) {
      void* r = reinterpret_cast<void*>(x->tp[0]);
      const ucs_status_t st = ucx().ucp_request_check_status(r);
      if (st == UCS_INPROGRESS) break;
      ucx().ucp_request_free(r);
      x->tp[0] = 0;
      if (st != UCS_OK) return requestError(st, "send", x);
    }
    sends_.pop();
    x->progressed = x->bytes;
    x->complete = true;
  }
  while (!recvs_.empty()) {
    Xfer* x = recvs_.front();
    void* r = reinterpret_cast<void*>(x->tp[0]);
    ucp_tag_recv_info_t info{};
    const ucs_status_t st = ucx().ucp_tag_recv_request_test(r, &info);
    if (st == UCS_INPROGRESS && failed) return endpointFailed();
    if (st == UCS_INPROGRESS) break;
    ucx().ucp_request_free(r);
    recvReqDone();
    x->tp[0] = 0;
    // Before the length: a message of another call has the wrong length too, as often as not.
    if ((st == UCS_OK || st == UCS_ERR_MESSAGE_TRUNCATED) &&
        otherCall(static_cast<uint32_t>(info.sender_tag >> kUcxSeqBits) & kCallMask, x->call))
      return fail(otherCallError(peer_));
    if (st == UCS_ERR_MESSAGE_TRUNCATED)
      return fail(errorf(braidRemoteError,
                         "message from peer rank %d has %zu bytes, more than the %zu bytes the posted receive expects",
                         peer_, info.length, x->capacity));
    if (st != UCS_OK) return requestError(st, "receive", x);
    if (info.length != x->capacity)
      return fail(errorf(braidRemoteError, "message from peer rank %d has %zu bytes, the posted receive expects %zu",
                         peer_, info.length, x->capacity));
    recvs_.pop();
    x->bytes = info.length;
    x->progressed = info.length;
    x->complete = true;
  }
  return okStatus();
}

// Teardown. Transfers still posted mean the communicator failed, and nothing of theirs may be
// touched: the engine, destroyed before the links, took the Xfers (and its scratch) along, and the
// caller may have freed its own buffers. Yet the data of a receive UCX has matched keeps landing at
// every ucp_worker_progress, for this link or any other of the worker: even a forced close only
// schedules the transport endpoints' teardown for later progress (a test crashed in
// ucp_rndv_data_handler that way). So no link progresses the worker here: each starts its close and
// leaves the request in its state, and the transport finishes them (ucx.cc), but only when no link
// had anything posted. Per link:
//   - nothing posted: a flush close (nothing of ours is in flight);
//   - something posted, or the link failed: abandoned, requests and all, with no more progress on
//     the worker. In the peer-failure mode the endpoint is closed forcibly (allowed there, and it
//     progresses nothing); without it the worker's destruction takes it down. The receives that
//     no message matched yet are cancelled and freed first (a cancel takes an unmatched receive
//     off the worker's queue at once, touching neither the buffer nor the worker's progress): UCX
//     1.13 prints each request still out at the worker's destruction, and for such a receive read
//     a field it never set, which crashed the process where the heap held no zeros there
//     (MALLOC_PERTURB_, as meson sets; test_mismatch.cc). UCX's log still names the requests left
//     (sends, matched receives): the price of memory safety after a failure.
UcxLink::~UcxLink() {
  if (ep_ == nullptr) return;
  const bool pending = busy() || !error_.ok();  // busy() reads the queues' heads, not the Xfers
  if (pending) {
    for (size_t i = recvReqHead_; i < recvReqs_.size(); ++i) {
      ucx().ucp_request_cancel(worker_, recvReqs_[i]);
      if (ucx().ucp_request_check_status(recvReqs_[i]) != UCS_INPROGRESS) ucx().ucp_request_free(recvReqs_[i]);
    }
  }
  closeUcxEndpoint(ep_, state_, pending, peerErrors_);
  state_->abandoned = pending;
  ep_ = nullptr;
}

}  // namespace braid
