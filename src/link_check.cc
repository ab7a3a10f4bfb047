#include "src/link_check.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "src/base/config.h"
#include "src/base/hash.h"

namespace braid {

namespace {

// ---- BRAID_TEST_LINK_FAULT -------------------------------------------------------------------

Status badFault(const std::string& text, const std::string& entry, const char* what) {
  return errorf(braidInvalidArgument,
                "BRAID_TEST_LINK_FAULT=%s: '%s' %s (want TRANSPORT:RANK-RANK:corrupt|drop|error, comma-separated)",
                text.c_str(), entry.c_str(), what);
}

bool parseRank(const std::string& s, int* out) {
  if (s.empty() || s.size() > 8 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoi(s);
  return true;
}

Status parseOneFault(const std::string& text, const std::string& entry, LinkFault* out) {
  const size_t c1 = entry.find(':');
  const size_t c2 = c1 == std::string::npos ? std::string::npos : entry.find(':', c1 + 1);
  if (c2 == std::string::npos) return badFault(text, entry, "has not three fields");
  LinkFault f;
  f.transport = entry.substr(0, c1);
  bool known = false;
  for (const TransportEntry& e : transportRegistry()) known = known || f.transport == e.name;
  if (!known) return badFault(text, entry, "names no transport of this build");
  const std::string pair = entry.substr(c1 + 1, c2 - c1 - 1);
  const size_t dash = pair.find('-');
  if (dash == std::string::npos || !parseRank(pair.substr(0, dash), &f.a) || !parseRank(pair.substr(dash + 1), &f.b) ||
      f.a == f.b)
    return badFault(text, entry, "has no pair of two different ranks");
  const std::string mode = entry.substr(c2 + 1);
  if (mode == "corrupt") {
    f.mode = LinkFaultMode::kCorrupt;
  } else if (mode == "drop") {
    f.mode = LinkFaultMode::kDrop;
  } else if (mode == "error") {
    f.mode = LinkFaultMode::kError;
  } else {
    return badFault(text, entry, "has an unknown fault");
  }
  *out = std::move(f);
  return okStatus();
}

// A link that breaks as asked. The transport drives the inner link directly (its progress() holds
// the inner pointer), so a corrupted receive is found by FaultTransport::progress, right after the
// inner transport's pass and before anyone can see the transfer complete.
class FaultLink final : public Link {
 public:
  FaultLink(std::unique_ptr<Link> inner, int peer, LinkFaultMode mode)
      : inner_(std::move(inner)), peer_(peer), mode_(mode) {}

  Status postSend(Xfer* x) override {
    if (mode_ == LinkFaultMode::kError) return injected();
    if (mode_ == LinkFaultMode::kDrop) {
      // Lost on the way: the sender sees it leave, the peer never sees it.
      x->complete = true;
      return okStatus();
    }
    return inner_->postSend(x);
  }
  Status postRecv(Xfer* x) override {
    if (mode_ == LinkFaultMode::kError) return injected();
    BRAID_TRY(inner_->postRecv(x));
    if (mode_ == LinkFaultMode::kCorrupt) {
      recvs_.push_back(x);
      corruptArrived();  // a transport may complete a receive inside postRecv
    }
    return okStatus();
  }
  Status progress() override {
    Status s = inner_->progress();
    corruptArrived();
    return s;
  }
  bool busy() const override { return inner_->busy(); }
  Copies receiveCopies() const override { return inner_->receiveCopies(); }

  // Flips a byte of every receive that completed since the last call (completion is in posting
  // order, so the pending ones are a suffix).
  void corruptArrived() {
    while (next_ < recvs_.size() && recvs_[next_]->complete) {
      Xfer* x = recvs_[next_++];
      if (x->bytes > 0 && x->memType == MemType::kHost) static_cast<uint8_t*>(x->data)[x->bytes / 2] ^= 0x5a;
    }
    if (next_ == recvs_.size()) {
      recvs_.clear();  // keeps the capacity: no allocation per message in the steady state
      next_ = 0;
    }
  }
  int peer() const { return peer_; }

 private:
  Status injected() const {
    return errorf(braidRemoteError, "injected fault (BRAID_TEST_LINK_FAULT) on the link to peer %d", peer_);
  }

  std::unique_ptr<Link> inner_;
  int peer_;
  LinkFaultMode mode_;
  std::vector<Xfer*> recvs_;  // corrupt: posted receives not yet corrupted, from next_ on
  size_t next_ = 0;
};

// The named transport with some of its links wrapped in FaultLink; otherwise a pass-through.
class FaultTransport final : public Transport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, std::vector<LinkFault> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}

  const char* name() const override { return inner_->name(); }
  const TransportCaps& caps() const override { return inner_->caps(); }
  void localRecord(const PeerInfo& me, TransportRecord* out) const override { inner_->localRecord(me, out); }
  bool canConnect(const Endpoint& a, const Endpoint& b) const override { return inner_->canConnect(a, b); }
  std::string whyNot(const Endpoint& a, const Endpoint& b) const override { return inner_->whyNot(a, b); }
  int waitFd() const override { return inner_->waitFd(); }

  Status connect(const TransportContext& ctx, const std::vector<int>& peers,
                 std::vector<std::unique_ptr<Link>>* out) override {
    BRAID_TRY(inner_->connect(ctx, peers, out));
    for (size_t i = 0; i < peers.size() && i < out->size(); ++i) {
      for (const LinkFault& f : faults_) {
        if (!((f.a == ctx.rank && f.b == peers[i]) || (f.b == ctx.rank && f.a == peers[i]))) continue;
        auto link = std::make_unique<FaultLink>(std::move((*out)[i]), peers[i], f.mode);
        if (f.mode == LinkFaultMode::kCorrupt) corrupting_.push_back(link.get());
        (*out)[i] = std::move(link);
        break;
      }
    }
    return okStatus();
  }
  Status progress(int* failedPeer) override {
    Status s = inner_->progress(failedPeer);
    for (FaultLink* l : corrupting_) l->corruptArrived();
    return s;
  }
  void dropLink(int peer) override {
    inner_->dropLink(peer);
    std::erase_if(corrupting_, [peer](const FaultLink* l) { return l->peer() == peer; });
  }

 protected:
  // Registration goes to the inner transport, which owns the keys; our region carries a copy.
  Status registerRegion(Region* region) override {
    const Region* inner = nullptr;
    BRAID_TRY(inner_->registerMemory(region->base, region->bytes, region->memType, &inner));
    memcpy(region->key, inner->key, sizeof(region->key));
    innerRegions_.emplace_back(region, inner);
    return okStatus();
  }
  void deregisterRegion(Region* region) override {
    for (size_t i = 0; i < innerRegions_.size(); ++i) {
      if (innerRegions_[i].first != region) continue;
      (void)inner_->deregisterMemory(innerRegions_[i].second);
      innerRegions_.erase(innerRegions_.begin() + static_cast<long>(i));
      return;
    }
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::vector<LinkFault> faults_;
  std::vector<FaultLink*> corrupting_;  // owned by the communicator, like every link
  std::vector<std::pair<Region*, const Region*>> innerRegions_;
};

// ---- the self-test ---------------------------------------------------------------------------

// Small enough to cost nothing, large enough to span several pieces where a test shrinks them
// (shm slots of 192 bytes, tcp reads of 4 KiB), and of no power-of-two length.
constexpr size_t kProbeBytes = 1000;
constexpr size_t kSumBytes = 8;
// Polling: yield the core for this long first (a peer's answer usually takes microseconds), then
// sleep between passes, so that ranks outnumbering cores do not starve the peers they wait for.
constexpr int64_t kYieldNs = 2 * 1000 * 1000;
constexpr long kSleepNs = 50 * 1000;

// The message `from` sends `to`: bytes that differ per pair, direction and communicator (so a
// message delivered to the wrong peer or from another communicator shows), then their checksum.
void fillProbe(uint8_t* buf, int from, int to, uint64_t commId) {
  uint64_t x = commId ^ (static_cast<uint64_t>(from) << 32) ^ static_cast<uint64_t>(to) ^ 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < kProbeBytes - kSumBytes; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    buf[i] = static_cast<uint8_t>(x >> 56);
  }
  const uint64_t sum = fnv1a(buf, kProbeBytes - kSumBytes);
  memcpy(buf + kProbeBytes - kSumBytes, &sum, kSumBytes);
}

}  // namespace

struct LinkCheck::Probe {
  uint8_t out[kProbeBytes];
  uint8_t in[kProbeBytes];
  Xfer send;
  Xfer recv;
  bool done = false;
};

namespace {

using Probe = LinkCheck::Probe;

// "" when the received message is the one the peer should have sent, else the first difference.
std::string verify(const Probe& p, int peer, int rank, uint64_t commId) {
  if (p.recv.bytes != kProbeBytes)
    return "received " + std::to_string(p.recv.bytes) + " bytes, want " + std::to_string(kProbeBytes);
  uint8_t want[kProbeBytes];
  fillProbe(want, peer, rank, commId);
  uint64_t sum = 0;
  memcpy(&sum, p.in + kProbeBytes - kSumBytes, kSumBytes);
  const bool sumOk = sum == fnv1a(p.in, kProbeBytes - kSumBytes);
  for (size_t i = 0; i < kProbeBytes; ++i) {
    if (p.in[i] == want[i]) continue;
    char buf[128];
    snprintf(buf, sizeof(buf), "byte %zu of %zu differs (0x%02x, want 0x%02x; checksum %s)", i, kProbeBytes, p.in[i],
             want[i], sumOk ? "matches: another sender's message?" : "wrong");
    return buf;
  }
  return "";
}

// The probe of the link to `peer` on transport t, or -1.
int probeOf(const LinkCheckSet& set, int t, int peer) {
  for (size_t i = 0; i < set.peers.size(); ++i)
    if (set.peers[i] == peer && set.transportOf[i] == t) return static_cast<int>(i);
  return -1;
}

void failProbe(const LinkCheckSet& set, size_t i, const std::string& why, std::vector<Probe>* probes,
               std::vector<std::string>* failures) {
  (*probes)[i].done = true;
  (*failures)[i] = why;
  // Its transfers may stay posted: the transport must not touch them again.
  (*set.transports)[set.transportOf[i]]->dropLink(set.peers[i]);
}

}  // namespace

Status parseLinkFaults(const std::string& text, std::vector<LinkFault>* out) {
  std::vector<LinkFault> faults;
  for (const std::string& entry : listItems(text)) BRAID_TRY(parseOneFault(text, entry, &faults.emplace_back()));
  *out = std::move(faults);
  return okStatus();
}

void wrapFaultyTransports(const std::vector<LinkFault>& faults, std::vector<std::unique_ptr<Transport>>* transports) {
  for (std::unique_ptr<Transport>& t : *transports) {
    std::vector<LinkFault> mine;
    for (const LinkFault& f : faults)
      if (f.transport == t->name()) mine.push_back(f);
    if (!mine.empty()) t = std::make_unique<FaultTransport>(std::move(t), std::move(mine));
  }
}

LinkCheck::LinkCheck() = default;
LinkCheck::~LinkCheck() = default;

Status LinkCheck::run(const LinkCheckSet& set, Deadline deadline, std::vector<std::string>* failures) {
  const size_t n = set.peers.size();
  failures->assign(n, "");
  probes_ = std::vector<Probe>(n);
  std::vector<Probe>& probes = probes_;
  size_t open = n;
  // Receives first: a message that arrives at once then has a place to go.
  for (size_t i = 0; i < n; ++i) {
    Probe& p = probes[i];
    fillProbe(p.out, set.rank, set.peers[i], set.commId);
    memset(p.in, 0, sizeof(p.in));
    p.recv.data = p.in;
    p.recv.bytes = kProbeBytes;
    p.recv.capacity = kProbeBytes;
    p.send.data = p.out;
    p.send.bytes = kProbeBytes;
    Status s = set.links[i]->postRecv(&p.recv);
    if (s.ok()) s = set.links[i]->postSend(&p.send);
    if (!s.ok()) {
      failProbe(set, i, s.message(), &probes, failures);
      --open;
    }
  }
  std::vector<int> used;  // the transports to drive, each once per pass
  for (size_t i = 0; i < n; ++i)
    if (std::find(used.begin(), used.end(), set.transportOf[i]) == used.end()) used.push_back(set.transportOf[i]);
  const int64_t startNs = nowNs();
  int64_t lastMoveNs = startNs;
  while (open > 0) {
    for (int t : used) {
      int failed = -1;
      Status s = (*set.transports)[t]->progress(&failed);
      if (s.ok()) continue;
      const int i = probeOf(set, t, failed);
      if (i < 0 || probes[i].done)
        return s.withContext("link self-test: a link outside the test failed (peer " + std::to_string(failed) + ")");
      failProbe(set, i, s.message(), &probes, failures);
      --open;
    }
    bool moved = false;
    for (size_t i = 0; i < n; ++i) {
      Probe& p = probes[i];
      if (p.done || !p.send.complete || !p.recv.complete) continue;
      p.done = true;
      --open;
      moved = true;
      std::string why = verify(p, set.peers[i], set.rank, set.commId);
      if (!why.empty()) failProbe(set, i, why, &probes, failures);
    }
    const int64_t now = nowNs();
    if (open > 0 && now >= deadline.atNs) {
      char buf[96];
      for (size_t i = 0; i < n; ++i) {
        Probe& p = probes[i];
        if (p.done) continue;
        snprintf(buf, sizeof(buf), "%s within %.0f ms",
                 !p.recv.complete ? "no message from the peer" : "our message did not leave",
                 static_cast<double>(now - startNs) / 1e6);
        failProbe(set, i, buf, &probes, failures);
        --open;
      }
    }
    if (moved) lastMoveNs = now;
    if (open == 0 || moved) continue;
    if (now - lastMoveNs < kYieldNs) {
      sched_yield();
    } else {
      const timespec ts{0, kSleepNs};
      nanosleep(&ts, nullptr);
    }
  }
  return okStatus();
}

}  // namespace braid
