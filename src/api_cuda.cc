// The C API's device buffers (issue "GPUs"): which calls run through host staging, and the staging
// of one call. The mechanism (copies and a flag wait on the caller's stream, the executor as the
// proxy that runs the host collective between them) is described at the top of src/cuda/staging.h.
//
// COMPILE-ONLY: built and linked with CUDA, never run on a GPU.
//
// Semantics, as NCCL's. A collective (or braidSend/braidRecv) whose buffers are device memory is
// ordered on `stream` (NULL: the legacy default stream): after the work enqueued on it before the
// call, before the work enqueued after. The host call returns once the copies are enqueued, also in
// its blocking form (which then has no request: its failure reaches the caller through
// braidCommGetAsyncError and the next call). A nonblocking call's request completes when the result
// is back in the device buffer. A group's device calls on one communicator share one stream and are
// staged together at braidGroupEnd (DeviceStaging::stageBatch); tagged calls on device buffers are
// refused.
//
// Cost on the host path: nothing without a device (the communicator's cudaDevice is -1 and no
// lookup is made); with one, a cached memory-type lookup per buffer (src/cuda/memtype.h).
#include <cstdint>

#include "src/api.h"
#include "src/comm.h"
#include "src/cuda/memtype.h"
#include "src/cuda/runtime.h"

namespace braid {

namespace {

bool onDevice(const PtrInfo& info) { return memTypeOf(info.kind) == MemType::kCuda; }

Status checkDevice(const braidComm* comm, const PtrInfo& info, const char* what) {
  if (info.device == comm->cudaDevice) return okStatus();
  return errorf(braidInvalidArgument,
                "%s is %s memory of CUDA device %d, but the communicator uses device %d (BRAID_CUDA_DEVICE, or the "
                "device current at init)",
                what, ptrKindName(info.kind), info.device, comm->cudaDevice);
}

Status stagingOf(braidComm* comm, DeviceStaging** out) {
  std::lock_guard<std::mutex> hold(comm->stagingMu);
  if (comm->staging == nullptr)
    BRAID_TRY(makeDeviceStaging(comm->cudaDevice, comm->settings.timeoutSec, &comm->staging));
  *out = comm->staging.get();
  return okStatus();
}

}  // namespace

Status routeDeviceCall(braidComm* comm, const CallBuffers& b, braidStream_t stream, bool* onDeviceOut) {
  PtrInfo send, recv;
  if (b.sendBytes > 0) BRAID_TRY(pointerKind(b.send, b.sendBytes, &send));
  if (b.recvBytes > 0) {
    if (b.sendBytes > 0 && b.recv == b.send)
      recv = send;  // in place: one lookup
    else
      BRAID_TRY(pointerKind(b.recv, b.recvBytes, &recv));
  }
  const bool sendDev = b.sendBytes > 0 && onDevice(send), recvDev = b.recvBytes > 0 && onDevice(recv);
  const bool sendHost = b.sendBytes > 0 && !sendDev, recvHost = b.recvBytes > 0 && !recvDev;
  if ((sendDev || recvDev) && (sendHost || recvHost))
    return errorf(braidInvalidArgument,
                  "sendbuff is %s memory and recvbuff %s memory: a call's buffers must all be host or all be device "
                  "memory",
                  ptrKindName(send.kind), ptrKindName(recv.kind));
  if (sendDev) BRAID_TRY(checkDevice(comm, send, "sendbuff"));
  if (recvDev) BRAID_TRY(checkDevice(comm, recv, "recvbuff"));
  if (!sendDev && !recvDev && stream != nullptr && (sendHost || recvHost))
    return errorf(braidInvalidUsage,
                  "a stream was given but the buffers are %s memory: a stream is for device buffers "
                  "(pass NULL for host buffers)",
                  ptrKindName(sendHost ? send.kind : recv.kind));
  // A call with no bytes here and a stream is ordered on the stream like its peers' device calls.
  *onDeviceOut = sendDev || recvDev || stream != nullptr;
  return okStatus();
}

const char* whyNoCommDevice() { return gpuAbsentReason()[0] != '\0' ? gpuAbsentReason() : "none was current at init"; }

Status checkDeviceStream(braidComm* comm, braidStream_t stream) {
  return checkStagingStream(comm->cudaDevice, static_cast<CUstream_st*>(stream));
}

namespace {

// The pool to stage on, once the communicator is healthy and the stream usable.
Status stagingFor(braidComm* comm, braidStream_t stream, DeviceStaging** out) {
  // Nothing goes on the stream for a call the engine would refuse (a race with a failure that comes
  // later is handled by abandonDeviceCall).
  if (comm->control->failed()) {
    const Status f = comm->control->failure();
    return Status(f.code(), f.message() + " [a device call, not started: the communicator had failed]");
  }
  BRAID_TRY(checkDeviceStream(comm, stream));
  return stagingOf(comm, out);
}

}  // namespace

Status stageDeviceCall(braidComm* comm, const CallBuffers& b, braidStream_t stream, StagedCall* out) {
  DeviceStaging* staging = nullptr;
  BRAID_TRY(stagingFor(comm, stream, &staging));
  return staging->stage(b, static_cast<CUstream_st*>(stream), out);
}

Status stageDeviceOps(braidComm* comm, StageOp* ops, size_t nops, braidStream_t stream) {
  DeviceStaging* staging = nullptr;
  BRAID_TRY(stagingFor(comm, stream, &staging));
  return staging->stageBatch(ops, nops, static_cast<CUstream_st*>(stream));
}

void abandonDeviceCall(braidComm* comm, const StagedCall& staged) { comm->staging->abandon(staged.gate); }
void abandonDeviceGate(braidComm* comm, OpGate* gate) { comm->staging->abandon(gate); }

Status requireHostBuffer(braidComm* comm, const void* buf, uint64_t bytes, braidStream_t stream, const char* what,
                         const char* calls) {
  if (stream != nullptr) return errorf(braidInvalidUsage, "%s take host buffers only: stream must be NULL", calls);
  if (comm->cudaDevice < 0 || bytes == 0) return okStatus();
  PtrInfo info;
  BRAID_TRY(pointerKind(buf, bytes, &info));
  if (onDevice(info))
    return errorf(braidInvalidArgument, "%s is %s memory: %s take host buffers only", what, ptrKindName(info.kind),
                  calls);
  return okStatus();
}

}  // namespace braid
