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
// Waiting: the worker's event descriptor (ucp_worker_get_efd) is the transport's waitFd. UCX only
// signals it after ucp_worker_arm, and arming on every idle pass would cost a system call per pass
// (and make shared-memory senders signal us); progress() arms it once the worker has been idle for
// kArmAfterNs, well before the engine's background thread goes to sleep on it (after a millisecond
// idle), and forgets the arming whenever the worker progresses (an event was consumed).
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_link.h"

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
// A worker address longer than this is nonsense from a broken peer (UCX's are a few hundred bytes).
constexpr uint64_t kMaxAddressBytes = 1 << 20;

std::string hostOf(const TransportContext& ctx, int rank) {
  if (ctx.peers == nullptr || rank < 0 || static_cast<size_t>(rank) >= ctx.peers->size()) return "?";
  const char* h = (*ctx.peers)[rank].hostname;
  return std::string(h, strnlen(h, sizeof((*ctx.peers)[rank].hostname)));
}

bool sameHost(const TransportContext& ctx, int a, int b) {
  const auto& p = *ctx.peers;
  return strncmp(p[a].hostId, p[b].hostId, sizeof(p[a].hostId)) == 0;
}

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
  return errorf(braidSystemError, "ucx: %s: %s", what, ucs_status_string(st));
}

class UcxTransport final : public Transport {
 public:
  UcxTransport();
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const char* name() const override { return "ucx"; }
  const TransportCaps& caps() const override { return kUcxCaps; }
  void localRecord(const PeerInfo& me, TransportRecord* out) const override {
    (void)me;
    out->bytes[0] = setup_.ok() ? kUcxUp : 0;
  }
  // Any two ranks that both started UCX: whether UCX finds a path between them shows at connect.
  bool canConnect(const Endpoint& a, const Endpoint& b) const override {
    return a.info->rank != b.info->rank && a.record->bytes[0] == kUcxUp && b.record->bytes[0] == kUcxUp;
  }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
  Status progress(int* failedPeer) override;
  int waitFd() const override { return links_.empty() ? -1 : efd_; }
  void dropLink(int peer) override {
    std::erase_if(links_, [peer](const LinkEntry<UcxLink>& e) { return e.peer == peer; });
  }

 protected:
  Status registerRegion(Region* region) override;
  void deregisterRegion(Region* region) override;

 private:
  Status start();
  // Whether the endpoint to `peer` asks UCX for peer-failure reports (BRAID_UCX_ERR_MODE).
  bool peerErrors(const TransportContext& ctx, int peer) const;
  // Both allGathers; fills `addrs` (nranks * *stride bytes) and `lens`.
  Status exchangeAddresses(const TransportContext& ctx, bool publish, std::vector<uint64_t>* lens,
                           std::vector<uint8_t>* addrs, uint64_t* stride);

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
};

UcxTransport::UcxTransport() {
  setup_ = start();
  if (!setup_.ok()) BRAID_WARN(kLogNet, "ucx unavailable on this rank: %s", setup_.message().c_str());
}

Status UcxTransport::start() {
  BRAID_TRY(paramEnum("BRAID_UCX_ERR_MODE", &errMode_));
  sharedMemoryOnly_ = sharedMemoryOnlyTls();
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);  // UCX_* from the environment
  if (st != UCS_OK) return ucxError(st, "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // registerMemory may run on a caller's thread while the executor's thread progresses the worker.
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) {
    context_ = nullptr;
    return ucxError(st, "ucp_init");
  }
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (the executor's lock), not always the same one.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) {
    worker_ = nullptr;
    return ucxError(st, "ucp_worker_create");
  }
  st = ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) {
    // Some transports cannot wake a sleeper; the engine then polls, as it does shm.
    BRAID_INFO(kLogNet, "ucx: no worker event descriptor (%s): polling only", ucs_status_string(st));
    efd_ = -1;
  }
  return okStatus();
}

UcxTransport::~UcxTransport() {
  // The links are gone already, their endpoints' closes started (~UcxLink). Unless a link abandoned
  // requests whose buffers may be gone, progress the worker until the closes finish and it runs dry
  // (a closed endpoint's purged requests return to UCX's pool only as it progresses), within a
  // bound, so that destroying it finds nothing outstanding. Then regions and the worker go before
  // the context.
  bool abandoned = false;
  for (const auto& st : states_) abandoned |= st->abandoned;
  if (worker_ != nullptr && !abandoned) {
    const int64_t until = nowNs() + kDrainNs;
    int quiet = 0;
    auto closing = [this] {
      for (const auto& st : states_)
        if (st->closing != nullptr && ucp_request_check_status(st->closing) == UCS_INPROGRESS) return true;
      return false;
    };
    while ((quiet < kQuietPasses || closing()) && nowNs() < until)
      quiet = ucp_worker_progress(worker_) == 0 ? quiet + 1 : 0;
    if (closing())
      BRAID_WARN(kLogNet, "ucx: closing the endpoints did not finish within %lld ms",
                 static_cast<long long>(kDrainNs / 1000000));
  }
  for (const auto& st : states_)
    if (st->closing != nullptr) ucp_request_free(st->closing);
  releaseRegions();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

bool UcxTransport::peerErrors(const TransportContext& ctx, int peer) const {
  if (errMode_ == "peer") return true;
  if (errMode_ == "none") return false;
  return !sameHost(ctx, ctx.rank, peer) || !sharedMemoryOnly_;
}

Status UcxTransport::exchangeAddresses(const TransportContext& ctx, bool publish, std::vector<uint64_t>* lens,
                                       std::vector<uint8_t>* addrs, uint64_t* stride) {
  const size_t n = static_cast<size_t>(std::max(ctx.nranks, 0));
  ucp_address_t* mine = nullptr;
  size_t mineLen = 0;
  Status local = okStatus();
  if (publish) {
    ucs_status_t st = ucp_worker_get_address(worker_, &mine, &mineLen);
    if (st != UCS_OK) local = ucxError(st, "ucp_worker_get_address");
  }
  if (!local.ok())
    BRAID_WARN(kLogNet, "ucx: rank %d cannot publish its address: %s", ctx.rank, local.message().c_str());
  uint64_t myLen = local.ok() ? mineLen : 0;
  lens->assign(n, 0);
  Status s = ctx.allGather(&myLen, sizeof(myLen), lens->data());
  uint64_t longest = 0;
  for (uint64_t l : *lens) longest = std::max(longest, l);
  if (s.ok() && longest > kMaxAddressBytes)
    s = errorf(braidRemoteError, "ucx: a rank published a worker address of %llu bytes",
               static_cast<unsigned long long>(longest));
  // Every rank saw the same lengths, so all skip the second exchange alike when nobody has one.
  if (s.ok() && longest > 0) {
    std::vector<uint8_t> padded(longest, 0);
    if (myLen > 0) memcpy(padded.data(), mine, myLen);
    addrs->assign(n * longest, 0);
    s = ctx.allGather(padded.data(), longest, addrs->data());
  }
  if (mine != nullptr) ucp_worker_release_address(worker_, mine);
  *stride = longest;
  BRAID_TRY(s);
  return local;
}

Status UcxTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Link>>* out) {
  const int64_t startNs = nowNs();
  std::vector<bool> seen(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  Status local = setup_;
  for (int p : peers) {
    if (p < 0 || p >= ctx.nranks || p == ctx.rank || seen[p]) {
      local = errorf(braidInternalError, "ucx connect: bad or repeated peer rank %d (rank %d of %d)", p, ctx.rank,
                     ctx.nranks);
      break;
    }
    seen[p] = true;
  }
  std::vector<uint64_t> lens;
  std::vector<uint8_t> addrs;
  uint64_t stride = 0;
  BRAID_TRY(exchangeAddresses(ctx, local.ok() && !peers.empty(), &lens, &addrs, &stride));
  BRAID_TRY(local);

  std::vector<std::unique_ptr<Link>> result(peers.size());
  int withReports = 0;
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    if (lens[p] == 0)
      return errorf(braidRemoteError, "ucx connect: peer rank %d (host %s) could not set up ucx (see its log)", p,
                    hostOf(ctx, p).c_str());
    states_.push_back(std::make_unique<UcxEndpointState>());
    auto link = std::make_unique<UcxLink>(worker_, states_.back().get(), ctx.rank, p, hostOf(ctx, p));
    const bool pe = peerErrors(ctx, p);
    withReports += pe ? 1 : 0;
    BRAID_TRY(link->open(reinterpret_cast<const ucp_address_t*>(addrs.data() + p * stride), pe));
    result[i] = std::move(link);
  }
  // Only once every link is up: a failed connect leaves no pointers to the links it dropped.
  for (size_t i = 0; i < peers.size(); ++i) links_.push_back({static_cast<UcxLink*>(result[i].get()), peers[i]});
  BRAID_INFO(kLogNet, "ucx: rank %d connected to %zu peers (%d with peer-failure reports) in %.1f ms, %s", ctx.rank,
             peers.size(), withReports, (nowNs() - startNs) / 1e6,
             efd_ >= 0 ? "wakes on the worker's event descriptor" : "polled");
  *out = std::move(result);
  return okStatus();
}

Status UcxTransport::progress(int* failedPeer) {
  if (links_.empty()) return okStatus();
  unsigned events = 0;
  for (int i = 0; i < kMaxWorkerPasses; ++i) {
    const unsigned k = ucp_worker_progress(worker_);
    events += k;
    if (k == 0) break;
  }
  BRAID_TRY(progressLinks(links_, failedPeer));
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
    armed_ = ucp_worker_arm(worker_) == UCS_OK;
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
  ucs_status_t st = ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK)
    return errorf(braidSystemError, "ucx: ucp_mem_map of %zu bytes at %p: %s", region->bytes, region->base,
                  ucs_status_string(st));
  region->key[0] = reinterpret_cast<uintptr_t>(memh);
  return okStatus();
}

void UcxTransport::deregisterRegion(Region* region) {
  auto memh = reinterpret_cast<ucp_mem_h>(region->key[0]);
  if (memh == nullptr) return;
  ucp_mem_unmap(context_, memh);
  region->key[0] = 0;
}

}  // namespace

std::unique_ptr<Transport> makeUcxTransport() { return std::make_unique<UcxTransport>(); }

}  // namespace braid
