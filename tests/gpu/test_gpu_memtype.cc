// Memory-type detection on CUDA memory: device, managed and pinned host allocations are told apart
// from host memory, interior pointers of a device allocation hit the cached range, and
// forgetPointerKinds empties the cache. Skipped where no GPU is present.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "braid/braid.h"
#include "src/cuda/memtype.h"
#include "tests/gpu/gpu_test.h"

namespace braid {
namespace {

using namespace gputest;

TEST_CASE("memory types of device, managed and pinned memory", "[gpu][memtype]") {
  if (noGpu()) return;
  const size_t bytes = 1 << 20;
  void* dev = nullptr;
  void* managed = nullptr;
  void* pinned = nullptr;
  REQUIRE(cudaMalloc(&dev, bytes) == cudaSuccess);
  REQUIRE(cudaMallocManaged(&managed, bytes) == cudaSuccess);
  REQUIRE(cudaMallocHost(&pinned, bytes) == cudaSuccess);
  void* host = malloc(bytes);
  struct Case {
    void* p;
    PtrKind kind;
  };
  for (const Case& c : {Case{dev, PtrKind::kDevice}, Case{managed, PtrKind::kManaged},
                        Case{pinned, PtrKind::kPinnedHost}, Case{host, PtrKind::kHost}}) {
    INFO(ptrKindName(c.kind));
    PtrInfo info;
    REQUIRE(pointerKind(c.p, bytes, &info).ok());
    CHECK(info.kind == c.kind);
    if (c.kind == PtrKind::kDevice || c.kind == PtrKind::kManaged) CHECK(info.device == 0);
  }
  // Interior chunks of the device allocation: answered by the range cached above.
  const PtrKindStats before = pointerKindStats();
  for (size_t off = 0; off < bytes; off += bytes / 8) {
    PtrInfo info;
    REQUIRE(pointerKind(static_cast<char*>(dev) + off, bytes / 8, &info).ok());
    CHECK(info.kind == PtrKind::kDevice);
  }
  CHECK(pointerKindStats().hits - before.hits == 8);
  // After a forget, the driver is asked again.
  forgetPointerKinds(dev, bytes);
  const PtrKindStats mid = pointerKindStats();
  PtrInfo info;
  REQUIRE(pointerKind(dev, 16, &info).ok());
  CHECK(pointerKindStats().misses - mid.misses == 1);
  CHECK(info.kind == PtrKind::kDevice);
  free(host);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(cudaFree(managed) == cudaSuccess);
  CHECK(cudaFree(dev) == cudaSuccess);
  forgetPointerKinds(nullptr, 0);
}

// braidMemAllocDevice: device memory of the current device that braidMemGetType names and a kernel
// can write; braidMemFree frees it once, and refuses device memory braid did not allocate (which
// stays the caller's to free).
TEST_CASE("braidMemAllocDevice memory is device memory that braidMemFree frees once", "[gpu][memtype]") {
  if (noGpu()) return;
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(braidMemAllocDevice(&p, 1 << 20) == braidSuccess);
  REQUIRE(p != nullptr);
  braidMemType_t t = braidMemHost;
  REQUIRE(braidMemGetType(static_cast<char*>(p) + 4096, 16, &t) == braidSuccess);
  CHECK(t == braidMemCuda);
  PtrInfo info;
  REQUIRE(pointerKind(p, 1 << 20, &info).ok());
  CHECK(info.kind == PtrKind::kDevice);
  CHECK(info.device == current);
  CHECK(cudaMemset(p, 0x5a, 1 << 20) == cudaSuccess);
  unsigned char back = 0;
  CHECK(cudaMemcpy(&back, static_cast<char*>(p) + 12345, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(back == 0x5a);
  void* foreign = nullptr;
  REQUIRE(cudaMalloc(&foreign, 4096) == cudaSuccess);
  CHECK(braidMemFree(foreign) == braidInvalidArgument);
  CHECK(cudaFree(foreign) == cudaSuccess);
  REQUIRE(braidMemFree(p) == braidSuccess);
  CHECK(braidMemFree(p) == braidInvalidArgument);
}

}  // namespace
}  // namespace braid
