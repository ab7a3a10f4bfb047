// The executor's waiting: a caller driving progress until its operation is done (wait, test,
// drain, with the backstop that ends a wait nothing would complete), the background thread that
// drives it while nobody waits (bgLoop), and a failure's wait for the peers to leave this rank's
// buffers (keepPeersOut). The rest of the engine is src/executor.cc.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "src/base/log.h"
#include "src/comm.h"
#include "src/cuda/runtime.h"
#include "src/executor.h"

namespace braid {

namespace {

// How long the background thread lets a caller that just posted a nonblocking operation get to its
// braidWait before it starts driving progress itself (see bgLoop).
constexpr int64_t kWakeGraceUs = 50;

// The background thread's longest sleep: how late it may notice a small nonblocking op that
// nobody waits for.
constexpr int64_t kIdleSleepUs = 10000;

// How often the background thread looks at a device call (src/op_gate.h) that waits for the GPU
// (its stream to reach it, cuda_ipc's kernels, the copy back), once it has been idle for a
// millisecond: each of those steps may lag the GPU by this much; a shorter sleep burns a core while
// the GPU computes. (It polled only calls whose stream had not reached them before: a call waiting
// for its kernels or its copy back slept up to a millisecond between looks.)
constexpr int64_t kGatePollUs = 50;

// How long a wait looks again after a single pause before it spaces its looks (see backoff).
constexpr int64_t kEagerSpinNs = 2000;

// A wait's own deadline, beyond BRAID_TIMEOUT: the operations' deadlines end every wait before it
// (an op's deadline runs from its post, before the wait began), so this only catches a wait that
// nothing would ever complete. The slack covers the deadline check's stride and kMaxBlameGraceNs (src/executor.cc).
constexpr double kBackstopSlackSec = 3.0;

// How long a failure waits for the peers to leave this rank's buffers (keepPeersOut; BRAID_TIMEOUT
// if shorter). A live peer leaves at its next step, after a pass of work at most (or once its device
// kernels end); past this, a warning names the one still inside, and a call in place's buffers stay
// pinned.
constexpr double kAbandonGraceSec = 10.0;

}  // namespace

// Waiting without progress: spin briefly (a peer's reply is usually microseconds away), then
// yield the core (more ranks than cores is common). The first kEagerSpinNs of a wait look again
// after one pause: a small nonblocking call's reply is usually there within a microsecond, and
// 16 pauses between looks made a 2-rank IAllReduce + Wait of 16 B on shm take 0.66-0.74 us against
// 0.47-0.52 us with this, on an AMD EPYC VM (perf/results/2026-12-06-wait-backoff.md).
// Past it, 16 pauses: a long wait polls the peers' flags less often.
void Engine::backoff(int64_t idleSinceNs) {
  const int64_t idleNs = nowNs() - idleSinceNs;
  if (spinNs_ > 0 && idleNs < spinNs_) {
    const int pauses = idleNs < kEagerSpinNs ? 1 : 16;
    for (int i = 0; i < pauses; ++i) cpuRelax();
    return;
  }
  sched_yield();
}

// Drives progress in the calling thread until done() holds. Ops time out through checkDeadline()
// inside progressOnce(); the backstop (read while idle, every 256 passes) ends a wait they miss. It
// counts from the first idle pass: a wait that needs none (the common small call) reads no clock. The
// caller counts itself in waiters_ around it (which parks the background thread).
template <class Done>
bool Engine::driveUntil(Done done, double backstopSec) {
  int64_t idleSince = 0;
  int idle = 0;
  bool met = true;
  Deadline backstop;  // set at the first idle pass (until then: never)
  while (!done()) {
    bool progressed = false;
    if (tryLock()) {
      progressed = progressOnce();
      unlock();
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    if (idle++ == 0) idleSince = nowNs();
    if (backstop.atNs == INT64_MAX) backstop = Deadline{idleSince + static_cast<int64_t>(backstopSec * 1e9)};
    if ((idle & 255) == 0 && backstop.expired()) {
      met = false;
      break;
    }
    backoff(idleSince);
  }
  return met;
}

// A wait past its backstop: fails the communicator, which completes every running operation.
void Engine::failStuckWait(const char* what) {
  control_.fail(errorf(braidTimeout, "rank %d: Timed out %s: it did not end within BRAID_TIMEOUT (%.0f s)", comm_->rank,
                       what, timeoutSec_),
                -1, true);
  lock();
  failAll();
  unlock();
}

// The result of a finished op; the op goes back to the pool.
Status Engine::finish(Op* op) {
  Status result = op->result == braidSuccess ? okStatus() : Status(op->result, op->error);
  releaseOp(op);
  return result;
}

Status Engine::wait(Op* op) {
  // Counted as a waiter until the op is released: braidCommAbort frees the engine once no waiter
  // is left inside it.
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  auto isDone = [op] { return op->state.load(std::memory_order_acquire) == Op::kDone; };
  if (!driveUntil(isDone, timeoutSec_ + kBackstopSlackSec)) {
    char what[96];
    snprintf(what, sizeof(what), "waiting for %s #%llu", collName(op->coll), static_cast<unsigned long long>(op->seq));
    failStuckWait(what);
  }
  // Not done even now: the op is not among the running ones, and is left as it is.
  Status result = isDone() ? finish(op)
                           : errorf(braidInternalError, "braidWait: %s #%llu is not running on rank %d",
                                    collName(op->coll), static_cast<unsigned long long>(op->seq), comm_->rank);
  // Operations left behind get the background thread back (seq_cst pair with bgSleeping_). That
  // check reads the engine after waiters_ dropped: leaving_ (raised before, dropped after, both
  // seq_cst) keeps abortWaiters from returning, and braidCommAbort from freeing the engine, meanwhile.
  leaving_.fetch_add(1);
  if (waiters_.fetch_sub(1) == 1 && activeCount_.load() > 0 && bgSleeping_.load()) wake();
  leaving_.fetch_sub(1);
  return result;
}

void Engine::abortWaiters() {
  lock();
  failAll();
  unlock();
  // waiters_ first: a wait() that already dropped out of it is counted in leaving_ (raised earlier).
  while (waiters_.load() > 0 || leaving_.load() > 0 || testers_.load() > 0) sched_yield();
}

Status Engine::test(Op* op, bool* done) {
  // Counted in testers_ (not waiters_, which would park the background thread) so that a
  // braidCommAbort from another thread does not free the engine under this call.
  testers_.fetch_add(1);
  if (op->state.load(std::memory_order_acquire) != Op::kDone && tryLock()) {
    progressOnce();
    unlock();
  }
  *done = op->state.load(std::memory_order_acquire) == Op::kDone;
  Status result = *done ? finish(op) : okStatus();
  testers_.fetch_sub(1);
  return result;
}

Status Engine::drain() {
  auto idle = [this] { return activeCount_.load(std::memory_order_acquire) == 0 || control_.failed(); };
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  const bool drained = driveUntil(idle, timeoutSec_ + kBackstopSlackSec);
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  if (!drained) failStuckWait("draining the operations before destroy");
  // What is left unreleased was posted and never waited for: destroy is the caller's last chance to
  // hear that it failed.
  lock();
  if (control_.failed()) failAll();
  int pending = 0, failedOps = 0;
  const Op* first = nullptr;
  for (const auto& op : all_) {
    const int state = op->state.load(std::memory_order_acquire);
    if (state == Op::kFree) continue;
    ++pending;
    if (state != Op::kDone || op->result == braidSuccess) continue;
    if (failedOps++ == 0 || op->seq < first->seq) first = op.get();  // the earliest posted
  }
  Status dropped;
  if (first != nullptr) {
    dropped = errorf(first->result, "%d operation%s still pending (posted, not waited for) and dropped; %d failed: %s",
                     pending, pending == 1 ? " was" : "s were", failedOps, first->error.c_str());
  }
  unlock();
  if (pending > 0 && first == nullptr)
    BRAID_INFO(kLogColl, "destroy drops %d finished operation(s) nobody waited for", pending);
  return dropped;
}

void Engine::bgLoop() {
  setLogRank(comm_->rank);
  // The communicator's device, current on this thread for good: its CUDA calls (event queries,
  // cuda_ipc launches under a DeviceScope) would otherwise run with device 0 current, which makes
  // a context there for every process whose communicator uses another GPU.
  if (comm_->cudaDevice >= 0) {
    const Status s = gpuSetDevice(comm_->cudaDevice);
    if (!s.ok())
      BRAID_WARN(kLogInit, "the background thread cannot use CUDA device %d: %s", comm_->cudaDevice,
                 s.message().c_str());
  }
  int64_t idleSince = nowNs();
  int64_t lastControl = 0;
  bool justWoke = false;
  while (!stop_.load(std::memory_order_acquire)) {
    control_.heartbeat(nowNs());
    const bool work = activeCount_.load(std::memory_order_acquire) > 0;
    if (work && justWoke) {
      // A nonblocking post woke us. Most callers wait soon after posting, and a waiter drives its
      // own progress: give it kWakeGraceUs before competing with it for the lock and the core.
      justWoke = false;
      control_.serve(kWakeGraceUs);
      continue;
    }
    if (work && waiters_.load(std::memory_order_acquire) == 0) {
      bool progressed = false;
      if (tryLock()) {
        progressed = progressOnce();
        unlock();
      }
      int64_t now = nowNs();
      if (progressed) idleSince = now;
      if (now - lastControl > 1000000) {  // control sockets at least every millisecond
        control_.serve(0);
        lastControl = now;
      }
      if (progressed) continue;
      if (now - idleSince < 1000000) {
        backoff(idleSince);
      } else if (gatedActive_.load(std::memory_order_relaxed) > 0) {
        // A device call waits for the GPU (its stream's copy in, cuda_ipc's kernels, the copy
        // back): nothing will wake us when that lands, so look again soon (kGatePollUs) rather
        // than sleep the full millisecond.
        control_.serve(kGatePollUs, true);
        lastControl = nowNs();
      } else {
        control_.serve(1000, true);  // idle for a while: sleep until data arrives, a millisecond at most
        lastControl = nowNs();
      }
      continue;
    }
    // Announce the sleep, then re-check (both seq_cst): a poster increments activeCount_ and then
    // reads bgSleeping_, so either we see its operation here or it sees us asleep and wakes us.
    // Long sleeps: a post wakes us through the eventfd, a caller leaving braidWait with operations
    // still pending does too, and the control sockets wake us themselves.
    bgSleeping_.store(true);
    bool woken = false;
    if (activeCount_.load() == 0 || waiters_.load() > 0) woken = control_.serve(kIdleSleepUs);
    bgSleeping_.store(false, std::memory_order_release);
    justWoke = woken;
    lastControl = nowNs();
    idleSince = lastControl;
  }
}

void Engine::keepPeersOut() {
  const double graceSec = std::min(timeoutSec_, kAbandonGraceSec);
  // Every way in closed first, on every rank before any waits (no rank then waits on one that
  // waits in turn): the links' (no waiting; not while a drain still moves them), then the call in
  // place's mark, with its wait.
  std::vector<std::pair<Link*, int>> links;  // and the rank at its other end
  if (!peersKeptOut_ && !draining()) {
    peersKeptOut_ = true;
    for (auto* v : {&comm_->links, &comm_->tagLinks})
      for (size_t r = 0; r < v->size(); ++r)
        if ((*v)[r] != nullptr) links.emplace_back((*v)[r].get(), static_cast<int>(r));
    for (auto& [l, r] : links) l->stopPeerAccess();
  }
  for (size_t i = head_; i < active_.size(); ++i)
    if (active_[i]->isDirect) small_->abandon(&active_[i]->small, graceSec);
  // A peer that left the communicator (braidCommDestroy) finished its calls: it reads nothing more
  // of ours, though it never says so on the link.
  const int64_t deadline = nowNs() + static_cast<int64_t>(graceSec * 1e9);
  for (;;) {
    std::erase_if(
        links, [&](const std::pair<Link*, int>& e) { return e.first->peerAccessEnded() || control_.left(e.second); });
    if (links.empty()) return;
    if (nowNs() > deadline) break;
    sched_yield();
  }
  for (const auto& [l, r] : links)
    BRAID_WARN(kLogColl, "%s may still be reading or writing this rank's buffers after %.0f s (stopped?)",
               comm_->describeRank(r).c_str(), graceSec);
}

}  // namespace braid
