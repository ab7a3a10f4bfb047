// The tcp transport: one stream socket per pair of ranks, usable wherever the ranks reach each
// other over IP, hence the registry's fallback (canConnect is true for any two distinct ranks).
//
// Connection setup (collective, one ctx.allGather of a fixed-size AddrRecord per rank):
//   1. Every rank that expects connections (it has a tcp peer of higher rank) listens on
//      defaultLocalAddress() with port 0 and publishes the address; a rank that fails locally
//      (e.g. BRAID_SOCKET_IFNAME names no interface) still takes part, publishing kFailed, so that
//      its peers fail at once with a clear message instead of waiting for the deadline.
//   2. For each peer p < rank we connect to p and send a Handshake {magic, version, size, commId,
//      from, to, secret}. connectTo returns as soon as the kernel has queued the connection on
//      p's listener, so these never wait on p's own progress and cannot deadlock.
//   3. One poll() loop then serves, together: the listener, every half-open accepted connection
//      (each with its own kHandshakeMs deadline, at most kMaxPending of them: the oldest is dropped
//      to make room), and our outgoing connections waiting for their one-byte ack. The acceptor
//      reads a handshake as soon as it accepts the connection, checks every field as the bytes
//      arrive (tcp_wire.h; the secret in constant time) and acks; anything else -- garbage, short,
//      oversized, silent, one byte a second, wrong communicator, unexpected or duplicate rank -- is
//      closed (logged through a RefusalLog: a few lines, then counts) while the real peers carry
//      on. Accept failing for lack of descriptors drops the oldest stranger, or pauses accepting
//      for kAcceptBackoffMs; it never spins and never fails the setup. A connector whose
//      connection is closed before the ack (dropped among a flood) connects again.
// The data path lives in tcp_link.cc.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "src/config.h"
#include "src/log.h"
#include "src/socket.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_wire.h"
#include "transports/transport.h"

namespace braid {
namespace {

using tcp::AddrRecord;
using tcp::Handshake;

// How long an accepted connection may take to deliver its handshake. A real peer sends it right
// after connecting, so this only bounds strangers; a few seconds absorbs a descheduled peer on an
// oversubscribed host.
constexpr int64_t kHandshakeMs = 5000;
// Half-open connections kept at once; past this the oldest is dropped, so a flood of strangers
// cannot exhaust our descriptors (a real peer whose connection is dropped connects again).
constexpr size_t kMaxPending = 256;
// Accepts per loop round: bounds the work a flood gets before pending handshakes are read again.
constexpr int kAcceptsPerRound = 64;
// When accept fails for lack of descriptors and no stranger can be dropped, the listener stays
// readable: polling it again at once would spin. Wait this long instead.
constexpr int64_t kAcceptBackoffMs = 10;
// A connector whose connection the acceptor closed before acking waits this long to connect again.
constexpr int64_t kReconnectMs = 50;

// An accepted connection that has not yet proven who it is.
struct Pending {
  Fd fd;
  SockAddr from;
  int64_t deadlineNs = 0;
  size_t got = 0;
  uint8_t buf[sizeof(Handshake) + 1];  // one spare byte detects an oversized handshake
};

// A connection we opened to a lower rank, waiting for its ack.
struct Outgoing {
  size_t slot;  // index into `peers`
  SockAddr addr;
  Fd fd;                      // invalid while waiting to connect again
  int64_t reconnectAtNs = 0;  // when fd is invalid
  int closes = 0;             // times the peer closed on us before acking
  std::string lastClose;
};

std::string hostOf(const TransportContext& ctx, int rank) {
  if (ctx.peers == nullptr || rank < 0 || static_cast<size_t>(rank) >= ctx.peers->size()) return "?";
  const char* h = (*ctx.peers)[rank].hostname;
  return std::string(h, strnlen(h, sizeof((*ctx.peers)[rank].hostname)));
}

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
  BRAID_TRY(paramSize("BRAID_TCP_CHUNK", &setup->chunk));
  if (setup->chunk < TcpLink::kMinChunk)
    return errorf(braidInvalidArgument, "BRAID_TCP_CHUNK=%zu is too small (at least %zu)", setup->chunk,
                  TcpLink::kMinChunk);
  BRAID_TRY(paramSize("BRAID_TCP_SOCKBUF", &setup->sockbuf));
  if (!needListener) return okStatus();
  SockAddr local;
  BRAID_TRY(defaultLocalAddress(&local));
  BRAID_TRY(listenOn(local, SOMAXCONN, &setup->listenFd, &setup->bound));
  BRAID_TRY(setNonBlocking(setup->listenFd.get(), true));
  if (!tcp::encodeAddrRecord(setup->bound, rec))
    return errorf(braidInternalError, "tcp listen address %s does not fit the address record",
                  setup->bound.toString().c_str());
  return okStatus();
}

// Connects to lower rank `peer` at `addr` and sends the handshake; the ack is awaited in the poll
// loop.
Status connectOut(const TransportContext& ctx, int peer, const SockAddr& addr, size_t sockbuf, Fd* out) {
  const Handshake hs = tcp::makeHandshake(ctx.commId, ctx.secret, ctx.rank, peer);
  Fd fd;
  Status s = connectTo(addr, ctx.deadline, &fd);
  if (s.ok()) s = sendAll(fd.get(), &hs, sizeof(hs), ctx.deadline);
  if (s.ok()) s = configureDataSocket(fd.get(), sockbuf, peer);
  if (!s.ok())
    return s.withContext("tcp connect to peer rank " + std::to_string(peer) + " (host " + hostOf(ctx, peer) + ", " +
                         addr.toString() + ")");
  *out = std::move(fd);
  return okStatus();
}

// Checks a complete handshake; returns the sender's slot in `peers`, or -1 with `why` set.
int checkHandshake(const TransportContext& ctx, const uint8_t* data, size_t len, const std::vector<int>& slotOf,
                   const std::vector<Fd>& links, std::string* why) {
  tcp::HandshakeExpect want;
  want.commId = ctx.commId;
  want.secret = ctx.secret;
  want.rank = ctx.rank;
  want.nranks = ctx.nranks;
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
  if (links[slotOf[hs.from]].valid()) {
    *why = "a second connection claiming rank " + std::to_string(hs.from);
    return -1;
  }
  return slotOf[hs.from];
}

// Step 3: one poll() loop serving the listener, the half-open accepted connections and our
// outgoing connections until every link is up. Fills links[slot] for every peer.
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
  // Reads from a half-open connection; true when it is finished with (accepted or refused).
  bool readHandshake(Pending& p, Status* fatal);
  Status acceptSome(int64_t now);

  const TransportContext& ctx_;
  const std::vector<int>& peers_;
  const Setup& setup_;
  std::vector<Outgoing>& outgoing_;
  std::vector<Fd>& links_;
  std::vector<int> slotOf_;
  int expected_ = 0;
  int accepted_ = 0;
  std::deque<Pending> pending_;
  int64_t acceptPausedUntilNs_ = 0;
  bool warnedAccept_ = false;
  RefusalLog refusals_;
};

Establisher::Establisher(const TransportContext& ctx, const std::vector<int>& peers, const Setup& setup,
                         std::vector<Outgoing>* outgoing, std::vector<Fd>* links)
    : ctx_(ctx),
      peers_(peers),
      setup_(setup),
      outgoing_(*outgoing),
      links_(*links),
      slotOf_(static_cast<size_t>(ctx.nranks), -1),
      refusals_(kLogNet, "tcp: rank " + std::to_string(ctx.rank)) {
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < ctx.rank) continue;
    slotOf_[peers[i]] = static_cast<int>(i);
    ++expected_;
  }
}

Status Establisher::run() {
  std::vector<pollfd> pfds;
  std::vector<size_t> polledOut;  // indices into outgoing_, in pfds order
  while (accepted_ < expected_ || !outgoing_.empty()) {
    const int64_t now = nowNs();
    if (now >= ctx_.deadline.atNs) return timedOut();
    BRAID_TRY(reconnectDue(now));
    // Drop strangers whose time is up; deadlines grow along the deque, so only the front expires.
    while (!pending_.empty() && pending_.front().deadlineNs <= now) {
      const Pending& p = pending_.front();
      refusals_.refuse(p.from, std::to_string(p.got) + " of " + std::to_string(sizeof(Handshake)) +
                                   " handshake bytes within " + std::to_string(kHandshakeMs) + " ms");
      pending_.pop_front();
    }
    const bool listening = accepted_ < expected_ && now >= acceptPausedUntilNs_;
    int64_t wakeNs = ctx_.deadline.atNs;
    if (!pending_.empty()) wakeNs = std::min(wakeNs, pending_.front().deadlineNs);
    if (accepted_ < expected_ && !listening) wakeNs = std::min(wakeNs, acceptPausedUntilNs_);
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
    for (const Pending& p : pending_) pfds.push_back({p.fd.get(), POLLIN, 0});
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return systemError(errno, "tcp connect: poll");
    if (rc <= 0) continue;

    // New connections are appended to pending_ only after the walk below, so indices stay valid.
    size_t at = 0;
    const bool listenerReady = listening && pfds[at++].revents != 0;
    for (size_t i : polledOut)
      if (pfds[at++].revents != 0) BRAID_TRY(readAck(outgoing_[i]));
    // Connected ones leave `outgoing` (their fd moved to links, nothing scheduled).
    outgoing_.erase(std::remove_if(outgoing_.begin(), outgoing_.end(),
                                   [](const Outgoing& o) { return !o.fd.valid() && o.reconnectAtNs == 0; }),
                    outgoing_.end());
    Status fatal;
    for (Pending& p : pending_) {
      if (pfds[at++].revents == 0) continue;
      if (readHandshake(p, &fatal)) p.fd.reset();
      if (!fatal.ok()) return fatal;
    }
    // The deque stays ordered by deadline when finished entries are removed from anywhere.
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.fd.valid(); }),
                   pending_.end());
    if (listenerReady) BRAID_TRY(acceptSome(now));
  }
  for (const Pending& p : pending_)
    refusals_.refuse(p.from, std::to_string(p.got) + " of " + std::to_string(sizeof(Handshake)) +
                                 " handshake bytes when setup finished");
  refusals_.summarize();
  return okStatus();
}

Status Establisher::timedOut() const {
  std::string missing;
  for (size_t i = 0; i < peers_.size(); ++i) {
    const Outgoing* out = nullptr;
    for (const Outgoing& o : outgoing_)
      if (o.slot == i) out = &o;
    if (peers_[i] > ctx_.rank ? links_[i].valid() : out == nullptr) continue;
    // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on a chain of +.
    missing.append(" ").append(std::to_string(peers_[i])).append(" (host ");
    missing.append(hostOf(ctx_, peers_[i])).append(")");
    if (out != nullptr && out->closes > 0)
      missing.append(" [closed our handshake connection ")
          .append(std::to_string(out->closes))
          .append(" times: ")
          .append(out->lastClose)
          .append("; see its log]");
  }
  return errorf(braidTimeout,
                "tcp connect: rank %d timed out waiting for peer ranks%s (%llu strange connections "
                "refused)",
                ctx_.rank, missing.c_str(), static_cast<unsigned long long>(refusals_.total()));
}

Status Establisher::readAck(Outgoing& o) {
  const int peer = peers_[o.slot];
  uint8_t ack = 0;
  ssize_t n = recv(o.fd.get(), &ack, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return okStatus();
  if (n == 1 && ack == tcp::kAck) {
    BRAID_TRACE(kLogNet, "tcp: rank %d connected to peer rank %d", ctx_.rank, peer);
    links_[o.slot] = std::move(o.fd);  // o.fd invalid with reconnectAtNs == 0: marks it for removal
    return okStatus();
  }
  if (n == 1)
    return errorf(braidRemoteError, "tcp connect: peer rank %d (host %s) answered our handshake with 0x%02x", peer,
                  hostOf(ctx_, peer).c_str(), ack);
  if (n < 0 && errno != ECONNRESET && errno != EPIPE)
    return systemError(errno, "tcp connect: waiting for the ack of peer rank %d (host %s)", peer,
                       hostOf(ctx_, peer).c_str());
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
    BRAID_TRY(connectOut(ctx_, peers_[o.slot], o.addr, setup_.sockbuf, &o.fd));
    o.reconnectAtNs = 0;
  }
  return okStatus();
}

Status Establisher::acceptSome(int64_t now) {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    SockAddr from;
    from.len = sizeof(from.storage);
    int s = accept4(setup_.listenFd.get(), reinterpret_cast<sockaddr*>(&from.storage), &from.len,
                    SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return okStatus();
      if ((err == EMFILE || err == ENFILE) && !pending_.empty()) {
        // Out of descriptors: make room by dropping the oldest stranger, then accept again.
        refusals_.refuse(pending_.front().from,
                         std::string("dropped to free a descriptor (accept: ") + strerror(err) + ")");
        pending_.pop_front();
        continue;
      }
      // The connection stays queued in the kernel; try again shortly instead of spinning on a
      // listener that stays readable.
      if (!warnedAccept_)
        BRAID_WARN(kLogNet, "tcp: rank %d accept: %s; retrying every %lld ms", ctx_.rank, strerror(err),
                   static_cast<long long>(kAcceptBackoffMs));
      warnedAccept_ = true;
      acceptPausedUntilNs_ = now + kAcceptBackoffMs * 1000000;
      return okStatus();
    }
    if (pending_.size() >= kMaxPending) {
      refusals_.refuse(pending_.front().from,
                       "dropped: " + std::to_string(pending_.size()) + " connections waiting for a handshake");
      pending_.pop_front();
    }
    Pending& p = pending_.emplace_back();
    p.fd.reset(s);
    p.from = from;
    p.deadlineNs = std::min(nowNs() + kHandshakeMs * 1000000, ctx_.deadline.atNs);
    // A real peer sends its handshake right after connecting: it is usually here already.
    Status fatal;
    if (readHandshake(p, &fatal)) pending_.pop_back();
    if (!fatal.ok()) return fatal;
  }
  return okStatus();
}

bool Establisher::readHandshake(Pending& p, Status* fatal) {
  ssize_t n = recv(p.fd.get(), p.buf + p.got, sizeof(p.buf) - p.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    refusals_.refuse(p.from, std::string(n == 0 ? "closed" : strerror(errno)) + " after " + std::to_string(p.got) +
                                 " of " + std::to_string(sizeof(Handshake)) + " handshake bytes");
    return true;
  }
  p.got += static_cast<size_t>(n);
  // Reject junk as soon as the magic is in, without waiting for the rest.
  Status s = tcp::checkHandshakePrefix(p.buf, p.got);
  if (!s.ok()) {
    refusals_.refuse(p.from, s.message());
    return true;
  }
  if (p.got < sizeof(Handshake)) return false;
  std::string why;
  int slot = checkHandshake(ctx_, p.buf, p.got, slotOf_, links_, &why);
  if (slot < 0) {
    refusals_.refuse(p.from, why);
    return true;
  }
  // From here on it is a proven peer: failures are real errors, not strangers to shrug off.
  const int peer = peers_[slot];
  ssize_t sent = send(p.fd.get(), &tcp::kAck, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  s = sent == 1 ? configureDataSocket(p.fd.get(), setup_.sockbuf, peer)
                : systemError(sent < 0 ? errno : EAGAIN, "sending the handshake ack");
  if (!s.ok()) {
    *fatal = s.withContext("tcp connect: peer rank " + std::to_string(peer) + " (host " + hostOf(ctx_, peer) + ")");
    return true;
  }
  BRAID_TRACE(kLogNet, "tcp: rank %d accepted peer rank %d from %s", ctx_.rank, peer, p.from.toString().c_str());
  links_[slot] = std::move(p.fd);
  ++accepted_;
  return true;
}

class TcpTransport final : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  bool canConnect(const PeerInfo& a, const PeerInfo& b) const override { return a.rank != b.rank; }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;
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

  std::vector<Fd> links(peers.size());
  std::vector<Outgoing> outgoing;
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    if (p > ctx.rank) continue;
    Outgoing& o = outgoing.emplace_back();
    o.slot = i;
    Status s = tcp::decodeAddrRecord(reinterpret_cast<const uint8_t*>(&all[p]), sizeof(all[p]), &o.addr);
    if (!s.ok()) return s.withContext("tcp connect: peer rank " + std::to_string(p) + " (host " + hostOf(ctx, p) + ")");
    BRAID_TRY(connectOut(ctx, p, o.addr, setup.sockbuf, &o.fd));
  }
  Establisher est(ctx, peers, setup, &outgoing, &links);
  BRAID_TRY(est.run());

  std::vector<std::unique_ptr<Link>> result(peers.size());
  for (size_t i = 0; i < peers.size(); ++i)
    result[i] = std::make_unique<TcpLink>(std::move(links[i]), peers[i], hostOf(ctx, peers[i]), setup.chunk);
  BRAID_INFO(kLogNet, "tcp: rank %d connected to %zu peers%s%s in %.1f ms (chunk %zu, socket buffers %zu)", ctx.rank,
             peers.size(), setup.listenFd.valid() ? ", listening on " : "",
             setup.listenFd.valid() ? setup.bound.toString().c_str() : "", (nowNs() - startNs) / 1e6, setup.chunk,
             setup.sockbuf);
  *out = std::move(result);
  return okStatus();
}

}  // namespace

std::unique_ptr<Transport> makeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace braid
