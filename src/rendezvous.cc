// The rendezvous. Rank 0 runs one poll() loop over, together:
//   - its listener (accepting up to kAcceptsPerRound connections per round, so that a flood cannot
//     starve the rest of the loop);
//   - every accepted connection that has not yet sent a complete hello, each with its own kHelloMs
//     deadline, at most kMaxPending of them (the oldest is dropped to make room);
//   - the connections of ranks that already joined, to notice one that closes (its rank becomes
//     free again: a live rank joins again) or talks before it has the table (dropped).
// A hello is read as soon as the connection is accepted (a real rank sends it right after
// connecting, so it is usually there already) and checked as its bytes arrive: junk is dropped at
// its first eight bytes, a wrong secret, communicator, rank count or rank when complete. So a
// stranger costs one descriptor for at most kHelloMs and never delays a real rank: not by being
// slow (one byte a second), silent, oversized, numerous, nor by exhausting our descriptors (accept
// failing with EMFILE drops the oldest stranger, or pauses accepting for kAcceptBackoffMs).
//
// Two connections claiming one rank (only possible with the secret: a rank that reconnected, two
// processes launched with the same rank, or an insider) are both dropped. A real rank joins again
// when dropped, so it ends up alone in its slot, whatever the order in which the claims arrived.
//
// Nothing is ever sent to a connection before it proved the secret; refusals are logged through a
// RefusalLog (a few lines, then counts).
#include "src/rendezvous.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "src/bootstrap.h"
#include "src/log.h"

namespace braid {

namespace {

// How long an accepted connection may take to deliver its hello. A real rank sends it right after
// connecting; a few seconds absorb a descheduled rank on an oversubscribed host.
constexpr int64_t kHelloMs = 5000;
// Connections waiting for their hello at once; a flood beyond this recycles the oldest.
constexpr size_t kMaxPending = 256;
// Accepts per loop round: bounds the work a flood gets before pending hellos are read again.
constexpr int kAcceptsPerRound = 64;
// When accept fails for lack of descriptors and no stranger can be dropped, the listener stays
// readable: polling it again at once would spin. Wait this long instead.
constexpr int64_t kAcceptBackoffMs = 10;
// A joining rank whose connection rank 0 closed waits this long before joining again.
constexpr useconds_t kRejoinDelayUs = 50000;

// An accepted connection that has not yet proven who it is.
struct Pending {
  Fd fd;
  SockAddr from;
  int64_t deadlineNs = 0;
  size_t got = 0;
  uint8_t buf[sizeof(Hello) + 1];  // one spare byte detects an oversized hello
};

class Server {
 public:
  Server(const UniqueIdData& id, int nranks, Deadline deadline, std::vector<Fd>* socks, std::vector<PeerInfo>* table)
      : id_(id), nranks_(nranks), deadline_(deadline), socks_(*socks), table_(*table), joinedFrom_(nranks) {}

  // Returns once every rank joined (or the deadline passed).
  Status run(int listenFd);

 private:
  Status timedOut() const;
  void acceptSome(int listenFd, int64_t now);
  // Reads what arrived on a pending connection; true when it is finished with (joined or refused).
  bool readHello(Pending& p);
  // A joined rank's connection became readable before the table was sent.
  void checkJoined(int rank);
  void unjoin(int rank);
  void refuse(const Pending& p, const std::string& why) { refusals_.refuse(p.from, why); }

  const UniqueIdData& id_;
  const int nranks_;
  const Deadline deadline_;
  std::vector<Fd>& socks_;
  std::vector<PeerInfo>& table_;
  std::vector<SockAddr> joinedFrom_;
  int joined_ = 1;  // rank 0: us
  std::deque<Pending> pending_;
  int64_t acceptPausedUntilNs_ = 0;
  bool warnedAccept_ = false;
  RefusalLog refusals_{kLogBoot, "rendezvous"};
};

Status Server::run(int listenFd) {
  std::vector<pollfd> pfds;
  std::vector<int> joinedRanks;  // in pfds order
  while (joined_ < nranks_) {
    const int64_t now = nowNs();
    if (now >= deadline_.atNs) return timedOut();
    // Deadlines grow along the deque (each is min(accept time + kHelloMs, deadline)), so only the
    // front can have expired.
    while (!pending_.empty() && pending_.front().deadlineNs <= now) {
      const Pending& p = pending_.front();
      refuse(p, "no complete hello within " + std::to_string(kHelloMs) + " ms (" + std::to_string(p.got) + " of " +
                    std::to_string(sizeof(Hello)) + " bytes)");
      pending_.pop_front();
    }
    const bool listening = now >= acceptPausedUntilNs_;
    int64_t wakeNs = deadline_.atNs;
    if (!pending_.empty()) wakeNs = std::min(wakeNs, pending_.front().deadlineNs);
    if (!listening) wakeNs = std::min(wakeNs, acceptPausedUntilNs_);
    const int timeoutMs = static_cast<int>(std::clamp<int64_t>((wakeNs - now + 999999) / 1000000, 0, 1000));

    pfds.clear();
    joinedRanks.clear();
    if (listening) pfds.push_back({listenFd, POLLIN, 0});
    for (int r = 1; r < nranks_; ++r) {
      if (!socks_[r].valid()) continue;
      pfds.push_back({socks_[r].get(), POLLIN, 0});
      joinedRanks.push_back(r);
    }
    for (const Pending& p : pending_) pfds.push_back({p.fd.get(), POLLIN, 0});
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return systemError(errno, "rendezvous: poll");
    if (rc <= 0) continue;

    // New connections are appended to pending_ only after the walk below, so indices stay valid.
    size_t at = 0;
    const bool listenerReady = listening && pfds[at++].revents != 0;
    for (int r : joinedRanks)
      if (pfds[at++].revents != 0) checkJoined(r);
    for (Pending& p : pending_)
      if (pfds[at++].revents != 0 && readHello(p)) p.fd.reset();
    // Removing finished entries from anywhere keeps the deque ordered by deadline.
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return !p.fd.valid(); }),
                   pending_.end());
    if (listenerReady) acceptSome(listenFd, now);
  }
  for (const Pending& p : pending_)
    refuse(p, "no complete hello when the rendezvous finished (" + std::to_string(p.got) + " bytes)");
  pending_.clear();
  refusals_.summarize();
  return okStatus();
}

Status Server::timedOut() const {
  std::string missing;
  int listed = 0;
  for (int r = 1; r < nranks_; ++r) {
    if (socks_[r].valid()) continue;
    if (++listed > 16) {
      missing += " ...";
      break;
    }
    missing.append(" ").append(std::to_string(r));
  }
  return errorf(braidTimeout,
                "rendezvous: timed out with %d of %d ranks joined (missing ranks:%s; %llu strange connections "
                "refused)",
                joined_, nranks_, missing.c_str(), static_cast<unsigned long long>(refusals_.total()));
}

void Server::acceptSome(int listenFd, int64_t now) {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    SockAddr from;
    from.len = sizeof(from.storage);
    int s = accept4(listenFd, reinterpret_cast<sockaddr*>(&from.storage), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if ((err == EMFILE || err == ENFILE) && !pending_.empty()) {
        // Out of descriptors: make room by dropping the oldest stranger, then accept again.
        refuse(pending_.front(), std::string("dropped to free a descriptor (accept: ") + strerror(err) + ")");
        pending_.pop_front();
        continue;
      }
      // Nothing of ours to free (or another accept failure): the connection stays queued in the
      // kernel; try again shortly instead of spinning on a listener that stays readable.
      if (!warnedAccept_)
        BRAID_WARN(kLogBoot, "rendezvous: accept: %s; retrying every %lld ms", strerror(err),
                   static_cast<long long>(kAcceptBackoffMs));
      warnedAccept_ = true;
      acceptPausedUntilNs_ = now + kAcceptBackoffMs * 1000000;
      return;
    }
    if (pending_.size() >= kMaxPending) {
      refuse(pending_.front(), "dropped: " + std::to_string(pending_.size()) + " connections waiting for a hello");
      pending_.pop_front();
    }
    Pending& p = pending_.emplace_back();
    p.fd.reset(s);
    p.from = from;
    p.deadlineNs = std::min(nowNs() + kHelloMs * 1000000, deadline_.atNs);
    if (readHello(p)) pending_.pop_back();
  }
}

bool Server::readHello(Pending& p) {
  ssize_t n = recv(p.fd.get(), p.buf + p.got, sizeof(p.buf) - p.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    refuse(p, std::string(n == 0 ? "closed" : strerror(errno)) + " after " + std::to_string(p.got) + " of " +
                  std::to_string(sizeof(Hello)) + " hello bytes");
    return true;
  }
  p.got += static_cast<size_t>(n);
  Status s = checkHelloPrefix(p.buf, p.got);
  if (!s.ok()) {
    refuse(p, s.message());
    return true;
  }
  if (p.got < sizeof(Hello)) return false;
  Hello h;
  s = decodeHello(p.buf, p.got, id_, nranks_, &h);
  if (!s.ok()) {
    refuse(p, s.message());
    return true;
  }
  const int r = h.rank;
  if (socks_[r].valid()) {
    BRAID_WARN(kLogBoot,
               "rendezvous: rank %d claimed by a second connection (from %s; it joined from %s): dropping both, a "
               "live rank %d joins again",
               r, p.from.toString().c_str(), joinedFrom_[r].toString().c_str(), r);
    unjoin(r);
    return true;
  }
  // The control plane after init expects a blocking socket, as connectTo gives the other side.
  s = setNonBlocking(p.fd.get(), false);
  if (!s.ok()) {
    BRAID_WARN(kLogBoot, "rendezvous: rank %d from %s: %s", r, p.from.toString().c_str(), s.message().c_str());
    return true;
  }
  socks_[r] = std::move(p.fd);
  table_[r] = h.info;
  joinedFrom_[r] = p.from;
  ++joined_;
  BRAID_INFO(kLogBoot, "rendezvous: rank %d joined from %s (%d of %d)", r, p.from.toString().c_str(), joined_, nranks_);
  return true;
}

void Server::checkJoined(int r) {
  uint8_t byte;
  ssize_t n = recv(socks_[r].get(), &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  BRAID_WARN(kLogBoot, "rendezvous: rank %d (from %s) %s before the rank table; waiting for it to join again", r,
             joinedFrom_[r].toString().c_str(),
             n == 0  ? "closed its connection"
             : n > 0 ? "sent bytes"
                     : strerror(errno));
  unjoin(r);
}

void Server::unjoin(int r) {
  socks_[r].reset();
  table_[r] = PeerInfo{};
  joinedFrom_[r] = SockAddr{};
  --joined_;
}

}  // namespace

Status serveRendezvous(const UniqueIdData& id, int nranks, const PeerInfo& me, Deadline deadline,
                       std::vector<Fd>* socks, std::vector<PeerInfo>* table) {
  Fd listener;
  BRAID_TRY(takeListener(id.commId, &listener));
  BRAID_TRY(setNonBlocking(listener.get(), true));
  table->assign(nranks, PeerInfo{});
  (*table)[0] = me;
  socks->clear();
  socks->resize(nranks);
  Server server(id, nranks, deadline, socks, table);
  BRAID_TRY(server.run(listener.get()));
  listener.reset();  // connections still queued are reset, not left hanging
  TableHeader th{kTableMagic, nranks};
  for (int r = 1; r < nranks; ++r) {
    Status s = sendAll((*socks)[r].get(), &th, sizeof(th), deadline);
    if (s.ok()) s = sendAll((*socks)[r].get(), table->data(), sizeof(PeerInfo) * nranks, deadline);
    if (!s.ok()) return s.withContext("rendezvous: sending the rank table to rank " + std::to_string(r));
  }
  return okStatus();
}

Status joinRendezvous(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline, Fd* sock,
                      std::vector<PeerInfo>* table) {
  const Hello h = makeHello(id, rank, nranks, me);
  const std::string root = id.root.toString();
  for (int attempt = 1;; ++attempt) {
    Fd conn;
    Status s = connectTo(id.root, deadline, &conn);
    if (!s.ok()) return s.withContext("rank " + std::to_string(rank) + " joining the rendezvous at rank 0");
    s = sendAll(conn.get(), &h, sizeof(h), deadline);
    uint8_t header[sizeof(TableHeader)];
    if (s.ok()) s = recvAll(conn.get(), header, sizeof(header), deadline);
    if (s.ok()) {
      // Rank 0 proved nothing yet, but a malformed table is no stale listener: give up at once.
      size_t bodyBytes = 0;
      BRAID_TRY(decodeTableHeader(header, sizeof(header), nranks, &bodyBytes).withContext("rendezvous at " + root));
      std::vector<uint8_t> body(bodyBytes);
      s = recvAll(conn.get(), body.data(), body.size(), deadline);
      if (s.ok()) {
        BRAID_TRY(decodeTableBody(body.data(), body.size(), nranks, table).withContext("rendezvous at " + root));
        *sock = std::move(conn);
        return okStatus();
      }
    }
    if (s.code() == braidTimeout || deadline.expired())
      return errorf(braidTimeout, "rank %d: rendezvous at %s did not complete before the deadline (%s)", rank,
                    root.c_str(), s.message().c_str());
    if (s.code() != braidRemoteError) return s.withContext("rank " + std::to_string(rank) + " joining the rendezvous");
    // Rank 0 closed on us: a stale listener of an earlier communicator on this address, or rank 0
    // dropped our connection (a flood of strangers, or a second claim of our rank). Join again.
    BRAID_INFO(kLogBoot, "rank %d: rendezvous at %s closed on us (%s); joining again (attempt %d)", rank, root.c_str(),
               s.message().c_str(), attempt + 1);
    usleep(kRejoinDelayUs);
  }
}

}  // namespace braid
