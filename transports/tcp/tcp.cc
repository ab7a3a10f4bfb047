// The tcp transport: BRAID_NSOCKS stream sockets per pair of ranks, usable wherever the ranks reach
// each other over IP, hence the registry's fallback (canConnect is true for any two distinct ranks).
//
// Connection setup (collective, one ctx.allGather of a fixed-size AddrRecord per rank):
//   1. Every rank that expects connections (it has a tcp peer of higher rank) listens on
//      defaultLocalAddress() with port 0 and publishes the address; a rank that fails locally
//      (e.g. BRAID_SOCKET_IFNAME names no interface) still takes part, publishing kFailed, so that
//      its peers fail at once with a clear message instead of waiting for the deadline.
//   2. For each peer p < rank and each lane (socket) we connect to p and send a Handshake {magic,
//      version, size, commId, from, to, secret, lane, lanes}. connectTo returns as soon as the kernel has queued the
//      connection on p's listener, so these never wait on p's own progress and cannot deadlock.
//   3. One poll() loop then serves, together: the listener and the half-open accepted
//      connections (a Doorway, src/doorway.h: each with its own deadline, bounded in number, junk
//      refused at its first bytes, accept running out of descriptors never spinning or failing the
//      setup), and our outgoing connections waiting for their one-byte ack. A complete handshake is
//      checked field by field (tcp_wire.h; the secret in constant time) and acked; a wrong
//      communicator, unexpected or duplicate rank is closed while the real peers carry on. A
//      connector whose connection is closed before the ack (dropped among a flood) connects again.
// The data path lives in tcp_link.cc.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/base/socket.h"
#include "src/doorway.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_wire.h"
#include "transports/transport.h"

namespace braid {
namespace {

using tcp::AddrRecord;
using tcp::Handshake;

// A connector whose connection the acceptor closed before acking waits this long to connect again.
constexpr int64_t kReconnectMs = 50;

// A connection we opened to a lower rank, waiting for its ack.
struct Outgoing {
  size_t slot;  // index into `peers`
  uint32_t lane;
  SockAddr addr;
  Fd fd;                      // invalid while waiting to connect again
  int64_t reconnectAtNs = 0;  // when fd is invalid
  int closes = 0;             // times the peer closed on us before acking
  std::string lastClose;
};

// Nonblocking, TCP_NODELAY (messages are framed by us; Nagle would hold back headers and small
// messages for an ack), and the configured socket buffers.
Status configureDataSocket(int fd, size_t sockbuf, int peer) {
  BRAID_TRY(setNonBlocking(fd, true));
  BRAID_TRY(setNoDelay(fd));
  if (sockbuf == 0) return okStatus();  // keep the kernel's autotuning
  int want = static_cast<int>(std::min<size_t>(sockbuf, 1u << 30));
  for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
    if (setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want)) != 0)
      return systemError(errno, "setsockopt(%s, %d)", opt == SO_SNDBUF ? "SO_SNDBUF" : "SO_RCVBUF", want);
    int got = 0;
    socklen_t len = sizeof(got);
    // Linux doubles the request for its own bookkeeping and caps it at net.core.{w,r}mem_max.
    if (getsockopt(fd, SOL_SOCKET, opt, &got, &len) == 0 && got < want)
      BRAID_INFO(kLogNet, "tcp: peer %d: kernel capped %s at %d bytes (asked %d; see net.core.%s)", peer,
                 opt == SO_SNDBUF ? "SO_SNDBUF" : "SO_RCVBUF", got, want, opt == SO_SNDBUF ? "wmem_max" : "rmem_max");
  }
  return okStatus();
}

// Everything connect() needs besides the context, read and checked before the allGather.
struct Setup {
  size_t chunk = 0;
  size_t sockbuf = 0;
  size_t crowdSndbuf = 0;
  uint32_t lanes = 1;
  TcpShaping shaping;
  bool zeroCopy = false;
  Fd listenFd;
  SockAddr bound;
};

Status prepare(const TransportContext& ctx, const std::vector<int>& peers, Setup* setup, AddrRecord* rec) {
  std::vector<bool> seen(static_cast<size_t>(std::max(ctx.nranks, 0)), false);
  bool needListener = false;
  for (int p : peers) {
    if (p < 0 || p >= ctx.nranks || p == ctx.rank || seen[p])
      return errorf(braidInternalError, "tcp connect: bad or repeated peer rank %d (rank %d of %d)", p, ctx.rank,
                    ctx.nranks);
    seen[p] = true;
    needListener = needListener || p > ctx.rank;
  }
  // Range-checked by paramSize: at least 4K, TcpLink::kMinChunk.
  BRAID_TRY(paramSize("BRAID_TCP_CHUNK", &setup->chunk));
  // Range-checked by paramSize: 0 (the kernel's autotuning) or at least 64K, since a buffer of a few
  // bytes makes every large message crawl one segment at a time.
  BRAID_TRY(paramSize("BRAID_TCP_SOCKBUF", &setup->sockbuf));
  BRAID_TRY(paramSize("BRAID_TCP_CROWD_SNDBUF", &setup->crowdSndbuf));
  // Range-checked by paramInt: 1..kTcpMaxLanes.
  int64_t lanes = 1;
  BRAID_TRY(paramInt("BRAID_NSOCKS", &lanes));
  setup->lanes = static_cast<uint32_t>(lanes);
  rec->lanes = setup->lanes;
  int64_t delayUs = 0;
  size_t rate = 0;
  BRAID_TRY(paramInt("BRAID_TCP_TEST_DELAY_US", &delayUs));
  BRAID_TRY(paramSize("BRAID_TCP_TEST_RATE", &rate));
  BRAID_TRY(paramBool("BRAID_TCP_ZEROCOPY", &setup->zeroCopy));
  setup->shaping.delayNs = delayUs * 1000;
  setup->shaping.bytesPerSec = static_cast<double>(rate);
  if (delayUs > 0 || rate > 0)
    BRAID_WARN(kLogNet, "tcp: rank %d: test shaping on (BRAID_TCP_TEST_DELAY_US=%lld, BRAID_TCP_TEST_RATE=%zu)",
               ctx.rank, static_cast<long long>(delayUs), rate);
  if (!needListener) return okStatus();
  SockAddr local;
  BRAID_TRY(defaultLocalAddress(&local));
  BRAID_TRY(listenOn(local, SOMAXCONN, &setup->listenFd, &setup->bound));
  BRAID_TRY(setNonBlocking(setup->listenFd.get(), true));
  if (!tcp::encodeAddrRecord(setup->bound, rec, setup->lanes))
    return errorf(braidInternalError, "tcp listen address %s does not fit the address record",
                  setup->bound.toString().c_str());
  return okStatus();
}

// Connects socket `lane` to lower rank `peer` at `addr` and sends the handshake; the ack is awaited
// in the poll loop.
Status connectOut(const TransportContext& ctx, int peer, uint32_t lane, const Setup& setup, const SockAddr& addr,
                  Fd* out) {
  const Handshake hs = tcp::makeHandshake(ctx.commId, ctx.secret, ctx.rank, peer, lane, setup.lanes);
  Fd fd;
  Status s = connectTo(addr, ctx.deadline, &fd);
  if (s.ok()) s = sendAll(fd.get(), &hs, sizeof(hs), ctx.deadline);
  if (s.ok()) s = configureDataSocket(fd.get(), setup.sockbuf, peer);
  if (!s.ok())
    return s.withContext("tcp connect to peer rank " + std::to_string(peer) + " (host " + peerHostname(ctx, peer) +
                         ", " + addr.toString() + ")");
  *out = std::move(fd);
  return okStatus();
}

// Checks a complete handshake; returns the sender's connection's index in `links` (slot in `peers`
// times lanes, plus the lane), or -1 with `why` set.
int checkHandshake(const TransportContext& ctx, const uint8_t* data, size_t len, uint32_t lanes,
                   const std::vector<int>& slotOf, const std::vector<Fd>& links, std::string* why) {
  tcp::HandshakeExpect want;
  want.commId = ctx.commId;
  want.secret = ctx.secret;
  want.rank = ctx.rank;
  want.nranks = ctx.nranks;
  want.lanes = lanes;
  Handshake hs;
  Status s = tcp::decodeHandshake(data, len, want, &hs);
  if (!s.ok()) {
    *why = s.message();
    return -1;
  }
  if (slotOf[hs.from] < 0) {
    *why = "rank " + std::to_string(hs.from) + " is no tcp peer of ours";
    return -1;
  }
  const int at = slotOf[hs.from] * static_cast<int>(lanes) + static_cast<int>(hs.lane);
  if (links[at].valid()) {
    *why = "a second connection claiming rank " + std::to_string(hs.from) + " socket " + std::to_string(hs.lane);
    return -1;
  }
  return at;
}

// Step 3: one poll() loop serving the listener, the half-open accepted connections and our
// outgoing connections until every link is up. Fills links[slot * lanes + lane] for every peer.
class Establisher {
 public:
  Establisher(const TransportContext& ctx, const std::vector<int>& peers, const Setup& setup,
              std::vector<Outgoing>* outgoing, std::vector<Fd>* links);
  Status run();

 private:
  Status timedOut() const;
  // Reads the ack of outgoing connection o; a close before the ack schedules a new connection.
  Status readAck(Outgoing& o);
  Status reconnectDue(int64_t now);
  // A whole handshake arrived: the peer's link, or a refusal; an error once the peer is proven.
  Status onHandshake(Doorway::Conn& c);

  const TransportContext& ctx_;
  const std::vector<int>& peers_;
  const Setup& setup_;
  std::vector<Outgoing>& outgoing_;
  std::vector<Fd>& links_;
  std::vector<int> slotOf_;
  int expected_ = 0;
  int accepted_ = 0;
  Doorway door_;
};

Establisher::Establisher(const TransportContext& ctx, const std::vector<int>& peers, const Setup& setup,
                         std::vector<Outgoing>* outgoing, std::vector<Fd>* links)
    : ctx_(ctx),
      peers_(peers),
      setup_(setup),
      outgoing_(*outgoing),
      links_(*links),
      slotOf_(static_cast<size_t>(ctx.nranks), -1),
      door_("handshake", sizeof(Handshake), tcp::checkHandshakePrefix, kLogNet,
            "tcp: rank " + std::to_string(ctx.rank)) {
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < ctx.rank) continue;
    slotOf_[peers[i]] = static_cast<int>(i);
    expected_ += static_cast<int>(setup.lanes);
  }
}

Status Establisher::run() {
  const Doorway::Arrived arrived = [this](Doorway::Conn& c) { return onHandshake(c); };
  std::vector<pollfd> pfds;
  std::vector<size_t> polledOut;  // indices into outgoing_, in pfds order
  while (accepted_ < expected_ || !outgoing_.empty()) {
    const int64_t now = nowNs();
    if (now >= ctx_.deadline.atNs) return timedOut();
    BRAID_TRY(reconnectDue(now));
    door_.expire(now);
    const bool listening = accepted_ < expected_ && door_.listening(now);
    int64_t wakeNs = door_.wakeNs(ctx_.deadline.atNs);
    for (const Outgoing& o : outgoing_)
      if (!o.fd.valid()) wakeNs = std::min(wakeNs, o.reconnectAtNs);
    const int timeoutMs = static_cast<int>(std::clamp<int64_t>((wakeNs - now + 999999) / 1000000, 0, 1000));

    pfds.clear();
    polledOut.clear();
    if (listening) pfds.push_back({setup_.listenFd.get(), POLLIN, 0});
    for (size_t i = 0; i < outgoing_.size(); ++i) {
      if (!outgoing_[i].fd.valid()) continue;
      pfds.push_back({outgoing_[i].fd.get(), POLLIN, 0});
      polledOut.push_back(i);
    }
    const size_t doorAt = pfds.size();
    door_.addPollFds(&pfds);
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return systemError(errno, "tcp connect: poll");
    if (rc <= 0) continue;

    size_t at = 0;
    const bool listenerReady = listening && pfds[at++].revents != 0;
    for (size_t i : polledOut)
      if (pfds[at++].revents != 0) BRAID_TRY(readAck(outgoing_[i]));
    // Connected ones leave `outgoing` (their fd moved to links, nothing scheduled).
    outgoing_.erase(std::remove_if(outgoing_.begin(), outgoing_.end(),
                                   [](const Outgoing& o) { return !o.fd.valid() && o.reconnectAtNs == 0; }),
                    outgoing_.end());
    BRAID_TRY(door_.serve(pfds.data() + doorAt, arrived));  // before acceptSome, which appends
    if (listenerReady) BRAID_TRY(door_.acceptSome(setup_.listenFd.get(), now, ctx_.deadline.atNs, arrived));
  }
  door_.close();
  return okStatus();
}

Status Establisher::timedOut() const {
  std::string missing;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Outgoing* out = nullptr;
    for (const Outgoing& o : outgoing_)
      if (o.slot == i) out = &o;
    bool up = true;
    for (uint32_t l = 0; l < setup_.lanes; ++l) up = up && links_[i * setup_.lanes + l].valid();
    if (peers_[i] > ctx_.rank ? up : out == nullptr) continue;
    // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on a chain of +.
    missing.append(" ").append(std::to_string(peers_[i])).append(" (host ");
    missing.append(peerHostname(ctx_, peers_[i])).append(")");
    if (out != nullptr && out->closes > 0)
      missing.append(" [closed our handshake connection ")
          .append(std::to_string(out->closes))
          .append(" times: ")
          .append(out->lastClose)
          .append("; see its log]");
  }
  return errorf(braidTimeout,
                "tcp connect: rank %d timed out waiting for peer ranks%s (%llu strange connections "
                "refused)%s",
                ctx_.rank, missing.c_str(), static_cast<unsigned long long>(door_.refusals().total()),
                door_.acceptTrouble().c_str());
}

Status Establisher::readAck(Outgoing& o) {
  const int peer = peers_[o.slot];
  uint8_t ack = 0;
  ssize_t n = recv(o.fd.get(), &ack, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return okStatus();
  if (n == 1 && ack == tcp::kAck) {
    BRAID_TRACE(kLogNet, "tcp: rank %d connected to peer rank %d", ctx_.rank, peer);
    links_[o.slot * setup_.lanes + o.lane] = std::move(o.fd);  // invalid fd, reconnectAtNs 0: removal
    return okStatus();
  }
  if (n == 1)
    return errorf(braidRemoteError, "tcp connect: peer rank %d (host %s) answered our handshake with 0x%02x", peer,
                  peerHostname(ctx_, peer).c_str(), ack);
  if (n < 0 && errno != ECONNRESET && errno != EPIPE)
    return systemError(errno, "tcp connect: waiting for the ack of peer rank %d (host %s)", peer,
                       peerHostname(ctx_, peer).c_str());
  // Closed before acking: the peer dropped us among a flood of strangers, or refused the handshake
  // (then we keep trying until the deadline, whose message says so). Connect again shortly.
  ++o.closes;
  o.lastClose = n == 0 ? "closed" : strerror(errno);
  BRAID_INFO(kLogNet, "tcp: rank %d: peer rank %d closed our handshake connection (%s); connecting again", ctx_.rank,
             peer, o.lastClose.c_str());
  o.fd.reset();
  o.reconnectAtNs = nowNs() + kReconnectMs * 1000000;
  return okStatus();
}

Status Establisher::reconnectDue(int64_t now) {
  for (Outgoing& o : outgoing_) {
    if (o.fd.valid() || o.reconnectAtNs > now) continue;
    BRAID_TRY(connectOut(ctx_, peers_[o.slot], o.lane, setup_, o.addr, &o.fd));
    o.reconnectAtNs = 0;
  }
  return okStatus();
}

Status Establisher::onHandshake(Doorway::Conn& p) {
  std::string why;
  const int at = checkHandshake(ctx_, p.buf, p.got, setup_.lanes, slotOf_, links_, &why);
  if (at < 0) {
    door_.refusals().refuse(p.from, why);
    return okStatus();
  }
  // From here on it is a proven peer: failures are real errors, not strangers to shrug off.
  const int peer = peers_[static_cast<size_t>(at) / setup_.lanes];
  ssize_t sent = send(p.fd.get(), &tcp::kAck, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  Status s = sent == 1 ? configureDataSocket(p.fd.get(), setup_.sockbuf, peer)
                       : systemError(sent < 0 ? errno : EAGAIN, "sending the handshake ack");
  if (!s.ok())
    return s.withContext("tcp connect: peer rank " + std::to_string(peer) + " (host " + peerHostname(ctx_, peer) + ")");
  BRAID_TRACE(kLogNet, "tcp: rank %d accepted peer rank %d from %s", ctx_.rank, peer, p.from.toString().c_str());
  links_[at] = std::move(p.fd);
  ++accepted_;
  return okStatus();
}

class TcpTransport final : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  const TransportCaps& caps() const override { return kTcpCaps; }
  // Any two ranks that reach each other over IP: the record is not needed.
  bool canConnect(const Endpoint& a, const Endpoint& b) const override { return a.info->rank != b.info->rank; }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
  Status progress(int* failedPeer) override { return progressLinks(links_, failedPeer); }
  int waitFd() const override { return epoll_.get(); }
  void dropLink(int peer) override {
    std::erase_if(links_, [peer](const LinkEntry<TcpLink>& e) { return e.peer == peer; });
  }

 private:
  TcpCrowd crowd_;                         // shared by the links to peers on this host
  std::vector<LinkEntry<TcpLink>> links_;  // owned by the communicator, which destroys them first
  // Readable when any link's socket got data (its sockets are edge-triggered in it: new data makes
  // it readable again, data nobody asked for yet does not keep a sleeper spinning); invalid
  // without links.
  Fd epoll_;
};

Status TcpTransport::connect(const TransportContext& ctx, const std::vector<int>& peers,
                             std::vector<std::unique_ptr<Link>>* out) {
  int64_t startNs = nowNs();
  Setup setup;
  AddrRecord mine{};
  Status local = prepare(ctx, peers, &setup, &mine);
  if (!local.ok()) {
    BRAID_WARN(kLogNet, "tcp: rank %d cannot set up: %s", ctx.rank, local.message().c_str());
    mine = AddrRecord{};
    mine.state = tcp::kFailed;
  }
  // Always exactly one allGather, whatever happened locally, so that every rank stays in step.
  std::vector<AddrRecord> all(static_cast<size_t>(std::max(ctx.nranks, 0)));
  BRAID_TRY(ctx.allGather(&mine, sizeof(mine), all.data()));
  if (!local.ok()) return local;

  // Both ends of a pair must cut messages across the same number of sockets.
  for (int p : peers)
    if (all[p].state != tcp::kFailed && all[p].lanes != setup.lanes)
      return errorf(braidInvalidUsage, "tcp connect: peer rank %d (host %s) has BRAID_NSOCKS=%u, rank %d has %u", p,
                    peerHostname(ctx, p).c_str(), all[p].lanes, ctx.rank, setup.lanes);
  const size_t lanes = setup.lanes;
  std::vector<Fd> links(peers.size() * lanes);
  std::vector<Outgoing> outgoing;
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    if (p > ctx.rank) continue;
    SockAddr addr;
    Status s = tcp::decodeAddrRecord(reinterpret_cast<const uint8_t*>(&all[p]), sizeof(all[p]), &addr);
    if (!s.ok())
      return s.withContext("tcp connect: peer rank " + std::to_string(p) + " (host " + peerHostname(ctx, p) + ")");
    for (uint32_t l = 0; l < setup.lanes; ++l) {
      Outgoing& o = outgoing.emplace_back();
      o.slot = i;
      o.lane = l;
      o.addr = addr;
      BRAID_TRY(connectOut(ctx, p, l, setup, o.addr, &o.fd));
    }
  }
  Establisher est(ctx, peers, setup, &outgoing, &links);
  BRAID_TRY(est.run());

  // Made once: a second connect (links moved here by the self-test) adds to it, since the engine
  // watches this descriptor and the earlier links' sockets are in it.
  if (!peers.empty() && !epoll_.valid()) {
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return systemError(errno, "tcp: epoll_create1");
  }
  // With the kernel's autotuning (BRAID_TCP_SOCKBUF=0) the buffers stay alone: setting SO_SNDBUF
  // would end the autotuning for good.
  crowd_.crowded = setup.crowdSndbuf;
  crowd_.normal = setup.sockbuf;
  const bool crowdable = setup.crowdSndbuf > 0 && setup.crowdSndbuf < setup.sockbuf;
  std::vector<std::unique_ptr<Link>> result(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    std::vector<Fd> fds(lanes);
    TcpLinkOptions opt;
    opt.chunkBytes = setup.chunk;
    opt.shaping = setup.shaping;
    opt.zeroCopy = setup.zeroCopy;
    opt.crowd = crowdable && onSameHost(ctx, ctx.rank, peers[i]) ? &crowd_ : nullptr;
    for (size_t l = 0; l < lanes; ++l) {
      // A kernel without SO_ZEROCOPY (before 4.14) keeps the link on plain sends.
      const int one = 1;
      if (opt.zeroCopy && setsockopt(links[i * lanes + l].get(), SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) != 0) {
        BRAID_WARN(kLogNet, "tcp: peer rank %d: SO_ZEROCOPY refused (%s): BRAID_TCP_ZEROCOPY is off for it", peers[i],
                   strerror(errno));
        opt.zeroCopy = false;
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLET;
      ev.data.u32 = static_cast<uint32_t>(i);
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, links[i * lanes + l].get(), &ev) != 0)
        return systemError(errno, "tcp: epoll_ctl for peer rank %d", peers[i]);
      fds[l] = std::move(links[i * lanes + l]);
    }
    result[i] = std::make_unique<TcpLink>(std::move(fds), peers[i], peerHostname(ctx, peers[i]), opt);
  }
  // Only once every link is up: a failed connect leaves no pointers to the links it dropped.
  for (size_t i = 0; i < peers.size(); ++i) links_.push_back({static_cast<TcpLink*>(result[i].get()), peers[i]});
  BRAID_INFO(kLogNet,
             "tcp: rank %d connected to %zu peers%s%s in %.1f ms (%u sockets each, chunk %zu, socket buffers %zu, "
             "crowded %zu%s)",
             ctx.rank, peers.size(), setup.listenFd.valid() ? ", listening on " : "",
             setup.listenFd.valid() ? setup.bound.toString().c_str() : "", (nowNs() - startNs) / 1e6, setup.lanes,
             setup.chunk, setup.sockbuf, crowdable ? setup.crowdSndbuf : 0, setup.zeroCopy ? ", zero-copy sends" : "");
  *out = std::move(result);
  return okStatus();
}

}  // namespace

std::unique_ptr<Transport> makeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace braid
