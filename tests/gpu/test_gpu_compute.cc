// CudaCompute (src/cuda/cuda_compute.h): local steps as tickets on a stream. issue() returns before
// the work is done, done() reports it, tickets retire in stream order, the event ring wraps, and the
// results are the CPU's. Skipped where no GPU is present.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <vector>

#include "src/compute.h"
#include "src/cuda/cuda_compute.h"
#include "tests/gpu/gpu_test.h"

namespace braid {
namespace {

using namespace gputest;

// Polls until done; false after 10 s (a ticket that never completes is a failure, not a hang).
bool waitTicket(Compute& c, uint64_t ticket) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!c.done(ticket))
    if (std::chrono::steady_clock::now() > until) return false;
  return true;
}

TEST_CASE("cuda compute: copy, reduce and scale steps complete through tickets", "[gpu][compute]") {
  if (noGpu()) return;
  std::unique_ptr<Compute> c;
  REQUIRE(makeCudaCompute(0, nullptr, &c).ok());
  CHECK(std::string(c->name()) == "cuda");
  const size_t n = (1u << 20) + 3;
  const size_t bytes = n * sizeof(float);
  DeviceBuffer dA(bytes), dB(bytes), dOut(bytes);
  std::vector<char> a(bytes), b(bytes), want(bytes), got(bytes);
  randomBytes(&a, 7);
  randomBytes(&b, 8);
  REQUIRE(cudaMemcpy(dA.get(), a.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dB.get(), b.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);

  Step copy;
  copy.kind = StepKind::kCopy;
  copy.bytes = bytes;
  LocalWork w;
  w.step = &copy;
  w.dst = dOut.get();
  w.src = dA.get();
  w.dtype = braidFloat32;
  uint64_t t1 = 0;
  REQUIRE(c->issue(w, &t1).ok());
  CHECK(t1 != 0);  // on a stream: never finished inside issue()

  // dOut = max(dOut, dB), then /= 4: the same stream orders them after the copy.
  Step red;
  red.kind = StepKind::kReduce;
  red.bytes = bytes;
  w.step = &red;
  w.src = dOut.get();
  w.incoming = dB.get();
  w.kernel = reduceKernel(braidFloat32, braidMax);
  uint64_t t2 = 0;
  REQUIRE(c->issue(w, &t2).ok());
  Step scale;
  scale.kind = StepKind::kScale;
  scale.bytes = bytes;
  w.step = &scale;
  w.nranks = 4;
  uint64_t t3 = 0;
  REQUIRE(c->issue(w, &t3).ok());
  CHECK(t1 < t2);
  CHECK(t2 < t3);
  REQUIRE(waitTicket(*c, t3));
  // A later ticket done means the earlier ones are.
  CHECK(c->done(t1));
  CHECK(c->done(t2));
  REQUIRE(cudaMemcpy(got.data(), dOut.get(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  reduce(braidFloat32, braidMax, want.data(), a.data(), b.data(), n);
  scaleDivide(braidFloat32, want.data(), n, 4);
  CHECK(firstDifference(braidFloat32, got, want, n) == -1);

  // A join computes nothing and is done at once; a transfer is not a local step.
  Step join;
  join.kind = StepKind::kJoin;
  w.step = &join;
  uint64_t t = 99;
  REQUIRE(c->issue(w, &t).ok());
  CHECK(t == 0);
  Step send;
  send.kind = StepKind::kSend;
  w.step = &send;
  CHECK(c->issue(w, &t).code() == braidInternalError);
  // A reduce step without a reduction is refused.
  w.step = &red;
  w.kernel = nullptr;
  CHECK(c->issue(w, &t).code() == braidInternalError);
}

TEST_CASE("cuda compute: more steps than events in flight, and weights on a user stream", "[gpu][compute]") {
  if (noGpu()) return;
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  {
    std::unique_ptr<Compute> c;
    REQUIRE(makeCudaCompute(0, reinterpret_cast<GpuStream>(stream), &c).ok());
    const size_t n = 4099;
    const size_t bytes = n * sizeof(double);
    DeviceBuffer dDst(bytes), dSrc(bytes);
    std::vector<char> src(bytes), want(bytes, 0), got(bytes);
    randomBytes(&src, 9);
    REQUIRE(cudaMemcpy(dSrc.get(), src.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemset(dDst.get(), 0, bytes) == cudaSuccess);
    Step axpyStep;
    axpyStep.kind = StepKind::kAxpy;
    axpyStep.bytes = bytes;
    axpyStep.weight = 0.125;
    LocalWork w;
    w.step = &axpyStep;
    w.dst = dDst.get();
    w.src = dSrc.get();
    w.dtype = braidFloat64;
    // 300 steps without polling: the ring of events wraps several times.
    std::vector<uint64_t> tickets;
    for (int i = 0; i < 300; ++i) {
      uint64_t t = 0;
      REQUIRE(c->issue(w, &t).ok());
      tickets.push_back(t);
      axpy(braidFloat64, want.data(), src.data(), n, 0.125);
    }
    REQUIRE(waitTicket(*c, tickets.back()));
    for (uint64_t t : tickets) CHECK(c->done(t));
    REQUIRE(cudaMemcpy(got.data(), dDst.get(), bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(firstDifference(braidFloat64, got, want, n) == -1);
  }
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("cuda compute: a device that does not exist is refused", "[gpu][compute]") {
  std::unique_ptr<Compute> c;
  Status s = makeCudaCompute(gpuDeviceCount(), nullptr, &c);
  INFO(s.message());
  CHECK_FALSE(s.ok());
  CHECK(c == nullptr);
}

}  // namespace
}  // namespace braid
