// The rendezvous. Rank 0 runs one poll() loop over, together:
//   - its listener and the accepted connections that have not yet sent a complete hello (a
//     Doorway, src/doorway.h: bounded in number and in time, junk refused at its first bytes, so
//     that a stranger never delays a real rank);
//   - the connections of ranks that already joined, to notice one that closes (its rank becomes
//     free again: a live rank joins again) or talks before it has the table (dropped).
// A complete hello is checked for the secret, communicator, rank count and rank.
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
#include <string>

#include "src/bootstrap.h"
#include "src/doorway.h"
#include "src/log.h"

namespace braid {

namespace {

// A joining rank whose connection rank 0 closed waits this long before joining again.
constexpr useconds_t kRejoinDelayUs = 50000;

class Server {
 public:
  Server(const UniqueIdData& id, int nranks, Deadline deadline, std::vector<Fd>* socks, std::vector<PeerInfo>* table)
      : id_(id), nranks_(nranks), deadline_(deadline), socks_(*socks), table_(*table), joinedFrom_(nranks) {}

  // Returns once every rank joined (or the deadline passed).
  Status run(int listenFd);

 private:
  Status timedOut() const;
  // A whole hello arrived: the rank joins, or the connection is refused.
  Status onHello(Doorway::Conn& c);
  // A joined rank's connection became readable before the table was sent.
  void checkJoined(int rank);
  void unjoin(int rank);

  const UniqueIdData& id_;
  const int nranks_;
  const Deadline deadline_;
  std::vector<Fd>& socks_;
  std::vector<PeerInfo>& table_;
  std::vector<SockAddr> joinedFrom_;
  int joined_ = 1;  // rank 0: us
  Doorway door_{"hello", sizeof(Hello), checkHelloPrefix, kLogBoot, "rendezvous"};
};

Status Server::run(int listenFd) {
  const Doorway::Arrived arrived = [this](Doorway::Conn& c) { return onHello(c); };
  std::vector<pollfd> pfds;
  std::vector<int> joinedRanks;  // in pfds order
  while (joined_ < nranks_) {
    const int64_t now = nowNs();
    if (now >= deadline_.atNs) return timedOut();
    door_.expire(now);
    const bool listening = door_.listening(now);
    const int timeoutMs =
        static_cast<int>(std::clamp<int64_t>((door_.wakeNs(deadline_.atNs) - now + 999999) / 1000000, 0, 1000));

    pfds.clear();
    joinedRanks.clear();
    if (listening) pfds.push_back({listenFd, POLLIN, 0});
    for (int r = 1; r < nranks_; ++r) {
      if (!socks_[r].valid()) continue;
      pfds.push_back({socks_[r].get(), POLLIN, 0});
      joinedRanks.push_back(r);
    }
    const size_t doorAt = pfds.size();
    door_.addPollFds(&pfds);
    int rc = poll(pfds.data(), pfds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) return systemError(errno, "rendezvous: poll");
    if (rc <= 0) continue;

    const bool listenerReady = listening && pfds[0].revents != 0;
    for (size_t i = 0; i < joinedRanks.size(); ++i)
      if (pfds[(listening ? 1 : 0) + i].revents != 0) checkJoined(joinedRanks[i]);
    BRAID_TRY(door_.serve(pfds.data() + doorAt, arrived));  // before acceptSome, which appends
    if (listenerReady) BRAID_TRY(door_.acceptSome(listenFd, now, deadline_.atNs, arrived));
  }
  door_.close();
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
                joined_, nranks_, missing.c_str(), static_cast<unsigned long long>(door_.refusals().total()));
}

Status Server::onHello(Doorway::Conn& c) {
  Hello h;
  Status s = decodeHello(c.buf, c.got, id_, nranks_, &h);
  if (!s.ok()) {
    door_.refusals().refuse(c.from, s.message());
    return okStatus();
  }
  const int r = h.rank;
  if (socks_[r].valid()) {
    BRAID_WARN(kLogBoot,
               "rendezvous: rank %d claimed by a second connection (from %s; it joined from %s): dropping both, a "
               "live rank %d joins again",
               r, c.from.toString().c_str(), joinedFrom_[r].toString().c_str(), r);
    unjoin(r);
    return okStatus();
  }
  // The control plane after init expects a blocking socket, as connectTo gives the other side.
  s = setNonBlocking(c.fd.get(), false);
  if (!s.ok()) {
    BRAID_WARN(kLogBoot, "rendezvous: rank %d from %s: %s", r, c.from.toString().c_str(), s.message().c_str());
    return okStatus();
  }
  socks_[r] = std::move(c.fd);
  table_[r] = h.info;
  joinedFrom_[r] = c.from;
  ++joined_;
  BRAID_INFO(kLogBoot, "rendezvous: rank %d joined from %s (%d of %d)", r, c.from.toString().c_str(), joined_, nranks_);
  return okStatus();
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
    if (!s.ok()) return s.withContext("rendezvous: sending the rank table to " + describePeer(*table, r));
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
