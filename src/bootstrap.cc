#include "src/bootstrap.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "src/base/log.h"
#include "src/rendezvous.h"

namespace braid {

namespace {

// Listeners created by createUniqueId/listenForId, waiting for the rank-0 init of their id.
std::mutex gListenMu;
std::map<uint64_t, Fd> gListeners;

}  // namespace

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
  for (const Fd& s : b->socks_) closeInForkedChild(s);  // a death shows as their end (socket.h)
  b->inbuf_.resize(b->socks_.size());
  b->peers_ = *table;
  *out = std::move(b);
  return okStatus();
}

Status Bootstrap::allGather(const void* mine, size_t bytes, void* all, Deadline deadline) {
  char* out = static_cast<char*>(all);
  uint64_t len = bytes;
  uint8_t word[sizeof(uint64_t)];
  // The socket layer knows no ranks: each failure is named here, by the peer and the direction.
  if (rank_ != 0) {
    Status s = sendAll(socks_[0].get(), &len, sizeof(len), deadline);
    if (s.ok()) s = sendAll(socks_[0].get(), mine, bytes, deadline);
    if (!s.ok()) return s.withContext("allgather: sending our " + std::to_string(bytes) + " bytes to " + describe(0));
    s = recvAll(socks_[0].get(), word, sizeof(word), deadline);
    if (s.ok()) s = decodeGatherLength(word, sizeof(word), bytes * nranks_);
    if (s.ok()) s = recvAll(socks_[0].get(), out, bytes * nranks_, deadline);
    if (!s.ok()) return s.withContext("allgather: receiving everyone's records from " + describe(0));
    return okStatus();
  }
  memcpy(out, mine, bytes);
  for (int r = 1; r < nranks_; ++r) {
    Status s = recvAll(socks_[r].get(), word, sizeof(word), deadline);
    if (s.ok()) s = decodeGatherLength(word, sizeof(word), bytes);
    if (s.ok()) s = recvAll(socks_[r].get(), out + r * bytes, bytes, deadline);
    if (!s.ok()) return s.withContext("allgather: receiving the record of " + describe(r));
  }
  uint64_t total = bytes * nranks_;
  for (int r = 1; r < nranks_; ++r) {
    Status s = sendAll(socks_[r].get(), &total, sizeof(total), deadline);
    if (s.ok()) s = sendAll(socks_[r].get(), out, total, deadline);
    if (!s.ok()) return s.withContext("allgather: sending everyone's records to " + describe(r));
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
    CtrlFrame frame;
    size_t used = 0, want = 0;
    BRAID_TRY(decodeCtrlFrame(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), kCtrlTypes, nranks_, &frame,
                              &used, &want));
    if (used > 0) {
      msg->type = static_cast<CtrlType>(frame.type);
      msg->rank = frame.rank;
      msg->text = std::move(frame.text);
      buf.clear();
      *got = true;
      return okStatus();
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

bool Bootstrap::ctrlPending(int rank) {
  const int idx = rank_ == 0 ? rank : 0;
  std::lock_guard<std::mutex> lock(sendMu_);  // closeCtrl may run in another thread
  if (idx < 0 || idx >= static_cast<int>(socks_.size()) || !socks_[idx].valid()) return false;
  pollfd p{socks_[idx].get(), POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

void Bootstrap::closeCtrl(int rank) {
  int idx = rank_ == 0 ? rank : 0;
  std::lock_guard<std::mutex> lock(sendMu_);  // sendCtrl may run in another thread
  if (idx >= 0 && idx < static_cast<int>(socks_.size())) socks_[idx].reset();
}

}  // namespace braid
