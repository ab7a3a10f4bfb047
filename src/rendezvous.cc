// The rendezvous. Rank 0 runs one poll() loop over, together:
//   - its listener and the accepted connections that have not yet sent a complete hello (a
//     Doorway, src/doorway.h: bounded in number and in time, junk refused at its first bytes, so
//     that a stranger never delays a real rank);
//   - the connections of ranks that already joined, to notice one that closes (its slot becomes
//     free again; the rank itself, once welcomed, never joins again: it died or gave up) or talks
//     before it has the table (dropped).
// A complete hello is checked for the secret, communicator, rank count and rank.
//
// A rank whose hello is accepted gets a welcome at once. From then on it never joins again: if the
// connection closes before the table, rank 0 is gone (or failed), and the rank fails too instead of
// retrying into whatever listens on the address next (a relaunch of the job, which it would join).
//
// Two connections claiming one rank (only possible with the secret: two jobs that share the
// address and the secret, two processes launched with the same rank, or an insider) fail the
// rendezvous: braid cannot tell which one belongs, and guessing could merge two jobs into one
// communicator that returns wrong sums. Rank 0 sends every proven connection a refusal saying why,
// so each of them fails with that message.
//
// Nothing is ever sent to a connection before it proved the secret; refusals of strangers are
// logged through a RefusalLog (a few lines, then counts).
#include "src/rendezvous.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "src/base/log.h"
#include "src/bootstrap.h"
#include "src/doorway.h"

namespace braid {

namespace {

// A joining rank whose connection rank 0 closed waits this long before joining again.
constexpr useconds_t kRejoinDelayUs = 50000;
// Rank 0's small replies (welcome, refusal) to a proven rank: a rank that does not read them within
// this time is not waiting for them.
constexpr int64_t kReplyMs = 1000;

// Tells a proven rank why the rendezvous failed (best effort: it may be gone).
void sendRefusal(int fd, const std::string& why) {
  const std::string text = why.substr(0, kMaxCtrlText);
  const TableHeader h = makeRootHeader(RootFrame::kRefusal, static_cast<uint32_t>(text.size()));
  const Deadline d = Deadline::afterMs(kReplyMs);
  if (sendAll(fd, &h, sizeof(h), d).ok()) (void)sendAll(fd, text.data(), text.size(), d);
}

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
                "rendezvous: Timed out with %d of %d ranks joined (missing ranks:%s; %llu strange connections "
                "refused)%s",
                joined_, nranks_, missing.c_str(), static_cast<unsigned long long>(door_.refusals().total()),
                door_.acceptTrouble().c_str());
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
    Status conflict = errorf(
        braidInvalidUsage,
        "rendezvous at %s: rank %d claimed twice (from %s and from %s): two jobs, or two launches of one, share this "
        "address and secret, and braid cannot tell them apart; give each job its own BRAID_SECRET or BRAID_JOB_ID "
        "(or its own address)",
        id_.root.toString().c_str(), r, joinedFrom_[r].toString().c_str(), c.from.toString().c_str());
    (void)setNonBlocking(c.fd.get(), false);
    sendRefusal(c.fd.get(), conflict.message());  // the others get it from serveRendezvous
    return conflict;
  }
  // The control plane after init expects a blocking socket, as connectTo gives the other side.
  s = setNonBlocking(c.fd.get(), false);
  const TableHeader welcome = makeRootHeader(RootFrame::kWelcome, static_cast<uint32_t>(nranks_));
  if (s.ok()) s = sendAll(c.fd.get(), &welcome, sizeof(welcome), Deadline::afterMs(kReplyMs));
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
  Status s = server.run(listener.get());
  listener.reset();  // connections still queued are reset, not left hanging
  if (!s.ok()) {
    // The ranks that joined would otherwise wait for a table until their own deadline.
    for (int r = 1; r < nranks; ++r)
      if ((*socks)[r].valid()) sendRefusal((*socks)[r].get(), "rank 0 failed the rendezvous: " + s.message());
    socks->clear();
    return s;
  }
  const TableHeader th = makeRootHeader(RootFrame::kTable, static_cast<uint32_t>(nranks));
  for (int r = 1; r < nranks; ++r) {
    Status sent = sendAll((*socks)[r].get(), &th, sizeof(th), deadline);
    if (sent.ok()) sent = sendAll((*socks)[r].get(), table->data(), sizeof(PeerInfo) * nranks, deadline);
    if (!sent.ok()) return sent.withContext("rendezvous: sending the rank table to " + describePeer(*table, r));
  }
  return okStatus();
}

namespace {

// Reads rank 0's replies on `conn` after our hello: a welcome, then the table or a refusal. *closed
// says whether a failure was the connection closing or being reset (recvAll's braidRemoteError),
// as opposed to a refusal, a malformed reply or the deadline; *welcomed whether rank 0 had accepted
// us before.
Status readReplies(int conn, int rank, int nranks, const std::string& root, Deadline deadline, bool* welcomed,
                   bool* closed, std::vector<PeerInfo>* table) {
  const auto read = [&](void* buf, size_t n) {
    Status s = recvAll(conn, buf, n, deadline);
    *closed = s.code() == braidRemoteError;
    return s;
  };
  for (;;) {
    uint8_t header[sizeof(TableHeader)];
    BRAID_TRY(read(header, sizeof(header)));
    // Rank 0 proved nothing yet, but a malformed reply is no stale listener: give up at once.
    RootFrame kind;
    size_t bodyBytes = 0;
    BRAID_TRY(decodeRootHeader(header, sizeof(header), nranks, &kind, &bodyBytes).withContext("rendezvous at " + root));
    std::vector<uint8_t> body(bodyBytes);
    if (bodyBytes > 0) BRAID_TRY(read(body.data(), body.size()));
    switch (kind) {
      case RootFrame::kWelcome:
        *welcomed = true;
        break;
      case RootFrame::kRefusal:
        return errorf(braidInvalidUsage, "rank %d: refused by rank 0: %.*s", rank, static_cast<int>(body.size()),
                      reinterpret_cast<const char*>(body.data()));
      case RootFrame::kTable:
        return decodeTableBody(body.data(), body.size(), nranks, table).withContext("rendezvous at " + root);
    }
  }
}

}  // namespace

Status joinRendezvous(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline, Fd* sock,
                      std::vector<PeerInfo>* table) {
  const Hello h = makeHello(id, rank, nranks, me);
  const std::string root = id.root.toString();
  for (int attempt = 1;; ++attempt) {
    Fd conn;
    Status s = connectTo(id.root, deadline, &conn);
    if (!s.ok()) return s.withContext("rank " + std::to_string(rank) + " joining the rendezvous at rank 0");
    bool welcomed = false, closed = false;
    s = sendAll(conn.get(), &h, sizeof(h), deadline);
    if (s.ok()) {
      s = readReplies(conn.get(), rank, nranks, root, deadline, &welcomed, &closed, table);
    } else {
      closed = s.code() == braidRemoteError;
      if (!closed) s = s.withContext("rank " + std::to_string(rank) + " joining the rendezvous");
    }
    if (s.ok()) {
      *sock = std::move(conn);
      return okStatus();
    }
    if (s.code() == braidTimeout || deadline.expired())
      return errorf(braidTimeout, "rank %d: rendezvous at %s: Timed out before the deadline (%s)", rank, root.c_str(),
                    s.message().c_str());
    if (!closed) return s;  // refused, or not a braid rank 0
    if (welcomed)
      return errorf(braidRemoteError,
                    "rank %d: rank 0 at %s accepted this rank, then closed the rendezvous before the rank table (%s): "
                    "it failed or left; see its log",
                    rank, root.c_str(), s.message().c_str());
    // Rank 0 closed on us before accepting our hello: it was not listening for us yet, the process
    // listening there serves another communicator or job, or it dropped our connection (a flood of
    // strangers). Join again.
    BRAID_INFO(kLogBoot, "rank %d: rendezvous at %s closed on us (%s); joining again (attempt %d)", rank, root.c_str(),
               s.message().c_str(), attempt + 1);
    usleep(kRejoinDelayUs);
  }
}

}  // namespace braid
