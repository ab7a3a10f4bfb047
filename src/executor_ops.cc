// The executor's handling of one operation at a time, apart from its progress loop (src/executor.cc):
// the mismatch check of a call's header (BRAID_CHECK_MISMATCH), the gate of a call on device buffers
// (src/op_gate.h).
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
  if (c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter)
    more(", %s", redopName(static_cast<braidRedOp_t>(h.redop)));
  if (c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter)
    more(", root %d", h.root);
  more("%s", ")");
  return buf;
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
