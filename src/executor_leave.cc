// The engine's side of leave notices (src/control_plane.h, sayGoodbye): what a rank's goodbye says
// about how far it got, and failing, on the others, the operations that still need it.
//
// What "needs" means. A rank leaves only with nothing pending (braidCommDestroy drains first), so
// everything it posted finished on its side; its bytes may still be in flight. Operations are told
// apart by kind, because the kinds are numbered differently across ranks:
// - collectives by their count: every rank posts the same collectives in the same order, so the
//   k-th on one rank is the k-th on all. One numbered past the leaver's count can never finish.
// - point-to-point calls (braidSend/braidRecv, groups) by their messages per peer and direction:
//   a link's k-th message is the same one on both sides, whatever the grouping. An op whose sends
//   to the leaver go past what it received from us, or whose receives go past what it sent us,
//   needs it. Ops with other peers do not, and keep working.
// - tagged receives (src/tags.h): a leaver that sent us tagged messages says goodbye after them
//   on the tag link, which already ends what only it could match; one that sent us none says so
//   here, and those receives fail now. Any-source receives fail once every rank they could match
//   left, as on the tag link.
// Everything at or before the counts is left alone: those operations finish with the bytes in
// flight, or fail as before (a link that breaks, after the blame grace, or the deadline), also on a
// rank whose later operation needs the leaver: that one fails the communicator, but the operations
// posted before it are run to the end first (Engine::draining, for kDrainMaxNs at most), and
// only then are it and the rest failed.
//
// Why this rank's communicator fails when one op needs a leaver: the op has partners among the
// ranks still here (a collective always does) that are at other points in it, with transfers
// posted on links that carry in-order messages. Abandoning it on one rank would leave those links
// out of step, and the next message between two healthy ranks would land in the wrong buffer.
//
// Why no failure notice goes out for it: every rank got the same leave record and fails what needs
// the leaver by itself (a collective past the count on every rank, as each posts it). A notice
// would also fail, on the others, the operations that do not need it: the leaver's last collective,
// whose bytes they may still be reading. The price: a rank still here that waits in a
// point-to-point call for a rank whose communicator failed this way waits until BRAID_TIMEOUT.
//
// Races. A notice may come before the leaver's last bytes: the counts keep those ops alive. An op
// posted after the notice: prepare() saw its sequence number past collSeqLimit_ (a collective) or
// countP2p saw its peer gone (a group) and asked for a look, so the next pass fails it if it needs
// the leaver.
//
// Cost on the hot path: one compare per post (prepare) and one relaxed load and compare per pass
// (leaversToCheck). Collectives are counted as seq_ - groups_, so their posts count nothing.
#include <cstdio>

#include "src/base/log.h"
#include "src/comm.h"
#include "src/executor.h"

namespace braid {

namespace {

// How long the operations before one that needs a leaver may take to finish (Engine::draining):
// their bytes are in flight or about to be, on every rank, so this is a safety net, as long as the
// longest blame grace (src/executor.cc).
constexpr int64_t kDrainMaxNs = 2000 * 1000000LL;

}  // namespace

// Engine lock held (postGroup).
void Engine::countP2p(const Plan& plan) {
  ++groups_;
  if (collSeqLimit_ != UINT64_MAX) ++collSeqLimit_;  // the group takes a sequence number
  for (const Plan::PeerQueue& q : plan.peers) {
    p2pSent_[q.peer] += q.sends.size();
    p2pRecvd_[q.peer] += q.recvs.size();
    if (control_.left(q.peer)) leaveSeen_ = kLeaveRecheck;
  }
}

std::string Engine::leaveRecord() {
  lock();
  std::string out;
  if (!control_.failed()) {
    const int n = comm_->nranks;
    constexpr size_t kF = ControlPlane::kLeaveFields;
    std::vector<uint64_t> perPeer(kF * static_cast<size_t>(n), 0);
    for (int p = 0; p < n; ++p) {
      const bool tagged = tagsEnabled_ && p != comm_->rank;
      perPeer[kF * p] = p2pSent_[p];
      perPeer[kF * p + 1] = p2pRecvd_[p];
      perPeer[kF * p + 2] = tagged && tags_.sentTo(p) ? 1 : 0;
      perPeer[kF * p + 3] = tagged ? tags_.receivedFrom(p) : 0;
    }
    out = ControlPlane::encodeLeave(seq_ - groups_, perPeer);
  }
  unlock();
  return out;
}

// Engine lock held.
void Engine::readLeaves() {
  const uint32_t gen = control_.leaveGen();
  if (gen != leaveSeen_) {  // a notice, or a forced look (which reads the records again: rare)
    leaveSeen_ = gen;
    std::atomic_thread_fence(std::memory_order_acquire);  // pairs with leaveGen_'s release increment
    leaves_ = control_.leaves();
    for (int r = 0; r < comm_->nranks; ++r) {
      const ControlPlane::LeaveRecord& rec = leaves_[r];
      if (!rec.known) continue;
      if (rec.colls < collLimit_) {
        collLimit_ = rec.colls;
        collLeaver_ = r;
      }
      if (tagsEnabled_ && !rec.taggedToMe && !tagLeaveSeen_[r]) {
        tagLeaveSeen_[r] = 1;
        tags_.leftWithoutSending(r);
      }
    }
    // The next collective past the limit gets at least this sequence number (more if groups come
    // first): posts beyond it ask for a look. Those already posted are in the walk below.
    const uint64_t colls = seq_ - groups_;
    if (collLimit_ != UINT64_MAX) collSeqLimit_ = seq_ + (collLimit_ > colls ? collLimit_ - colls : 0);
  }
}

bool Engine::leaverFinished(int peer) {
  // Called where a link to `peer` failed, which may be news of its leaving that came after this
  // pass looked: read the records now, and have the next pass walk the operations too.
  if (leaversToCheck()) {
    readLeaves();
    leaveSeen_ = kLeaveRecheck;
  }
  return !leaves_.empty() && leaves_[peer].known;
}

// Engine lock held.
bool Engine::checkLeavers() {
  readLeaves();
  // Walk from the newest op back, counting down: each op's last collective number and last message
  // number per peer. The earliest op that needs a leaver is named.
  uint64_t coll = seq_ - groups_;
  std::vector<uint64_t> sent = p2pSent_, recvd = p2pRecvd_;
  const Op* needy = nullptr;
  int leaver = -1;
  for (size_t i = active_.size(); i-- > head_;) {
    const Op* op = active_[i];
    const Plan* plan = op->plan;
    if (plan->coll != Coll::kSendRecv) {
      if (!op->finished && coll > collLimit_) {
        needy = op;
        leaver = collLeaver_;
      }
      --coll;
      continue;
    }
    for (const Plan::PeerQueue& q : plan->peers) {
      const ControlPlane::LeaveRecord& rec = leaves_.empty() ? ControlPlane::LeaveRecord{} : leaves_[q.peer];
      const bool past = rec.known && ((!q.sends.empty() && sent[q.peer] > rec.recvdFromMe) ||
                                      (!q.recvs.empty() && recvd[q.peer] > rec.sentToMe));
      if (!op->finished && past) {
        needy = op;
        leaver = q.peer;
      }
      sent[q.peer] -= q.sends.size();
      recvd[q.peer] -= q.recvs.size();
    }
  }
  if (needy == nullptr) return false;
  const ControlPlane::LeaveRecord& rec = leaves_[leaver];
  char after[160];
  if (needy->plan->coll != Coll::kSendRecv)
    snprintf(after, sizeof(after), "after operation #%llu", static_cast<unsigned long long>(rec.colls));
  else
    snprintf(after, sizeof(after), "after sending rank %d %llu point-to-point message(s) and receiving %llu from it",
             comm_->rank, static_cast<unsigned long long>(rec.sentToMe),
             static_cast<unsigned long long>(rec.recvdFromMe));
  control_.fail(errorf(braidRemoteError, "%s left the communicator (braidCommDestroy) %s; %s #%llu on rank %d needs it",
                       comm_->describeRank(leaver).c_str(), after, collName(needy->coll),
                       static_cast<unsigned long long>(needy->seq), comm_->rank),
                leaver, false);
  // The operations before it need no leaver, and every rank still here runs them to the end (each
  // fails only what needs the leaver, and from the same record): they finish before the rest fails,
  // so that a call the leaver joined does not fail here while it succeeds elsewhere.
  drainStop_ = needy;
  drainUntilNs_ = nowNs() + kDrainMaxNs;
  drainCulprits_ = control_.failedRanks().size();
  if (!draining()) failAll();
  return true;
}

bool Engine::draining() {
  if (drainStop_ == nullptr) return false;
  // Completion is in issue order: the stop at the head means everything before it is done.
  const bool pending = head_ < active_.size() && active_[head_] != drainStop_;
  if (!pending || nowNs() >= drainUntilNs_ || control_.failedRanks().size() != drainCulprits_) drainStop_ = nullptr;
  return drainStop_ != nullptr;
}

}  // namespace braid
