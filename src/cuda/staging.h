// Host staging of collectives on device buffers, with NCCL's stream semantics (issue "GPUs").
//
// COMPILE-ONLY: this code has been built and linked, but never run on a GPU.
//
// A call on device buffers with a cudaStream_t runs as the ordinary host collective on pinned host
// copies of its buffers. stage() enqueues on the caller's stream, and returns without waiting:
//
//   1. cudaMemcpyAsync device -> pinned staging (the input), then cudaEventRecord(in);
//   2. a wait until a flag in mapped pinned memory reaches this call's number (cuStreamWaitValue32);
//   3. cudaMemcpyAsync pinned staging -> device (the output), then cudaEventRecord(out).
//
// The executor starts the host collective once `in` completed (OpGate::ready: one cudaEventQuery,
// polled by whoever drives progress, the background thread included; the calling thread never
// blocks), writes the flag when the collective is over (OpGate::release), and completes the
// operation once `out` completed (OpGate::drained). So the call is ordered after earlier work on the
// stream, later work on the stream sees its result, and a nonblocking request completes when the
// result is back in the caller's device buffer.
//
// Why a flag and a stream wait. The stream must stop between the two copies until a host thread
// (the executor) says the collective is over. cuStreamWaitValue32 does that on the GPU's front end:
// the stream waits, nothing on the host blocks, and the flag is a plain store from the executor. It
// is a driver function: it is looked up at run time through cudaGetDriverEntryPointByVersion, so braid
// does not link libcuda (a binary linked to it would not even load without the driver). Where the
// driver refuses stream memory operations (CUDA_ERROR_NOT_SUPPORTED, or no entry point), the wait is
// a cudaLaunchHostFunc whose function spins until the flag is written. Its cost: it occupies CUDA's
// one callback thread for the whole collective (every other host function of the process waits
// behind it), and a host function adds tens of microseconds of stream latency. The choice is made
// once per pool and logged.
//
// Staging memory. A pool of slots per communicator, each with its own pinned buffer (cudaHostAlloc,
// grown on demand to the largest call it served, never shrunk), two events and a flag. A slot is
// reused once the engine retired its previous call (OpGate::retire) and that call's copy back
// completed, so nonblocking calls in flight each have their own; once warm, a call allocates nothing. At most kMaxSlots
// are in use at once; one more call waits in stage() for the oldest to end.
//
// cuda_ipc (CallBuffers::direct): the collective runs in place on the caller's device buffers, which
// its peers open with CUDA IPC (src/cuda/ipc_coll.h), so nothing is copied through the host:
//
//   1. cudaEventRecord(in) (after a copy into the slot's device buffer, for a buffer that cannot
//      be exported: managed memory, a cudaMallocAsync pool's, cuMemCreate's);
//   2. the same wait on the flag;
//   3. cudaEventRecord(out) (after the copy back, likewise).
//
// The executor starts the call once `in` completed: every rank's buffers then hold what the work
// before the call wrote. Each rank's kernels on its peers' buffers run on a stream of the executor's;
// once every rank's are done, the flag lets the caller's stream go on. The buffers are exported per
// call (one cuPointerGetAttributes; cudaIpcGetMemHandle once per allocation); the peers open each
// allocation once and keep it open (src/cuda/ipc_coll.h says why and what it costs).
//
// Not supported (refused before anything is enqueued): graph capture of the stream (the executor
// needs a fresh flag value and event per launch, which a replayed graph cannot give it); a stream of
// another device than the communicator's.
//
// Failure. A failed collective still releases the flag (the stream must not hang); the copy back
// then writes whatever the staging holds, and the failure is the request's result or, for the
// blocking form, braidCommGetAsyncError's. A fault of the copy in fails the communicator.
//
// Threads: stage() may be called from several threads (a mutex guards the pool; this is not the
// host hot path); the gates are the engine's (src/op_gate.h).
#pragma once

#include <cstddef>
#include <memory>

#include "src/base/status.h"
#include "src/cuda/ipc.h"
#include "src/op_gate.h"

struct CUstream_st;  // cudaStream_t is a CUstream_st*

namespace braid {

// One call's buffers as this rank reads (send) and writes (recv) them; bytes 0 for a buffer the
// call does not touch on this rank. inPlace: the collective's in-place layout (the two ranges
// overlap as its in-place form has them), staged as one range so that the layout is kept.
struct CallBuffers {
  const void* send = nullptr;
  size_t sendBytes = 0;
  void* recv = nullptr;
  size_t recvBytes = 0;
  bool inPlace = false;
  // Run in place on the peers' device memory (cuda_ipc, src/cuda/ipc_coll.h) rather than on host
  // copies: see "cuda_ipc" above. A batch of one call only.
  bool direct = false;
  // A direct call whose layout its peers must not see (AllToAll in place: rank p would write what
  // rank q still reads): its input and output are copied apart through the slot's device buffer.
  bool copyApart = false;
};

// What the host collective runs on: pinned host addresses laid out as the caller's buffers, and the
// gate that ties its operation to the stream.
struct StagedCall {
  const void* send = nullptr;
  void* recv = nullptr;
  OpGate* gate = nullptr;
  // A direct call: send and recv are device addresses (the caller's own buffers, or the slot's
  // device copy of them), and ipc their two handles (send, recv; bytes 0 for a buffer of no bytes),
  // valid while the gate is in use.
  const IpcHandle* ipc = nullptr;
};

// One operation of a batch: the calls it runs, staged into one slot behind one gate (a group's
// point-to-point calls on one communicator are one operation). out[i] receives call i's staged
// buffers; every out[i].gate is the operation's gate.
struct StageOp {
  const CallBuffers* calls = nullptr;
  size_t ncalls = 0;
  StagedCall* out = nullptr;
};

// Most operations one batch may stage (a communicator's group): the pool's slot count.
constexpr size_t kMaxStagedOps = 32;

class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // Enqueues the call's copies and wait on `stream` (null: the legacy default stream; checked
  // with checkStagingStream first) and returns the staged buffers. On failure nothing waits on the
  // stream and no slot is held.
  Status stage(const CallBuffers& call, CUstream_st* stream, StagedCall* out) {
    StageOp op{&call, 1, out};
    return stageBatch(&op, 1, stream);
  }
  // A group's operations on one stream: every operation's input copies first, then, operation by
  // operation, its wait and its copies back. So the host runs the group's operations one after the
  // other as their inputs arrive, and the stream's later work sees all their results. At most
  // kMaxStagedOps operations. On failure nothing waits on the stream and no slot is held.
  virtual Status stageBatch(StageOp* ops, size_t nops, CUstream_st* stream) = 0;
  // A call staged but never posted (the communicator had failed): lets its stream go on.
  virtual void abandon(OpGate* gate) = 0;
};

// Refuses a stream the staging cannot order calls on: one being captured into a CUDA graph (before
// anything else touches CUDA, as a call that is not capture-safe would end the capture), one of
// another device, a handle that is no stream. Without CUDA: braidInvalidUsage.
Status checkStagingStream(int device, CUstream_st* stream);

// A pool for `device`; timeoutSec bounds a stage() that waits for a free slot (BRAID_TIMEOUT).
// Without CUDA: braidInvalidUsage saying so. *out set on success only.
Status makeDeviceStaging(int device, double timeoutSec, std::unique_ptr<DeviceStaging>* out);

}  // namespace braid
