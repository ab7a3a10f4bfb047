// CUDA IPC export (src/cuda/ipc.h) of memory it must refuse: managed memory and a cudaMallocAsync
// pool's (the transport copies those through a buffer of its own). Built only with CUDA; skipped,
// saying why, without a GPU. The rest of ipc.h's tests: tests/unit/test_cuda_ipc.cc.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "src/cuda/ipc.h"
#include "src/cuda/runtime.h"

namespace braid {
namespace {

TEST_CASE("CUDA IPC refuses managed memory and memory of a cudaMallocAsync pool, saying why", "[unit][memtype][gpu]") {
  if (gpuDeviceCount() == 0) {
    WARN("skipped: " << gpuAbsentReason());
    return;
  }
  IpcHandle h, untouched;
  memset(&h, 0xab, sizeof(h));
  memset(&untouched, 0xab, sizeof(untouched));
  void* managed = nullptr;
  REQUIRE(cudaMallocManaged(&managed, 1 << 20) == cudaSuccess);
  Status s = ipcExport(managed, 1 << 20, &h);
  CHECK(s.code() == braidInvalidArgument);
  CHECK(s.message().find("managed") != std::string::npos);
  cudaFree(managed);
  void* pooled = nullptr;
  REQUIRE(cudaMallocAsync(&pooled, 1 << 20, nullptr) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  s = ipcExport(pooled, 1 << 20, &h);
  CHECK(s.code() == braidInvalidArgument);
  CHECK(s.message().find("cudaMallocAsync") != std::string::npos);
  cudaFreeAsync(pooled, nullptr);
  cudaStreamSynchronize(nullptr);
  CHECK(memcmp(&h, &untouched, sizeof(h)) == 0);  // nothing written
}

}  // namespace
}  // namespace braid
