// Device memory braid allocated for the application (braidMemAllocDevice, the NCCL shim's
// ncclMemAlloc): cudaMalloc on the calling thread's current device, recorded so that braidMemFree
// can tell it from host memory and refuse what braid did not hand out. cudaMalloc memory can be
// exported to peers with CUDA IPC as it is, so nothing more is needed here for the cuda_ipc
// transport to map it. In a build without CUDA, or without a device, allocation is refused saying why.
//
// Threads: thread-safe (a mutex over the record; allocation is not on a hot path).
#pragma once

#include <cstddef>

#include "src/base/status.h"

namespace braid {

// *ptr set on success only; size > 0 (the caller checks).
Status deviceAlloc(size_t size, void** ptr);
// Frees ptr and returns true when deviceAlloc returned it (a failure of cudaFree in *status);
// false, touching nothing, for any other pointer.
bool deviceFree(void* ptr, Status* status);

}  // namespace braid
