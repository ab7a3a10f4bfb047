#include "src/bootstrap.h"

#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "src/log.h"

namespace braid {

namespace {

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
constexpr uint32_t kTableMagic = 0x4c424154;  // "TABL"
constexpr uint32_t kMaxCtrlText = 4096;
// How long one connecting peer may take to say hello before the root gives up on it.
constexpr int kHelloMs = 5000;

struct WireId {
  uint32_t magic;
  uint32_t version;
  uint64_t commId;
  uint8_t secret[16];
  uint16_t addrLen;
  uint8_t addr[32];  // a sockaddr_in or sockaddr_in6
};
static_assert(sizeof(WireId) <= BRAID_UNIQUE_ID_BYTES, "unique id overflow");

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t commId;
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
  PeerInfo info;
};

struct TableHeader {
  uint32_t magic;
  int32_t nranks;
};

struct CtrlHeader {
  uint32_t type;
  int32_t rank;
  uint32_t len;
};

// Listeners created by createUniqueId/listenForId, waiting for the rank-0 init of their id.
std::mutex gListenMu;
std::map<uint64_t, Fd> gListeners;

bool sameSecret(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; ++i) diff |= a[i] ^ b[i];  // constant time
  return diff == 0;
}

Status takeListener(uint64_t commId, Fd* fd) {
  std::lock_guard<std::mutex> lock(gListenMu);
  auto it = gListeners.find(commId);
  if (it == gListeners.end())
    return errorf(braidInvalidUsage,
                  "rank 0 must be initialized in the process that called braidGetUniqueId for this id (or the id was "
                  "already used)");
  *fd = std::move(it->second);
  gListeners.erase(it);
  return okStatus();
}

}  // namespace

void encodeUniqueId(const UniqueIdData& d, braidUniqueId* out) {
  WireId w{};
  w.magic = d.magic;
  w.version = d.version;
  w.commId = d.commId;
  memcpy(w.secret, d.secret, 16);
  w.addrLen = static_cast<uint16_t>(std::min<size_t>(d.root.len, sizeof(w.addr)));
  memcpy(w.addr, &d.root.storage, w.addrLen);
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, &w, sizeof(w));
}

Status decodeUniqueId(const braidUniqueId& in, UniqueIdData* out) {
  WireId w;
  memcpy(&w, in.internal, sizeof(w));
  if (w.magic != kUniqueIdMagic) return errorf(braidInvalidArgument, "not a braid unique id (bad magic)");
  if (w.version != kProtocolVersion)
    return errorf(braidInvalidArgument, "unique id of protocol version %u, this library speaks %u", w.version,
                  kProtocolVersion);
  if (w.addrLen == 0 || w.addrLen > sizeof(w.addr)) return errorf(braidInvalidArgument, "unique id has no address");
  UniqueIdData d;
  d.magic = w.magic;
  d.version = w.version;
  d.commId = w.commId;
  memcpy(d.secret, w.secret, 16);
  memcpy(&d.root.storage, w.addr, w.addrLen);
  d.root.len = w.addrLen;
  if (d.root.family() != AF_INET && d.root.family() != AF_INET6)
    return errorf(braidInvalidArgument, "unique id has a bad address family");
  *out = d;
  return okStatus();
}

Status createUniqueId(UniqueIdData* out) {
  UniqueIdData d;
  d.magic = kUniqueIdMagic;
  d.version = kProtocolVersion;
  if (getrandom(d.secret, sizeof(d.secret), 0) != sizeof(d.secret) ||
      getrandom(&d.commId, sizeof(d.commId), 0) != sizeof(d.commId))
    return systemError(errno, "getrandom");
  SockAddr local;
  BRAID_TRY(defaultLocalAddress(&local));
  Fd fd;
  BRAID_TRY(listenOn(local, 1024, &fd, &d.root));
  {
    std::lock_guard<std::mutex> lock(gListenMu);
    gListeners[d.commId] = std::move(fd);
  }
  *out = d;
  return okStatus();
}

Status listenForId(const UniqueIdData& id) {
  SockAddr any = id.root;
  Fd fd;
  SockAddr bound;
  Status s = listenOn(any, 1024, &fd, &bound);
  if (!s.ok()) return s.withContext("rank 0 cannot listen on the rendezvous address " + id.root.toString());
  std::lock_guard<std::mutex> lock(gListenMu);
  gListeners[id.commId] = std::move(fd);
  return okStatus();
}

void adoptListener(uint64_t commId, Fd fd) {
  std::lock_guard<std::mutex> lock(gListenMu);
  gListeners[commId] = std::move(fd);
}

void dropListener(uint64_t commId) {
  std::lock_guard<std::mutex> lock(gListenMu);
  gListeners.erase(commId);
}

Bootstrap::~Bootstrap() = default;

// Rank 0: accept hellos until every rank arrived, then send everyone the table.
static Status serveRendezvous(const UniqueIdData& id, int nranks, const PeerInfo& me, Deadline deadline,
                              std::vector<Fd>* socks, std::vector<PeerInfo>* table) {
  Fd listener;
  BRAID_TRY(takeListener(id.commId, &listener));
  table->assign(nranks, PeerInfo{});
  (*table)[0] = me;
  socks->clear();
  socks->resize(nranks);
  int joined = 1;
  while (joined < nranks) {
    Fd conn;
    SockAddr from;
    Status s = acceptOne(listener.get(), deadline, &conn, &from);
    if (!s.ok())
      return s.withContext("rendezvous: " + std::to_string(joined) + " of " + std::to_string(nranks) + " ranks joined");
    Hello h;
    Deadline helloBy = Deadline::afterMs(kHelloMs);
    if (helloBy.atNs > deadline.atNs) helloBy = deadline;
    Status r = recvAll(conn.get(), &h, sizeof(h), helloBy);
    const char* why = nullptr;
    if (!r.ok())
      why = "no complete hello";
    else if (h.magic != kHelloMagic || h.version != kProtocolVersion)
      why = "bad magic or version";
    else if (h.commId != id.commId || !sameSecret(h.secret, id.secret))
      why = "wrong id or secret";
    else if (h.nranks != nranks)
      why = "different rank count";
    else if (h.rank <= 0 || h.rank >= nranks)
      why = "rank out of range";
    else if (socks->at(h.rank).valid())
      why = "rank joined twice";
    if (why != nullptr) {
      BRAID_WARN(kLogBoot, "rendezvous: refused a connection from %s: %s", from.toString().c_str(), why);
      continue;
    }
    h.info.rank = h.rank;
    h.info.hostname[sizeof(h.info.hostname) - 1] = '\0';
    h.info.hostId[sizeof(h.info.hostId) - 1] = '\0';
    (*table)[h.rank] = h.info;
    (*socks)[h.rank] = std::move(conn);
    ++joined;
    BRAID_INFO(kLogBoot, "rendezvous: rank %d joined from %s (%d of %d)", h.rank, from.toString().c_str(), joined,
               nranks);
  }
  TableHeader th{kTableMagic, nranks};
  for (int r = 1; r < nranks; ++r) {
    Status s = sendAll((*socks)[r].get(), &th, sizeof(th), deadline);
    if (s.ok()) s = sendAll((*socks)[r].get(), table->data(), sizeof(PeerInfo) * nranks, deadline);
    if (!s.ok()) return s.withContext("rendezvous: sending the rank table to rank " + std::to_string(r));
  }
  return okStatus();
}

// Other ranks: connect, prove the secret, receive the table. Retries while the root is not there
// yet or closed on us (a stale listener of an earlier communicator on the same address).
static Status joinRendezvous(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline,
                             Fd* sock, std::vector<PeerInfo>* table) {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  h.commId = id.commId;
  memcpy(h.secret, id.secret, 16);
  h.rank = rank;
  h.nranks = nranks;
  h.info = me;
  Status last;
  for (;;) {
    Fd conn;
    Status s = connectTo(id.root, deadline, &conn);
    if (!s.ok()) return s.withContext("rank " + std::to_string(rank) + " joining the rendezvous at rank 0");
    s = sendAll(conn.get(), &h, sizeof(h), deadline);
    TableHeader th{};
    if (s.ok()) s = recvAll(conn.get(), &th, sizeof(th), deadline);
    if (s.ok() && (th.magic != kTableMagic || th.nranks != nranks))
      return errorf(braidRemoteError, "rendezvous: malformed rank table from %s", id.root.toString().c_str());
    if (s.ok()) {
      table->assign(nranks, PeerInfo{});
      s = recvAll(conn.get(), table->data(), sizeof(PeerInfo) * nranks, deadline);
    }
    if (s.ok()) {
      *sock = std::move(conn);
      return okStatus();
    }
    if (s.code() == braidTimeout || deadline.expired())
      return errorf(braidTimeout, "rank %d: rendezvous at %s did not complete before the deadline (%s)", rank,
                    id.root.toString().c_str(), s.message().c_str());
    if (s.code() != braidRemoteError) return s;
    usleep(50000);  // the root closed on us: stale listener or a refused hello; try again
  }
}

Status Bootstrap::init(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline,
                       std::unique_ptr<Bootstrap>* out, std::vector<PeerInfo>* table) {
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  if (rank == 0) {
    BRAID_TRY(serveRendezvous(id, nranks, me, deadline, &b->socks_, table));
  } else {
    b->socks_.resize(1);
    BRAID_TRY(joinRendezvous(id, rank, nranks, me, deadline, &b->socks_[0], table));
  }
  for (int r = 0; r < nranks; ++r) (*table)[r].rank = r;
  b->inbuf_.resize(b->socks_.size());
  *out = std::move(b);
  return okStatus();
}

Status Bootstrap::allGather(const void* mine, size_t bytes, void* all, Deadline deadline) {
  char* out = static_cast<char*>(all);
  uint64_t len = bytes;
  if (rank_ != 0) {
    BRAID_TRY(sendAll(socks_[0].get(), &len, sizeof(len), deadline));
    BRAID_TRY(sendAll(socks_[0].get(), mine, bytes, deadline));
    uint64_t total = 0;
    BRAID_TRY(recvAll(socks_[0].get(), &total, sizeof(total), deadline));
    if (total != bytes * nranks_)
      return errorf(braidRemoteError, "allgather: rank 0 sent %llu bytes, expected %zu",
                    static_cast<unsigned long long>(total), bytes * nranks_);
    return recvAll(socks_[0].get(), out, total, deadline);
  }
  memcpy(out, mine, bytes);
  for (int r = 1; r < nranks_; ++r) {
    uint64_t got = 0;
    Status s = recvAll(socks_[r].get(), &got, sizeof(got), deadline);
    if (s.ok() && got != bytes)
      s = errorf(braidRemoteError, "allgather: rank %d contributed %llu bytes, expected %zu", r,
                 static_cast<unsigned long long>(got), bytes);
    if (s.ok()) s = recvAll(socks_[r].get(), out + r * bytes, bytes, deadline);
    if (!s.ok()) return s.withContext("allgather from rank " + std::to_string(r));
  }
  uint64_t total = bytes * nranks_;
  for (int r = 1; r < nranks_; ++r) {
    Status s = sendAll(socks_[r].get(), &total, sizeof(total), deadline);
    if (s.ok()) s = sendAll(socks_[r].get(), out, total, deadline);
    if (!s.ok()) return s.withContext("allgather to rank " + std::to_string(r));
  }
  return okStatus();
}

std::vector<int> Bootstrap::ctrlFds() const {
  std::vector<int> fds;
  for (const Fd& f : socks_) fds.push_back(f.get());
  return fds;
}

Status Bootstrap::sendCtrl(int toRank, CtrlType type, int aboutRank, const std::string& text) {
  int idx = rank_ == 0 ? toRank : 0;
  CtrlHeader h{static_cast<uint32_t>(type), aboutRank,
               static_cast<uint32_t>(std::min<size_t>(text.size(), kMaxCtrlText))};
  std::string msg(reinterpret_cast<const char*>(&h), sizeof(h));
  msg.append(text.data(), h.len);
  std::lock_guard<std::mutex> lock(sendMu_);
  if (idx < 0 || idx >= static_cast<int>(socks_.size()) || !socks_[idx].valid()) return okStatus();
  // Short: a peer that does not drain its control socket must not hold up failure handling.
  return sendAll(socks_[idx].get(), msg.data(), msg.size(), Deadline::afterMs(1000));
}

Status Bootstrap::pollCtrl(int fromRank, bool* got, CtrlMsg* msg, bool* eof) {
  *got = false;
  *eof = false;
  int idx = rank_ == 0 ? fromRank : 0;
  if (idx < 0 || idx >= static_cast<int>(socks_.size()) || !socks_[idx].valid()) return okStatus();
  std::string& buf = inbuf_[idx];
  // Reads only what completes the current frame (header, then its text): a backlog of queued
  // messages stays in the kernel and is delivered one by one, and no sender can make us buffer more
  // than one frame.
  for (;;) {
    size_t want = sizeof(CtrlHeader);
    if (buf.size() >= sizeof(CtrlHeader)) {
      CtrlHeader h;
      memcpy(&h, buf.data(), sizeof(h));
      if (h.len > kMaxCtrlText || h.type == 0 || h.type > kMaxCtrlType)
        return errorf(braidRemoteError, "malformed control message (type %u, %u bytes)", h.type, h.len);
      want = sizeof(h) + h.len;
      if (buf.size() == want) {
        msg->type = static_cast<CtrlType>(h.type);
        msg->rank = h.rank;
        msg->text.assign(buf.data() + sizeof(h), h.len);
        buf.clear();
        *got = true;
        return okStatus();
      }
    }
    char tmp[sizeof(CtrlHeader) + kMaxCtrlText];
    ssize_t n = recv(socks_[idx].get(), tmp, want - buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      buf.append(tmp, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) *eof = true;
    return okStatus();
  }
}

void Bootstrap::closeCtrl(int rank) {
  int idx = rank_ == 0 ? rank : 0;
  std::lock_guard<std::mutex> lock(sendMu_);  // sendCtrl may run in another thread
  if (idx >= 0 && idx < static_cast<int>(socks_.size())) socks_[idx].reset();
}

}  // namespace braid
