#include "src/cuda/cuda_compute.h"

#include <cuda_runtime_api.h>

#include "src/base/log.h"
#include "src/cuda/check.h"
#include "src/cuda/runtime.h"

namespace braid {

namespace {

// Steps in flight on one stream before issue() waits: a plan keeps a few chunks of local work
// pending at a time, far below this.
constexpr uint64_t kEvents = 64;

// The reduction behind a CPU kernel pointer: LocalWork carries the executor's resolved CPU kernel
// (braidAvg already as braidSum), and the device needs the operation it stands for. Four compares.
bool opOfKernel(braidDataType_t dt, ReduceKernel kernel, braidRedOp_t* op) {
  for (braidRedOp_t o : {braidSum, braidProd, braidMin, braidMax}) {
    if (reduceKernel(dt, o) == kernel) {
      *op = o;
      return true;
    }
  }
  return false;
}

class CudaCompute final : public Compute {
 public:
  CudaCompute(int device, cudaStream_t stream, bool ownsStream) : device_(device), stream_(stream), owns_(ownsStream) {}

  ~CudaCompute() override {
    DeviceScope on(device_);
    // Pending work may still read or write the buffers: let it end before the events go.
    (void)cudaStreamSynchronize(stream_);
    for (cudaEvent_t& e : events_)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (owns_) (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  Status init() {
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    if (stream_ == nullptr) {
      BRAID_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owns_ = true;
    }
    for (cudaEvent_t& e : events_) BRAID_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return okStatus();
  }

  Status issue(const LocalWork& w, uint64_t* ticket) override {
    const Step& s = *w.step;
    *ticket = 0;
    if (s.kind == StepKind::kJoin) return okStatus();  // nothing to compute
    // Progress may run on the caller's thread (a wait drives it), whose device stays its own.
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    BRAID_TRY(makeRoom());
    BRAID_TRY(enqueue(w));
    const uint64_t t = issued_ + 1;
    BRAID_CUDA_TRY(cudaEventRecord(events_[t % kEvents], stream_));
    issued_ = t;
    *ticket = t;
    return okStatus();
  }

  bool done(uint64_t ticket) override {
    if (ticket <= completed_) return true;
    const cudaError_t err = cudaEventQuery(events_[ticket % kEvents]);
    if (err == cudaSuccess) {
      completed_ = ticket;  // stream order: every earlier ticket is done too
      return true;
    }
    if (err != cudaErrorNotReady && !failed_) {
      failed_ = true;
      BRAID_WARN(kLogColl, "device %d: a local step failed: %s", device_,
                 cudaStatus(err, "cudaEventQuery").message().c_str());
    }
    (void)cudaGetLastError();
    return false;
  }

  const char* name() const override { return "cuda"; }

 private:
  // Waits for the oldest pending step when the next ticket's event is still in use by it.
  Status makeRoom() {
    if (issued_ - completed_ < kEvents) return okStatus();
    const uint64_t oldest = issued_ + 1 - kEvents;
    BRAID_CUDA_TRY(cudaEventSynchronize(events_[oldest % kEvents]));
    completed_ = oldest;
    return okStatus();
  }

  Status enqueue(const LocalWork& w) {
    const Step& s = *w.step;
    const size_t es = dtypeSize(w.dtype);
    const GpuLaunch l{reinterpret_cast<GpuStream>(stream_), device_, 0};
    // Closed, as the CPU's: every kind is named; transfers and control steps never reach a Compute.
    switch (s.kind) {
      case StepKind::kCopy:
        return gpuCopy(w.dst, w.src, s.bytes, l);
      case StepKind::kScale:
        return gpuScaleDivide(w.dtype, w.dst, s.bytes / es, w.nranks, l);
      case StepKind::kScaleBy:
        return gpuScaleBy(w.dtype, w.dst, w.src, s.bytes / es, s.weight, l);
      case StepKind::kAxpy:
        return gpuAxpy(w.dtype, w.dst, w.src, s.bytes / es, s.weight, l);
      case StepKind::kReduce: {
        braidRedOp_t op = braidSum;
        if (w.kernel == nullptr || !opOfKernel(w.dtype, w.kernel, &op))
          return errorf(braidInternalError, "a reduce step in a plan without a reduction");
        return gpuReduce(w.dtype, op, w.dst, nullptr, w.src, w.incoming, s.bytes / es, l);
      }
      case StepKind::kJoin:
        return okStatus();
      case StepKind::kSend:
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
      case StepKind::kCheck:
        break;
    }
    return errorf(braidInternalError, "step kind %d is not a local computation", static_cast<int>(s.kind));
  }

  int device_;
  cudaStream_t stream_;
  bool owns_;
  cudaEvent_t events_[kEvents] = {};
  uint64_t issued_ = 0;     // the last ticket handed out (tickets start at 1; 0 means finished)
  uint64_t completed_ = 0;  // every ticket up to this one is known to be done
  bool failed_ = false;
};

}  // namespace

Status makeCudaCompute(int device, GpuStream stream, std::unique_ptr<Compute>* out) {
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (device < 0 || device >= gpuDeviceCount())
    return errorf(braidInvalidArgument, "CUDA device %d does not exist (this process sees %d)", device,
                  gpuDeviceCount());
  auto c = std::make_unique<CudaCompute>(device, reinterpret_cast<cudaStream_t>(stream), false);
  BRAID_TRY(c->init());
  *out = std::move(c);
  return okStatus();
}

}  // namespace braid
