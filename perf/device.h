// Device buffers for the *_perf tools' -m device (CUDA builds only; elsewhere every function says
// that CUDA is not compiled in and exits 2). The CUDA runtime itself, not braid's internals: the
// tools still reach braid through the public API only. Every failure prints one line and exits 1.
//
// COMPILE-ONLY: never run on a GPU yet.
#ifndef BRAID_PERF_DEVICE_H_
#define BRAID_PERF_DEVICE_H_

#include <braid/braid.h>

#include <cstddef>

namespace braid::perf {

// Makes `gpu` current (-1: keeps the current device) and returns a new stream of it. Called before
// the communicator is created, which takes the current device as its own.
braidStream_t deviceSetup(int gpu);
// `bytes` of device memory, filled with `poison`.
void* deviceAlloc(size_t bytes, unsigned char poison);
void deviceFree(void* p);
// Copies on `stream` and waits for them.
void deviceUpload(void* dst, const void* src, size_t bytes, braidStream_t stream);
void deviceDownload(void* dst, const void* src, size_t bytes, braidStream_t stream);
// Waits until the work on `stream` (the collectives' copies back included) is done.
void deviceSync(braidStream_t stream);

}  // namespace braid::perf

#endif  // BRAID_PERF_DEVICE_H_
