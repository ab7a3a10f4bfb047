// The engine's side of tagged point-to-point (src/tags.h): posting, progress, completion, failure
// and deadlines of the operations the tag matcher drives. They share the engine's lock, pool,
// request handles, background thread and failure state with the plans, but not the plans' issue
// order: a tagged operation completes when its message does.
#include <algorithm>
#include <cstdio>

#include "src/base/log.h"
#include "src/comm.h"
#include "src/executor.h"

namespace braid {

namespace {

// Nonblocking tagged sends of this many bytes wake the background thread, as plans do (executor.cc).
constexpr uint64_t kTaggedWakeBytes = 1 << 20;

}  // namespace

Status Engine::postTagged(const TagOp& spec, bool userOwned, Op** out) {
  if (!tagsEnabled_)
    return errorf(braidInvalidUsage, "tagged point-to-point needs the tag links, which BRAID_P2P_TAGS=0 left out");
  lock();
  if (control_.failed()) {
    Status r = refused(Coll::kSendRecv);
    unlock();
    return r;
  }
  Op* op = nullptr;
  Status taken = takeOp(&op);
  if (!taken.ok()) {
    unlock();
    return taken;
  }
  op->isTagged = true;
  op->tagged = spec;
  op->tagged.owner = op;
  op->tagged.error = okStatus();
  op->tagged.from = nullptr;
  op->tagged.source = -1;
  op->plan = nullptr;
  op->coll = Coll::kSendRecv;
  op->result = braidSuccess;
  op->userOwned = userOwned;
  op->finished = false;
  // A count of their own: the collectives' sequence numbers are compared across ranks (heartbeats,
  // the mismatch check), and ranks make different numbers of tagged calls.
  op->seq = ++tagSeq_;
  op->deadline = Deadline::afterSeconds(timeoutSec_);
  Status posted = okStatus();
  if (spec.isSend) {
    posted = tags_.postSend(&op->tagged);
  } else {
    tags_.postRecv(&op->tagged);
  }
  if (!posted.ok()) {
    control_.fail(posted.withContext("posting a tagged send to " + comm_->describeRank(spec.peer)), spec.peer, true);
    op->isTagged = false;
    unlock();
    releaseOp(op);
    return control_.failure();
  }
  op->state.store(Op::kRunning, std::memory_order_release);
  tagActive_.push_back(op);
  activeCount_.fetch_add(1);  // seq_cst: pairs with bgSleeping_ (Dekker-style handshake)
  BRAID_INFO(kLogP2p, "tagged %s #%llu %s %s: %llu bytes, tag %d", spec.isSend ? "send" : "receive",
             static_cast<unsigned long long>(op->seq), spec.isSend ? "to" : "from",
             spec.peer == kAnySource ? "any rank" : comm_->describeRank(spec.peer).c_str(),
             static_cast<unsigned long long>(spec.bytes), spec.tag);
  unlock();
  if (userOwned && spec.isSend && spec.bytes >= kTaggedWakeBytes && bgSleeping_.load()) wake();
  *out = op;
  return okStatus();
}

void Engine::postTagGoodbyes() {
  if (!tagsEnabled_) return;
  lock();
  if (!control_.failed()) {
    int posted = 0;
    Status s = tags_.postByes(&posted);
    byesPending_ += posted;
    activeCount_.fetch_add(posted);
    // A link that refuses a 16-byte send is broken: the peers hear of it as a closed link.
    if (!s.ok()) BRAID_INFO(kLogP2p, "goodbye on the tag links: %s", s.message().c_str());
  }
  unlock();
}

// Engine lock held. Sets *linkFailed when a transport failed (held as linkFailure_, as for plans).
bool Engine::progressTagged(bool* linkFailed) {
  for (size_t t = 0; t < comm_->tagTransports.size(); ++t) {
    int peer = -1;
    Status st = comm_->tagTransports[t]->progress(&peer);
    if (st.ok()) continue;
    if (peer >= 0 && control_.left(peer)) {
      tagPeerLeft(static_cast<int>(t), peer);
      continue;
    }
    // Held back like a plan's link failure (see driveTransport), for a notice naming the cause, or
    // the peer's goodbye on the control plane (then it is no failure: see progressOnce).
    linkFailure_ = st;
    linkFailedPeer_ = peer;
    linkFailedAtNs_ = nowNs();
    linkFailedTag_ = static_cast<int>(t) + 1;
    *linkFailed = true;
    return true;
  }
  bool any = false;
  int failedPeer = -1;
  tagDone_.clear();
  Status s = tags_.poll(&tagDone_, &failedPeer, &any);
  for (TagOp* t : tagDone_) finishTagged(t);
  if (!s.ok()) {
    control_.fail(s, failedPeer, true);
    failAll();
    return true;
  }
  return any;
}

void Engine::tagPeerLeft(int transport, int peer) {
  BRAID_INFO(kLogP2p, "%s left: its tag link closed", comm_->describeRank(peer).c_str());
  tags_.peerLeft(peer, leaverFinished(peer) ? leaves_[peer].taggedFromMe : 0);
  comm_->tagTransports[transport]->dropLink(peer);
}

// A tagged operation whose message is in (or out): its result, its source, and its handle done.
void Engine::finishTagged(TagOp* t) {
  Op* op = t->owner;
  if (op == nullptr) {  // a goodbye
    --byesPending_;
    activeCount_.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if (t->error.ok()) {
    op->result = braidSuccess;
    if (!t->isSend && t->sourceOut != nullptr) *t->sourceOut = t->source;
  } else {
    op->result = t->error.code();
    char ctx[96];
    snprintf(ctx, sizeof(ctx), " [tagged receive #%llu on rank %d]", static_cast<unsigned long long>(op->seq),
             comm_->rank);
    op->error = t->error.message() + ctx;
  }
  tagActive_.erase(std::find(tagActive_.begin(), tagActive_.end(), op));
  op->isTagged = false;
  activeCount_.fetch_sub(1, std::memory_order_acq_rel);
  op->state.store(Op::kDone, std::memory_order_release);
}

void Engine::failTagged(const Status& f) {
  tags_.clear();
  activeCount_.fetch_sub(byesPending_, std::memory_order_acq_rel);
  byesPending_ = 0;
  for (Op* op : tagActive_) {
    op->result = f.code();
    char ctx[96];
    snprintf(ctx, sizeof(ctx), " [tagged %s #%llu on rank %d", op->tagged.isSend ? "send" : "receive",
             static_cast<unsigned long long>(op->seq), comm_->rank);
    op->error = f.message() + ctx + "]";
    op->isTagged = false;
    activeCount_.fetch_sub(1, std::memory_order_acq_rel);
    op->state.store(Op::kDone, std::memory_order_release);
  }
  tagActive_.clear();
}

bool Engine::taggedDeadline() {
  Op* op = tagActive_.front();  // the oldest: all have the same timeout
  if (!op->deadline.expired()) return false;
  const TagOp& t = op->tagged;
  const std::string peer = t.peer == kAnySource ? std::string("any rank") : comm_->describeRank(t.peer);
  control_.fail(errorf(braidTimeout, "tagged %s #%llu on %s timed out after %.0f s (BRAID_TIMEOUT) waiting for %s",
                       t.isSend ? "send" : "receive", static_cast<unsigned long long>(op->seq),
                       comm_->describeRank(comm_->rank).c_str(), timeoutSec_, TagMatcher::describe(t, peer).c_str()),
                t.peer, true);
  return true;
}

}  // namespace braid
