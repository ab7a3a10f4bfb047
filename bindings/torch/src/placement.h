// Where a call's tensors live, and the stream a CUDA call is ordered on.
//
// CUDA tensors (a braid_torch built against a torch with CUDA, BRAID_TORCH_CUDA): a collective on
// them is ordered on the current CUDA stream of their device, as ProcessGroupNCCL orders its work
// after what the caller queued there: braid's call is queued on that stream (braid's device
// semantics, include/braid/braid.h), and so are the copies of staged outputs back into the
// caller's tensors (BraidWork::issued). The host call returns without waiting for the data.
// COMPILE-ONLY so far: no GPU has run it.
#pragma once

#include <ATen/ATen.h>
#include <braid/braid.h>
#include <c10/core/Stream.h>

#include <optional>
#include <vector>

#ifndef BRAID_TORCH_CUDA
#define BRAID_TORCH_CUDA 0
#endif

namespace braid_torch {

struct Placement {
  c10::Device device{c10::kCPU};
  braidStream_t stream = nullptr;    // the device's current cudaStream_t; nullptr on the CPU
  std::optional<c10::Stream> queue;  // the same stream as c10 names it (CUDA only)
  bool onCuda() const { return device.is_cuda(); }
};

// The placement of a call on `tensors` (undefined ones are skipped): every tensor on the CPU, or
// every one on one CUDA device. Throws, naming `op`, on a mix, on two devices, or on CUDA tensors
// when braid_torch was built without CUDA.
Placement placeOf(const std::vector<at::Tensor>& tensors, const char* op);

// a followed by b, for placeOf over inputs and outputs.
std::vector<at::Tensor> both(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// The current stream of a CUDA device (the one the caller's next kernels go to).
c10::Stream currentStream(c10::Device device);

}  // namespace braid_torch
