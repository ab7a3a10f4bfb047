// Memory-type detection (src/cuda/memtype.h) where it must work on every machine: host memory is
// host memory, with CUDA compiled in or not, with a GPU or not, and asking never crashes or hangs.
// Device, managed and pinned memory are checked in tests/gpu/test_gpu_memtype.cc.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "braid_build_config.h"
#include "src/cuda/memtype.h"
#include "src/cuda/runtime.h"
#include "src/regions.h"

namespace braid {
namespace {

TEST_CASE("memory types: malloc'ed, stack and braidMemAlloc memory are host memory", "[unit][memtype]") {
  CHECK(gpuCompiledIn() == (BRAID_HAVE_CUDA != 0));
  if (gpuDeviceCount() == 0) {
    // What a skip message or a log would say: never empty when there is no device.
    INFO(gpuAbsentReason());
    CHECK(strlen(gpuAbsentReason()) > 0);
    int device = 0;
    CHECK(gpuCurrentDevice(&device).code() == braidInvalidUsage);
  }
  char stack[100];
  std::vector<double> heap(1 << 18);
  void* raw = malloc(4096 + 3);
  REQUIRE(raw != nullptr);
  void* mem = nullptr;
  REQUIRE(braidMemAlloc(&mem, 1 << 20) == braidSuccess);
  struct Case {
    const char* what;
    const void* p;
    size_t bytes;
  };
  const Case cases[] = {{"stack", stack, sizeof(stack)},
                        {"stack + 1", stack + 1, 7},
                        {"vector", heap.data(), heap.size() * sizeof(double)},
                        {"malloc", raw, 4096 + 3},
                        {"malloc, 0 bytes", raw, 0},
                        {"braidMemAlloc", mem, 1 << 20},
                        {"braidMemAlloc interior", static_cast<char*>(mem) + 4093, 5}};
  const PtrKindStats before = pointerKindStats();
  for (int round = 0; round < 2; ++round) {
    for (const Case& c : cases) {
      INFO(c.what << ", round " << round);
      PtrInfo info{PtrKind::kDevice, 5};
      REQUIRE(pointerKind(c.p, c.bytes, &info).ok());
      CHECK(info.kind == PtrKind::kHost);
      CHECK(info.device == -1);
      CHECK(memTypeOf(info.kind) == MemType::kHost);
    }
  }
  const PtrKindStats after = pointerKindStats();
  if (gpuDeviceCount() == 0) {
    // No device: answered without the cache and without asking CUDA.
    CHECK(after.hits == before.hits);
    CHECK(after.misses == before.misses);
  } else {
    // The second round is answered from the cache.
    CHECK(after.hits - before.hits >= 7);
  }
  REQUIRE(braidMemFree(mem) == braidSuccess);
  free(raw);
}

TEST_CASE("memory types: braidMemFree and the last deregistration of a range forget what was cached",
          "[unit][memtype]") {
  void* mem = nullptr;
  REQUIRE(braidMemAlloc(&mem, 4096) == braidSuccess);
  uint64_t epoch = pointerKindEpoch();
  REQUIRE(braidMemFree(mem) == braidSuccess);
  CHECK(pointerKindEpoch() > epoch);
  // A refused free forgets nothing.
  epoch = pointerKindEpoch();
  CHECK(braidMemFree(mem) == braidInvalidArgument);
  CHECK(pointerKindEpoch() == epoch);

  RegionTable table;
  char buf[256];
  void* first = nullptr;
  void* second = nullptr;
  REQUIRE(table.add(buf, sizeof(buf), &first).ok());
  REQUIRE(table.add(buf, sizeof(buf), &second).ok());  // the same range: one more reference
  epoch = pointerKindEpoch();
  REQUIRE(table.remove(first).ok());
  CHECK(pointerKindEpoch() == epoch);  // still registered once
  REQUIRE(table.remove(second).ok());
  CHECK(pointerKindEpoch() > epoch);
}

TEST_CASE("memory types map onto the transports' MemType and have names", "[unit][memtype]") {
  CHECK(memTypeOf(PtrKind::kHost) == MemType::kHost);
  CHECK(memTypeOf(PtrKind::kPinnedHost) == MemType::kHost);
  CHECK(memTypeOf(PtrKind::kDevice) == MemType::kCuda);
  CHECK(memTypeOf(PtrKind::kManaged) == MemType::kCuda);
  CHECK(std::string(ptrKindName(PtrKind::kPinnedHost)) == "pinned host");
  CHECK(std::string(ptrKindName(PtrKind::kManaged)) == "managed");
}

}  // namespace
}  // namespace braid

namespace braid {
namespace {

// The public calls on every machine: braidMemGetType answers host for host memory and refuses bad
// arguments; braidMemAllocDevice refuses bad arguments and, without a device, says why and writes
// nothing. The device side is in tests/gpu/test_gpu_memtype.cc.
TEST_CASE("braidMemGetType and braidMemAllocDevice on host memory and bad arguments", "[unit][memtype]") {
  char stack[64];
  void* mem = nullptr;
  REQUIRE(braidMemAlloc(&mem, 4096) == braidSuccess);
  for (const void* p : {static_cast<const void*>(stack), static_cast<const void*>(mem)}) {
    braidMemType_t t = braidMemCuda;
    REQUIRE(braidMemGetType(p, 64, &t) == braidSuccess);
    CHECK(t == braidMemHost);
  }
  braidMemType_t t = braidMemCuda;
  CHECK(braidMemGetType(nullptr, 1, &t) == braidInvalidArgument);
  CHECK(braidMemGetType(stack, 1, nullptr) == braidInvalidArgument);
  CHECK(t == braidMemCuda);
  void* p = stack;
  CHECK(braidMemAllocDevice(nullptr, 16) == braidInvalidArgument);
  CHECK(braidMemAllocDevice(&p, 0) == braidInvalidArgument);
  CHECK(p == stack);
  if (gpuDeviceCount() == 0) {
    CHECK(braidMemAllocDevice(&p, 4096) == braidInvalidUsage);
    CHECK(std::string(braidGetLastError()).find("CUDA") != std::string::npos);
    CHECK(p == stack);
  }
  // Host memory from braidMemAlloc is still freed by braidMemFree, and only once.
  REQUIRE(braidMemFree(mem) == braidSuccess);
  CHECK(braidMemFree(mem) == braidInvalidArgument);
}

}  // namespace
}  // namespace braid
