// The device Compute (src/compute.h): a plan's local steps as kernels and copies on one CUDA stream,
// each followed by an event that done() polls. Built only with CUDA; not yet chosen by any
// communicator (the executor still runs every local step on the CPU).
//
// issue() enqueues and returns at once with a ticket; done(ticket) is one cudaEventQuery. Work on
// the stream finishes in order, so a ticket found done retires every earlier one too. The events
// are made once, at construction, and reused in a ring: issue() allocates nothing. When more steps
// are pending than the ring holds, issue() waits for the oldest (the executor keeps far fewer in
// flight).
//
// A failed kernel or copy (a fault, say) is logged once and its ticket never reports done, so the
// operation ends in BRAID_TIMEOUT's error rather than handing over wrong data as finished.
//
// Threads: as every Compute, one caller at a time. issue() makes the Compute's device current for
// the calling thread when it is not.
#pragma once

#include <memory>

#include "src/compute.h"
#include "src/cuda/kernels.h"

namespace braid {

// A Compute on `device` and `stream` (null: a stream of its own, non-blocking with respect to the
// legacy default stream, destroyed with the Compute). *out set on success only; no device, or a
// device that does not exist, is an error saying which.
Status makeCudaCompute(int device, GpuStream stream, std::unique_ptr<Compute>* out);

}  // namespace braid
