// Lowering: rewrites a finalized plan for the links and the memory it runs on, so that no transport
// ever sees a step it cannot run. Runs once per plan shape, and the result is cached with the plan
// (src/plan_cache.h).
//
// Rules, per transfer step to or from peer P (caps = P's link's TransportCaps):
// - kRecvReduce where !caps.reduceOnRecv (or BRAID_FORCE_LOWERING=1, for every peer): a kRecv into a
//   scratch slot (8 per peer, reused in turn), then a local kReduce (dst = src op slot) that depends
//   on the receive; the steps that depended on the receive-reduce depend on the reduce instead.
// - A buffer whose memory type the link cannot touch (caps.memTypes): the transfer goes through a
//   host scratch block with an explicit kCopy before a send or after a receive. Today every buffer is
//   host memory, which every link touches, so this rule changes nothing yet; device buffers (issue
//   "GPUs") set LowerTarget::bufMem.
// Plans that need neither come back unchanged (the common case: shm and tcp reduce on receive).
#pragma once

#include <cstdint>
#include <vector>

#include "src/plan.h"
#include "transports/transport.h"

namespace braid {

struct LowerTarget {
  std::vector<TransportCaps> peerCaps;  // indexed by rank; this rank's entry is unused
  MemType bufMem[kNumBufs] = {MemType::kHost, MemType::kHost, MemType::kHost, MemType::kHost};
  bool force = false;  // BRAID_FORCE_LOWERING
};

// Rewrites `plan` (finalized) for `target` and finalizes it again. Returns whether anything changed.
bool lowerPlan(const LowerTarget& target, Plan* plan);

}  // namespace braid
