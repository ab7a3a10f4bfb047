// What CUDA IPC gives between two ranks of one host, the raw material of the cuda_ipc transport
// (issue "GPUs": its 2-rank AllReduce should reach 70% of what the copy bandwidth allows). Rank 0
// exports a device buffer (src/cuda/ipc.h) and sends the handle; rank 1 opens it and times, per
// size, a copy from rank 0's memory into its own (pull), one from its own into rank 0's (push) and a
// copy within its own memory (local), each a cudaMemcpyAsync on its stream timed by CUDA events.
// On one GPU shared by both ranks every copy stays in that GPU's memory; on two GPUs pull and push
// cross NVLink or PCIe. GB/s = size / time (each byte read once and written once).
//
// Then what the cuda_ipc transport pays outside the copies (src/cuda/ipc_coll.h): rank 0's ipcExport
// of an allocation it exported before (every call makes one; the handle kept by buffer id) and of
// its first export, and rank 1's cudaIpcOpenMemHandle + cudaIpcCloseMemHandle of rank 0's whole
// allocation (paid once per peer allocation), host wall time, means.
//
// Run with two ranks: braidrun -n 2 cuda_ipc_perf [-b 1M -e 1G -f 2 -n 20 -w 5] [-g DEV] (each rank's
// device: -g, else BRAID_CUDA_DEVICE, else its current device). Without a CUDA device it says so and
// exits 0. Links braid's internals (ipc.h), like cuda_reduce_perf.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "braid/braid.h"
#include "perf/cuda_bench.h"
#include "perf/options.h"
#include "src/cuda/ipc.h"
#include "src/cuda/runtime.h"

namespace {

using namespace braid;
using perf::must;
using perf::timeUs;

void must(braidResult_t r, const char* what) {
  if (r == braidSuccess) return;
  std::fprintf(stderr, "cuda_ipc_perf: %s: %s: %s\n", what, braidGetErrorString(r), braidGetLastError());
  std::exit(1);
}

double nowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int device = -1;
  const perf::Options o = perf::parseCudaBenchFlags(argc, argv, {{"-g", &device}});
  if (gpuDeviceCount() == 0) {
    std::printf("cuda_ipc_perf: %s; nothing measured\n", gpuAbsentReason());
    return 0;
  }
  if (device >= gpuDeviceCount()) {
    std::fprintf(stderr, "cuda_ipc_perf: -g %d: this process sees %d device(s)\n", device, gpuDeviceCount());
    return 2;
  }
  if (device >= 0) must(gpuSetDevice(device), "select the device");
  braidComm_t comm = nullptr;
  must(braidCommInitFromEnv(&comm), "braidCommInitFromEnv");
  int rank = 0, size = 0;
  must(braidCommUserRank(comm, &rank), "braidCommUserRank");
  must(braidCommCount(comm, &size), "braidCommCount");
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "cuda_ipc_perf: runs on 2 ranks, not %d\n", size);
    braidCommDestroy(comm);
    return 2;
  }
  must(braidCommCuDevice(comm, &device), "braidCommCuDevice");
  const size_t maxBytes = o.maxBytes;
  void* mine = nullptr;
  must(braidMemAllocDevice(&mine, maxBytes), "braidMemAllocDevice");
  must(cudaMemset(mine, rank + 1, maxBytes), "cudaMemset");
  must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  IpcHandle h{};
  constexpr int kExports = 100, kOpens = 20;
  double exportUs[2] = {0, 0};  // the first export, and the mean of later ones
  if (rank == 0) {
    double t = nowUs();
    must(ipcExport(mine, maxBytes, &h), "ipcExport");
    exportUs[0] = nowUs() - t;
    t = nowUs();
    for (int i = 0; i < kExports; ++i) must(ipcExport(mine, maxBytes, &h), "ipcExport");
    exportUs[1] = (nowUs() - t) / kExports;
    must(braidSend(&h, sizeof(h), braidUint8, 1, comm, nullptr), "braidSend");
    must(braidSend(exportUs, 2, braidFloat64, 1, comm, nullptr), "braidSend");
    must(braidBarrier(comm, nullptr), "braidBarrier");  // rank 1 measured and closed the handle
  } else {
    must(braidRecv(&h, sizeof(h), braidUint8, 0, comm, nullptr), "braidRecv");
    must(braidRecv(exportUs, 2, braidFloat64, 0, comm, nullptr), "braidRecv");
    int peerDevice = -1;
    must(ipcLocalDevice(h, &peerDevice), "ipcLocalDevice");
    bool reachable = false;
    must(ipcReachable(device, peerDevice, &reachable), "ipcReachable");
    if (!reachable) {
      std::printf("cuda_ipc_perf: device %d cannot reach device %d peer to peer; nothing measured\n", device,
                  peerDevice);
    } else {
      IpcImports imports;
      void* peer = nullptr;
      must(imports.open(h, device, &peer), "open rank 0's memory");
      cudaStream_t stream = nullptr;
      must(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      // What rank 1 sees of rank 0's memory: rank 0 wrote 1 in every byte.
      unsigned char first = 0;
      must(cudaMemcpy(&first, peer, 1, cudaMemcpyDeviceToHost), "cudaMemcpy");
      void* local = nullptr;
      must(cudaMalloc(&local, maxBytes), "cudaMalloc");
      cudaDeviceProp prop{};
      must(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
      std::printf("# rank 1 on device %d (%s), rank 0's memory on device %d (%s); rank 0's first byte %s\n", device,
                  prop.name, peerDevice, h.busId, first == 1 ? "reads 1: ok" : "is WRONG");
      std::printf("# %12s %10s %10s %10s %10s %10s %10s %9s\n", "size(B)", "pull(us)", "pull(GB/s)", "push(us)",
                  "push(GB/s)", "local(us)", "local(GB/s)", "pull/loc");
      for (size_t bytes = o.minBytes; bytes <= maxBytes;
           bytes = o.stepBytes > 0 ? bytes + o.stepBytes : bytes * o.stepFactor) {
        auto copy = [&](void* dst, const void* src) {
          return timeUs(o.warmup, o.iters, stream, [&] {
            must(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
          });
        };
        const double pull = copy(mine, peer), push = copy(peer, mine), loc = copy(local, mine);
        std::printf("  %12zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %9.3f\n", bytes, pull, bytes / pull / 1e3, push,
                    bytes / push / 1e3, loc, bytes / loc / 1e3, loc / pull);
        if (bytes == 0) break;
      }
      cudaFree(local);
      cudaStreamDestroy(stream);
      must(imports.closeAll(), "close rank 0's memory");
      const double t = nowUs();
      for (int i = 0; i < kOpens; ++i) {
        must(imports.open(h, device, &peer), "open rank 0's memory");
        must(imports.closeAll(), "close rank 0's memory");
      }
      std::printf(
          "# per call: ipcExport %.1f us (first %.1f us); once per peer allocation: open+close of rank 0's %zu-byte "
          "allocation %.1f us\n",
          exportUs[1], exportUs[0], maxBytes, (nowUs() - t) / kOpens);
    }
    must(braidBarrier(comm, nullptr), "braidBarrier");
  }
  must(braidMemFree(mine), "braidMemFree");
  must(braidCommDestroy(comm), "braidCommDestroy");
  return 0;
}
