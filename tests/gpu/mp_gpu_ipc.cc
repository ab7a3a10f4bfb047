// CUDA IPC between real processes that share one GPU (src/cuda/ipc.h): rank 0 exports a range in the
// middle of its device memory and sends the handle as bytes; rank 1 opens it, reads rank 0's data
// there (its GPU found by PCI bus id), writes its own, and the range opens once however often it is asked for; rank 0
// then sees rank 1's bytes in the range and its own outside it. Built only with CUDA; skipped, saying why, where no GPU
// is present.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <vector>

#include "src/cuda/ipc.h"
#include "tests/gpu/mp_gpu.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// Whether all n bytes at p (device memory) are v.
bool deviceBytesAre(const char* p, size_t n, unsigned char v, size_t* firstWrong) {
  std::vector<unsigned char> h(n);
  if (cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) {
    *firstWrong = 0;
    return false;
  }
  for (size_t i = 0; i < n; ++i)
    if (h[i] != v) {
      *firstWrong = i;
      return false;
    }
  return true;
}

TEST_CASE("CUDA IPC: a peer process opens a range of device memory, reads and writes it", "[gpu][mp]") {
  if (noGpu()) return;
  auto res = runComm(2, {}, [](braidComm_t comm, int rank, int) {
    int device = -1;
    CHECK_BRAID(rank, braidCommCuDevice(comm, &device));
    const size_t allocBytes = 4 << 20, offset = 1 << 20, bytes = (1 << 20) + 13;
    braid::IpcHandle h{};
    size_t wrong = 0;
    if (rank == 0) {
      void* d = nullptr;
      CHECK_BRAID(rank, braidMemAllocDevice(&d, allocBytes));
      char* base = static_cast<char*>(d);
      CUDA_OK(rank, cudaMemset(base, 0x5a, allocBytes));
      CUDA_OK(rank, cudaDeviceSynchronize());
      const braid::Status s = braid::ipcExport(base + offset, bytes, &h);
      if (!s.ok()) return fail(rank, "ipcExport: %s", s.message().c_str());
      CHECK_BRAID(rank, braidSend(&h, sizeof(h), braidUint8, 1, comm, nullptr));
      CHECK_BRAID(rank, braidBarrier(comm, nullptr));  // rank 1 wrote the range
      if (!deviceBytesAre(base + offset, bytes, 0x33, &wrong))
        return fail(rank, "byte %zu of the exported range is not rank 1's", wrong);
      if (!deviceBytesAre(base, offset, 0x5a, &wrong) ||
          !deviceBytesAre(base + offset + bytes, allocBytes - offset - bytes, 0x5a, &wrong))
        return fail(rank, "rank 1 wrote outside the exported range (byte %zu of a side)", wrong);
      CHECK_BRAID(rank, braidBarrier(comm, nullptr));  // rank 1 closed it
      CHECK_BRAID(rank, braidMemFree(d));
      return 0;
    }
    CHECK_BRAID(rank, braidRecv(&h, sizeof(h), braidUint8, 0, comm, nullptr));
    if (h.offset != offset || h.bytes != bytes || h.allocBytes < allocBytes)
      return fail(rank, "the handle says %llu bytes at offset %llu of %llu", static_cast<unsigned long long>(h.bytes),
                  static_cast<unsigned long long>(h.offset), static_cast<unsigned long long>(h.allocBytes));
    int peerDevice = -1;
    const braid::Status l = braid::ipcLocalDevice(h, &peerDevice);
    if (!l.ok() || peerDevice != device)  // the ranks share one GPU
      return fail(rank, "the handle's GPU %s is device %d here, not %d: %s", h.busId, peerDevice, device,
                  l.message().c_str());
    bool reachable = false;
    const braid::Status r = braid::ipcReachable(device, peerDevice, &reachable);
    if (!r.ok() || !reachable)
      return fail(rank, "device %d cannot reach device %d: %s", device, peerDevice, r.message().c_str());
    braid::IpcImports imports;
    void* p = nullptr;
    void* again = nullptr;
    braid::Status s = imports.open(h, device, &p);
    if (!s.ok()) return fail(rank, "open: %s", s.message().c_str());
    s = imports.open(h, device, &again);
    if (!s.ok() || again != p || imports.openCount() != 1)
      return fail(rank, "the second open gave %p (first %p), %zu open: %s", again, p, imports.openCount(),
                  s.message().c_str());
    // A second holder in this process (another communicator's) shares the mapping: CUDA would
    // refuse a second open of the handle (cudaErrorAlreadyMapped). Letting it go keeps the first's.
    {
      braid::IpcImports other;
      void* shared = nullptr;
      s = other.open(h, device, &shared);
      if (!s.ok() || shared != p)
        return fail(rank, "a second holder got %p (first %p): %s", shared, p, s.message().c_str());
      s = other.closeAll();
      if (!s.ok()) return fail(rank, "the second holder's closeAll: %s", s.message().c_str());
    }
    if (!deviceBytesAre(static_cast<char*>(p), bytes, 0x5a, &wrong))
      return fail(rank, "byte %zu of rank 0's range does not read 0x5a", wrong);
    CUDA_OK(rank, cudaMemset(p, 0x33, bytes));
    CUDA_OK(rank, cudaDeviceSynchronize());
    CHECK_BRAID(rank, braidBarrier(comm, nullptr));
    s = imports.closeAll();
    if (!s.ok() || imports.openCount() != 0) return fail(rank, "closeAll: %s", s.message().c_str());
    CHECK_BRAID(rank, braidBarrier(comm, nullptr));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace
