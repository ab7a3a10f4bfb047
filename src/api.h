// Glue shared by the C API files (src/api.cc, src/api_coll.cc): the exception/status guard that
// turns every internal outcome into a braidResult_t and this thread's last-error text.
#pragma once

#include <new>
#include <string>

#include "braid/braid.h"
#include "src/base/log.h"
#include "src/base/status.h"
#include "src/cuda/staging.h"
#include "src/handles.h"

namespace braid {

void setLastError(const std::string& message);

// The objects behind the handles of the C API (src/handles.h), or an error naming what the handle
// is instead (NULL, stale, never handed out). *out is set on success only; the slot, when asked
// for, is the one to remove() on destroy.
inline Status commOf(braidComm_t handle, braidComm** out, uint32_t* slot = nullptr) {
  void* obj = nullptr;
  BRAID_TRY(commHandles().find(reinterpret_cast<uintptr_t>(handle), &obj, slot));  // inline on success
  *out = static_cast<braidComm*>(obj);
  return okStatus();
}
Status graphOf(braidGraph_t handle, braidGraph** out, uint32_t* slot = nullptr);
Status requestOf(braidRequest_t handle, braidRequest** out);
// The handle of a posted request (its generation changes when it is released).
braidRequest_t requestHandle(const braidRequest* op);

// Registers an object made by make(&obj) (a Status-returning callable) in `table` and sets *out to
// its handle; on failure nothing is registered. A slot is reserved first, so that a full table
// fails before a collective create involves the other ranks. make may set obj to NULL (a split
// rank of no color): *out is then NULL.
template <class Handle, class T, class Make>
Status publishHandle(HandleTable& table, Handle* out, Make make) {
  uint32_t slot = 0;
  BRAID_TRY(table.reserve(&slot));
  T* obj = nullptr;
  Status s = make(&obj);
  if (!s.ok() || obj == nullptr) {
    table.remove(slot, HandleEnd::kNone);
    if (s.ok()) *out = nullptr;
    return s;
  }
  table.publish(slot, obj);
  *out = reinterpret_cast<Handle>(static_cast<uintptr_t>(table.handleOf(slot)));
  return okStatus();
}

// The checks every call with a buffer makes (src/api_coll.cc): the communicator handle, the
// datatype and the stream; and a point-to-point buffer of `count` elements (its size fits,
// non-NULL unless empty).
Status checkCommTypeStream(braidComm_t handle, braidDataType_t dtype, braidStream_t stream, braidComm** comm);
Status checkP2pBuffer(const void* buf, size_t count, braidDataType_t dtype, bool isSend);

// Device buffers (src/api_cuda.cc), for a communicator with a CUDA device. *onDevice: the call runs
// through host staging on `stream` (its buffers are device or managed memory of the communicator's
// device; or it has no bytes here and a stream was given). A mix of host and device buffers, a
// buffer of another device, and a stream with host buffers are refused.
Status routeDeviceCall(braidComm* comm, const CallBuffers& b, braidStream_t stream, bool* onDevice);
// Stages a device call on `stream` (src/cuda/staging.h): *out has the host buffers to post the call
// on and its gate. A call staged and then not posted must be given to abandonDeviceCall.
Status stageDeviceCall(braidComm* comm, const CallBuffers& b, braidStream_t stream, StagedCall* out);
void abandonDeviceCall(braidComm* comm, const StagedCall& staged);
// A group's device operations on one communicator, staged together on `stream` (src/cuda/staging.h:
// stageBatch); an operation staged and not posted must be given to abandonDeviceGate.
Status stageDeviceOps(braidComm* comm, StageOp* ops, size_t nops, braidStream_t stream);
void abandonDeviceGate(braidComm* comm, OpGate* gate);
// Refuses a stream device calls cannot be ordered on (captured, of another device, not a stream).
Status checkDeviceStream(braidComm* comm, braidStream_t stream);
// Why a communicator has no CUDA device (cudaDevice -1), for messages: "no CUDA device: ...",
// "CUDA is not compiled in ...", or "none was current at init".
const char* whyNoCommDevice();
// For calls that take host buffers only (tagged point-to-point, neighbour allreduces): refuses a
// stream, and a device buffer where the communicator has a device. `what` names the buffer, `calls`
// the kind of call ("tagged calls") in the message.
Status requireHostBuffer(braidComm* comm, const void* buf, uint64_t bytes, braidStream_t stream, const char* what,
                         const char* calls);

// Whether this thread is between braidGroupStart and braidGroupEnd (src/api_coll.cc).
bool inGroup();
// A tagged operation posted inside the group (src/api_p2p.cc): the outermost braidGroupEnd waits
// for it with the group's own calls.
void keepForGroupEnd(braidRequest* op);

// Runs `body` (returning Status); converts failures and exceptions at the C boundary.
template <class F>
braidResult_t guard(const char* fn, F&& body) {
  Status s = catching(body);
  if (s.ok()) return braidSuccess;
  setLastError(std::string(fn) + ": " + s.message());
  if (s.code() == braidInvalidArgument || s.code() == braidInvalidUsage)
    BRAID_WARN(kLogColl, "%s: %s", fn, s.message().c_str());
  return s.code();
}

}  // namespace braid
