#include "placement.h"

#include <c10/util/Exception.h>

#if BRAID_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace braid_torch {

namespace {

[[noreturn]] void noCuda(const char* op, const c10::Device& d) {
  TORCH_CHECK(false, "braid ", op, ": the tensor is on ", d,
              ", but this braid_torch was built against a torch without CUDA (or without braid's CUDA build): it "
              "takes CPU tensors only");
}

}  // namespace

Placement placeOf(const std::vector<at::Tensor>& tensors, const char* op) {
  Placement p;
  bool first = true;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    const c10::Device d = t.device();
    TORCH_CHECK(d.is_cpu() || d.is_cuda(), "braid ", op, ": the tensor is on ", d,
                "; braid takes CPU and CUDA tensors");
    if (first) {
      p.device = d;
      first = false;
    } else {
      TORCH_CHECK(d == p.device, "braid ", op, ": tensors on ", p.device, " and on ", d,
                  "; one call's tensors must all be on the CPU or all on one CUDA device");
    }
  }
  if (!p.onCuda()) return p;
#if BRAID_TORCH_CUDA
  const c10::cuda::CUDAStream s = c10::cuda::getCurrentCUDAStream(p.device.index());
  p.stream = s.stream();
  p.queue = s.unwrap();
  return p;
#else
  noCuda(op, p.device);
#endif
}

std::vector<at::Tensor> both(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  std::vector<at::Tensor> all(a);
  all.insert(all.end(), b.begin(), b.end());
  return all;
}

c10::Stream currentStream(c10::Device device) {
#if BRAID_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).unwrap();
#else
  noCuda("stream", device);
#endif
}

}  // namespace braid_torch
