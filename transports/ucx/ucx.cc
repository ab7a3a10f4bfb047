// The ucx transport: UCX's UCP layer carries braid's messages, so braid reaches every fabric UCX
// drives (InfiniBand, RoCE, EFA, TCP, shared memory) without a driver of its own. Used only where
// BRAID_TRANSPORTS names it (the default list is shm,tcp).
//
// One UCP context and one worker per communicator (created with the transport, so that a machine
// where UCX cannot start says so in its record and the pair falls to the next transport), the
// tag-matching API (UCP_FEATURE_TAG: braid's messages are whole, matched in order, of known size,
// which is exactly tagged send/receive; active messages would need our own matching and a copy out
// of UCX's buffers), and one endpoint per peer (ucx_link.cc).
//
// Connection setup (collective, always two ctx.allGather calls, whatever happened locally): every
// rank publishes its worker address length, then the addresses padded to the longest. Worker
// addresses out of band (rather than a UCX listener) let UCX pick shared memory between ranks of
// one host.
//
// Peer failure: UCX reports a dead peer only in the UCP_ERR_HANDLING_MODE_PEER error mode, which
// also keeps UCX off its shared-memory transports. BRAID_UCX_ERR_MODE=auto asks for it for every
// pair, except on one host when UCX_TLS allows shared memory only: without it a peer's death can
// kill the survivors inside UCX (its cma transport aborts the process when process_vm_readv finds
// the peer gone, seen in the link contract test), and braid's own shm transport comes before ucx on
// one host anyway. Where UCX reports nothing, braid's control plane still notices the dead rank and
// fails the communicator naming it.
//
// Data paths (BRAID_UCX_PROTO): tag (ucx_link.cc) or rma (ucx_rma_link.cc: braid's chunk/credit
// protocol over puts into ucp_mem_map'ed rings). In rma mode the address exchange also carries, per
// rank, its ring mapping's address and packed rkey and where in it each peer's ring lies (one
// mapping per connect for all peers: one rkey to pack and publish); the rings and the staging rings
// belong to the transport, not the links, because UCX may still touch them while the worker drains
// after the links are gone.
//
// Waiting: the worker's event descriptor (ucp_worker_get_efd) is the transport's waitFd. UCX only
// signals it after ucp_worker_arm, and arming on every idle pass would cost a system call per pass
// (and make shared-memory senders signal us); progress() arms it once the worker has been idle for
// kArmAfterNs, well before the engine's background thread goes to sleep on it (after a millisecond
// idle), and forgets the arming whenever the worker progresses (an event was consumed).

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_api.h"
#include "transports/ucx/ucx_link.h"
#include "transports/ucx/ucx_rma_link.h"

namespace braid {
namespace {

// The record's first byte: whether this rank could start UCX (its context and worker).
constexpr uint8_t kUcxUp = 1;
// Idle time after which progress() arms the worker's event descriptor (see the file comment).
constexpr int64_t kArmAfterNs = 200000;
// ucp_worker_progress calls per progress() at most, so one busy worker cannot hold the executor.
constexpr int kMaxWorkerPasses = 8;
// Teardown: the worker is drained until the endpoints' closes finish and it reports no progress
// this many passes in a row, for at most kDrainNs (a slow-path callback may need a few passes to
// run; a flush to a peer that is gone ends in UCX's own timeout or ours).
constexpr int kQuietPasses = 16;
constexpr int64_t kDrainNs = 2000000000;
// rma mode's goodbye: how long teardown waits for the peers to answer (a peer answers whenever its
// worker progresses: in an operation, or in its own teardown).
constexpr int64_t kGoodbyeNs = 2000000000;
// A worker address longer than this is nonsense from a broken peer (UCX's are a few hundred bytes).
constexpr uint64_t kMaxAddressBytes = 1 << 20;
// Rings start on a page: a registration pins or maps whole pages.
constexpr size_t kRingAlign = 4096;
// Send-queue entries beyond the ring's slots: room for credit returns while every slot is in flight.
constexpr uint32_t kExtraWrites = 4;

enum class Proto : uint32_t { kTag = 1, kRma = 2 };

// What every rank publishes first: the sizes of what it publishes second, and its data path.
struct Published {
  uint64_t addrBytes = 0;
  uint32_t rmaBytes = 0;
  uint32_t proto = 0;
};

// rma mode: the head of a rank's ring record, followed by nranks offsets (where the ring for that
// rank lies in the mapping; kNoRing for non-peers) and the packed rkey.
struct RmaHead {
  uint32_t slots = 0;
  uint32_t slotBytes = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint32_t rkeyBytes = 0;
  uint32_t nranks = 0;
};
constexpr uint64_t kNoRing = ~0ull;

// Whether UCX_TLS limits UCX to transports that cannot report a peer's failure (shared memory and
// self). Read from the variable rather than probed: a probe endpoint in the peer-failure mode logs a
// UCX error when it fails. Every rank of a job reads the same UCX_TLS, so all decide alike.
bool sharedMemoryOnlyTls() {
  const char* tls = getenv("UCX_TLS");
  if (tls == nullptr || tls[0] == '\0' || tls[0] == '^') return false;  // all, or all but some
  auto isLocal = [](const std::string& name) {
    for (const char* local : {"sm", "shm", "posix", "sysv", "xpmem", "knem", "cma", "self"})
      if (name == local) return true;
    return false;  // tcp, rc, ud, dc, all, an alias: something that can report failures
  };
  const std::string list(tls);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (!isLocal(list.substr(pos, comma - pos))) return false;
    pos = comma + 1;
  }
  return true;
}

Status ucxError(ucs_status_t st, const char* what) {
  return errorf(braidSystemError, "ucx: %s: %s", what, ucx().ucs_status_string(st));
}

class UcxTransport final : public Transport {
 public:
  UcxTransport();
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const char* name() const override { return "ucx"; }
  const TransportCaps& caps() const override { return proto_ == Proto::kRma ? kUcxRmaCaps : kUcxCaps; }
  void localRecord(const PeerInfo& me, TransportRecord* out) const override {
    (void)me;
    out->bytes[0] = setup_.ok() ? kUcxUp : 0;
  }
  // Any two ranks that both started UCX: whether UCX finds a path between them shows at connect.
  bool canConnect(const Endpoint& a, const Endpoint& b) const override {
    return a.info->rank != b.info->rank && a.record->bytes[0] == kUcxUp && b.record->bytes[0] == kUcxUp;
  }
  // This rank's own reason is setup_'s; a peer's is in its log.
  std::string whyNot(const Endpoint& a, const Endpoint& b) const override {
    if (a.info->rank == b.info->rank) return "one rank";
    std::string why;
    if (a.record->bytes[0] != kUcxUp) {
      std::string mine = setup_.message();
      if (mine.rfind("ucx: ", 0) == 0) mine.erase(0, 5);  // the caller names the transport
      why = "rank " + std::to_string(a.info->rank) + " could not start UCX (" + mine + ")";
    }
    if (b.record->bytes[0] != kUcxUp)
      why.append(why.empty() ? "" : "; ")
          .append("rank " + std::to_string(b.info->rank) + " could not start UCX (see its log)");
    return why;
  }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
  Status progress(int* failedPeer) override;
  int waitFd() const override { return links_.empty() && rmaLinks_.empty() ? -1 : efd_; }
  void dropLink(int peer) override {
    std::erase_if(links_, [peer](const LinkEntry<UcxLink>& e) { return e.peer == peer; });
    std::erase_if(rmaLinks_, [peer](const LinkEntry<UcxRmaLink>& e) { return e.peer == peer; });
  }

 protected:
  Status registerRegion(Region* region) override;
  void deregisterRegion(Region* region) override;

 private:
  Status start();
  Status readSettings();
  // Whether the endpoint to `peer` asks UCX for peer-failure reports (BRAID_UCX_ERR_MODE).
  bool peerErrors(const TransportContext& ctx, int peer) const;
  // Both allGathers: every rank's Published into `heads`, then its worker address (padded to
  // *addrStride) followed by `rmaRecord` (padded), nranks * *stride bytes into `all`.
  Status exchangeAddresses(const TransportContext& ctx, bool publish, const std::vector<uint8_t>& rmaRecord,
                           std::vector<Published>* heads, std::vector<uint8_t>* all, uint64_t* addrStride,
                           uint64_t* stride);
  // rma mode: maps the rings for `peers` (one each way per peer) and builds this rank's record.
  Status prepareRings(const TransportContext& ctx, const std::vector<int>& peers, std::vector<uint8_t>* record);
  // rma mode: the link to peers[i] from the peer's record.
  Status connectRma(const TransportContext& ctx, size_t i, int peer, const uint8_t* peerRecord, uint32_t peerBytes,
                    const ucp_address_t* peerAddress, bool pe, std::unique_ptr<Link>* out);
  // The active-message handler of rma mode: hands the message to the link of the rank it names.
  static ucs_status_t onAm(void* arg, const void* header, size_t headerBytes, void* data, size_t dataBytes,
                           const ucp_am_recv_param_t* param);
  // rma mode: answers the goodbyes that came (onAm only notes them: it runs inside UCX's progress).
  void answerGoodbyes();
  // Teardown: waits until every goodbye this side sent is answered (or its endpoint failed, or
  // kGoodbyeNs passed), answering the peers' meanwhile, then closes those endpoints.
  void finishGoodbyes();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  Status setup_;
  std::string errMode_ = "auto";
  bool sharedMemoryOnly_ = false;          // UCX_TLS allows no transport that reports peer failure
  int efd_ = -1;                           // the worker's event descriptor, owned by UCX; -1: poll only
  bool armed_ = false;                     // efd_ will be signalled by the next event
  int64_t idleSince_ = 0;                  // when the worker last stopped progressing; 0 while it progresses
  std::vector<LinkEntry<UcxLink>> links_;  // owned by the communicator, which destroys them first
  std::vector<std::unique_ptr<UcxEndpointState>> states_;  // one per endpoint made, kept to the end

  // rma mode.
  Proto proto_ = Proto::kTag;
  net::ChunkLinkConfig rmaCfg_;
  size_t rmaInline_ = 0;
  bool rmaPuts_ = false;  // chunks above rmaInline_ as puts; else every chunk in its active message
  std::vector<LinkEntry<UcxRmaLink>> rmaLinks_;  // owned by the communicator, as links_
  std::vector<UcxEndpointState*> byRank_;        // the endpoint state of each peer rank, for onAm
  int rank_ = -1;
  uint32_t acksOwed_ = 0;  // goodbyes noted by onAm and not answered yet
  // One per connect with peers: the mapping of all its receive rings, and the staging rings.
  struct Rings {
    ucp_mem_h recv = nullptr;
    uint8_t* recvBase = nullptr;
    uint64_t recvBytes = 0;
    ucp_mem_h staging = nullptr;
    uint8_t* stagingBase = nullptr;
  };
  std::vector<Rings> rings_;
  size_t ringStride_ = 0;  // bytes per peer's ring in a mapping: slots x slot size, page-rounded
};

UcxTransport::UcxTransport() {
  setup_ = start();
  if (!setup_.ok()) BRAID_WARN(kLogNet, "ucx unavailable on this rank: %s", setup_.message().c_str());
}

Status UcxTransport::readSettings() {
  BRAID_TRY(paramEnum("BRAID_UCX_ERR_MODE", &errMode_));
  std::string proto;
  BRAID_TRY(paramEnum("BRAID_UCX_PROTO", &proto));
  proto_ = proto == "rma" ? Proto::kRma : Proto::kTag;
  size_t slotBytes = 0;
  int64_t slots = 0;
  BRAID_TRY(paramSize("BRAID_UCX_RMA_SLOT_SIZE", &slotBytes));
  // Slots on cache lines: the reduce kernels read whole elements from aligned slots.
  if (slotBytes % 64 != 0)
    return errorf(braidInvalidArgument, "BRAID_UCX_RMA_SLOT_SIZE=%zu is not a multiple of 64", slotBytes);
  BRAID_TRY(paramInt("BRAID_UCX_RMA_SLOTS", &slots));
  BRAID_TRY(paramSize("BRAID_UCX_RMA_INLINE", &rmaInline_));
  std::string write;
  BRAID_TRY(paramEnum("BRAID_UCX_RMA_WRITE", &write));
  // auto: puts only where UCX_TLS keeps UCX to shared memory, whose puts are native (see
  // ucx_rma_link.h for why not over an emulated put).
  rmaPuts_ = write == "put" || (write == "auto" && sharedMemoryOnlyTls());
  rmaCfg_.slots = static_cast<uint32_t>(slots);
  rmaCfg_.slotBytes = slotBytes;
  rmaCfg_.maxWrites = rmaCfg_.slots + kExtraWrites;
  ringStride_ = (static_cast<size_t>(rmaCfg_.slots) * slotBytes + kRingAlign - 1) / kRingAlign * kRingAlign;
  return net::ChunkLink::check(rmaCfg_);
}

Status UcxTransport::start() {
  BRAID_TRY(readSettings());
  BRAID_TRY(loadUcx());
  sharedMemoryOnly_ = sharedMemoryOnlyTls();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucx().ucp_config_read(nullptr, nullptr, &config);  // UCX_* from the environment
  if (st != UCS_OK) return ucxError(st, "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  if (proto_ == Proto::kRma) params.features |= UCP_FEATURE_RMA | UCP_FEATURE_AM;
  // registerMemory may run on a caller's thread while the executor's thread progresses the worker.
  params.mt_workers_shared = 1;
  st = ucx().ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  ucx().ucp_config_release(config);
  if (st != UCS_OK) {
    context_ = nullptr;
    return ucxError(st, "ucp_init");
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (the executor's lock), not always the same one.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucx().ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    worker_ = nullptr;
    return ucxError(st, "ucp_worker_create");
  }
  st = ucx().ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) {
    // Some transports cannot wake a sleeper; the engine then polls, as it does shm.
    BRAID_INFO(kLogNet, "ucx: no worker event descriptor (%s): polling only", ucx().ucs_status_string(st));
    efd_ = -1;
  }
  if (proto_ == Proto::kRma) {
    // Before any endpoint exists, so no peer's message can find the worker without it.
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kUcxAmId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &UcxTransport::onAm;
    hp.arg = this;
    st = ucx().ucp_worker_set_am_recv_handler(worker_, &hp);
    if (st != UCS_OK) return ucxError(st, "ucp_worker_set_am_recv_handler");
  }
  return okStatus();
}

ucs_status_t UcxTransport::onAm(void* arg, const void* header, size_t headerBytes, void* data, size_t dataBytes,
                                const ucp_am_recv_param_t* param) {
  auto* t = static_cast<UcxTransport*>(arg);
  // braid sends eager messages only: a rendezvous one comes from no braid peer; its data is dropped.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    ucx().ucp_am_data_release(t->worker_, data);
    return UCS_OK;
  }
  uint32_t rank = 0;
  if (headerBytes < sizeof(rank)) return UCS_OK;
  memcpy(&rank, header, sizeof(rank));
  if (headerBytes == sizeof(UcxAmCtl) && rank < t->byRank_.size() && t->byRank_[rank] != nullptr) {
    UcxAmCtl c;
    memcpy(&c, header, sizeof(c));
    if (c.count == 0) {  // the goodbye handshake, also after the link is gone
      UcxEndpointState* st = t->byRank_[rank];
      if (c.kind == UcxAmCtl::kFin && !st->finSeen) {
        st->finSeen = true;
        st->ackOwed = true;
        ++t->acksOwed_;
      } else if (c.kind == UcxAmCtl::kAck) {
        st->finAcked = true;
      }
      return UCS_OK;
    }
  }
  // A link gone (or a rank that is no peer) drops the message: after a link's destruction only
  // credits and announcements of a finished exchange can still come.
  if (rank >= t->byRank_.size() || t->byRank_[rank] == nullptr || t->byRank_[rank]->rma == nullptr) return UCS_OK;
  t->byRank_[rank]->rma->onMessage(header, headerBytes, data, dataBytes);
  return UCS_OK;
}

void UcxTransport::answerGoodbyes() {
  // Every message the peer sent before its goodbye has reached its link (onAm delivers them in
  // order): the answer tells it so, and it may close.
  for (const auto& st : states_) {
    if (!st->ackOwed) continue;
    st->ackOwed = false;
    (void)sendUcxCtl(st.get(), rank_, UcxAmCtl::kAck);  // an endpoint gone has nobody to answer
  }
  acksOwed_ = 0;
}

void UcxTransport::finishGoodbyes() {
  // Every link is gone by now: an endpoint still open is one whose goodbye went out (~UcxRmaLink).
  // A peer whose own goodbye came has finished: it needs nothing more from us, and may be gone.
  auto waiting = [this] {
    for (const auto& st : states_)
      if (st->ep != nullptr && !st->finAcked && !st->finSeen && st->error == UCS_OK) return true;
    return false;
  };
  const int64_t until = nowNs() + kGoodbyeNs;
  while ((waiting() || acksOwed_ != 0) && nowNs() < until) {
    ucx().ucp_worker_progress(worker_);
    answerGoodbyes();
  }
  if (waiting())
    BRAID_INFO(kLogNet, "ucx: a peer did not answer the goodbye within %lld ms (busy elsewhere): closing anyway",
               static_cast<long long>(kGoodbyeNs / 1000000));
  for (const auto& st : states_) {
    if (st->ep == nullptr || st->closed) continue;
    closeUcxEndpoint(st->ep, st.get(), st->error != UCS_OK, st->peerErrors);
    st->ep = nullptr;
  }
}

UcxTransport::~UcxTransport() {
  // The links are gone already, their endpoints' closes started (~UcxLink). Unless a link abandoned
  // requests whose buffers may be gone, progress the worker until the closes finish and it runs dry
  // (a closed endpoint's purged requests return to UCX's pool only as it progresses), within a
  // bound, so that destroying it finds nothing outstanding. Then regions and the worker go before
  // the context.
  bool abandoned = false;
  for (const auto& st : states_) abandoned |= st->abandoned;
  if (worker_ != nullptr && !abandoned) finishGoodbyes();
  if (worker_ != nullptr && !abandoned) {
    const int64_t until = nowNs() + kDrainNs;
    int quiet = 0;
    auto closing = [this] {
      for (const auto& st : states_)
        if (st->closing != nullptr && ucx().ucp_request_check_status(st->closing) == UCS_INPROGRESS) return true;
      return false;
    };
    while ((quiet < kQuietPasses || closing()) && nowNs() < until)
      quiet = ucx().ucp_worker_progress(worker_) == 0 ? quiet + 1 : 0;
    if (closing())
      BRAID_WARN(kLogNet, "ucx: closing the endpoints did not finish within %lld ms",
                 static_cast<long long>(kDrainNs / 1000000));
  }
  for (const auto& st : states_) {
    if (st->closing != nullptr) ucx().ucp_request_free(st->closing);
    for (void* r : st->ctlReq)
      if (r != nullptr) ucx().ucp_request_free(r);
  }
  releaseRegions();
  if (worker_ != nullptr) ucx().ucp_worker_destroy(worker_);
  // The rings only once nothing can write into them or read from them any more.
  for (const Rings& r : rings_) {
    if (r.recv != nullptr) ucx().ucp_mem_unmap(context_, r.recv);
    if (r.staging != nullptr) ucx().ucp_mem_unmap(context_, r.staging);
    std::free(r.stagingBase);
  }
  if (context_ != nullptr) ucx().ucp_cleanup(context_);
}

bool UcxTransport::peerErrors(const TransportContext& ctx, int peer) const {
  if (errMode_ == "peer") return true;
  if (errMode_ == "none") return false;
  return !onSameHost(ctx, ctx.rank, peer) || !sharedMemoryOnly_;
}

Status UcxTransport::exchangeAddresses(const TransportContext& ctx, bool publish, const std::vector<uint8_t>& rmaRecord,
                                       std::vector<Published>* heads, std::vector<uint8_t>* all, uint64_t* addrStride,
                                       uint64_t* stride) {
  const size_t n = static_cast<size_t>(std::max(ctx.nranks, 0));
  ucp_address_t* mine = nullptr;
  size_t mineLen = 0;
  Status local = okStatus();
  if (publish) {
    ucs_status_t st = ucx().ucp_worker_get_address(worker_, &mine, &mineLen);
    if (st != UCS_OK) local = ucxError(st, "ucp_worker_get_address");
  }
  if (!local.ok())
    BRAID_WARN(kLogNet, "ucx: rank %d cannot publish its address: %s", ctx.rank, local.message().c_str());
  Published me;
  me.addrBytes = local.ok() ? mineLen : 0;
  me.rmaBytes = local.ok() ? static_cast<uint32_t>(rmaRecord.size()) : 0;
  me.proto = static_cast<uint32_t>(proto_);
  heads->assign(n, Published{});
  Status s = ctx.allGather(&me, sizeof(me), heads->data());
  uint64_t longestAddr = 0, longestRma = 0;
  for (const Published& h : *heads) {
    longestAddr = std::max(longestAddr, h.addrBytes);
    longestRma = std::max<uint64_t>(longestRma, h.rmaBytes);
  }
  if (s.ok() && (longestAddr > kMaxAddressBytes || longestRma > kMaxAddressBytes + 8 * n))
    s = errorf(braidRemoteError, "ucx: a rank published a worker address of %llu bytes and a ring record of %llu",
               static_cast<unsigned long long>(longestAddr), static_cast<unsigned long long>(longestRma));
  // Every rank saw the same lengths, so all skip the second exchange alike when nobody has one.
  const uint64_t longest = longestAddr + longestRma;
  if (s.ok() && longest > 0) {
    std::vector<uint8_t> padded(longest, 0);
    if (me.addrBytes > 0) memcpy(padded.data(), mine, me.addrBytes);
    if (me.rmaBytes > 0) memcpy(padded.data() + longestAddr, rmaRecord.data(), me.rmaBytes);
    all->assign(n * longest, 0);
    s = ctx.allGather(padded.data(), longest, all->data());
  }
  if (mine != nullptr) ucx().ucp_worker_release_address(worker_, mine);
  *addrStride = longestAddr;
  *stride = longest;
  BRAID_TRY(s);
  return local;
}

Status UcxTransport::prepareRings(const TransportContext& ctx, const std::vector<int>& peers,
                                  std::vector<uint8_t>* record) {
  if (peers.empty()) return okStatus();
  const uint64_t total = static_cast<uint64_t>(peers.size()) * ringStride_;
  rings_.emplace_back();
  Rings& r = rings_.back();
  // UCX allocates the receive rings itself, so that it may pick memory its shared-memory
  // transports can map into a peer (they cannot put into arbitrary heap memory).
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.length = total;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  ucs_status_t st = ucx().ucp_mem_map(context_, &mp, &r.recv);
  if (st != UCS_OK) {
    r.recv = nullptr;
    return errorf(braidSystemError, "ucx: ucp_mem_map of %llu bytes of receive rings: %s",
                  static_cast<unsigned long long>(total), ucx().ucs_status_string(st));
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucx().ucp_mem_query(r.recv, &attr);
  if (st != UCS_OK || attr.length < total) return ucxError(st, "ucp_mem_query of the receive rings");
  r.recvBase = static_cast<uint8_t*>(attr.address);
  r.recvBytes = total;
  r.stagingBase = static_cast<uint8_t*>(std::aligned_alloc(kRingAlign, total));
  if (r.stagingBase == nullptr)
    return errorf(braidSystemError, "ucx: cannot allocate %llu bytes of staging rings",
                  static_cast<unsigned long long>(total));
  mp = ucp_mem_map_params_t{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = r.stagingBase;
  mp.length = total;
  st = ucx().ucp_mem_map(context_, &mp, &r.staging);
  if (st != UCS_OK) {
    r.staging = nullptr;
    return ucxError(st, "ucp_mem_map of the staging rings");
  }
  void* packed = nullptr;
  size_t packedBytes = 0;
  st = ucx().ucp_rkey_pack(context_, r.recv, &packed, &packedBytes);
  if (st != UCS_OK) return ucxError(st, "ucp_rkey_pack of the receive rings");
  const size_t n = static_cast<size_t>(ctx.nranks);
  RmaHead h;
  h.slots = rmaCfg_.slots;
  h.slotBytes = static_cast<uint32_t>(rmaCfg_.slotBytes);
  h.base = reinterpret_cast<uintptr_t>(r.recvBase);
  h.bytes = total;
  h.rkeyBytes = static_cast<uint32_t>(packedBytes);
  h.nranks = static_cast<uint32_t>(n);
  std::vector<uint64_t> offsets(n, kNoRing);
  for (size_t i = 0; i < peers.size(); ++i) offsets[peers[i]] = i * ringStride_;
  record->resize(sizeof(h) + n * sizeof(uint64_t) + packedBytes);
  memcpy(record->data(), &h, sizeof(h));
  memcpy(record->data() + sizeof(h), offsets.data(), n * sizeof(uint64_t));
  memcpy(record->data() + sizeof(h) + n * sizeof(uint64_t), packed, packedBytes);
  ucx().ucp_rkey_buffer_release(packed);
  return okStatus();
}

Status UcxTransport::connectRma(const TransportContext& ctx, size_t i, int peer, const uint8_t* peerRecord,
                                uint32_t peerBytes, const ucp_address_t* peerAddress, bool pe,
                                std::unique_ptr<Link>* out) {
  const size_t n = static_cast<size_t>(ctx.nranks);
  RmaHead h;
  if (peerBytes >= sizeof(h)) memcpy(&h, peerRecord, sizeof(h));
  if (peerBytes < sizeof(h) || h.nranks != n || peerBytes != sizeof(h) + n * sizeof(uint64_t) + h.rkeyBytes)
    return errorf(braidRemoteError, "ucx connect: peer rank %d (host %s) published a malformed ring record (%u bytes)",
                  peer, peerHostname(ctx, peer).c_str(), peerBytes);
  if (h.slots != rmaCfg_.slots || h.slotBytes != rmaCfg_.slotBytes)
    return errorf(braidInvalidUsage,
                  "ucx: peer rank %d (host %s) uses rma rings of %u slots of %u bytes, this rank %u of %zu "
                  "(BRAID_UCX_RMA_SLOTS and BRAID_UCX_RMA_SLOT_SIZE must be the same on every rank)",
                  peer, peerHostname(ctx, peer).c_str(), h.slots, h.slotBytes, rmaCfg_.slots, rmaCfg_.slotBytes);
  uint64_t offset = kNoRing;
  memcpy(&offset, peerRecord + sizeof(h) + static_cast<size_t>(ctx.rank) * sizeof(uint64_t), sizeof(offset));
  const uint64_t ringBytes = static_cast<uint64_t>(rmaCfg_.slots) * rmaCfg_.slotBytes;
  if (offset == kNoRing || offset > h.bytes || h.bytes - offset < ringBytes)
    return errorf(braidRemoteError, "ucx connect: peer rank %d (host %s) has no ring for this rank", peer,
                  peerHostname(ctx, peer).c_str());
  const Rings& mine = rings_.back();
  UcxLocalRings local;
  local.recv = mine.recvBase + i * ringStride_;
  local.staging = mine.stagingBase + i * ringStride_;
  local.stagingMemh = mine.staging;
  UcxRemoteRing remote;
  remote.addr = h.base + offset;
  remote.packedRkey = peerRecord + sizeof(h) + n * sizeof(uint64_t);
  auto link = std::make_unique<UcxRmaLink>(worker_, states_.back().get(), rmaCfg_, rmaPuts_ ? rmaInline_ : SIZE_MAX,
                                           ctx.rank, peer, peerHostname(ctx, peer), local);
  BRAID_TRY(link->open(peerAddress, pe, remote));
  *out = std::move(link);
  return okStatus();
}

Status UcxTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Link>>* out) {
  const int64_t startNs = nowNs();
  rank_ = ctx.rank;
  std::vector<bool> seen(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  // A rank with no pair on ucx takes part in the exchange whether or not UCX started here (a
  // transport further down BRAID_TRANSPORTS than the one its pairs use must not fail its init).
  Status local = peers.empty() ? okStatus() : setup_;
  for (int p : peers) {
    if (p < 0 || p >= ctx.nranks || p == ctx.rank || seen[p]) {
      local = errorf(braidInternalError, "ucx connect: bad or repeated peer rank %d (rank %d of %d)", p, ctx.rank,
                     ctx.nranks);
      break;
    }
    seen[p] = true;
  }
  const bool rma = proto_ == Proto::kRma;
  std::vector<uint8_t> record;
  if (local.ok() && rma && setup_.ok()) {
    local = prepareRings(ctx, peers, &record);
    if (!local.ok()) {
      BRAID_WARN(kLogNet, "ucx: rank %d cannot set up its rma rings: %s", ctx.rank, local.message().c_str());
      record.clear();
    }
  }
  std::vector<Published> heads;
  std::vector<uint8_t> all;
  uint64_t addrStride = 0, stride = 0;
  BRAID_TRY(exchangeAddresses(ctx, local.ok() && !peers.empty(), record, &heads, &all, &addrStride, &stride));
  BRAID_TRY(local);

  std::vector<std::unique_ptr<Link>> result(peers.size());
  int withReports = 0;
  if (rma && byRank_.size() < static_cast<size_t>(ctx.nranks)) byRank_.resize(ctx.nranks, nullptr);
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    if (heads[p].addrBytes == 0)
      return errorf(braidRemoteError, "ucx connect: peer rank %d (host %s) could not set up ucx (see its log)", p,
                    peerHostname(ctx, p).c_str());
    if (heads[p].proto != static_cast<uint32_t>(proto_))
      return errorf(braidInvalidUsage,
                    "ucx: peer rank %d (host %s) uses another data path than this rank's BRAID_UCX_PROTO=%s (it "
                    "must be the same on every rank)",
                    p, peerHostname(ctx, p).c_str(), rma ? "rma" : "tag");
    states_.push_back(std::make_unique<UcxEndpointState>());
    const bool pe = peerErrors(ctx, p);
    withReports += pe ? 1 : 0;
    const auto* addr = reinterpret_cast<const ucp_address_t*>(all.data() + p * stride);
    if (rma) {
      BRAID_TRY(connectRma(ctx, i, p, all.data() + p * stride + addrStride, heads[p].rmaBytes, addr, pe, &result[i]));
    } else {
      auto link = std::make_unique<UcxLink>(worker_, states_.back().get(), ctx.rank, p, peerHostname(ctx, p));
      BRAID_TRY(link->open(addr, pe));
      result[i] = std::move(link);
    }
  }
  // Only once every link is up: a failed connect leaves no pointers to the links it dropped.
  for (size_t i = 0; i < peers.size(); ++i) {
    if (rma) {
      rmaLinks_.push_back({static_cast<UcxRmaLink*>(result[i].get()), peers[i]});
      byRank_[peers[i]] = states_[states_.size() - peers.size() + i].get();
    } else {
      links_.push_back({static_cast<UcxLink*>(result[i].get()), peers[i]});
    }
  }
  BRAID_INFO(kLogNet, "ucx: rank %d connected to %zu peers (%d with peer-failure reports, %s) in %.1f ms, %s", ctx.rank,
             peers.size(), withReports,
             !rma       ? "tagged messages"
             : rmaPuts_ ? "rma: puts into registered rings"
                        : "rma: chunks in active messages",
             (nowNs() - startNs) / 1e6, efd_ >= 0 ? "wakes on the worker's event descriptor" : "polled");
  *out = std::move(result);
  return okStatus();
}

Status UcxTransport::progress(int* failedPeer) {
  if (links_.empty() && rmaLinks_.empty()) return okStatus();
  unsigned events = 0;
  for (int i = 0; i < kMaxWorkerPasses; ++i) {
    const unsigned k = ucx().ucp_worker_progress(worker_);
    events += k;
    if (k == 0) break;
  }
  BRAID_TRY(progressLinks(links_, failedPeer));
  BRAID_TRY(progressLinks(rmaLinks_, failedPeer));
  if (acksOwed_ != 0) answerGoodbyes();
  if (events != 0) {
    armed_ = false;
    idleSince_ = 0;
    return okStatus();
  }
  if (armed_ || efd_ < 0) return okStatus();
  const int64_t now = nowNs();
  if (idleSince_ == 0) {
    idleSince_ = now;
  } else if (now - idleSince_ >= kArmAfterNs) {
    // UCS_ERR_BUSY: events arrived meanwhile; the next pass progresses them and arms later.
    armed_ = ucx().ucp_worker_arm(worker_) == UCS_OK;
  }
  return okStatus();
}

Status UcxTransport::registerRegion(Region* region) {
  BRAID_TRY(setup_);
  if (region->bytes == 0) return okStatus();  // nothing to map; key[0] == 0 means "no memh"
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = region->base;
  mp.length = region->bytes;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucx().ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK)
    return errorf(braidSystemError, "ucx: ucp_mem_map of %zu bytes at %p: %s", region->bytes, region->base,
                  ucx().ucs_status_string(st));
  region->key[0] = reinterpret_cast<uintptr_t>(memh);
  return okStatus();
}

void UcxTransport::deregisterRegion(Region* region) {
  auto memh = reinterpret_cast<ucp_mem_h>(region->key[0]);
  if (memh == nullptr) return;
  ucx().ucp_mem_unmap(context_, memh);
  region->key[0] = 0;
}

}  // namespace

std::unique_ptr<Transport> makeUcxTransport() { return std::make_unique<UcxTransport>(); }

}  // namespace braid
