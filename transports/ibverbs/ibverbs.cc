// The ibverbs transport: one RC queue pair per peer over an RDMA device (InfiniBand or RoCE),
// carrying the chunk/credit protocol of transports/net/ (RDMA writes with immediate into the
// peer's slot ring, credits returned in batches). The verbs part is thin: libibverbs opened at run
// time (ib_api.cc), device and port choice (ib_device.cc), the queue pair and its rings
// (ib_link.cc), and here the setup exchange, the one completion queue and its wait descriptor.
//
// Connection setup (collective; exactly two ctx.allGather calls on every rank, also on ranks with
// no ibverbs peer or no device, so that every rank stays in step):
//   1. Each rank creates a queue pair (in INIT) and its rings per peer, and publishes its address
//      (LID, GID, MTU) and, for every rank, its end of their pair (QP number, PSN, ring address
//      and rkey). A rank that failed locally publishes ok = 0 so its peers fail at once.
//   2. Each rank moves its queue pairs to RTR and RTS against the peers' ends and posts receives.
//   3. The second exchange says who got there: nobody writes before it, so no write can reach a
//      queue pair that is not ready, and a failure anywhere fails every peer of that rank.
// Completions of every link arrive on one completion queue, polled in progress(); its completion
// channel is the transport's wait descriptor.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/ibverbs/ib_api.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/ib_link.h"
#include "transports/transport.h"

namespace braid {
namespace {

using ib::IbAddr;
using ib::IbConn;
using ib::IbLink;
using ib::IbRecord;

// Completions taken from the queue per ibv_poll_cq call, and calls per progress() pass at most (a
// flood of completions must not keep the executor from the links).
constexpr int kPollBatch = 32;
constexpr int kPollRounds = 4;
// Send-queue entries beyond the ring's slots: room for credit returns while every slot is in flight.
constexpr uint32_t kExtraWrites = 4;

std::string peerNameOf(const TransportContext& ctx, int rank) {
  if (ctx.peers == nullptr || rank < 0 || static_cast<size_t>(rank) >= ctx.peers->size())
    return "peer rank " + std::to_string(rank);
  const char* h = (*ctx.peers)[rank].hostname;
  return "peer rank " + std::to_string(rank) + " (host " +
         std::string(h, strnlen(h, sizeof((*ctx.peers)[rank].hostname))) + ")";
}

// The settings of the rings and the queue pairs, read once at construction.
Status readSettings(ib::IbLinkConfig* cfg) {
  size_t slotBytes = 0;
  int64_t slots = 0, timeout = 0, retry = 0;
  BRAID_TRY(paramSize("BRAID_IB_SLOT_SIZE", &slotBytes));
  // Slots on cache lines: the reduce kernels read whole elements from aligned slots.
  if (slotBytes % 64 != 0)
    return errorf(braidInvalidArgument, "BRAID_IB_SLOT_SIZE=%zu is not a multiple of 64", slotBytes);
  BRAID_TRY(paramInt("BRAID_IB_SLOTS", &slots));
  BRAID_TRY(paramInt("BRAID_IB_TIMEOUT", &timeout));
  BRAID_TRY(paramInt("BRAID_IB_RETRY_CNT", &retry));
  cfg->proto.slots = static_cast<uint32_t>(slots);
  cfg->proto.slotBytes = slotBytes;
  cfg->proto.maxWrites = cfg->proto.slots + kExtraWrites;
  // A send completes once the peer acknowledged its writes, not when they are posted: a rank whose
  // last operation sent leaves (destroying its queue pairs, whose unacknowledged work is dropped,
  // never retransmitted) only after the peer has the bytes. NCCL's net sends complete the same way.
  cfg->proto.sendsAwaitWrites = true;
  cfg->timeout = static_cast<uint8_t>(timeout);
  cfg->retryCnt = static_cast<uint8_t>(retry);
  std::string name;
  int port = 0;
  const std::string hca = paramString("BRAID_IB_HCA");
  if (!hca.empty() && !ib::parseHca(hca, &name, &port))
    return errorf(braidInvalidArgument, "BRAID_IB_HCA=%s: expected a device name with an optional :port (mlx5_0:1)",
                  hca.c_str());
  return net::ChunkLink::check(cfg->proto);
}

// The spec lets a device wait up to 4x the ACK timeout per try; a dead peer shows after
// (retry + 1) tries. Lowers the exponent until that fits in half of the time left for setup (the
// communicator's timeout), so the queue pair reports a dead peer before braid's deadline does.
uint8_t fitTimeout(uint8_t exponent, uint8_t retry, const Deadline& deadline) {
  const double budgetSec = deadline.atNs == INT64_MAX ? 1e9 : (deadline.atNs - nowNs()) / 2e9;
  while (exponent > 1 && 4.0 * (retry + 1) * 4.096e-6 * std::ldexp(1.0, exponent) > budgetSec) --exponent;
  return exponent;
}

class IbTransport final : public Transport {
 public:
  IbTransport() {
    // A bad setting fails init (connect returns it); a missing device only makes canConnect refuse.
    settings_ = readSettings(&cfg_);
    probe_ = settings_.ok() ? ib::openDevice(&dev_) : settings_;
    if (!probe_.ok()) {
      dev_.reset();
      // Explicit device or library settings that do not work deserve a warning; a machine without
      // RDMA devices (or without libibverbs) is the common case and falls back quietly.
      // (A bad setting is reported by connect, as the init error.)
      if (settings_.ok() &&
          (paramIsSet("BRAID_IB_HCA") || paramIsSet("BRAID_IB_GID_INDEX") || paramIsSet("BRAID_IB_LIBRARY")))
        BRAID_WARN(kLogNet, "ibverbs: %s", probe_.message().c_str());
      else if (settings_.ok())
        BRAID_INFO(kLogNet, "ibverbs: %s", probe_.message().c_str());
    } else {
      BRAID_INFO(kLogNet, "ibverbs: %s port %u (%s), GID index %d, MTU %d, %u slots of %zu bytes per peer",
                 dev_->name.c_str(), dev_->port,
                 dev_->portAttr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", dev_->gidIndex,
                 ib::mtuBytes(dev_->mtu), cfg_.proto.slots, cfg_.proto.slotBytes);
    }
  }
  ~IbTransport() override;

  const char* name() const override { return "ibverbs"; }
  const TransportCaps& caps() const override { return ib::kIbCaps; }
  void localRecord(const PeerInfo& me, TransportRecord* out) const override {
    IbRecord r;
    ib::fillRecord(dev_.get(), probe_, &r);
    memcpy(out->bytes, &r, sizeof(r));
  }
  bool canConnect(const Endpoint& a, const Endpoint& b) const override {
    std::string why;
    return a.info->rank != b.info->rank && recordsOf(a, b, &why);
  }
  std::string whyNot(const Endpoint& a, const Endpoint& b) const override {
    std::string why;
    if (a.info->rank == b.info->rank) return "one rank";
    return recordsOf(a, b, &why) ? std::string() : why;
  }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
  Status progress(int* failedPeer) override;
  int waitFd() const override { return channel_ != nullptr ? channel_->fd : -1; }
  // The entry stays (completions name links by index) with no link: the queue pair's flushed
  // completions that still come are dropped in pollCq.
  void dropLink(int peer) override {
    for (LinkEntry<IbLink>& e : links_)
      if (e.peer == peer) e.link = nullptr;
  }

 protected:
  Status registerRegion(Region* region) override;
  void deregisterRegion(Region* region) override;

 private:
  static bool recordsOf(const Endpoint& a, const Endpoint& b, std::string* why) {
    IbRecord ra, rb;
    memcpy(&ra, a.record->bytes, sizeof(ra));
    memcpy(&rb, b.record->bytes, sizeof(rb));
    return ib::recordsConnect(ra, rb, why);
  }
  // Creates the completion queue and channel, and the links (queue pairs in INIT).
  Status prepare(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<IbLink>>* links);
  // Takes up to kPollBatch completions and hands each to its link; *got says how many.
  Status pollCq(int* failedPeer, int* got);
  // Consumes the channel's events and re-arms the queue; see progress().
  Status rearm();

  Status settings_;
  Status probe_;
  ib::IbLinkConfig cfg_;
  std::shared_ptr<ib::IbDevice> dev_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  bool armed_ = false;  // notification requested and no completion polled since: nothing can have fired
  std::vector<LinkEntry<IbLink>> links_;  // by link index (wr_id); owned by the communicator
};

IbTransport::~IbTransport() {
  // The communicator destroyed the links (and their queue pairs) already.
  releaseRegions();
  if (cq_ != nullptr) ib::ibv().destroy_cq(cq_);
  if (channel_ != nullptr) ib::ibv().destroy_comp_channel(channel_);
}

Status IbTransport::prepare(const TransportContext& ctx, const std::vector<int>& peers,
                            std::vector<std::unique_ptr<IbLink>>* links) {
  BRAID_TRY(probe_);
  std::vector<bool> seen(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  for (int p : peers) {
    if (p < 0 || p >= ctx.nranks || p == ctx.rank || seen[p])
      return errorf(braidInternalError, "ibverbs connect: bad or repeated peer rank %d (rank %d of %d)", p, ctx.rank,
                    ctx.nranks);
    seen[p] = true;
  }
  // Every send and receive entry of every link may complete at once: the queue holds them all,
  // those of the links of earlier connects (the self-test's fallback rounds) too.
  const size_t total = links_.size() + peers.size();
  const uint64_t cqe = static_cast<uint64_t>(total) * (cfg_.proto.maxWrites + 2ull * cfg_.proto.slots);
  if (cqe > static_cast<uint64_t>(dev_->attr.max_cqe))
    return errorf(braidInvalidArgument,
                  "ibverbs: %zu peers need a completion queue of %llu entries, %s allows %d (lower BRAID_IB_SLOTS)",
                  total, static_cast<unsigned long long>(cqe), dev_->name.c_str(), dev_->attr.max_cqe);
  if (cq_ != nullptr) {
    // A later connect: one queue and channel serve every link (progress polls one), grown to fit.
    const int rc = ib::ibv().resize_cq(cq_, static_cast<int>(cqe));
    if (rc != 0) return systemError(rc, "ibverbs: ibv_resize_cq to %llu entries", static_cast<unsigned long long>(cqe));
  } else {
    channel_ = ib::ibv().create_comp_channel(dev_->ctx);
    if (channel_ == nullptr) return systemError(errno, "ibverbs: ibv_create_comp_channel");
    // progress() reads the channel without waiting.
    const int fl = fcntl(channel_->fd, F_GETFL);
    if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0)
      return systemError(errno, "ibverbs: making the completion channel nonblocking");
    cq_ = ib::ibv().create_cq(dev_->ctx, static_cast<int>(cqe), nullptr, channel_, 0);
    if (cq_ == nullptr)
      return systemError(errno, "ibverbs: ibv_create_cq of %llu entries", static_cast<unsigned long long>(cqe));
  }
  ib::IbLinkConfig cfg = cfg_;
  cfg.timeout = fitTimeout(cfg_.timeout, cfg_.retryCnt, ctx.deadline);
  if (cfg.timeout != cfg_.timeout)
    BRAID_INFO(kLogNet, "ibverbs: ACK timeout exponent %u instead of %u, to report a dead peer within the timeout",
               cfg.timeout, cfg_.timeout);
  // A link's index (in its work requests' ids) is its place in links_, where connect() appends it.
  links->resize(peers.size());
  for (size_t i = 0; i < peers.size(); ++i)
    BRAID_TRY(IbLink::create(dev_, cq_, cfg, peers[i], peerNameOf(ctx, peers[i]),
                             static_cast<uint32_t>(links_.size() + i), &(*links)[i]));
  return okStatus();
}

Status IbTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                            std::vector<std::unique_ptr<Link>>* out) {
  const int64_t startNs = nowNs();
  const size_t n = static_cast<size_t>(std::max(ctx.nranks, 0));
  std::vector<std::unique_ptr<IbLink>> links;
  Status local = !settings_.ok() ? settings_ : peers.empty() ? okStatus() : prepare(ctx, peers, &links);
  if (!local.ok()) BRAID_WARN(kLogNet, "ibverbs: rank %d cannot set up: %s", ctx.rank, local.message().c_str());

  // Exchange 1: this rank's address, then its end of the pair for every rank (empty for non-peers).
  const size_t stride = sizeof(IbAddr) + n * sizeof(IbConn);
  std::vector<uint8_t> mine(stride, 0), all(stride * n, 0);
  IbAddr addr;
  if (local.ok() && dev_ != nullptr) {
    addr.ok = 1;
    addr.lid = dev_->portAttr.lid;
    addr.mtu = static_cast<uint8_t>(dev_->mtu);
    addr.linkLayer = dev_->portAttr.link_layer;
    memcpy(addr.gid, dev_->gid.raw, sizeof(addr.gid));
    for (size_t i = 0; i < peers.size(); ++i) {
      const IbConn c = links[i]->localConn();
      memcpy(mine.data() + sizeof(IbAddr) + static_cast<size_t>(peers[i]) * sizeof(IbConn), &c, sizeof(c));
    }
  }
  memcpy(mine.data(), &addr, sizeof(addr));
  BRAID_TRY(ctx.allGather(mine.data(), stride, all.data()));

  // Step 2, on our side of each pair.
  for (size_t i = 0; i < peers.size() && local.ok(); ++i) {
    const int p = peers[i];
    IbAddr pa;
    IbConn pc;
    memcpy(&pa, all.data() + static_cast<size_t>(p) * stride, sizeof(pa));
    memcpy(
        &pc,
        all.data() + static_cast<size_t>(p) * stride + sizeof(IbAddr) + static_cast<size_t>(ctx.rank) * sizeof(IbConn),
        sizeof(pc));
    if (pa.ok != 1) {
      local =
          errorf(braidRemoteError, "ibverbs: %s failed to set up its device (see its log)", peerNameOf(ctx, p).c_str());
      break;
    }
    local = links[i]->connect(pa, pc);
  }

  // Exchange 2: who is ready. Always made, so that a rank that failed above stays in step.
  const uint32_t ready = local.ok() ? 1 : 0;
  std::vector<uint32_t> readyAll(n, 0);
  BRAID_TRY(ctx.allGather(&ready, sizeof(ready), readyAll.data()));
  if (!local.ok()) return local;
  for (int p : peers)
    if (readyAll[p] != 1)
      return errorf(braidRemoteError, "ibverbs: %s could not connect its queue pairs (see its log)",
                    peerNameOf(ctx, p).c_str());

  std::vector<std::unique_ptr<Link>> result;
  for (size_t i = 0; i < links.size(); ++i) {
    links_.push_back({links[i].get(), peers[i]});
    result.push_back(std::move(links[i]));
  }
  if (cq_ != nullptr) BRAID_TRY(rearm());
  if (!peers.empty())
    BRAID_INFO(kLogNet, "ibverbs: rank %d connected %zu queue pairs on %s port %u in %.1f ms", ctx.rank, peers.size(),
               dev_->name.c_str(), dev_->port, (nowNs() - startNs) / 1e6);
  *out = std::move(result);
  return okStatus();
}

Status IbTransport::pollCq(int* failedPeer, int* got) {
  ibv_wc wc[kPollBatch];
  const int n = ibv_poll_cq(cq_, kPollBatch, wc);
  *got = std::max(n, 0);
  if (n < 0) {
    // The queue itself broke (an overrun, a device error): every link is lost. Name the first peer.
    *failedPeer = links_.empty() ? -1 : links_.front().peer;
    return errorf(braidSystemError, "ibverbs: polling the completion queue failed (%d)", n);
  }
  // Every completion polled reaches its link, also after one failed: those of other links would
  // otherwise be lost (a receive never reposted, a write never counted back). The first failure is
  // returned; a failed link keeps its error for later passes.
  Status first;
  for (int i = 0; i < n; ++i) {
    const uint32_t idx = IbLink::indexOf(wc[i].wr_id);
    if (idx >= links_.size()) {
      if (first.ok()) {
        *failedPeer = links_.empty() ? -1 : links_.front().peer;
        first = errorf(braidInternalError, "ibverbs: a completion for link %u of %zu", idx, links_.size());
      }
      continue;
    }
    if (links_[idx].link == nullptr) continue;  // dropped (dropLink)
    Status s = links_[idx].link->onCompletion(wc[i]);
    if (!s.ok() && first.ok()) {
      *failedPeer = links_[idx].peer;
      first = std::move(s);
    }
  }
  return first;
}

Status IbTransport::rearm() {
  // Events consumed must be acknowledged before the queue is destroyed; acknowledging them as they
  // come keeps no count to carry.
  int events = 0;
  ibv_cq* evCq = nullptr;
  void* evCtx = nullptr;
  while (ib::ibv().get_cq_event(channel_, &evCq, &evCtx) == 0) ++events;
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return systemError(errno, "ibverbs: reading the completion channel");
  if (events > 0) ib::ibv().ack_cq_events(cq_, static_cast<unsigned>(events));
  int rc = ibv_req_notify_cq(cq_, 0);
  if (rc != 0) return systemError(rc, "ibverbs: ibv_req_notify_cq");
  armed_ = true;
  return okStatus();
}

Status IbTransport::progress(int* failedPeer) {
  if (cq_ == nullptr) return okStatus();
  int got = kPollBatch;
  for (int round = 0; round < kPollRounds && got == kPollBatch; ++round) {
    BRAID_TRY(pollCq(failedPeer, &got));
    // A completion after the queue was armed fired an event and disarmed it (maybe: the event may
    // still be on its way).
    if (got > 0) armed_ = false;
  }
  if (got == 0 && !armed_) {
    // Idle after completions: the caller may sleep on waitFd next. Consume the events, re-arm, then
    // poll once more for completions that came in between; any later completion then makes the
    // descriptor readable again. Idle passes with the queue still armed cost no system call, and
    // neither does a busy stream of completions.
    BRAID_TRY(rearm());
    BRAID_TRY(pollCq(failedPeer, &got));
    if (got > 0) armed_ = false;
  }
  return progressLinks(links_, failedPeer);
}

Status IbTransport::registerRegion(Region* region) {
  if (dev_ == nullptr) return probe_;
  // Local access only: registered buffers are the sources of direct writes (their lkey); no peer
  // writes or reads them, so none gets the right to (a stray rkey cannot reach the user's memory).
  ibv_mr* mr = ib::ibv().reg_mr(dev_->pd, region->base, region->bytes, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr)
    return systemError(errno,
                       "ibverbs: ibv_reg_mr of %zu bytes at %p (is the locked-memory limit, ulimit -l, too low?)",
                       region->bytes, region->base);
  // key[0] finds the registration again; key[1] holds lkey (low half) and rkey (high half, with no
  // remote rights yet).
  region->key[0] = reinterpret_cast<uint64_t>(mr);
  region->key[1] = static_cast<uint64_t>(mr->lkey) | (static_cast<uint64_t>(mr->rkey) << 32);
  return okStatus();
}

void IbTransport::deregisterRegion(Region* region) {
  auto* mr = reinterpret_cast<ibv_mr*>(region->key[0]);
  if (mr == nullptr) return;
  ib::ibv().dereg_mr(mr);
  region->key[0] = 0;
}

}  // namespace

std::unique_ptr<Transport> makeIbverbsTransport() { return std::make_unique<IbTransport>(); }

}  // namespace braid
