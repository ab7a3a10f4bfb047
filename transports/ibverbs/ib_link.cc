#include "transports/ibverbs/ib_link.h"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "src/base/log.h"
#include "transports/ibverbs/ib_api.h"

namespace braid::ib {

namespace {

// Rings start on a page: the device pins whole pages, and a ring sharing its pages with other heap
// data would pin those too.
constexpr size_t kRingAlign = 4096;

// Receive work requests: one per data chunk the peer may have in flight (a ring's worth) and one
// per credit message it may have in flight (at most one per slot it still owes us).
uint32_t recvDepth(const IbLinkConfig& cfg) { return 2 * cfg.proto.slots; }

// min_rnr_timer 12 (0.64 ms) and rnr_retry 7 (retry forever): receives are always posted ahead of
// the credits that allow a write, so a receiver-not-ready NAK means only a peer slow to repost.
constexpr uint8_t kMinRnrTimer = 12;
constexpr uint8_t kRnrRetry = 7;
// RoCE v2 packets cross IP routers: a hop limit of 1 would stop them at the first.
constexpr uint8_t kHopLimit = 64;

}  // namespace

Status IbLink::makeRing(size_t bytes, int access, Ring* r) {
  const size_t rounded = (bytes + kRingAlign - 1) / kRingAlign * kRingAlign;
  r->mem = std::aligned_alloc(kRingAlign, rounded);
  if (r->mem == nullptr) return errorf(braidSystemError, "ibverbs: cannot allocate a %zu-byte ring", rounded);
  memset(r->mem, 0, rounded);
  r->mr = ibv().reg_mr(dev_->pd, r->mem, rounded, access);
  if (r->mr == nullptr)
    return systemError(errno,
                       "ibverbs: ibv_reg_mr of a %zu-byte ring for %s (is the locked-memory limit, ulimit -l, "
                       "too low?)",
                       rounded, peerName_.c_str());
  return okStatus();
}

Status IbLink::create(std::shared_ptr<IbDevice> dev, ibv_cq* cq, const IbLinkConfig& cfg, int peer,
                      std::string peerName, uint32_t index, std::unique_ptr<IbLink>* out) {
  std::unique_ptr<IbLink> l(new IbLink());
  l->dev_ = std::move(dev);
  l->cfg_ = cfg;
  l->peer_ = peer;
  l->peerName_ = std::move(peerName);
  l->index_ = index;
  const size_t ringBytes = static_cast<size_t>(cfg.proto.slots) * cfg.proto.slotBytes;
  BRAID_TRY(l->makeRing(ringBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &l->recvRing_));
  BRAID_TRY(l->makeRing(ringBytes, IBV_ACCESS_LOCAL_WRITE, &l->staging_));

  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = cfg.proto.maxWrites;
  init.cap.max_recv_wr = recvDepth(cfg);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = cfg.maxInline;
  l->qp_ = ibv().create_qp(l->dev_->pd, &init);
  if (l->qp_ == nullptr && init.cap.max_inline_data > 0) {
    // Some providers refuse any inline room (EFA, some iWARP): inline is an optimization only.
    init.cap.max_inline_data = 0;
    l->qp_ = ibv().create_qp(l->dev_->pd, &init);
  }
  if (l->qp_ == nullptr)
    return systemError(errno, "ibverbs: ibv_create_qp for %s (%u send, %u receive entries)", l->peerName_.c_str(),
                       cfg.proto.maxWrites, recvDepth(cfg));
  // The device may grant less inline room than asked; never inline more than it granted.
  l->cfg_.maxInline = init.cap.max_inline_data;

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = l->dev_->port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv().modify_qp(l->qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    return systemError(errno, "ibverbs: queue pair to %s: RESET -> INIT", l->peerName_.c_str());

  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(l.get()));
  l->psn_ = r & 0xffffff;
  l->wrIds_.reset(new uint64_t[cfg.proto.maxWrites]);
  l->proto_ = std::make_unique<net::ChunkLink>(cfg.proto, l.get(), static_cast<const uint8_t*>(l->recvRing_.mem),
                                               static_cast<uint8_t*>(l->staging_.mem), l->peerName_);
  *out = std::move(l);
  return okStatus();
}

IbLink::~IbLink() {
  // The queue pair first: it may still reference the rings' memory regions.
  if (qp_ != nullptr) ibv().destroy_qp(qp_);
  for (Ring* r : {&recvRing_, &staging_}) {
    if (r->mr != nullptr) ibv().dereg_mr(r->mr);
    std::free(r->mem);
  }
}

IbConn IbLink::localConn() const {
  IbConn c;
  c.qpn = qp_->qp_num;
  c.psn = psn_;
  c.ringAddr = reinterpret_cast<uint64_t>(recvRing_.mem);
  c.rkey = recvRing_.mr->rkey;
  c.slots = cfg_.proto.slots;
  c.slotBytes = static_cast<uint32_t>(cfg_.proto.slotBytes);
  c.valid = 1;
  return c;
}

Status IbLink::connect(const IbAddr& peerAddr, const IbConn& peerConn) {
  if (peerConn.valid != 1 || peerConn.slots != cfg_.proto.slots || peerConn.slotBytes != cfg_.proto.slotBytes)
    return errorf(braidInvalidUsage,
                  "ibverbs: %s uses rings of %u slots of %u bytes, this rank %u of %zu (BRAID_IB_SLOTS and "
                  "BRAID_IB_SLOT_SIZE must be the same on every rank)",
                  peerName_.c_str(), peerConn.slots, peerConn.slotBytes, cfg_.proto.slots, cfg_.proto.slotBytes);
  remoteRing_ = peerConn.ringAddr;
  remoteKey_ = peerConn.rkey;

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  // Both ends must agree on the path MTU: the smaller of the two ports' (each already capped).
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(dev_->mtu, peerAddr.mtu));
  a.dest_qp_num = peerConn.qpn;
  a.rq_psn = peerConn.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.port_num = dev_->port;
  a.ah_attr.dlid = peerAddr.lid;
  a.ah_attr.sl = 0;
  // RoCE has no LIDs: every packet carries a global route header. InfiniBand within one subnet
  // (what canConnect allows) routes by LID alone.
  if (peerAddr.linkLayer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peerAddr.gid, sizeof(peerAddr.gid));
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_->gidIndex);
    a.ah_attr.grh.hop_limit = kHopLimit;
  }
  if (ibv().modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return systemError(errno, "ibverbs: queue pair to %s: INIT -> RTR (MTU %d, dest qp %u)", peerName_.c_str(),
                       mtuBytes(a.path_mtu), peerConn.qpn);
  // Receives before the peer can write: nobody writes before the transport's second exchange,
  // which every rank enters with its queue pairs in RTS and their receives posted.
  BRAID_TRY(postRecvs(recvDepth(cfg_)));

  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = cfg_.timeout;
  a.retry_cnt = cfg_.retryCnt;
  a.rnr_retry = kRnrRetry;
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  if (ibv().modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return systemError(errno, "ibverbs: queue pair to %s: RTR -> RTS", peerName_.c_str());
  return okStatus();
}

Status IbLink::postRecvs(uint32_t n) {
  // Writes with immediate carry no payload into a receive buffer: the receives have no
  // scatter entries.
  for (uint32_t i = 0; i < n; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = wrIdOf(index_, true);
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc != 0) return proto_->fail(systemError(rc, "ibverbs: posting a receive for %s", peerName_.c_str()));
  }
  return okStatus();
}

Status IbLink::postWr(ibv_send_wr* wr, uint64_t wrId) {
  wr->wr_id = wrIdOf(index_, false);
  wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr->send_flags |= IBV_SEND_SIGNALED;
  wr->wr.rdma.rkey = remoteKey_;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp_, wr, &bad);
  if (rc != 0) return systemError(rc, "ibverbs: posting a write to %s", peerName_.c_str());
  // The protocol never has more than maxWrites in flight, so the ring cannot overflow.
  wrIds_[(wrHead_ + wrCount_) % cfg_.proto.maxWrites] = wrId;
  ++wrCount_;
  return okStatus();
}

Status IbLink::postWrite(const void* src, const Region* srcRegion, size_t bytes, uint32_t slot, uint32_t imm,
                         uint64_t wrId) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(src);
  sge.length = static_cast<uint32_t>(bytes);
  // A registered caller's buffer carries its lkey in the region's key (see the transport's
  // registerRegion); else the bytes are in the staging ring.
  sge.lkey = srcRegion != nullptr ? static_cast<uint32_t>(srcRegion->key[1]) : staging_.mr->lkey;
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = bytes > 0 ? 1 : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remoteRing_ + static_cast<uint64_t>(slot) * cfg_.proto.slotBytes;
  // Small chunks travel inside the work request: no DMA read of the source, less latency.
  if (bytes > 0 && bytes <= cfg_.maxInline) wr.send_flags = IBV_SEND_INLINE;
  return postWr(&wr, wrId);
}

Status IbLink::postCredit(uint32_t imm, uint64_t wrId) {
  ibv_send_wr wr{};
  wr.num_sge = 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remoteRing_;
  return postWr(&wr, wrId);
}

Status IbLink::describeWc(const ibv_wc& wc) const {
  const char* hint = wc.status == IBV_WC_RETRY_EXC_ERR ? " (the peer stopped answering: dead, or unreachable)" : "";
  return errorf(braidRemoteError, "ibverbs: %s with %s failed: %s (vendor error 0x%x)%s",
                isRecv(wc.wr_id) ? "a receive" : "a write", peerName_.c_str(), ibv().wc_status_str(wc.status),
                wc.vendor_err, hint);
}

Status IbLink::progress() {
  if (wireError_.ok()) return proto_->progress();
  // The chunks that arrived before the wire broke still complete receives; a transfer left after
  // them (now, or posted later) fails with the wire's error.
  bool left = true;
  BRAID_TRY(proto_->deliverArrived(&left));
  return left ? proto_->fail(wireError_) : okStatus();
}

Status IbLink::onCompletion(const ibv_wc& wc) {
  if (!proto_->error().ok()) return proto_->error();
  if (wc.status != IBV_WC_SUCCESS) {
    // Flushes follow the first error on a queue pair; the first one says what happened.
    if (wireError_.ok()) wireError_ = describeWc(wc);
    return okStatus();
  }
  if (isRecv(wc.wr_id)) {
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || (wc.wc_flags & IBV_WC_WITH_IMM) == 0)
      return proto_->fail(errorf(braidRemoteError, "ibverbs: %s sent a message without an immediate (opcode %d)",
                                 peerName_.c_str(), static_cast<int>(wc.opcode)));
    BRAID_TRY(postRecvs(1));
    return proto_->onArrival(ntohl(wc.imm_data));
  }
  if (wrCount_ == 0)
    return proto_->fail(
        errorf(braidInternalError, "ibverbs: a send completion for %s with nothing posted", peerName_.c_str()));
  const uint64_t id = wrIds_[wrHead_];
  wrHead_ = (wrHead_ + 1) % cfg_.proto.maxWrites;
  --wrCount_;
  return proto_->onWriteDone(id);
}

}  // namespace braid::ib
