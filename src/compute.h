// Compute: where a plan's local steps run (copy, reduce, scale, scaleBy, axpy; later encode and
// decode). The executor hands a step over once its dependencies are done; the step may finish at
// once (the CPU) or later (a device stream, which reports through an event): issue() says which, and
// a pending step is polled with done() until it finishes. The executor never assumes a local step
// finished inside issue(), so a device implementation plugs in without touching it.
//
// Threads: called by whoever drives the engine's progress (engine lock held), never concurrently.
#pragma once

#include <cstdint>
#include <memory>

#include "src/base/status.h"
#include "src/plan.h"
#include "src/reduce.h"

namespace braid {

// A local step with its buffers resolved and the call's datatype and reduction.
struct LocalWork {
  const Step* step = nullptr;
  char* dst = nullptr;
  // kReduce folds src op incoming: the executor puts the received operand (scratch) in `incoming`,
  // or in `src` where the step folds it first (FoldOrder::kIncomingFirst).
  const char* src = nullptr;
  const char* incoming = nullptr;
  braidDataType_t dtype = braidUint8;
  ReduceKernel kernel = nullptr;  // kReduce: the call's reduction (braidAvg as sum)
  int nranks = 1;                 // kScale: the divisor
  // kCopy into an output that bypasses the cache (PostArgs::streamOut): non-temporal stores, fenced
  // before issue() returns. Honoured by the CPU; a device copy ignores it.
  bool stream = false;
};

class Compute {
 public:
  virtual ~Compute() = default;
  // Starts `w`. On success *ticket is 0 when the step finished already, else a handle for done().
  // An error (a step kind that is not a computation, say) fails the operation.
  [[nodiscard]] virtual Status issue(const LocalWork& w, uint64_t* ticket) = 0;
  // Whether the step behind `ticket` finished; after true the ticket is spent.
  virtual bool done(uint64_t ticket) = 0;
  virtual const char* name() const = 0;
};

// The CPU: every step finishes inside issue().
std::unique_ptr<Compute> makeCpuCompute();

}  // namespace braid
