// The communicator's control plane: failure notices, goodbyes and heartbeats over the bootstrap star
// (rank 0 in the middle), the texts that say who failed and how far every rank had got, and the
// background thread's sleep (src/control_plane.h).
//
// Detection. A rank that dies closes its control connection (the kernel does it): rank 0 sees
// the close at once and tells everyone. A rank that stops (SIGSTOP, a hung machine, a cut cable)
// closes nothing: heartbeats find it. Every BRAID_HEARTBEAT_MS the others send rank 0 a heartbeat
// carrying their last posted operation, and rank 0 sends everyone one; a peer silent for
// BRAID_HEARTBEAT_MISSES periods is declared stopped (braidTimeout). Rank 0 watches every rank,
// every rank watches rank 0.
//
// Propagation. Whoever detects a failure tells rank 0 (or is rank 0); rank 0 sends everyone its
// table of the ranks' progress, then the notice. Ranks learn within one control-socket wakeup.
//
// Calls. A rank whose oldest operation has waited a heartbeat period tells rank 0 that call and its
// last ones (kCalls); rank 0 compares them with its own and the other ranks' and fails everyone
// when two ranks' calls of one number differ (src/call_watch.h).
//
// Leaving. A rank's goodbye says how far it got (Engine::leaveRecord); rank 0 passes it on to
// everyone still here, and rank 0's own goes to everyone. Each rank's engine then fails exactly the
// operations that need the leaver and were posted after what it finished (Engine::checkLeavers,
// src/executor_leave.cc).
#include "src/control_plane.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/comm.h"
#include "src/wire.h"

namespace braid {

namespace {

// Ten times the background loop's longest sleep (kIdleSleepUs, 10 ms): a shorter gap between two
// heartbeat checks is the loop's normal pace, not a stop, even with a heartbeat period below it.
constexpr int64_t kJudgeAwayNs = 100 * 1000000LL;

// "0-2,5,7-9"
std::string rankRanges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

// Adds fd to epoll set ep; fd < 0 (a link that can only be polled, like shm's) adds nothing.
Status watchFd(int ep, int fd, uint64_t tag, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  if (fd >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) return systemError(errno, "epoll_ctl");
  return okStatus();
}

}  // namespace

ControlPlane::ControlPlane(braidComm* comm) : comm_(comm) {
  gone_.assign(comm->nranks, 0);
  leaves_.resize(comm->nranks);
  left_.reset(new std::atomic<uint8_t>[comm->nranks]());
}

ControlPlane::~ControlPlane() {
  if (wakeFd_ >= 0) close(wakeFd_);
  if (epollFd_ >= 0) close(epollFd_);
  if (epollLinksFd_ >= 0) close(epollLinksFd_);
}

Status ControlPlane::start() {
  BRAID_TRY(readHeartbeatSettings());
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeFd_ < 0) return systemError(errno, "eventfd");
  // Two sets: control only (sleeping while nothing is posted or a caller drives progress), and
  // control plus the links' descriptors, edge-triggered (sleeping while operations wait on peers:
  // new data wakes us once, and data nobody has asked for yet cannot keep us spinning).
  for (int* ep : {&epollFd_, &epollLinksFd_}) {
    *ep = epoll_create1(EPOLL_CLOEXEC);
    if (*ep < 0) return systemError(errno, "epoll_create1");
  }
  // Control sockets: rank 0 watches one per rank, the others the one to rank 0. A socket closed
  // later (goodbye) leaves both sets by itself.
  std::vector<int> ctrl = comm_->boot->ctrlFds();
  for (int ep : {epollFd_, epollLinksFd_}) {
    BRAID_TRY(watchFd(ep, wakeFd_, kWakeTag, EPOLLIN));
    for (size_t i = 0; i < ctrl.size(); ++i) BRAID_TRY(watchFd(ep, ctrl[i], comm_->rank == 0 ? i : 0, EPOLLIN));
  }
  // The first heartbeats go out now, from the thread in init, not at the background thread's first
  // turn: a rank stopped as soon as its init returned (SIGSTOP, a hung machine) had often never run
  // that thread, so rank 0 had never heard from it and allowed it the init grace (BRAID_TIMEOUT)
  // instead of the heartbeats' silence. The survivors' operations then timed out, each naming the
  // peer it waited for, a live one too (tests/mp/test_failure.cc, "a rank stopped as soon as...").
  if (heartbeatNs_ > 0) {
    for (int r = 0; r < comm_->nranks; ++r) beatTo(r, 0);
    nextBeatNs_ = nowNs() + heartbeatNs_;
  }
  return okStatus();
}

bool ControlPlane::beatTo(int r, uint64_t seq) {
  if (r == comm_->rank || gone_[r] || (comm_->rank != 0 && r != 0)) return false;
  (void)comm_->boot->sendCtrl(r, CtrlType::kHeartbeat, comm_->rank,
                              std::string(reinterpret_cast<const char*>(&seq), sizeof(seq)));
  return true;
}

Status ControlPlane::watchLinkFd(int fd) { return watchFd(epollLinksFd_, fd, kLinkTag, EPOLLIN | EPOLLET); }

void ControlPlane::wake() {
  if (wakeFd_ < 0) return;
  uint64_t one = 1;
  ssize_t rc = write(wakeFd_, &one, sizeof(one));
  (void)rc;  // a full counter already means "awake"
}

bool ControlPlane::ctrlPending(int peer) { return comm_->boot->ctrlPending(peer); }

void ControlPlane::sayGoodbye(const std::string& record) {
  if (comm_->rank == 0) {
    // Rank 0 goes at once, without waiting for the others to leave (it did until 2026-12: failure
    // notices travel through it). Why that is safe: it finished every operation it posted, so no
    // rank needs its bytes beyond what is already in flight, and every rank learns from this notice
    // which of its operations need rank 0 (they fail now). What rank 0 no longer does for the others
    // is relay failures and goodbyes among them: from here on they find those locally, through the
    // links (a peer that exits closes them) and their operations' deadlines. Lingering instead would
    // keep rank 0's process for as long as any other rank runs, up to BRAID_TIMEOUT, and waiting for
    // acknowledgements would only shorten that window, not remove it.
    for (int r = 1; r < comm_->nranks; ++r)
      if (!gone_[r]) (void)comm_->boot->sendCtrl(r, CtrlType::kBye, 0, record);
  } else {
    (void)comm_->boot->sendCtrl(0, CtrlType::kBye, comm_->rank, record);
  }
}

std::string ControlPlane::encodeLeave(uint64_t colls, const std::vector<uint64_t>& perPeer) {
  std::string out(reinterpret_cast<const char*>(&colls), 8);
  std::string table = encodeProgress(perPeer);
  // Whole runs only, within a control message: ranks past the cut decode as unknown.
  const size_t room = (kMaxCtrlText - 8) / 12 * 12;
  if (table.size() > room) table.resize(room);
  return out + table;
}

std::vector<ControlPlane::LeaveRecord> ControlPlane::leaves() const {
  std::lock_guard<std::mutex> g(failMu_);
  return leaves_;
}

void ControlPlane::onGoodbye(int who, const std::string& record) {
  LeaveRecord rec;
  if (record.size() >= 8) {
    std::vector<uint64_t> table(kLeaveFields * static_cast<size_t>(comm_->nranks));
    memcpy(&rec.colls, record.data(), 8);
    decodeProgress(reinterpret_cast<const uint8_t*>(record.data()) + 8, record.size() - 8, &table);
    const size_t me = kLeaveFields * static_cast<size_t>(comm_->rank);
    rec.known = true;
    rec.sentToMe = table[me];
    rec.recvdFromMe = table[me + 1];
    // Unknown (a cut table) counts as "sent": then only its tag link's own goodbye ends receives.
    rec.taggedToMe = table[me + 2] != 0;
    rec.taggedFromMe = table[me + 3] == kProgressUnknown ? 0 : table[me + 3];
  }
  {
    std::lock_guard<std::mutex> g(failMu_);
    leaves_[who] = rec;
  }
  // The generation first: a thread that sees left(who) (acquire) then sees the record's generation.
  leaveGen_.fetch_add(1, std::memory_order_release);
  left_[who].store(1, std::memory_order_release);
  if (rec.known)
    BRAID_INFO(kLogInit, "%s left the communicator after operation #%llu", comm_->describeRank(who).c_str(),
               static_cast<unsigned long long>(rec.colls));
  else
    BRAID_INFO(kLogInit, "%s left the communicator", comm_->describeRank(who).c_str());
  if (comm_->rank == 0 && who != 0) {
    // Everyone still here hears it, in the one order of rank 0's notices (noticeMu_).
    std::lock_guard<std::mutex> order(noticeMu_);
    for (int r = 1; r < comm_->nranks; ++r)
      if (r != who && !gone_[r]) (void)comm_->boot->sendCtrl(r, CtrlType::kBye, who, record);
  }
  wake();
}

void ControlPlane::fail(const Status& s, int culprit, bool notify, int skip, const std::string& relayText) {
  const int n = comm_->nranks;
  if (culprit < -1 || culprit >= n) culprit = -1;
  bool first = false, newCulprit = false;
  std::string progress;
  std::lock_guard<std::mutex> order(noticeMu_);
  {
    std::lock_guard<std::mutex> g(failMu_);
    if (culprit >= 0 && culprit != comm_->rank) {
      auto it = std::lower_bound(failedRanks_.begin(), failedRanks_.end(), culprit);
      if (it == failedRanks_.end() || *it != culprit) {
        failedRanks_.insert(it, culprit);
        newCulprit = true;
      }
    }
    if (!failed_.load(std::memory_order_relaxed)) {
      failure_ = s;
      progress_[comm_->rank] = postedSeq_.load(std::memory_order_relaxed);
      progressAtFail_ = progress_;
      failed_.store(true, std::memory_order_release);
      first = true;
    }
    if (comm_->rank == 0) progress = encodeProgress(progressAtFail_);
  }
  if (first)
    BRAID_WARN(kLogInit, "communicator failed: %s", s.message().c_str());
  else if (newCulprit)
    BRAID_INFO(kLogInit, "also failed: %s", s.message().c_str());
  if (!notify || comm_->boot == nullptr || (!first && !newCulprit)) {
    if (first) wake();
    return;
  }
  const CtrlType type = s.code() == braidTimeout        ? CtrlType::kTimeout
                        : s.code() == braidInvalidUsage ? CtrlType::kUsage
                                                        : CtrlType::kAbort;
  if (comm_->rank == 0) {
    // A stopped culprit gets the notice too: should it wake up, it learns why it was dropped.
    for (int r = 1; r < n; ++r) {
      if (r == skip || (r == culprit && type != CtrlType::kTimeout)) continue;
      (void)comm_->boot->sendCtrl(r, CtrlType::kProgress, 0, progress);
      (void)comm_->boot->sendCtrl(r, type, culprit, relayText.empty() ? s.message() : relayText);
    }
  } else {
    (void)comm_->boot->sendCtrl(0, type, culprit, s.message());
  }
  wake();
}

Status ControlPlane::failure() const {
  std::lock_guard<std::mutex> g(failMu_);
  return failure_;
}

std::vector<int> ControlPlane::failedRanks() const {
  std::lock_guard<std::mutex> g(failMu_);
  return failedRanks_;
}

std::string ControlPlane::reachedText(uint64_t seq, bool timedOut) const {
  std::vector<int> reached, behind;
  std::string detail;
  {
    std::lock_guard<std::mutex> g(failMu_);
    for (int r = 0; r < static_cast<int>(progressAtFail_.size()); ++r) {
      uint64_t p = progressAtFail_[r];
      if (p == kProgressUnknown) continue;
      if (p >= seq) {
        reached.push_back(r);
      } else {
        behind.push_back(r);
        if (behind.size() > 8) continue;
        if (!detail.empty()) detail += ", ";
        detail += std::to_string(r);
        detail += " at #";
        detail += std::to_string(p);
      }
    }
  }
  if (reached.size() + behind.size() <= 1) return "; the other ranks' progress is unknown";
  auto ranks = [](const std::vector<int>& v) { return (v.size() == 1 ? "rank " : "ranks ") + rankRanges(v); };
  std::string out = "; reached by " + (reached.empty() ? std::string("no rank") : ranks(reached));
  if (!behind.empty()) out += "; the others last reported " + detail + (behind.size() > 8 ? ", ..." : "");
  // Every rank posted the call and still it did not finish: the ranks wait for each other, which
  // happens when their calls differ (a Reduce whose ranks name different roots, say).
  if (timedOut && behind.empty() && static_cast<int>(reached.size()) == comm_->nranks)
    out +=
        "; every rank posted it, so their calls likely differ (root, count, datatype or op; BRAID_CHECK_MISMATCH=1 "
        "compares them)";
  return out;
}

void ControlPlane::onControl(int peer, const Bootstrap::CtrlMsg& msg) {
  switch (msg.type) {
    case CtrlType::kHeartbeat:
      if (comm_->rank == 0 && msg.text.size() == 8) {
        std::lock_guard<std::mutex> g(failMu_);
        memcpy(&progress_[peer], msg.text.data(), 8);
      }
      break;
    case CtrlType::kProgress:
      if (comm_->rank != 0) {
        std::lock_guard<std::mutex> g(failMu_);
        decodeProgress(reinterpret_cast<const uint8_t*>(msg.text.data()), msg.text.size(), &progress_);
      }
      break;
    case CtrlType::kCalls:
      if (comm_->rank == 0) checkCalls(peer, msg.text);
      break;
    case CtrlType::kBye:
      // A departure, not a failure. From rank r to rank 0, or from rank 0 about itself: the sender
      // goes, its control socket with it. From rank 0 about another rank: a goodbye passed on.
      if (comm_->rank == 0 || msg.rank == 0) {
        gone_[peer] = 1;
        comm_->boot->closeCtrl(peer);
        onGoodbye(peer, msg.text);
      } else if (msg.rank != comm_->rank) {
        onGoodbye(msg.rank, msg.text);
      }
      break;
    case CtrlType::kAbort:
    case CtrlType::kTimeout:
    case CtrlType::kUsage: {
      // A notice that blames this very rank (another rank waited for us, or took us for stopped)
      // says so: read here, "waiting for rank 1" would otherwise seem to be our own wait.
      Status s(msg.type == CtrlType::kTimeout ? braidTimeout
               : msg.type == CtrlType::kUsage ? braidInvalidUsage
                                              : braidRemoteError,
               msg.rank == comm_->rank ? msg.text + " (this rank)" : msg.text);
      // Rank 0 passes a notice on to everyone but its sender; the others apply it.
      if (comm_->rank == 0)
        fail(s, msg.rank, true, peer, msg.text);
      else
        fail(s, msg.rank, false);
      break;
    }
  }
}

// Sleeps in epoll (control sockets, the wake eventfd, the links' descriptors) for up to timeoutUs,
// then serves what arrived on the control sockets. Data on a link just ends the sleep: the caller
// drives progress next.
bool ControlPlane::serve(int64_t timeoutUs, bool withLinks) {
  if (timeoutUs > 0 && timeoutUs < 1000) {
    // Below epoll's millisecond resolution: sleep, then look without waiting.
    timespec ts{0, static_cast<long>(timeoutUs) * 1000};
    nanosleep(&ts, nullptr);
    timeoutUs = 0;
  }
  epoll_event events[64];
  int rc = epoll_wait(withLinks ? epollLinksFd_ : epollFd_, events, 64, static_cast<int>(timeoutUs / 1000));
  bool woken = false;
  for (int i = 0; i < rc; ++i) {
    const uint64_t tag = events[i].data.u64;
    if (tag == kWakeTag) {
      uint64_t v;
      ssize_t r = read(wakeFd_, &v, sizeof(v));
      (void)r;
      woken = true;
      continue;
    }
    if (tag == kLinkTag) continue;
    servePeer(static_cast<int>(tag));
  }
  return woken;
}

void ControlPlane::servePeer(int peer) {
  while (!gone_[peer]) {
    bool got = false, eof = false;
    Bootstrap::CtrlMsg msg;
    Status s = comm_->boot->pollCtrl(peer, &got, &msg, &eof);
    if (!s.ok()) {
      gone_[peer] = 1;
      comm_->boot->closeCtrl(peer);
      fail(s.withContext("control connection of " + comm_->describeRank(peer)), peer, true);
      return;
    }
    if (got) {
      lastHeard_[peer] = nowNs();
      heard_[peer] = 1;
      onControl(peer, msg);
      continue;
    }
    if (eof) {
      gone_[peer] = 1;
      comm_->boot->closeCtrl(peer);
      fail(errorf(braidRemoteError, "%s died: its control connection closed without a goodbye",
                  comm_->describeRank(peer).c_str()),
           peer, true);
    }
    return;
  }
}

void ControlPlane::noteWaiting(const CallRecord& call) {
  std::string report(reinterpret_cast<const char*>(&call), sizeof(call));
  callLog_.appendTo(&report);
  {
    std::lock_guard<std::mutex> g(waitMu_);
    waitReport_ = std::move(report);  // a newer one replaces it: the same oldest call, or a later
  }
  waitPending_.store(true, std::memory_order_release);
  wake();
}

void ControlPlane::checkCalls(int rank, const std::string& records) {
  if (failed()) return;
  const auto describe = [this](int r) { return comm_->describeRank(r); };
  std::string mine;
  callLog_.appendTo(&mine);
  std::string differ = callTable_.add(0, mine, describe);
  if (differ.empty() && !records.empty()) differ = callTable_.add(rank, records, describe);
  // Nobody died and nobody is to blame more than another: culprit none.
  if (!differ.empty()) fail(Status(braidInvalidUsage, differ), -1, true);
}

void ControlPlane::heartbeat(int64_t now) {
  if (waitPending_.load(std::memory_order_acquire)) {
    std::string report;
    {
      std::lock_guard<std::mutex> g(waitMu_);
      report.swap(waitReport_);
      waitPending_.store(false, std::memory_order_relaxed);
    }
    if (comm_->rank == 0)
      checkCalls(0, report);
    else if (!gone_[0])
      (void)comm_->boot->sendCtrl(0, CtrlType::kCalls, comm_->rank, report);
  }
  if (heartbeatNs_ == 0) return;
  // The background thread looks here on every turn of its loop, at least every kIdleSleepUs. A gap
  // longer than both a heartbeat period and kJudgeAwayNs means the judge itself did not run
  // (SIGSTOP, a suspended VM, a starved core): the silence it would measure across the gap says
  // nothing about the peers, so their silence clocks skip it.
  if (lastLookNs_ != 0 && now - lastLookNs_ > std::max(heartbeatNs_, kJudgeAwayNs)) {
    const int64_t away = now - lastLookNs_;
    for (int64_t& t : lastHeard_) t = std::min(now, t + away);
  }
  lastLookNs_ = now;
  // Called on every turn of the background loop: the common case returns before building anything.
  const uint64_t mine = postedSeq_.load(std::memory_order_relaxed);
  if (now < nextBeatNs_) {
    // Between heartbeats, a rank that posted since its last report tells rank 0 early (at most
    // every reportNs_), so a failure notice can say precisely who had reached the failed call.
    if (comm_->rank == 0 || reportNs_ == 0 || mine == lastReported_ || now < nextReportNs_ || gone_[0]) return;
    (void)comm_->boot->sendCtrl(0, CtrlType::kHeartbeat, comm_->rank,
                                std::string(reinterpret_cast<const char*>(&mine), 8));
    lastReported_ = mine;
    nextReportNs_ = now + reportNs_;
    return;
  }
  nextBeatNs_ = now + heartbeatNs_;
  lastReported_ = mine;
  // Once a rank has reported a wait, rank 0 compares its own calls since with theirs every period:
  // it may post the call they reported only later.
  if (comm_->rank == 0 && !callTable_.empty()) checkCalls(0, {});
  for (int r = 0; r < comm_->nranks; ++r) {
    if (!beatTo(r, mine)) continue;
    // Until a peer's first heartbeat, allow for init skew: it may still be connecting its links
    // (a dead one closes its control socket; a stopped one is caught by the init deadline).
    const auto allowed = [&] { return heard_[r] ? silenceNs_ : std::max(silenceNs_, initGraceNs_); };
    if (now - lastHeard_[r] <= allowed()) continue;
    // Silence is judged on what the peer sent, not on what we happened to read: its heartbeats or
    // its goodbye may wait unread on the socket (we were busy or stopped). Read them first.
    servePeer(r);
    if (gone_[r] || now - lastHeard_[r] <= allowed()) continue;
    gone_[r] = 1;
    fail(errorf(braidTimeout,
                "%s stopped answering: Timed out with no heartbeat for %.1f s (BRAID_HEARTBEAT_MS=%lld x "
                "BRAID_HEARTBEAT_MISSES); it is stopped, hung or unreachable",
                comm_->describeRank(r).c_str(), (now - lastHeard_[r]) / 1e9,
                static_cast<long long>(heartbeatNs_ / 1000000)),
         r, true);
    comm_->boot->closeCtrl(r);
  }
}

Status ControlPlane::readHeartbeatSettings() {
  int64_t ms = 0, misses = 0;
  BRAID_TRY(paramInt("BRAID_HEARTBEAT_MS", &ms));
  BRAID_TRY(paramInt("BRAID_HEARTBEAT_MISSES", &misses));
  // paramInt holds both to their declared ranges (an hour, a thousand), whose product in ns fits
  // in int64; checked products keep a wider table from wrapping into a negative period, which
  // once failed healthy jobs at their first op.
  if (ms < 0 || misses < 1 || __builtin_mul_overflow(ms, int64_t{1000000}, &heartbeatNs_) ||
      __builtin_mul_overflow(heartbeatNs_, misses, &silenceNs_))
    return errorf(braidInvalidArgument, "BRAID_HEARTBEAT_MS=%lld x BRAID_HEARTBEAT_MISSES=%lld is out of range",
                  static_cast<long long>(ms), static_cast<long long>(misses));
  // Early progress reports: a tenth of the period on small communicators; on large ones rank 0
  // would read too many, so only the heartbeats carry progress there.
  reportNs_ = comm_->nranks <= 64 ? heartbeatNs_ / 10 : 0;
  const int64_t now = nowNs();
  lastHeard_.assign(comm_->nranks, now);
  heard_.assign(comm_->nranks, 0);
  initGraceNs_ = static_cast<int64_t>(comm_->settings.timeoutSec * 1e9);
  waitReportNs_ = std::min(heartbeatNs_ > 0 ? heartbeatNs_ : int64_t{1000000000}, initGraceNs_ / 4);
  // Rank 0 hears every rank's progress (nothing posted yet); the others only from rank 0's notice.
  progress_.assign(comm_->nranks, comm_->rank == 0 ? 0 : kProgressUnknown);
  nextBeatNs_ = now;
  return okStatus();
}

}  // namespace braid
