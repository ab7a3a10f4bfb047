// Collectives on device buffers, in place on the peers' device memory (cuda_ipc, src/cuda/ipc_coll.h)
// and through host staging (src/cuda/staging.h), on real processes that share one GPU: every collective in place and
// out of place, every dtype and op of AllReduce, 1, 2 and 4 ranks, checked on the host; the stream order (a kernel
// before the call writes its input, a kernel after it reads its output); a nonblocking request; send/recv; groups of
// device calls; and the refusals. Built only with CUDA; skipped, saying why, where no GPU is present (asked in a child
// process: CUDA set up in this process would be unusable in the ranks forked from it).
#include <cuda_runtime_api.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "src/comm.h"
#include "src/cuda/kernels.h"
#include "src/cuda/runtime.h"
#include "src/executor.h"
#include "tests/gpu/mp_gpu.h"
#include "tests/mp/collective_case.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// Device copies of a case's buffers, on `stream` (null: the legacy default stream). Grown, reused.
class OnDevice final : public DeviceCopies {
 public:
  explicit OnDevice(cudaStream_t stream) : stream_(stream) {}
  ~OnDevice() override {
    cudaFree(send_);
    cudaFree(recv_);
  }

  bool upload(const Buffers& b, const char** send, char** recv, braidStream_t* stream) override {
    if (!grow(&send_, &sendCap_, b.send.size()) || !grow(&recv_, &recvCap_, b.recv.size())) return false;
    if (!ok(cudaMemcpyAsync(send_, b.send.data(), b.send.size(), cudaMemcpyHostToDevice, stream_), "upload") ||
        !ok(cudaMemcpyAsync(recv_, b.recv.data(), b.recv.size(), cudaMemcpyHostToDevice, stream_), "upload"))
      return false;
    *send = send_;
    *recv = recv_;
    *stream = stream_;
    return true;
  }

  bool download(Buffers* b) override {
    return ok(cudaMemcpyAsync(b->recv.data(), recv_, b->recv.size(), cudaMemcpyDeviceToHost, stream_), "download") &&
           ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  static bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return false;
  }
  static bool grow(char** p, size_t* cap, size_t bytes) {
    if (*cap >= bytes && *p != nullptr) return true;
    cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    if (!ok(cudaMalloc(reinterpret_cast<void**>(p), bytes == 0 ? 1 : bytes), "cudaMalloc")) return false;
    *cap = bytes;
    return true;
  }

  cudaStream_t stream_;
  char* send_ = nullptr;
  char* recv_ = nullptr;
  size_t sendCap_ = 0, recvCap_ = 0;
};

// A host function that holds its stream until *open is set: the test decides when the stream may
// run, so "the call returned while its stream had not reached it" is certain, not a race.
void holdUntilOpen(void* open) {
  auto* flag = static_cast<std::atomic<int>*>(open);
  while (flag->load(std::memory_order_acquire) == 0) sched_yield();
}

}  // namespace

TEST_CASE("device buffers: every collective in place and out of place, 1, 2 and 4 ranks, cuda_ipc and host staging",
          "[gpu][mp]") {
  if (noGpu()) return;
  const int n = GENERATE(1, 2, 4);
  const bool legacyStream = GENERATE(false, true);
  const bool ipc = GENERATE(from_range(ipcVariants())) != 0;
  INFO("nranks " << n << (legacyStream ? ", the legacy default stream" : ", a stream of its own")
                 << (ipc ? ", cuda_ipc" : ", host staging (BRAID_CUDA_IPC=0)"));
  // Host staging cuts the largest calls (4 MiB of floats) of AllReduce, Reduce and Broadcast into
  // pieces of 1 MiB.
  auto res = runComm(
      n, {{"BRAID_CUDA_IPC", ipc ? "1" : "0"}, {"BRAID_CUDA_IPC_MIN", "0"}, {"BRAID_CUDA_STAGING_PIECE", "1M"}},
      [legacyStream, ipc](braidComm_t comm, int rank, int size) {
        cudaStream_t stream = nullptr;
        if (!legacyStream) CUDA_OK(rank, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        OnDevice dev(stream);
        Buffers b;
        int rootPick = 0;
        for (C c : {C::kAllReduce, C::kReduce, C::kReduceScatter, C::kAllGather, C::kBroadcast, C::kAllToAll})
          for (braidDataType_t dt : {braidFloat32, braidInt8, braidBfloat16})
            for (size_t count : {size_t{0}, size_t{1}, size_t{1031}, (size_t{1} << 20) + 3})
              for (bool inPlace : {false, true})
                if (runCase(comm, rank, size, c, dt, braidSum, count, inPlace, (rootPick++) % size, b, &dev) != 0)
                  return 1;
        if (stream != nullptr) cudaStreamDestroy(stream);
        // Which path ran: every call with bytes (6 collectives x 3 dtypes x 3 counts x 2 layouts) ran
        // on the peers' device memory where cuda_ipc is on and there are peers (AllToAll in place
        // through the slot's device buffer); none where it is off.
        const uint64_t expected = ipc && size > 1 ? 6 * 3 * 3 * 2 : 0;
        const uint64_t ran = internalsOf(comm)->engine->directCalls();
        if (ran != expected)
          return fail(rank, "%llu device calls ran on cuda_ipc, expected %llu", static_cast<unsigned long long>(ran),
                      static_cast<unsigned long long>(expected));
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("device AllReduce: every dtype and op, 1, 2 and 4 ranks, cuda_ipc and host staging", "[gpu][mp]") {
  if (noGpu()) return;
  const int n = GENERATE(1, 2, 4);
  const bool ipc = GENERATE(from_range(ipcVariants())) != 0;
  INFO("nranks " << n << (ipc ? ", cuda_ipc" : ", host staging (BRAID_CUDA_IPC=0)"));
  auto res = runComm(n, {{"BRAID_CUDA_IPC", ipc ? "1" : "0"}, {"BRAID_CUDA_IPC_MIN", "0"}},
                     [](braidComm_t comm, int rank, int size) {
                       cudaStream_t stream = nullptr;
                       CUDA_OK(rank, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
                       OnDevice dev(stream);
                       Buffers b;
                       for (braidDataType_t dt : kTypes)
                         for (braidRedOp_t op : kOps)
                           for (size_t count : {size_t{7}, size_t{65537}})
                             for (bool inPlace : {false, true})
                               if (runCase(comm, rank, size, C::kAllReduce, dt, op, count, inPlace, 0, b, &dev) != 0)
                                 return 1;
                       cudaStreamDestroy(stream);
                       return 0;
                     });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("device calls are ordered on their stream: a kernel before writes the input, one after reads the output",
          "[gpu][mp]") {
  if (noGpu()) return;
  const int n = GENERATE(1, 2);
  auto res = runComm(n, {}, [](braidComm_t comm, int rank, int size) {
    const size_t count = (size_t{1} << 20) + 5, bytes = count * sizeof(float);
    std::vector<float> seed(count), sentinel(count, -1.0f), out(count), second(count);
    for (size_t i = 0; i < count; ++i) seed[i] = static_cast<float>(inputValue(braidSum, rank, i, size));
    float *dSeed = nullptr, *dIn = nullptr, *dOut = nullptr, *dSecond = nullptr;
    for (float** p : {&dSeed, &dIn, &dOut, &dSecond}) CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(p), bytes));
    CUDA_OK(rank, cudaMemcpy(dSeed, seed.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(rank, cudaMemset(dIn, 0, bytes));
    CUDA_OK(rank, cudaMemcpy(dOut, sentinel.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(rank, cudaMemset(dSecond, 0, bytes));
    CUDA_OK(rank, cudaDeviceSynchronize());
    cudaStream_t s = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::atomic<int> open{0};
    CUDA_OK(rank, cudaLaunchHostFunc(s, holdUntilOpen, &open));
    const braid::GpuLaunch launch{s, 0, 0};
    // input = seed, by a kernel the stream runs only once it is opened: a collective that read its
    // input at once would reduce zeros.
    if (!braid::gpuScaleBy(braidFloat32, dIn, dSeed, count, 1.0, launch).ok()) return fail(rank, "gpuScaleBy");
    // Returns while the stream is held (a call that waited for its stream would never return).
    CHECK_BRAID(rank, braidAllReduce(dIn, dOut, count, braidFloat32, braidSum, comm, s));
    // second = output, by a kernel after the call: a stream that ran past the collective would copy
    // the sentinels.
    if (!braid::gpuScaleBy(braidFloat32, dSecond, dOut, count, 1.0, launch).ok()) return fail(rank, "gpuScaleBy");
    open.store(1, std::memory_order_release);
    CUDA_OK(rank, cudaStreamSynchronize(s));
    CUDA_OK(rank, cudaMemcpy(out.data(), dOut, bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(rank, cudaMemcpy(second.data(), dSecond, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(expectedValue(braidFloat32, braidSum, i, size));
      if (out[i] != want) return fail(rank, "output[%zu] is %g, expected %g", i, out[i], want);
      if (second[i] != want)
        return fail(rank, "the kernel after the call read %g at %zu, expected %g", second[i], i, want);
    }
    cudaStreamDestroy(s);
    for (float* p : {dSeed, dIn, dOut, dSecond}) cudaFree(p);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a nonblocking device AllReduce completes once its result is in the device buffer", "[gpu][mp]") {
  if (noGpu()) return;
  // cuda_ipc; host staging of the whole call; host staging in 19 pieces of 64 KiB (the request is
  // the last piece's).
  const int mode = GENERATE(from_range(cudaIpcSkipped() ? std::vector<int>{1, 2} : std::vector<int>{0, 1, 2}));
  INFO((mode == 0 ? "cuda_ipc" : mode == 1 ? "host staging, one piece" : "host staging, 64 KiB pieces"));
  const Env env = mode == 0 ? Env{{"BRAID_CUDA_IPC_MIN", "0"}}
                            : Env{{"BRAID_CUDA_IPC", "0"}, {"BRAID_CUDA_STAGING_PIECE", mode == 1 ? "0" : "64K"}};
  auto res = runComm(2, env, [](braidComm_t comm, int rank, int size) {
    const size_t count = 300007, bytes = count * sizeof(float);
    std::vector<float> in(count), out(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(inputValue(braidSum, rank, i, size));
    float *dIn = nullptr, *dOut = nullptr;
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&dIn), bytes));
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&dOut), bytes));
    CUDA_OK(rank, cudaMemcpy(dIn, in.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(rank, cudaMemset(dOut, 0, bytes));
    CUDA_OK(rank, cudaDeviceSynchronize());
    cudaStream_t s = nullptr, other = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(rank, cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    std::atomic<int> open{0};
    CUDA_OK(rank, cudaLaunchHostFunc(s, holdUntilOpen, &open));
    braidRequest_t req = nullptr;
    CHECK_BRAID(rank, braidIAllReduce(dIn, dOut, count, braidFloat32, braidSum, comm, s, &req));
    int done = -1;
    CHECK_BRAID(rank, braidTest(req, &done));
    // The stream is held before the copy of the input: the operation cannot be done.
    if (done != 0) return fail(rank, "braidTest said done while the stream had not reached the call");
    open.store(1, std::memory_order_release);
    CHECK_BRAID(rank, braidWait(req));
    // No synchronize with `s`: the request's completion alone must mean the result is on the device.
    CUDA_OK(rank, cudaMemcpyAsync(out.data(), dOut, bytes, cudaMemcpyDeviceToHost, other));
    CUDA_OK(rank, cudaStreamSynchronize(other));
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(expectedValue(braidFloat32, braidSum, i, size));
      if (out[i] != want) return fail(rank, "after braidWait, output[%zu] is %g, expected %g", i, out[i], want);
    }
    CUDA_OK(rank, cudaStreamSynchronize(s));
    cudaStreamDestroy(s);
    cudaStreamDestroy(other);
    cudaFree(dIn);
    cudaFree(dOut);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("braidSend and braidRecv on device buffers", "[gpu][mp]") {
  if (noGpu()) return;
  auto res = runComm(2, {}, [](braidComm_t comm, int rank, int) {
    const size_t count = 100003, bytes = count * sizeof(int32_t);
    std::vector<int32_t> h(count);
    for (size_t i = 0; i < count; ++i) h[i] = rank == 0 ? static_cast<int32_t>(i * 7 + 1) : -1;
    int32_t* d = nullptr;
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&d), bytes));
    CUDA_OK(rank, cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t s = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (rank == 0)
      CHECK_BRAID(rank, braidSend(d, count, braidInt32, 1, comm, s));
    else
      CHECK_BRAID(rank, braidRecv(d, count, braidInt32, 0, comm, s));
    CUDA_OK(rank, cudaStreamSynchronize(s));
    CUDA_OK(rank, cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i)
      if (h[i] != static_cast<int32_t>(i * 7 + 1)) return fail(rank, "element %zu is %d", i, h[i]);
    cudaStreamDestroy(s);
    cudaFree(d);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE(
    "a group's device calls run together on their stream: collectives, a ring of sends, an all-to-all of "
    "sends and receives, a send to self",
    "[gpu][mp]") {
  if (noGpu()) return;
  const int n = GENERATE(2, 3, 4);
  INFO("nranks " << n);
  auto res = runComm(n, {}, [](braidComm_t comm, int rank, int size) {
    const size_t count = 65537, bytes = count * sizeof(int32_t);
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    // Every buffer's value is a function of (the rank that wrote it, block, index).
    auto value = [](int who, int block, size_t i) { return static_cast<int32_t>(who * 1000003 + block * 7919 + i); };
    std::vector<int32_t> h(count * size);
    auto fill = [&](int32_t* d, int who, int blocks) -> int {
      for (int b = 0; b < blocks; ++b)
        for (size_t i = 0; i < count; ++i) h[b * count + i] = value(who, b, i);
      CUDA_OK(rank, cudaMemcpy(d, h.data(), bytes * blocks, cudaMemcpyHostToDevice));
      return 0;
    };
    int32_t *dSum = nullptr, *dGather = nullptr, *dRingIn = nullptr, *dRingOut = nullptr, *dA2aIn = nullptr,
            *dA2aOut = nullptr, *dSelfIn = nullptr, *dSelfOut = nullptr;
    for (int32_t** p : {&dSum, &dRingIn, &dRingOut, &dSelfIn, &dSelfOut})
      CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(p), bytes));
    for (int32_t** p : {&dGather, &dA2aIn, &dA2aOut})
      CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(p), bytes * size));
    if (fill(dSum, rank, 1) || fill(dRingIn, rank, 1) || fill(dA2aIn, rank, size) || fill(dSelfIn, rank, 1)) return 1;
    CUDA_OK(rank, cudaMemset(dRingOut, 0xff, bytes));
    CUDA_OK(rank, cudaMemset(dA2aOut, 0xff, bytes * size));
    CUDA_OK(rank, cudaMemset(dSelfOut, 0xff, bytes));
    if (fill(dGather + rank * count, rank, 1)) return 1;  // the in-place AllGather's own block
    CUDA_OK(rank, cudaDeviceSynchronize());
    cudaStream_t s = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::atomic<int> open{0};
    CUDA_OK(rank, cudaLaunchHostFunc(s, holdUntilOpen, &open));
    // Two groups, as NCCL programs write them: collectives with a ring of sends, then an all-to-all
    // of sends and receives (torch's all_to_all) with a send to self and an empty send.
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidAllReduce(dSum, dSum, count, braidInt32, braidSum, comm, s));
    CHECK_BRAID(rank, braidAllGather(dGather + rank * count, dGather, count, braidInt32, comm, s));
    CHECK_BRAID(rank, braidSend(dRingIn, count, braidInt32, next, comm, s));
    CHECK_BRAID(rank, braidRecv(dRingOut, count, braidInt32, prev, comm, s));
    CHECK_BRAID(rank, braidGroupEnd());
    CHECK_BRAID(rank, braidGroupStart());
    for (int p = 0; p < size; ++p) {
      CHECK_BRAID(rank, braidSend(dA2aIn + p * count, count, braidInt32, p, comm, s));
      CHECK_BRAID(rank, braidRecv(dA2aOut + p * count, count, braidInt32, p, comm, s));
    }
    CHECK_BRAID(rank, braidSend(dSelfIn, count, braidInt32, rank, comm, s));
    CHECK_BRAID(rank, braidRecv(dSelfOut, count, braidInt32, rank, comm, s));
    CHECK_BRAID(rank, braidSend(nullptr, 0, braidInt32, next, comm, s));
    CHECK_BRAID(rank, braidRecv(nullptr, 0, braidInt32, prev, comm, s));
    // Both groups returned while the stream was held before them: they are on the stream, not done.
    CHECK_BRAID(rank, braidGroupEnd());
    open.store(1, std::memory_order_release);
    CUDA_OK(rank, cudaStreamSynchronize(s));
    auto check = [&](const int32_t* d, int blocks, auto want, const char* what) -> int {
      CUDA_OK(rank, cudaMemcpy(h.data(), d, bytes * blocks, cudaMemcpyDeviceToHost));
      for (int b = 0; b < blocks; ++b)
        for (size_t i = 0; i < count; ++i)
          if (h[b * count + i] != want(b, i))
            return fail(rank, "%s: block %d element %zu is %d, expected %d", what, b, i, h[b * count + i], want(b, i));
      return 0;
    };
    if (check(
            dSum, 1,
            [&](int, size_t i) {
              int64_t t = 0;
              for (int r = 0; r < size; ++r) t += value(r, 0, i);
              return static_cast<int32_t>(t);  // wraps as int32 sums do
            },
            "AllReduce") ||
        check(
            dGather, size, [&](int b, size_t i) { return value(b, 0, i); }, "AllGather") ||
        check(
            dRingOut, 1, [&](int, size_t i) { return value(prev, 0, i); }, "ring receive") ||
        check(
            dA2aOut, size, [&](int b, size_t i) { return value(b, rank, i); }, "all-to-all") ||
        check(
            dSelfOut, 1, [&](int, size_t i) { return value(rank, 0, i); }, "send to self"))
      return 1;
    cudaStreamDestroy(s);
    for (int32_t* p : {dSum, dGather, dRingIn, dRingOut, dA2aIn, dA2aOut, dSelfIn, dSelfOut}) cudaFree(p);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("device calls refuse mixed buffers, host buffers with a stream, bad groups, tagged and graph calls, capture",
          "[gpu][mp]") {
  if (noGpu()) return;
  auto res = runComm(2, {}, [](braidComm_t comm, int rank, int size) {
    const size_t count = 64, bytes = count * sizeof(float);
    std::vector<float> host(count, 5.0f), host2(count, 6.0f);
    float* d = nullptr;
    CUDA_OK(rank, cudaMalloc(reinterpret_cast<void**>(&d), bytes));
    std::vector<float> ones(count, 1.0f);
    CUDA_OK(rank, cudaMemcpy(d, ones.data(), bytes, cudaMemcpyHostToDevice));
    cudaStream_t s = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto expect = [&](braidResult_t got, braidResult_t want, const char* what) {
      if (got == want) return 0;
      return fail(rank, "%s: got %s, expected %s (%s)", what, braidGetErrorString(got), braidGetErrorString(want),
                  braidGetLastError());
    };
    if (expect(braidAllReduce(d, host.data(), count, braidFloat32, braidSum, comm, s), braidInvalidArgument,
               "device send, host recv"))
      return 1;
    if (host[0] != 5.0f) return fail(rank, "a refused call wrote the host buffer");
    if (expect(braidAllReduce(host.data(), host2.data(), count, braidFloat32, braidSum, comm, s), braidInvalidUsage,
               "host buffers with a stream"))
      return 1;
    // Groups: device calls of one communicator on two streams, and sends on device buffers beside a
    // receive into host memory, are refused at braidGroupEnd with nothing posted.
    cudaStream_t s2 = nullptr;
    CUDA_OK(rank, cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, s));
    CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, s2));
    if (expect(braidGroupEnd(), braidInvalidUsage, "a group on two streams")) return 1;
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidSend(d, count, braidFloat32, 1 - rank, comm, s));
    CHECK_BRAID(rank, braidRecv(host.data(), count, braidFloat32, 1 - rank, comm, nullptr));
    if (expect(braidGroupEnd(), braidInvalidUsage, "a group's sends on device and receives on host")) return 1;
    if (host[0] != 5.0f) return fail(rank, "a refused group wrote the host buffer");
    CHECK_BRAID(rank, braidGroupStart());
    braidRequest_t req = nullptr;
    const braidResult_t nb = braidIAllReduce(d, d, count, braidFloat32, braidSum, comm, s, &req);
    CHECK_BRAID(rank, braidGroupEnd());
    if (expect(nb, braidInvalidUsage, "a nonblocking device call in a group")) return 1;
    cudaStreamDestroy(s2);
    if (expect(braidSendTagged(d, count, braidFloat32, 1 - rank, 3, comm, nullptr), braidInvalidArgument,
               "a tagged send of device memory"))
      return 1;
    // Neighbour allreduces take host buffers only (graph calls are not staged).
    braidGraph_t ring = nullptr;
    const int other = 1 - rank;
    const double weight = 0.5;
    CHECK_BRAID(rank, braidGraphCreate(comm, 1, &other, &weight, 0.5, &ring));
    if (expect(braidNeighborAllReduce(d, d, count, braidFloat32, ring, comm, nullptr), braidInvalidArgument,
               "a neighbour allreduce of device memory"))
      return 1;
    CHECK_BRAID(rank, braidGraphDestroy(ring));
    CUDA_OK(rank, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const braidResult_t captured = braidAllReduce(d, d, count, braidFloat32, braidSum, comm, s);
    cudaGraph_t graph = nullptr;
    CUDA_OK(rank, cudaStreamEndCapture(s, &graph));
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (expect(captured, braidInvalidUsage, "a call on a capturing stream")) return 1;
    // None of that reached the peers: the communicator still works, and the device buffer holds 1s.
    CHECK_BRAID(rank, braidAllReduce(d, d, count, braidFloat32, braidSum, comm, s));
    CUDA_OK(rank, cudaStreamSynchronize(s));
    CUDA_OK(rank, cudaMemcpy(ones.data(), d, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i)
      if (ones[i] != static_cast<float>(size)) return fail(rank, "element %zu is %g after the refusals", i, ones[i]);
    cudaStreamDestroy(s);
    cudaFree(d);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
