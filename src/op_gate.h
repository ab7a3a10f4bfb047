// OpGate: what ties an operation of the executor to work outside it that must come first and last.
// A collective on device buffers (src/cuda/staging.h) runs as an ordinary host operation on pinned
// staging buffers; its gate says when the device-to-host copy of the input has landed (the op may
// start), is told when the op is over (the user's stream may copy the result back), and says when
// that copy back has landed (the op completes, as the caller sees it).
//
// Threads: ready(), release() and drained() are called by whoever drives the engine's progress
// (engine lock held), or, for release() of a call that was never posted, by the API thread that
// staged it. Plain C++: the executor needs no CUDA header.
#pragma once

#include "src/base/status.h"

namespace braid {

class OpGate {
 public:
  virtual ~OpGate() = default;
  // Whether the op may start. A failure (the copy in faulted) sets *failure and returns true: the
  // engine fails the communicator with it rather than wait for a copy that will never land.
  virtual bool ready(Status* failure) = 0;
  // The op is over (ok: it succeeded; else it failed and the staged result means nothing): lets
  // the work queued behind it go on. Called exactly once per use of the gate.
  virtual void release(bool ok) = 0;
  // After release(): whether the work queued behind the op (the copy back) has finished.
  virtual bool drained() = 0;
  // The engine is done with this use of the gate (the op completed or failed) and will not call it
  // again: its owner may reuse it. Called once, after release(). Until then the gate must keep
  // answering for this use (reusing it earlier would let drained() see the next use's copy, which
  // waits for this op: a deadlock).
  virtual void retire() = 0;
};

}  // namespace braid
