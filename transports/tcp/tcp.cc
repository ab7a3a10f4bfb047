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
//      (each with its own kHandshakeMs deadline), and our outgoing connections waiting for their
//      one-byte ack. The acceptor checks every handshake field (the secret in constant time) and
//      acks; anything else -- garbage, short, oversized, silent, wrong communicator, unexpected or
//      duplicate rank -- is closed with a WARN while the real peers carry on.
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
#include "transports/transport.h"

namespace braid {
namespace {

constexpr uint64_t kMagic = 0x7063746469617262ull;  // "braidtcp" in little-endian byte order
constexpr uint32_t kVersion = 1;
constexpr uint8_t kAck = 0xa5;
// How long an accepted connection may take to deliver its handshake. A real peer sends it right
// after connecting, so this only bounds strangers; a few seconds absorbs a descheduled peer on an
// oversubscribed host.
constexpr int64_t kHandshakeMs = 5000;
// Half-open connections kept at once; past this the oldest is dropped, so a flood of strangers
// cannot exhaust our descriptors (a real peer's connection is never older than a few ms).
constexpr size_t kMaxPending = 256;

struct Handshake {
  uint64_t magic;
  uint32_t version;
  uint32_t size;  // sizeof(Handshake): a later version with more fields is refused, not misread
  uint64_t commId;
  int32_t from;
  int32_t to;
  uint8_t secret[16];
};
static_assert(sizeof(Handshake) == 48, "the handshake layout is part of the wire protocol");

enum AddrState : uint32_t { kNoListener = 0, kListening = 1, kFailed = 2 };

// Published by every rank in the one allGather. sockaddr_in6 is the largest address we listen on.
struct AddrRecord {
  uint32_t state;
  uint32_t len;
  uint8_t addr[sizeof(sockaddr_in6)];
};

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
  Fd fd;
};

std::string hostOf(const TransportContext& ctx, int rank) {
  if (ctx.peers == nullptr || rank < 0 || static_cast<size_t>(rank) >= ctx.peers->size()) return "?";
  const char* h = (*ctx.peers)[rank].hostname;
  return std::string(h, strnlen(h, sizeof((*ctx.peers)[rank].hostname)));
}

bool sameSecret(const uint8_t* a, const uint8_t* b) {
  // Constant time: the loop never exits early, so timing does not reveal how many bytes matched.
  uint8_t diff = 0;
  for (int i = 0; i < 16; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
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
  if (setup->bound.len > sizeof(rec->addr))
    return errorf(braidInternalError, "tcp listen address %s does not fit the address record",
                  setup->bound.toString().c_str());
  rec->state = kListening;
  rec->len = setup->bound.len;
  memcpy(rec->addr, &setup->bound.storage, setup->bound.len);
  return okStatus();
}

// Connects to lower rank `peer` and sends the handshake; the ack is awaited in the poll loop.
Status connectOut(const TransportContext& ctx, int peer, const AddrRecord& rec, size_t sockbuf, Fd* out) {
  std::string host = hostOf(ctx, peer);
  if (rec.state == kFailed)
    return errorf(braidRemoteError, "peer rank %d (host %s) could not set up its tcp listener (see its log)", peer,
                  host.c_str());
  if (rec.state != kListening || rec.len == 0 || rec.len > sizeof(rec.addr))
    return errorf(braidInternalError,
                  "peer rank %d (host %s) published no tcp address: the ranks disagree on which "
                  "pairs use tcp",
                  peer, host.c_str());
  SockAddr addr;
  memcpy(&addr.storage, rec.addr, rec.len);
  addr.len = rec.len;
  Handshake hs{};
  hs.magic = kMagic;
  hs.version = kVersion;
  hs.size = sizeof(Handshake);
  hs.commId = ctx.commId;
  hs.from = ctx.rank;
  hs.to = peer;
  memcpy(hs.secret, ctx.secret, sizeof(hs.secret));
  Fd fd;
  std::string what =
      "tcp connect to peer rank " + std::to_string(peer) + " (host " + host + ", " + addr.toString() + ")";
  Status s = connectTo(addr, ctx.deadline, &fd);
  if (s.ok()) s = sendAll(fd.get(), &hs, sizeof(hs), ctx.deadline);
  if (s.ok()) s = configureDataSocket(fd.get(), sockbuf, peer);
  if (!s.ok()) return s.withContext(what);
  *out = std::move(fd);
  return okStatus();
}

// Checks a complete handshake; returns the sender's slot in `peers`, or -1 with `why` set.
int checkHandshake(const TransportContext& ctx, const Handshake& hs, const std::vector<int>& slotOf,
                   const std::vector<Fd>& links, std::string* why) {
  if (hs.version != kVersion || hs.size != sizeof(Handshake)) {
    *why = "protocol version " + std::to_string(hs.version) + " (we speak " + std::to_string(kVersion) + ")";
    return -1;
  }
  // The secret first: a stranger learns nothing about our communicator or ranks from the answer.
  if (!sameSecret(hs.secret, ctx.secret)) {
    *why = "wrong secret";
    return -1;
  }
  if (hs.commId != ctx.commId) {
    *why = "handshake for another communicator";
    return -1;
  }
  if (hs.to != ctx.rank) {
    *why = "handshake addressed to rank " + std::to_string(hs.to);
    return -1;
  }
  if (hs.from <= ctx.rank || hs.from >= ctx.nranks || slotOf[hs.from] < 0) {
    *why = "unexpected rank " + std::to_string(hs.from);
    return -1;
  }
  if (links[slotOf[hs.from]].valid()) {
    *why = "a second connection claiming rank " + std::to_string(hs.from);
    return -1;
  }
  return slotOf[hs.from];
}

class TcpTransport final : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  bool canConnect(const PeerInfo& a, const PeerInfo& b) const override { return a.rank != b.rank; }
  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override;

 private:
  // The poll loop of step 3; fills links[slot] for every peer.
  Status establish(const TransportContext& ctx, const std::vector<int>& peers, Setup& setup,
                   std::vector<Outgoing>& outgoing, std::vector<Fd>& links);
  // Reads from a half-open connection; true when it is finished with (accepted or refused).
  bool serviceIncoming(const TransportContext& ctx, Pending& p, const std::vector<int>& slotOf, std::vector<Fd>& links,
                       size_t sockbuf, int* accepted, Status* fatal);
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
    mine.state = kFailed;
  }
  // Always exactly one allGather, whatever happened locally, so that every rank stays in step.
  std::vector<AddrRecord> all(static_cast<size_t>(std::max(ctx.nranks, 0)));
  BRAID_TRY(ctx.allGather(&mine, sizeof(mine), all.data()));
  if (!local.ok()) return local;

  std::vector<Fd> links(peers.size());
  std::vector<Outgoing> outgoing;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] > ctx.rank) continue;
    Fd fd;
    BRAID_TRY(connectOut(ctx, peers[i], all[peers[i]], setup.sockbuf, &fd));
    outgoing.push_back(Outgoing{i, std::move(fd)});
  }
  BRAID_TRY(establish(ctx, peers, setup, outgoing, links));

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

Status TcpTransport::establish(const TransportContext& ctx, const std::vector<int>& peers, Setup& setup,
                               std::vector<Outgoing>& outgoing, std::vector<Fd>& links) {
  std::vector<int> slotOf(static_cast<size_t>(ctx.nranks), -1);
  int expected = 0;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < ctx.rank) continue;
    slotOf[peers[i]] = static_cast<int>(i);
    ++expected;
  }
  int accepted = 0;
  std::deque<Pending> pending;
  std::vector<pollfd> pfds;
  while (accepted < expected || !outgoing.empty()) {
    int64_t now = nowNs();
    if (now >= ctx.deadline.atNs) {
      std::string missing;
      for (size_t i = 0; i < peers.size(); ++i) {
        bool waiting = peers[i] > ctx.rank ? !links[i].valid()
                                           : std::any_of(outgoing.begin(), outgoing.end(),
                                                         [&](const Outgoing& o) { return o.slot == i; });
        if (!waiting) continue;
        // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on a chain of +.
        missing.append(" ").append(std::to_string(peers[i])).append(" (host ");
        missing.append(hostOf(ctx, peers[i])).append(")");
      }
      return errorf(braidTimeout, "tcp connect: rank %d timed out waiting for peer ranks%s", ctx.rank, missing.c_str());
    }
    // Drop strangers whose time is up; deadlines grow along the deque, so only the front expires.
    while (!pending.empty() && pending.front().deadlineNs <= now) {
      Pending& p = pending.front();
      BRAID_WARN(kLogNet, "tcp: rank %d closing connection from %s: %zu of %zu handshake bytes within %lld ms",
                 ctx.rank, p.from.toString().c_str(), p.got, sizeof(Handshake), static_cast<long long>(kHandshakeMs));
      pending.pop_front();
    }
    int64_t wakeNs = ctx.deadline.atNs;
    if (!pending.empty()) wakeNs = std::min(wakeNs, pending.front().deadlineNs);
    int timeoutMs = static_cast<int>(std::clamp<int64_t>((wakeNs - now + 999999) / 1000000, 0, 1000));

    pfds.clear();
    bool listening = accepted < expected;
    if (listening) pfds.push_back({setup.listenFd.get(), POLLIN, 0});
    for (const Outgoing& o : outgoing) pfds.push_back({o.fd.get(), POLLIN, 0});
    for (const Pending& p : pending) pfds.push_back({p.fd.get(), POLLIN, 0});
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return systemError(errno, "tcp connect: poll");
    if (rc <= 0) continue;
    size_t at = 0;

    // Listener first in pfds, but its new connections are appended after the walk below, so the
    // indices of `outgoing` and `pending` in pfds stay valid.
    bool listenerReady = listening && (pfds[at++].revents & (POLLIN | POLLERR)) != 0;

    for (size_t i = 0; i < outgoing.size(); ++i, ++at) {
      if (pfds[at].revents == 0) continue;
      Outgoing& o = outgoing[i];
      int peer = peers[o.slot];
      uint8_t ack = 0;
      ssize_t n = recv(o.fd.get(), &ack, 1, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n != 1 || ack != kAck)
        return errorf(braidRemoteError, "tcp connect: peer rank %d (host %s) refused our handshake (%s)", peer,
                      hostOf(ctx, peer).c_str(),
                      n == 0  ? "closed the connection"
                      : n < 0 ? strerror(errno)
                              : "bad ack");
      BRAID_TRACE(kLogNet, "tcp: rank %d connected to peer rank %d", ctx.rank, peer);
      links[o.slot] = std::move(o.fd);
      o.fd.reset();  // marks it for removal below
    }
    outgoing.erase(std::remove_if(outgoing.begin(), outgoing.end(), [](const Outgoing& o) { return !o.fd.valid(); }),
                   outgoing.end());

    Status fatal;
    for (auto& p : pending) {
      if (pfds[at++].revents == 0) continue;
      if (serviceIncoming(ctx, p, slotOf, links, setup.sockbuf, &accepted, &fatal)) p.fd.reset();
      if (!fatal.ok()) return fatal;
    }
    // The deque stays ordered by deadline when finished entries are removed from anywhere.
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return !p.fd.valid(); }),
                  pending.end());

    while (listenerReady) {
      SockAddr from;
      from.len = sizeof(from.storage);
      int s = accept4(setup.listenFd.get(), reinterpret_cast<sockaddr*>(&from.storage), &from.len,
                      SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        // Out of descriptors or similar: keep serving what we have and try again next round.
        BRAID_WARN(kLogNet, "tcp: rank %d accept: %s", ctx.rank, strerror(errno));
        break;
      }
      if (pending.size() >= kMaxPending) {
        BRAID_WARN(kLogNet, "tcp: rank %d: %zu connections still silent, dropping the oldest (from %s)", ctx.rank,
                   pending.size(), pending.front().from.toString().c_str());
        pending.pop_front();
      }
      Pending& p = pending.emplace_back();
      p.fd.reset(s);
      p.from = from;
      p.deadlineNs = std::min(nowNs() + kHandshakeMs * 1000000, ctx.deadline.atNs);
    }
  }
  for (const Pending& p : pending)
    BRAID_WARN(kLogNet, "tcp: rank %d closing connection from %s: %zu of %zu handshake bytes when setup finished",
               ctx.rank, p.from.toString().c_str(), p.got, sizeof(Handshake));
  return okStatus();
}

bool TcpTransport::serviceIncoming(const TransportContext& ctx, Pending& p, const std::vector<int>& slotOf,
                                   std::vector<Fd>& links, size_t sockbuf, int* accepted, Status* fatal) {
  ssize_t n = recv(p.fd.get(), p.buf + p.got, sizeof(p.buf) - p.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  std::string from = p.from.toString();
  if (n <= 0) {
    BRAID_WARN(kLogNet, "tcp: rank %d closing connection from %s: %s after %zu of %zu handshake bytes", ctx.rank,
               from.c_str(), n == 0 ? "closed" : strerror(errno), p.got, sizeof(Handshake));
    return true;
  }
  p.got += static_cast<size_t>(n);
  // Reject garbage as soon as the magic is in, without waiting for the rest.
  uint64_t magic = 0;
  if (p.got >= sizeof(magic)) memcpy(&magic, p.buf, sizeof(magic));
  if (p.got >= sizeof(magic) && magic != kMagic) {
    BRAID_WARN(kLogNet, "tcp: rank %d closing connection from %s: not a braid tcp handshake", ctx.rank, from.c_str());
    return true;
  }
  if (p.got > sizeof(Handshake)) {
    BRAID_WARN(kLogNet, "tcp: rank %d closing connection from %s: oversized handshake", ctx.rank, from.c_str());
    return true;
  }
  if (p.got < sizeof(Handshake)) return false;
  Handshake hs;
  memcpy(&hs, p.buf, sizeof(hs));
  std::string why;
  int slot = checkHandshake(ctx, hs, slotOf, links, &why);
  if (slot < 0) {
    BRAID_WARN(kLogNet, "tcp: rank %d refusing connection from %s: %s", ctx.rank, from.c_str(), why.c_str());
    return true;
  }
  // From here on it is a proven peer: failures are real errors, not strangers to shrug off.
  ssize_t sent = send(p.fd.get(), &kAck, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  Status s = sent == 1 ? configureDataSocket(p.fd.get(), sockbuf, hs.from)
                       : systemError(sent < 0 ? errno : EAGAIN, "sending the handshake ack");
  if (!s.ok()) {
    *fatal =
        s.withContext("tcp connect: peer rank " + std::to_string(hs.from) + " (host " + hostOf(ctx, hs.from) + ")");
    return true;
  }
  BRAID_TRACE(kLogNet, "tcp: rank %d accepted peer rank %d from %s", ctx.rank, hs.from, from.c_str());
  links[slot] = std::move(p.fd);
  ++*accepted;
  return true;
}

}  // namespace

std::unique_ptr<Transport> makeTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace braid
