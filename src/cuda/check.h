// CUDA runtime errors as braid Status, and a scoped current device, for the files of src/cuda/ that include the CUDA
// headers.
#pragma once

#include <cuda_runtime_api.h>

#include "src/base/status.h"

namespace braid {

// braidSystemError "<what>: <CUDA's message> (<error name>)"; success for cudaSuccess. Clears the
// runtime's sticky last error for non-sticky errors, as reading it with cudaGetLastError would.
Status cudaStatus(cudaError_t err, const char* what);

// The driver function `name` (as of CUDA 12.0's ABI), through the runtime, so that braid does not
// link libcuda (a binary linked to it would not even load on a machine without the driver). Null
// when the driver lacks it. Callers cache the answer.
void* driverEntryPoint(const char* name);

// Makes `device` current for the calling thread, and puts the thread's previous CUDA context back
// when it ends: the very context (a user's own from cuCtxCreate included), through the driver's
// cuCtxGetCurrent / cuCtxSetCurrent. A thread that had none (cudaGetDevice still says 0 there) is
// left on `device`: putting "device 0" back would create a context on GPU 0 in a process that
// never used it (hundreds of MB of that GPU's memory).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const Status& status() const { return status_; }

 private:
  void* previousCtx_ = nullptr;  // CUcontext; null: the thread had none, or the driver cannot say
  bool knowCtx_ = false;         // the driver said what the thread had
  int previous_ = -1;
  bool switched_ = false;
  Status status_;
};

}  // namespace braid

// Returns the failure of a CUDA runtime call as a Status naming the call.
#define BRAID_CUDA_TRY(call) BRAID_TRY(::braid::cudaStatus((call), #call))
