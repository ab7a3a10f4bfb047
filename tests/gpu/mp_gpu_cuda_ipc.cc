// The cuda_ipc path of device collectives (src/cuda/ipc_coll.h) where the every-collective tests
// of mp_gpu_collectives.cc do not reach: buffers CUDA IPC cannot export (managed memory, a
// cudaMallocAsync pool), mixed with exportable ones across the ranks, and a rank killed while its
// peers are in a device collective (host staging too). Real processes sharing one GPU; skipped,
// saying why, where there is none.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "src/comm.h"
#include "src/executor.h"
#include "tests/gpu/mp_gpu.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// How a rank allocates its buffers in one round.
enum class Alloc { kMalloc, kManaged, kPool };
const char* allocName(Alloc a) {
  return a == Alloc::kMalloc ? "cudaMalloc" : a == Alloc::kManaged ? "cudaMallocManaged" : "cudaMallocAsync";
}

cudaError_t allocate(Alloc a, void** p, size_t bytes, cudaStream_t s) {
  switch (a) {
    case Alloc::kMalloc:
      return cudaMalloc(p, bytes);
    case Alloc::kManaged:
      return cudaMallocManaged(p, bytes);
    case Alloc::kPool: {
      const cudaError_t e = cudaMallocAsync(p, bytes, s);
      return e == cudaSuccess ? cudaStreamSynchronize(s) : e;
    }
  }
  return cudaErrorInvalidValue;
}

void release(Alloc a, void* p, cudaStream_t s) {
  if (a == Alloc::kPool) {
    cudaFreeAsync(p, s);
    cudaStreamSynchronize(s);
  } else {
    cudaFree(p);
  }
}

float valueOf(int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 7); }

}  // namespace

TEST_CASE("cuda_ipc: buffers CUDA IPC cannot export go through a device buffer of its own, mixed across the ranks",
          "[gpu][mp]") {
  if (noGpu() || noCudaIpc()) return;
  const int n = GENERATE(2, 3);
  INFO("nranks " << n);
  auto res = runComm(n, {{"BRAID_CUDA_IPC_MIN", "0"}}, [](braidComm_t comm, int rank, int size) {
    const size_t count = 65537, bytes = count * sizeof(float);
    cudaStream_t s = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> h(count * size);
    const Alloc kinds[] = {Alloc::kMalloc, Alloc::kManaged, Alloc::kPool};
    for (int round = 0; round < 3; ++round) {
      // Each rank a kind of its own per round: every pairing of an exported and a copied buffer.
      const Alloc kind = kinds[(rank + round) % 3];
      INFO("round " << round << ": " << allocName(kind));
      void *in = nullptr, *sum = nullptr, *all = nullptr;
      CUDA_OK(rank, allocate(kind, &in, bytes, s));
      CUDA_OK(rank, allocate(kind, &sum, bytes, s));
      CUDA_OK(rank, allocate(kind, &all, bytes * size, s));
      for (size_t i = 0; i < count; ++i) h[i] = valueOf(rank, i);
      CUDA_OK(rank, cudaMemcpy(in, h.data(), bytes, cudaMemcpyHostToDevice));
      CUDA_OK(rank, cudaMemcpy(static_cast<char*>(all) + rank * bytes, h.data(), bytes, cudaMemcpyHostToDevice));
      CUDA_OK(rank, cudaDeviceSynchronize());
      // Out of place, and an in-place AllGather (its own block inside the output).
      CHECK_BRAID(rank, braidAllReduce(in, sum, count, braidFloat32, braidSum, comm, s));
      CHECK_BRAID(rank, braidAllGather(static_cast<char*>(all) + rank * bytes, all, count, braidFloat32, comm, s));
      CUDA_OK(rank, cudaStreamSynchronize(s));
      braidResult_t async = braidSuccess;
      CHECK_BRAID(rank, braidCommGetAsyncError(comm, &async));
      if (async != braidSuccess) return fail(rank, "round %d: async error %s", round, braidGetErrorString(async));
      CUDA_OK(rank, cudaMemcpy(h.data(), sum, bytes, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += valueOf(r, i);
        if (h[i] != want) return fail(rank, "round %d: AllReduce [%zu] is %g, expected %g", round, i, h[i], want);
      }
      CUDA_OK(rank, cudaMemcpy(h.data(), all, bytes * size, cudaMemcpyDeviceToHost));
      for (int r = 0; r < size; ++r)
        for (size_t i = 0; i < count; ++i)
          if (h[r * count + i] != valueOf(r, i))
            return fail(rank, "round %d: AllGather block %d [%zu] is %g, expected %g", round, r, i, h[r * count + i],
                        valueOf(r, i));
      release(kind, in, s);
      release(kind, sum, s);
      release(kind, all, s);
    }
    const uint64_t ran = internalsOf(comm)->engine->directCalls();
    if (ran != 6) return fail(rank, "%llu of 6 device calls ran on cuda_ipc", static_cast<unsigned long long>(ran));
    cudaStreamDestroy(s);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a rank killed while its peers are in a device collective is an error naming it, and their streams go on",
          "[gpu][mp]") {
  if (noGpu()) return;
  const bool ipc = GENERATE(from_range(ipcVariants())) != 0;
  INFO((ipc ? "cuda_ipc" : "host staging (BRAID_CUDA_IPC=0)"));
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto* arrived = static_cast<int*>(page);
  *arrived = 0;
  const int victim = 2;
  auto res = runComm(
      3, {{"BRAID_CUDA_IPC", ipc ? "1" : "0"}, {"BRAID_TIMEOUT", "60"}},
      [&](braidComm_t comm, int rank, int) {
        const size_t count = 1 << 20, bytes = count * sizeof(float);
        float* d = nullptr;
        CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&d), bytes));
        CUDA_OK(rank, cudaMemset(d, 0, bytes));
        cudaStream_t s = nullptr;
        CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        // One good call first: the path is set up on every rank.
        CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, s));
        CUDA_OK(rank, cudaStreamSynchronize(s));
        __atomic_add_fetch(arrived, 1, __ATOMIC_SEQ_CST);
        if (rank == victim) {
          while (__atomic_load_n(arrived, __ATOMIC_SEQ_CST) < 3) usleep(1000);
          usleep(100 * 1000);  // the survivors are in the call by now
          raise(SIGKILL);
        }
        braidRequest_t req = nullptr;
        CHECK_BRAID(rank, braidIAllReduce(d, d, count, braidFloat32, braidSum, comm, s, &req));
        const braidResult_t r = braidWait(req);
        const std::string msg = braidGetLastError();
        if (r == braidSuccess) return fail(rank, "the AllReduce succeeded without rank %d", victim);
        if (msg.find("rank " + std::to_string(victim) + " (host ") == std::string::npos)
          return fail(rank, "the error does not name rank %d: %s", victim, msg.c_str());
        // The stream waited for the call; the failure let it go on.
        CUDA_OK(rank, cudaStreamSynchronize(s));
        cudaStreamDestroy(s);
        cudaFree(d);
        return 0;
      },
      120);
  munmap(page, 4096);
  INFO(describe(res));
  for (size_t r = 0; r < res.size(); ++r) CHECK(res[r].status == (static_cast<int>(r) == victim ? 128 + SIGKILL : 0));
}

TEST_CASE("cuda_ipc takes device collectives from BRAID_CUDA_IPC_MIN bytes on; smaller ones are staged", "[gpu][mp]") {
  if (noGpu() || noCudaIpc()) return;
  auto res = runComm(2, {{"BRAID_CUDA_IPC_MIN", "1M"}}, [](braidComm_t comm, int rank, int size) {
    const size_t big = (1 << 20) / sizeof(float), small = big - 1;  // 1 MiB, and one element less
    float* d = nullptr;
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&d), big * sizeof(float)));
    std::vector<float> h(big);
    for (size_t count : {small, big}) {
      for (size_t i = 0; i < count; ++i) h[i] = valueOf(rank, i);
      CUDA_OK(rank, cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
      const uint64_t before = internalsOf(comm)->engine->directCalls();
      CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, nullptr));
      CUDA_OK(rank, cudaStreamSynchronize(nullptr));
      const uint64_t ran = internalsOf(comm)->engine->directCalls() - before;
      if (ran != (count == big ? 1u : 0u))
        return fail(rank, "%zu floats: %llu calls on cuda_ipc", count, static_cast<unsigned long long>(ran));
      CUDA_OK(rank, cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += valueOf(r, i);
        if (h[i] != want) return fail(rank, "%zu floats: [%zu] is %g, expected %g", count, i, h[i], want);
      }
    }
    cudaFree(d);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a group of one device collective runs as the call alone would: on cuda_ipc", "[gpu][mp]") {
  if (noGpu() || noCudaIpc()) return;
  auto res = runComm(2, {{"BRAID_CUDA_IPC_MIN", "0"}}, [](braidComm_t comm, int rank, int size) {
    const size_t count = 4099;
    float* d = nullptr;
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&d), count * sizeof(float)));
    std::vector<float> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = valueOf(rank, i);
    CUDA_OK(rank, cudaMemcpy(d, h.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, nullptr));
    CHECK_BRAID(rank, braidGroupEnd());
    CUDA_OK(rank, cudaStreamSynchronize(nullptr));
    const uint64_t ran = internalsOf(comm)->engine->directCalls();
    if (ran != 1) return fail(rank, "%llu calls on cuda_ipc, expected 1", static_cast<unsigned long long>(ran));
    CUDA_OK(rank, cudaMemcpy(h.data(), d, count * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += valueOf(r, i);
      if (h[i] != want) return fail(rank, "[%zu] is %g, expected %g", i, h[i], want);
    }
    cudaFree(d);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
