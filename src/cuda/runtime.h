// A thin wrapper over the CUDA runtime for the rest of braid: which devices exist, which one a
// communicator uses, and CUDA errors as braid Status. Plain C++ (no CUDA header), so every part of
// braid may include it; in a build without CUDA every answer is "no device".
//
// Threads: every function is thread-safe. The device count is asked of the driver once per process
// (the driver's answer does not change while the process runs) and then read from a cache.
#pragma once

#include "src/base/status.h"

namespace braid {

// Whether this build has CUDA compiled in (BRAID_HAVE_CUDA).
bool gpuCompiledIn();

// The number of CUDA devices this process sees; 0 without CUDA, without a driver or without a
// device (the first call asks the driver, later calls read the answer). Never fails.
int gpuDeviceCount();
// Why gpuDeviceCount() is 0, in words ("no CUDA device: cudaGetDeviceCount: ..."; "CUDA is not
// compiled in"); "" when it is not 0. For skip messages and logs.
const char* gpuAbsentReason();

// The calling thread's current device (cudaGetDevice). No device: braidInvalidUsage saying why.
Status gpuCurrentDevice(int* device);

// The device a communicator created now would use: `configured` (config->cudaDevice) when >= 0,
// else BRAID_CUDA_DEVICE when set (its range is checked with every knob at init; here also against
// the devices present), else the calling thread's current device. *device set on success only.
Status gpuCommDevice(int* device, int configured = -1);

// Makes `device` current for the calling thread (cudaSetDevice).
Status gpuSetDevice(int device);

// Streaming multiprocessors of `device` (asked once per device, then cached); 0 when unknown.
int gpuMultiprocessors(int device);

}  // namespace braid
