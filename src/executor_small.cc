// The executor's side of the small collectives on the mailboxes (src/small_coll.h): which calls go
// there, the blocking call run at once by its caller while the engine is idle, and the pass over a
// small op for the calls that wait among others (src/executor.cc calls stepSmall).
#include <sched.h>

#include "src/comm.h"
#include "src/executor.h"

namespace braid {

namespace {

// How many passes a blocking small call spins (or yields, with more ranks than cores) in runSmall
// before it becomes an op: its peers are usually well under a microsecond away.
constexpr int kInlineSpins = 2048;
constexpr int kInlineYields = 64;

}  // namespace

bool Engine::takesDeviceCall(const CollArgs& sh) const {
  if (small_ == nullptr || sh.algo == Algo::kGossip) return false;
  return small_->takesDevice(sh.coll, sh.count * sh.elemSize);
}

SmallArgs smallArgsOf(const PostArgs& a) {
  const CollArgs& sh = a.shape;
  return SmallArgs{sh.coll, a.send,     a.recv,      sh.count, sh.count * sh.elemSize, a.dtype, a.op,
                   sh.root, sh.inPlace, a.streamOut, sh.algo};
}

namespace {

// What every call on the mailboxes carries of its arguments.
void fillCall(const SmallArgs& a, SmallCall* c) {
  c->coll = a.coll;
  c->send = static_cast<const char*>(a.send);
  c->recv = static_cast<char*>(a.recv);
  c->bytes = a.coll == Coll::kBarrier ? 0 : a.bytes;
  c->dtype = a.dtype;
  c->op = a.op;
  const bool reducing = collReduces(a.coll);
  c->kernel = reducing ? reduceKernel(a.dtype, a.op == braidAvg ? braidSum : a.op) : nullptr;
  c->root = a.root;
  c->inPlace = a.inPlace;
  c->streamOut = a.streamOut;
}

}  // namespace

bool Engine::hostMailboxCall(const SmallArgs& a, SmallCall* c) const {
  const size_t bytes = a.coll == Coll::kBarrier ? 0 : a.bytes;
  // BRAID_ALGO asked for an algorithm (tests count its messages), or the call may gossip.
  if (comm_->selector.overridden(a.coll) || a.algo == Algo::kGossip) return false;
  const bool small = small_->takes(a.coll, bytes);
  if (!small && !small_->takesDirect(a.coll, bytes)) return false;
  fillCall(a, c);
  c->direct = !small;
  c->device = false;
  c->ipc = nullptr;
  return true;
}

bool Engine::mailboxCall(const PostArgs& a, SmallCall* c) const {
  if (small_ == nullptr) return false;
  if (a.ipc == nullptr) return a.gate == nullptr && hostMailboxCall(smallArgsOf(a), c);
  // A device call takesDeviceCall said yes to (BRAID_ALGO names host algorithms): in place on the
  // peers' device memory.
  fillCall(smallArgsOf(a), c);
  c->direct = true;
  c->device = true;
  c->ipc = a.ipc;
  return true;
}

bool Engine::runSmall(const SmallArgs& a, Status* result) {
  if (small_ == nullptr || !tryLock()) return false;
  // The engine's own SmallCall, under its lock: a fresh one on the stack cost 33 instructions a call
  // (of about 900 for a 16-byte Broadcast), to zero what only direct calls use.
  SmallCall& c = runCall_;
  // Idle: nothing running that this call could overtake or hold up, nothing failed or left (a
  // collective past a leaver's count is failed by the op path), and no look at the leavers due.
  if (!hostMailboxCall(a, &c) || c.direct || head_ < active_.size() || !tagActive_.empty() || byesPending_ != 0 ||
      linkFailedAtNs_ != 0 || control_.failed() || leaversToCheck() || seq_ >= collSeqLimit_) {
    unlock();
    return false;
  }
  c.seq = seq_ + 1;
  small_->number(&c);
  const CallRecord call = numberCall(a.coll, a.count, a.dtype, a.op, a.root);
  Status err;
  int r = 0;
  const int passes = spinNs_ > 0 ? kInlineSpins : kInlineYields;
  for (int i = 0;; ++i) {
    r = small_->step(&c, &err);
    if (r != 0 || i == passes) break;
    if (spinNs_ > 0)
      cpuRelax();
    else
      sched_yield();
  }
  if (r > 0) {
    ++seq_;  // counted like any collective (leave records, heartbeats)
    control_.notePosted(seq_);
    unlock();
    *result = okStatus();
    return true;
  }
  // A peer is late (or the calls differ): the rest is an op's, with its deadline, failure checks
  // and peer-death checks, and the lock free for other threads meanwhile.
  Op* op = nullptr;
  Status taken = takeOp(&op);
  if (!taken.ok()) {
    // The call is numbered on the mailboxes and cannot be withdrawn: the communicator cannot go on.
    control_.fail(taken.withContext("continuing a small collective"), -1, true);
    unlock();
    *result = taken;
    return true;
  }
  fillSmall(op, c, a.count);
  op->detached = false;
  op->call = call;
  prepare(op, false);
  if (r < 0) control_.fail(err, -1, true);  // a mismatch: the next pass fails the op
  unlock();
  *result = wait(op);
  return true;
}

void Engine::fillSmall(Op* op, const SmallCall& c, uint64_t count) {
  op->isSmall = true;
  op->small = c;
  op->plan = &smallPlans_[static_cast<int>(c.coll)];
  op->dtype = c.dtype;
  op->redop = c.op;
  op->count = count;
  op->root = c.root;
  op->kernel = nullptr;
  op->gate = nullptr;
}

bool Engine::stepSmall(Op* op) {
  SmallCall& c = op->small;
  c.seq = op->seq;
  Status err;
  const int r = small_->step(&c, &err);
  if (r > 0) {
    op->finished = true;
    return true;
  }
  if (r < 0) {
    control_.fail(err, -1, true);
    return true;
  }
  return c.waitingOn >= 0 && checkSmallPeer(c.waitingOn);
}

// The peer a mailbox call waits for may be dead: the links' own check, which the mailboxes bypass.
bool Engine::checkSmallPeer(int peer) {
  if (linkFailedAtNs_ != 0) return false;
  Status alive = comm_->links[peer]->peerCheck();
  if (alive.ok()) return false;
  linkFailure_ = alive;
  linkFailedPeer_ = peer;
  linkFailedAtNs_ = nowNs();
  return true;
}

}  // namespace braid

namespace braid {

bool Engine::stepDirect(Op* op) {
  SmallCall& c = op->small;
  c.seq = op->seq;
  Status err;
  const int r = small_->step(&c, &err);
  if (r == 1) {
    op->finished = true;
    directCalls_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (r == 2) {
    op->isDirect = false;  // some rank's buffers are not braidMemAlloc memory: the plan runs
    return true;
  }
  if (r == -2) {
    // Blamed like a link's failure, after a grace: the peer's own failure notice names the cause.
    // With a failure held already, that one is judged first (this peer may only have freed its
    // buffers after failing for the same cause).
    if (linkFailedAtNs_ == 0) {
      linkFailure_ = err;
      linkFailedPeer_ = c.waitingOn;
      linkFailedAtNs_ = nowNs();
    }
    return true;
  }
  if (r < 0) {
    control_.fail(err, -1, true);
    return true;
  }
  return c.waitingOn >= 0 ? checkSmallPeer(c.waitingOn) : c.phase == 3;
}

}  // namespace braid
