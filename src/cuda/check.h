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

// Makes `device` current for the calling thread, and puts the previous one back when it ends.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) {
      status_ = cudaStatus(cudaSetDevice(device), "cudaSetDevice");
      switched_ = status_.ok();
    }
  }
  ~DeviceScope() {
    if (switched_ && previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  Status status_;
};

}  // namespace braid

// Returns the failure of a CUDA runtime call as a Status naming the call.
#define BRAID_CUDA_TRY(call) BRAID_TRY(::braid::cudaStatus((call), #call))
