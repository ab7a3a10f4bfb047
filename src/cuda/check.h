// CUDA runtime errors as braid Status, for the files of src/cuda/ that include the CUDA headers.
#pragma once

#include <cuda_runtime_api.h>

#include "src/base/status.h"

namespace braid {

// braidSystemError "<what>: <CUDA's message> (<error name>)"; success for cudaSuccess. Clears the
// runtime's sticky last error for non-sticky errors, as reading it with cudaGetLastError would.
Status cudaStatus(cudaError_t err, const char* what);

}  // namespace braid

// Returns the failure of a CUDA runtime call as a Status naming the call.
#define BRAID_CUDA_TRY(call) BRAID_TRY(::braid::cudaStatus((call), #call))
