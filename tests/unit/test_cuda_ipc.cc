// CUDA IPC export and import (src/cuda/ipc.h) where it must work on every machine: bad arguments
// and, without a device, every call refused saying why with nothing written; with a device, what one
// process can check by itself (the handle's range, device, bus id and process; ranges past their
// allocation, host memory, a handle of this very process and a GPU this process does not see
// refused). Two processes sharing device memory: tests/gpu/mp_gpu_ipc.cc.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "src/cuda/ipc.h"
#include "src/cuda/ipc_coll.h"
#include "src/cuda/runtime.h"

namespace braid {
namespace {

bool allBytes(const void* p, size_t n, unsigned char v) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != v) return false;
  return true;
}

TEST_CASE("CUDA IPC: bad arguments and a missing device are refused, writing nothing", "[unit][memtype]") {
  IpcHandle h;
  memset(&h, 0xab, sizeof(h));
  std::vector<char> host(4096);
  CHECK(ipcExport(nullptr, 16, &h).code() == braidInvalidArgument);
  CHECK(ipcExport(host.data(), 0, &h).code() == braidInvalidArgument);
  CHECK(ipcExport(host.data(), 16, nullptr).code() == braidInvalidArgument);
  CHECK(allBytes(&h, sizeof(h), 0xab));
  if (gpuDeviceCount() > 0) return;  // the device's side: the next case
  INFO(gpuAbsentReason());
  Status s = ipcExport(host.data(), host.size(), &h);
  CHECK(s.code() == braidInvalidUsage);
  CHECK(s.message() == gpuAbsentReason());
  CHECK(allBytes(&h, sizeof(h), 0xab));
  int device = -1;
  CHECK(ipcLocalDevice(h, &device).code() == braidInvalidUsage);
  CHECK(device == -1);
  bool reachable = true;
  CHECK(ipcReachable(0, 0, &reachable).code() == braidInvalidUsage);
  CHECK(reachable);
  IpcImports imports;
  void* p = &h;
  h.pid = static_cast<int32_t>(getpid()) + 1;
  CHECK(imports.open(h, 0, &p).code() == braidInvalidUsage);
  CHECK(p == &h);
  CHECK(imports.openCount() == 0);
  CHECK(imports.closeAll().ok());
}

TEST_CASE("cuda_ipc without a device: no collective side is made, no bus id, no peer reached", "[unit][memtype]") {
  if (gpuDeviceCount() > 0) return;  // with a device: the [gpu][mp] tests
  INFO(gpuAbsentReason());
  std::unique_ptr<IpcColl> coll;
  Status s = makeIpcColl(0, &coll);
  CHECK(s.code() == braidInvalidUsage);
  CHECK(s.message() == gpuAbsentReason());
  CHECK(coll == nullptr);
  char bus[32];
  memset(bus, 'x', sizeof(bus));
  ipcBusId(0, bus);
  CHECK(bus[0] == '\0');
  bool ok = true;
  std::string why;
  CHECK(ipcReachesAll(0, {"0000:01:00.0", "0000:02:00.0"}, 0, &ok, &why).ok());
  CHECK_FALSE(ok);
  CHECK_FALSE(why.empty());
}

TEST_CASE("CUDA IPC: a range of braidMemAllocDevice memory exports with its offset; wrong ranges are refused",
          "[unit][memtype][gpu]") {
  if (gpuDeviceCount() == 0) {
    WARN("skipped: " << gpuAbsentReason());
    return;
  }
  int device = -1;
  REQUIRE(gpuCurrentDevice(&device).ok());
  const size_t bytes = 1 << 20;
  void* d = nullptr;
  REQUIRE(braidMemAllocDevice(&d, bytes) == braidSuccess);
  char* base = static_cast<char*>(d);
  IpcHandle whole{}, part{};
  REQUIRE(ipcExport(base, bytes, &whole).ok());
  CHECK(whole.offset == 0);
  CHECK(whole.bytes == bytes);
  CHECK(whole.allocBytes >= bytes);
  CHECK(whole.device == device);
  CHECK(whole.pid == static_cast<int32_t>(getpid()));
  int local = -1;
  CHECK(ipcLocalDevice(whole, &local).ok());  // the bus id names this very device
  CHECK(local == device);
  IpcHandle stranger = whole;
  snprintf(stranger.busId, sizeof(stranger.busId), "ffff:ff:1f.7");
  local = -1;
  CHECK(ipcLocalDevice(stranger, &local).code() == braidInvalidUsage);
  memset(stranger.busId, 0, sizeof(stranger.busId));
  CHECK(ipcLocalDevice(stranger, &local).code() == braidInvalidArgument);
  CHECK(local == -1);
  REQUIRE(ipcExport(base + 4096, 1000, &part).ok());
  CHECK(part.offset == 4096);
  CHECK(part.bytes == 1000);
  CHECK(memcmp(part.handle, whole.handle, sizeof(whole.handle)) == 0);  // one allocation, one handle

  IpcHandle untouched;
  memset(&untouched, 0xab, sizeof(untouched));
  CHECK(ipcExport(base + 4096, whole.allocBytes, &untouched).code() == braidInvalidArgument);  // past the end
  std::vector<char> host(4096);
  CHECK(ipcExport(host.data(), host.size(), &untouched).code() == braidInvalidArgument);  // host memory
  CHECK(allBytes(&untouched, sizeof(untouched), 0xab));

  bool reachable = false;
  CHECK(ipcReachable(device, device, &reachable).ok());
  CHECK(reachable);
  CHECK(ipcReachable(device, gpuDeviceCount(), &reachable).code() == braidInvalidArgument);

  IpcImports imports;
  void* p = nullptr;
  CHECK(imports.open(whole, device, &p).code() == braidInvalidUsage);  // this process's own handle
  IpcHandle bad = whole;
  bad.pid += 1;
  bad.offset = bad.allocBytes;  // an empty range past the end
  CHECK(imports.open(bad, device, &p).code() == braidInvalidArgument);
  CHECK(p == nullptr);
  CHECK(imports.openCount() == 0);
  CHECK(braidMemFree(d) == braidSuccess);

  // An allocation made where a freed one was is exported as itself (the handles are kept by
  // allocation, not by address): its handle's size is its own.
  void* again = nullptr;
  REQUIRE(braidMemAllocDevice(&again, bytes / 2) == braidSuccess);
  IpcHandle later{};
  REQUIRE(ipcExport(again, bytes / 2, &later).ok());
  CHECK(later.allocBytes >= bytes / 2);
  CHECK(later.allocBytes < whole.allocBytes);
  CHECK(braidMemFree(again) == braidSuccess);
}

}  // namespace
}  // namespace braid
