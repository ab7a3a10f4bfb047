// -m device for the *_perf tools: see device.h.
#include "device.h"

#include <cstdio>
#include <cstdlib>

#if BRAID_PERF_CUDA
#include <cuda_runtime_api.h>
#endif

namespace braid::perf {

#if BRAID_PERF_CUDA

namespace {
void must(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "-m device: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
}  // namespace

braidStream_t deviceSetup(int gpu) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "-m device: no CUDA device\n");
    std::exit(1);
  }
  if (gpu >= n) {
    std::fprintf(stderr, "-m device: -g %d, but this process sees %d device(s)\n", gpu, n);
    std::exit(2);
  }
  if (gpu >= 0) must(cudaSetDevice(gpu), "cudaSetDevice");
  cudaStream_t s = nullptr;
  must(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}

void* deviceAlloc(size_t bytes, unsigned char poison) {
  void* p = nullptr;
  must(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  must(cudaMemset(p, poison, bytes), "cudaMemset");
  must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return p;
}

void deviceFree(void* p) { (void)cudaFree(p); }

void deviceUpload(void* dst, const void* src, size_t bytes, braidStream_t stream) {
  auto s = static_cast<cudaStream_t>(stream);
  must(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  must(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void deviceDownload(void* dst, const void* src, size_t bytes, braidStream_t stream) {
  auto s = static_cast<cudaStream_t>(stream);
  must(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  must(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void deviceSync(braidStream_t stream) {
  must(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
}

#else  // !BRAID_PERF_CUDA

namespace {
[[noreturn]] void absent() {
  std::fprintf(stderr, "-m device: CUDA is not compiled in (meson option cuda)\n");
  std::exit(2);
}
}  // namespace

braidStream_t deviceSetup(int) { absent(); }
void* deviceAlloc(size_t, unsigned char) { absent(); }
void deviceFree(void*) {}
void deviceUpload(void*, const void*, size_t, braidStream_t) { absent(); }
void deviceDownload(void*, const void*, size_t, braidStream_t) { absent(); }
void deviceSync(braidStream_t) { absent(); }

#endif

}  // namespace braid::perf
