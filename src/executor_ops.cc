// The executor's handling of one operation at a time, apart from its progress loop (src/executor.cc):
// the numbering of calls and the report of the one that waits (src/call_watch.h), the oldest
// operation's deadline, the mismatch check of a call's header (BRAID_CHECK_MISMATCH), the gate of a
// call on device buffers (src/op_gate.h).
//
// Threads: everything here runs with the engine lock held.
#include <cstdio>
#include <cstring>
#include <string>

#include "src/base/log.h"
#include "src/comm.h"
#include "src/executor.h"

namespace braid {

std::string describeCall(const CallHeader& h) {
  if (h.magic != kCallHeaderMagic) return "something that is not a braid collective";
  const Coll c = static_cast<Coll>(h.coll);
  char buf[160];
  int n = snprintf(buf, sizeof(buf), "%s #%llu (count %llu", collName(c), static_cast<unsigned long long>(h.seq),
                   static_cast<unsigned long long>(h.count));
  auto more = [&](const char* fmt, auto v) {
    if (n >= 0 && n < static_cast<int>(sizeof(buf))) n += snprintf(buf + n, sizeof(buf) - n, fmt, v);
  };
  if (c != Coll::kBarrier) more(", %s", dtypeName(static_cast<braidDataType_t>(h.dtype)));
  if (collReduces(c)) more(", %s", redopName(static_cast<braidRedOp_t>(h.redop)));
  if (collRooted(c)) more(", root %d", h.root);
  more("%s", ")");
  return buf;
}

CallRecord Engine::numberCall(Coll coll, uint64_t count, braidDataType_t dt, braidRedOp_t op, int root) {
  const CallRecord r = callRecord(++calls_, coll, count, dt, op, root);
  control_.noteCall(r);
  return r;
}

// The oldest operation's deadline, checked every few dozen passes (a clock read is cheap, but
// not free on the 2-microsecond path).
void Engine::checkDeadline() {
  if ((++deadlineTick_ & 31) != 0) return;
  if (!tagActive_.empty() && taggedDeadline()) return;
  if (head_ >= active_.size()) return;
  Op* op = active_[head_];
  const int64_t now = nowNs();
  if (now < op->deadline.atNs) {
    // Waited a while: rank 0 compares its call with the others' (a mismatch fails the communicator
    // long before the deadline). Once per operation. An operation no call numbers (point-to-point,
    // the neighbour AllReduce) sends our last calls alone: it may wait on a peer that waits in a
    // collective of ours behind it.
    const int64_t postedNs = op->deadline.atNs - static_cast<int64_t>(timeoutSec_ * 1e9);
    if (!op->callShown && now - postedNs >= control_.waitReportNs()) {
      op->callShown = true;
      control_.noteWaiting(op->call);
    }
    return;
  }
  // Name the peer it is waiting for: the first queue with unfinished work.
  int waitingOn = op->isSmall || op->isDirect ? op->small.waitingOn : -1;
  const Plan* plan = op->plan;
  for (size_t qi = 0; qi < plan->peers.size() && waitingOn < 0; ++qi) {
    const Op::Cursor& c = op->cursors[qi];
    if (c.recvDone < plan->peers[qi].recvs.size() || c.sendDone < plan->peers[qi].sends.size())
      waitingOn = plan->peers[qi].peer;
  }
  std::string who = !op->started     ? "waiting for its CUDA stream to reach it (the copy of its input)"
                    : waitingOn >= 0 ? "waiting for " + comm_->describeRank(waitingOn)
                                     : "with no peer pending";
  // The notice reaches every rank, the awaited one included: it names the waiter too, or the
  // awaited rank would read that it was waiting for itself. " Timed out " is the phrase that
  // PyTorch's tests and users match timeouts on (Gloo's wording), so braid says it that way.
  control_.fail(errorf(braidTimeout, "%s #%llu on %s: Timed out after %.0f s (BRAID_TIMEOUT) %s", collName(op->coll),
                       static_cast<unsigned long long>(op->seq), comm_->describeRank(comm_->rank).c_str(), timeoutSec_,
                       who.c_str()),
                waitingOn, true);
}

bool Engine::checkHeaders(const CallHeader& mine, const CallHeader& theirs) {
  if (memcmp(&mine, &theirs, sizeof(mine)) == 0) return true;
  const int prev = (comm_->rank + comm_->nranks - 1) % comm_->nranks;
  control_.fail(errorf(braidInvalidUsage, "mismatched calls: %s called %s, but %s called %s (BRAID_CHECK_MISMATCH)",
                       comm_->describeRank(prev).c_str(), describeCall(theirs).c_str(),
                       comm_->describeRank(comm_->rank).c_str(), describeCall(mine).c_str()),
                -1, true);
  return false;
}

// The gate opens once its copy in landed. The op's deadline starts again then: the time the stream
// took to reach the call (the user's kernels before it) is not the peers' fault; a stream that
// never reaches it still ends in BRAID_TIMEOUT's error, which says so.
bool Engine::startGated(Op* op) {
  Status failure;
  if (!op->gate->ready(&failure)) return false;
  op->started = true;
  if (!failure.ok()) {
    control_.fail(failure.withContext(std::string(collName(op->coll)) + " #" + std::to_string(op->seq) + " on " +
                                      comm_->describeRank(comm_->rank)),
                  -1, true);
    return false;
  }
  op->deadline = Deadline::afterSeconds(timeoutSec_);
  return true;
}

bool Engine::gateSettled(Op* op) {
  if (!op->gateReleased) {
    op->gate->release(true);
    op->gateReleased = true;
  }
  return op->gate->drained();
}

}  // namespace braid
