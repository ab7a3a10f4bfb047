// Host staging of device-buffer calls: the slot pool and its stream operations. The design, and why
// a flag with cuStreamWaitValue32, is at the top of src/cuda/staging.h.
//
// COMPILE-ONLY: built and linked with nvcc 13, never run on a GPU.
#include "src/cuda/staging.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "braid_build_config.h"
#include "src/base/clock.h"
#include "src/base/log.h"

#if BRAID_HAVE_CUDA
#include <cuda.h>  // driver types only: cuStreamWaitValue32 is reached through the runtime's entry points
#include <cuda_runtime_api.h>

#include "src/cuda/check.h"
#endif

namespace braid {

#if BRAID_HAVE_CUDA

namespace {

// Calls in flight per communicator (each holds a slot until its copy back completed). Far above what
// a training step keeps in flight (a few gradient buckets); a 33rd call waits for the oldest.
constexpr size_t kMaxSlots = kMaxStagedOps;
// One flag per 64-byte line, so that the executor's store to one does not share a line the GPU polls
// for another.
constexpr size_t kFlagStride = 64 / sizeof(uint32_t);
// A slot's first buffer, and the rounding of later ones: small calls never reallocate.
constexpr size_t kMinStagingBytes = 64 << 10;
// The receive range starts on this boundary when the two ranges are staged apart: every dtype's
// alignment, and the 16-byte alignment the CPU kernels' vector loads like.
constexpr size_t kStagingAlign = 256;
// How long destroy waits for a slot's copy back before it leaves the slot's buffer allocated rather
// than free memory a copy may still write.
constexpr double kDrainAtDestroySec = 5.0;

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32 through the runtime (src/cuda/check.h: driverEntryPoint); null when the
// driver lacks it.
WaitValue32 waitValueFn() {
  static const WaitValue32 fn = reinterpret_cast<WaitValue32>(driverEntryPoint("cuStreamWaitValue32"));
  return fn;
}

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

Status checkStream(int device, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(stream, &capture);
  if (e == cudaErrorStreamCaptureImplicit || (e == cudaSuccess && capture != cudaStreamCaptureStatusNone)) {
    (void)cudaGetLastError();
    return errorf(braidInvalidUsage,
                  "the stream is being captured into a CUDA graph: braid's device calls cannot be captured (each "
                  "launch needs the host executor and a fresh flag value)");
  }
  if (e != cudaSuccess) return cudaStatus(e, "cudaStreamIsCapturing (is the stream a live cudaStream_t?)");
  int dev = -1;
  BRAID_CUDA_TRY(cudaStreamGetDevice(stream, &dev));
  if (dev != device)
    return errorf(braidInvalidArgument, "the stream belongs to CUDA device %d, the communicator to device %d", dev,
                  device);
  return okStatus();
}

class Slot final : public OpGate {
 public:
  Slot(uint32_t* flag, CUdeviceptr flagDev) : flag_(flag), flagDev_(flagDev) {}
  ~Slot() override {
    if (in_ != nullptr) (void)cudaEventDestroy(in_);
    if (out_ != nullptr) (void)cudaEventDestroy(out_);
    if (buf_ != nullptr && !lost_) (void)cudaFreeHost(buf_);
    for (char* old : bufRetired_) (void)cudaFreeHost(old);
    if (dev_ != nullptr && !lost_) (void)cudaFree(dev_);
    for (char* old : devRetired_) (void)cudaFree(old);
    (void)cudaGetLastError();
  }

  Status init() {
    BRAID_CUDA_TRY(cudaEventCreateWithFlags(&in_, cudaEventDisableTiming));
    BRAID_CUDA_TRY(cudaEventCreateWithFlags(&out_, cudaEventDisableTiming));
    return okStatus();
  }

  // Free for a new call: the engine retired the last one and its copy back completed (an event never
  // recorded counts as completed). Pool lock held.
  bool idle() {
    if (lost_ || !retired_.load(std::memory_order_acquire)) return false;
    const cudaError_t e = cudaEventQuery(out_);
    if (e == cudaErrorNotReady) return false;
    (void)cudaGetLastError();
    return true;
  }

  // Room for `bytes`; only an idle slot grows (no copy is in flight on its buffer).
  Status reserve(size_t bytes) {
    if (buf_ != nullptr && cap_ >= bytes) return okStatus();
    const size_t cap = alignUp(std::max({bytes, kMinStagingBytes, cap_ * 2}), kMinStagingBytes);
    // The outgrown buffer is freed with the slot, not now: cudaFreeHost may wait for the device's
    // streams, and one of them may be waiting for a call of a communicator this thread also drives
    // (ranks of one process, ncclCommInitAll's).
    if (buf_ != nullptr) bufRetired_.push_back(buf_);
    buf_ = nullptr;
    cap_ = 0;
    void* p = nullptr;
    BRAID_CUDA_TRY(cudaHostAlloc(&p, cap, cudaHostAllocPortable));
    buf_ = static_cast<char*>(p);
    cap_ = cap;
    return okStatus();
  }

  // A device buffer of `bytes` for the copies of a direct call, exported (devHandle) for the peers;
  // like reserve(), only an idle slot grows. The old buffer is freed with the slot, not now: the
  // peers keep it open (src/cuda/ipc_coll.h), and cudaFree waits for the device's other streams,
  // which may be waiting for this communicator's calls in flight.
  Status reserveDevice(size_t bytes) {
    if (bytes == 0 || (dev_ != nullptr && devCap_ >= bytes)) return okStatus();
    const size_t cap = alignUp(std::max({bytes, kMinStagingBytes, devCap_ * 2}), kMinStagingBytes);
    if (dev_ != nullptr) devRetired_.push_back(dev_);
    dev_ = nullptr;
    devCap_ = 0;
    void* p = nullptr;
    BRAID_CUDA_TRY(cudaMalloc(&p, cap));
    const Status exported = ipcExport(p, cap, &devHandle_);
    if (!exported.ok()) {
      (void)cudaFree(p);
      return exported.withContext("the device buffer of a cuda_ipc call");
    }
    dev_ = static_cast<char*>(p);
    devCap_ = cap;
    return okStatus();
  }

  // A new call takes the slot: the value its stream waits for.
  uint32_t begin() {
    retired_.store(false, std::memory_order_relaxed);
    return ++target_;
  }

  // A use that never reached the engine: lets its stream go on and frees the slot.
  void abandonUse() {
    release(false);
    retire();
  }

  // The call's stream work could not all be enqueued: whatever was waits on the flag no more, and
  // the slot is never reused (a copy may still be in flight on its buffer, which stays allocated).
  void lose() {
    lost_ = true;
    abandonUse();
  }

  bool ready(Status* failure) override {
    const cudaError_t e = cudaEventQuery(in_);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) *failure = cudaStatus(e, "the copy of a device call's input to the host (cudaEventQuery)");
    return true;
  }

  void release(bool ok) override {
    (void)ok;  // the stream goes on either way; the caller hears of the failure from the engine
    // Release: the staged result (plain stores of the host collective) is in memory before the
    // stream, which then copies it back, can see the flag.
    __atomic_store_n(flag_, target_, __ATOMIC_RELEASE);
  }

  bool drained() override {
    const cudaError_t e = cudaEventQuery(out_);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) {
      // A faulted stream: the fault is the user's to see on it (sticky), and waiting cannot help.
      const Status s = cudaStatus(e, "the copy of a device call's result back (cudaEventQuery)");
      BRAID_WARN(kLogColl, "%s", s.message().c_str());
    }
    return true;
  }

  void retire() override { retired_.store(true, std::memory_order_release); }

  // The fallback wait (cudaLaunchHostFunc): CUDA's callback thread spins until the flag is written.
  static void waitOnHost(void* arg) {
    auto* s = static_cast<Slot*>(arg);
    while (static_cast<int32_t>(__atomic_load_n(s->flag_, __ATOMIC_ACQUIRE) - s->target_) < 0) sched_yield();
  }

  // Waits (bounded) for the last copy back before destroy frees the buffer; keeps the buffer when
  // it does not end.
  void drainForDestroy() {
    if (lost_) return;
    const Deadline until = Deadline::afterSeconds(kDrainAtDestroySec);
    while (cudaEventQuery(out_) == cudaErrorNotReady) {
      if (until.expired()) {
        BRAID_WARN(kLogColl, "destroy: a device call's copy back did not end in %.0f s; its staging stays allocated",
                   kDrainAtDestroySec);
        lost_ = true;
        return;
      }
      sched_yield();
    }
    (void)cudaGetLastError();
  }

  bool lost() const { return lost_; }
  char* buf() const { return buf_; }
  char* dev() const { return dev_; }
  const IpcHandle& devHandle() const { return devHandle_; }
  IpcHandle* ipc() { return ipc_; }
  CUdeviceptr flagDev() const { return flagDev_; }
  cudaEvent_t in() const { return in_; }
  cudaEvent_t out() const { return out_; }

 private:
  uint32_t* flag_;
  CUdeviceptr flagDev_;
  uint32_t target_ = 0;              // this use's value; the flag reaches it when the call is over
  std::atomic<bool> retired_{true};  // the engine is done with the current use (or there is none)
  bool lost_ = false;
  char* buf_ = nullptr;
  std::vector<char*> bufRetired_;  // outgrown ones, freed with the slot
  size_t cap_ = 0;
  char* dev_ = nullptr;            // direct calls' copies (reserveDevice)
  std::vector<char*> devRetired_;  // outgrown ones, freed with the slot
  size_t devCap_ = 0;
  IpcHandle devHandle_{};
  IpcHandle ipc_[2] = {};  // the current direct call's send and recv handles
  cudaEvent_t in_ = nullptr;
  cudaEvent_t out_ = nullptr;
};

class Pool final : public DeviceStaging {
 public:
  Pool(int device, double timeoutSec) : device_(device), timeoutSec_(timeoutSec) {}

  ~Pool() override {
    DeviceScope on(device_);
    size_t lost = 0;
    for (auto& s : slots_) {
      s->drainForDestroy();
      if (s->lost()) {
        // Its stream may still reach the flag wait (a kernel queued before the call outlasted the
        // drain) or CUDA's callback thread still read the Slot (waitOnHost): neither may be freed.
        (void)s.release();
        ++lost;
      }
    }
    slots_.clear();
    if (lost > 0) {
      BRAID_WARN(kLogColl,
                 "destroy: %zu device calls' streams may still wait on their flags: their staging "
                 "and the flags stay allocated",
                 lost);
    } else if (flags_ != nullptr) {
      (void)cudaFreeHost(flags_);
    }
    (void)cudaGetLastError();
  }

  Status init() {
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    void* p = nullptr;
    // Mapped: the GPU reads the flags where they are (the stream's wait polls them over the bus).
    BRAID_CUDA_TRY(
        cudaHostAlloc(&p, kMaxSlots * kFlagStride * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    flags_ = static_cast<uint32_t*>(p);
    for (size_t i = 0; i < kMaxSlots * kFlagStride; ++i) flags_[i] = 0;
    void* d = nullptr;
    BRAID_CUDA_TRY(cudaHostGetDevicePointer(&d, p, 0));
    flagsDev_ = reinterpret_cast<CUdeviceptr>(d);
    waitValue_ = waitValueFn();
    BRAID_INFO(kLogInit, "CUDA device %d: device calls wait on their stream with %s", device_,
               waitValue_ != nullptr ? "cuStreamWaitValue32" : "cudaLaunchHostFunc (no stream memory operations)");
    return okStatus();
  }

  Status stageBatch(StageOp* ops, size_t nops, CUstream_st* stream) override {
    if (nops > kMaxStagedOps)
      return errorf(braidInvalidUsage, "%zu device operations in one group on one communicator: at most %zu", nops,
                    kMaxStagedOps);
    std::lock_guard<std::mutex> hold(mu_);
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    if (ops[0].ncalls > 0 && ops[0].calls[0].direct) {
      if (nops != 1 || ops[0].ncalls != 1)
        return errorf(braidInternalError, "a cuda_ipc call is staged alone (%zu operations, %zu calls)", nops,
                      ops[0].ncalls);
      return stageDirect(ops[0], stream);
    }
    // Each call's staged addresses, and a slot per operation, before anything is enqueued.
    Slot* slots[kMaxStagedOps] = {};
    uint32_t targets[kMaxStagedOps] = {};
    for (size_t k = 0; k < nops; ++k) {
      const Status taken = take(layOut(ops[k]), false, &slots[k]);
      if (!taken.ok()) {
        for (size_t j = 0; j < k; ++j) slots[j]->abandonUse();  // nothing was enqueued: free again
        return taken;
      }
      targets[k] = slots[k]->begin();  // no longer idle: the next take() cannot hand it out again
      for (size_t i = 0; i < ops[k].ncalls; ++i) {
        StagedCall& c = ops[k].out[i];
        c.send = slots[k]->buf() + reinterpret_cast<uintptr_t>(c.send);
        c.recv = slots[k]->buf() + reinterpret_cast<uintptr_t>(c.recv);
        c.gate = slots[k];
      }
    }
    Status st;
    bool enqueued = false;
    for (size_t k = 0; k < nops && st.ok(); ++k) {
      for (size_t i = 0; i < ops[k].ncalls && st.ok(); ++i) {
        const CallBuffers& r = ops[k].calls[i];
        if (r.sendBytes == 0) continue;
        st = cudaStatus(
            cudaMemcpyAsync(const_cast<void*>(ops[k].out[i].send), r.send, r.sendBytes, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync of the input to the host");
        enqueued = enqueued || st.ok();
      }
      if (st.ok()) st = cudaStatus(cudaEventRecord(slots[k]->in(), stream), "cudaEventRecord");
      enqueued = enqueued || st.ok();
    }
    for (size_t k = 0; k < nops && st.ok(); ++k) {
      st = enqueueWait(stream, slots[k], targets[k]);
      for (size_t i = 0; i < ops[k].ncalls && st.ok(); ++i) {
        const CallBuffers& r = ops[k].calls[i];
        if (r.recvBytes == 0) continue;
        st = cudaStatus(cudaMemcpyAsync(r.recv, ops[k].out[i].recv, r.recvBytes, cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync of the result to the device");
      }
      if (st.ok()) st = cudaStatus(cudaEventRecord(slots[k]->out(), stream), "cudaEventRecord");
    }
    if (st.ok()) return okStatus();
    // Something may be on the stream: whatever waits on a flag waits no more, and a slot a copy may
    // still use is never reused (Slot::lose).
    for (size_t k = 0; k < nops; ++k) {
      if (enqueued)
        slots[k]->lose();
      else
        slots[k]->abandonUse();
    }
    return st;
  }

  void abandon(OpGate* gate) override { static_cast<Slot*>(gate)->abandonUse(); }

 private:
  // Places an operation's calls in one staging buffer: each call from a kStagingAlign boundary,
  // an in-place call as one range (its layout kept), else its input and then its output. Writes
  // the offsets into op.out[i].send/recv (made addresses once the slot is known); returns the bytes.
  static size_t layOut(const StageOp& op) {
    size_t at = 0;
    for (size_t i = 0; i < op.ncalls; ++i) {
      const CallBuffers& r = op.calls[i];
      const char* s = static_cast<const char*>(r.send);
      const char* d = static_cast<const char*>(r.recv);
      size_t sendOff = at, recvOff = 0;
      if (r.inPlace) {
        const char* lo = std::min<const char*>(s, d);
        const char* hi = std::max<const char*>(s + r.sendBytes, d + r.recvBytes);
        sendOff = at + static_cast<size_t>(s - lo);
        recvOff = at + static_cast<size_t>(d - lo);
        at += static_cast<size_t>(hi - lo);
      } else {
        recvOff = alignUp(at + r.sendBytes, kStagingAlign);
        at = recvOff + r.recvBytes;
      }
      op.out[i].send = reinterpret_cast<const void*>(static_cast<uintptr_t>(sendOff));
      op.out[i].recv = reinterpret_cast<void*>(static_cast<uintptr_t>(recvOff));
      at = alignUp(at, kStagingAlign);
    }
    return at;
  }

  // A direct call (cuda_ipc): its buffers exported, or copied into the slot's device buffer where
  // they cannot be; around the wait, the events that tell the executor when to start and when
  // the caller's stream went on. Pool lock held, the device current.
  Status stageDirect(const StageOp& op, cudaStream_t stream) {
    const CallBuffers& r = op.calls[0];
    StagedCall& c = op.out[0];
    IpcHandle h[2] = {};
    Status exported;
    if (!r.copyApart && r.sendBytes > 0) exported = ipcExport(r.send, r.sendBytes, &h[0]);
    if (!r.copyApart && exported.ok() && r.recvBytes > 0) exported = ipcExport(r.recv, r.recvBytes, &h[1]);
    const bool copies = r.copyApart || !exported.ok();
    if (!r.copyApart && copies && !toldCopies_) {
      BRAID_INFO(kLogColl,
                 "a device call's buffers cannot be exported (%s): cuda_ipc copies them through a device "
                 "buffer of its own (said once)",
                 exported.message().c_str());
      toldCopies_ = true;
    }
    Slot* slot = nullptr;
    BRAID_TRY(take(copies ? layOut(op) : 0, true, &slot));
    const uint32_t target = slot->begin();
    if (copies) {  // layOut wrote the offsets
      const size_t sendOff = reinterpret_cast<uintptr_t>(c.send), recvOff = reinterpret_cast<uintptr_t>(c.recv);
      c.send = slot->dev() + sendOff;
      c.recv = slot->dev() + recvOff;
      h[0] = h[1] = slot->devHandle();
      h[0].offset += sendOff;
      h[0].bytes = r.sendBytes;
      h[1].offset += recvOff;
      h[1].bytes = r.recvBytes;
    } else {
      c.send = r.send;
      c.recv = r.recv;
    }
    IpcHandle* held = slot->ipc();
    held[0] = h[0];
    held[1] = h[1];
    c.ipc = held;
    c.gate = slot;
    Status st;
    bool enqueued = false;
    if (copies && r.sendBytes > 0) {
      st = cudaStatus(cudaMemcpyAsync(const_cast<void*>(c.send), r.send, r.sendBytes, cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync of the input to cuda_ipc's device buffer");
      enqueued = st.ok();
    }
    if (st.ok()) st = cudaStatus(cudaEventRecord(slot->in(), stream), "cudaEventRecord");
    enqueued = enqueued || st.ok();
    if (st.ok()) st = enqueueWait(stream, slot, target);
    if (st.ok() && copies && r.recvBytes > 0)
      st = cudaStatus(cudaMemcpyAsync(r.recv, c.recv, r.recvBytes, cudaMemcpyDeviceToDevice, stream),
                      "cudaMemcpyAsync of the result from cuda_ipc's device buffer");
    if (st.ok()) st = cudaStatus(cudaEventRecord(slot->out(), stream), "cudaEventRecord");
    if (st.ok()) return okStatus();
    if (enqueued)
      slot->lose();
    else
      slot->abandonUse();
    return st;
  }

  Status enqueueWait(cudaStream_t stream, Slot* slot, uint32_t target) {
    if (waitValue_ != nullptr) {
      const CUresult r =
          waitValue_(reinterpret_cast<CUstream>(stream), slot->flagDev(), target, CU_STREAM_WAIT_VALUE_GEQ);
      if (r == CUDA_SUCCESS) return okStatus();
      if (r != CUDA_ERROR_NOT_SUPPORTED)
        return errorf(braidSystemError, "cuStreamWaitValue32 on CUDA device %d failed (CUresult %d)", device_,
                      static_cast<int>(r));
      waitValue_ = nullptr;
      BRAID_WARN(kLogColl,
                 "CUDA device %d has no stream memory operations: device calls now wait on their stream through "
                 "cudaLaunchHostFunc (slower; see src/cuda/staging.h)",
                 device_);
    }
    return cudaStatus(cudaLaunchHostFunc(stream, &Slot::waitOnHost, slot), "cudaLaunchHostFunc");
  }

  // An idle slot with room for `bytes` (pinned host memory; device memory for a direct call), round
  // robin from the last one taken; a new one while fewer than kMaxSlots exist, else waits for one to
  // become idle. Pool lock held.
  Status take(size_t bytes, bool device, Slot** out) {
    auto room = [&](Slot* s) { return device ? s->reserveDevice(bytes) : s->reserve(bytes); };
    const Deadline until = Deadline::afterSeconds(timeoutSec_);
    for (;;) {
      const size_t n = slots_.size();
      for (size_t i = 0; i < n; ++i) {
        Slot* s = slots_[(next_ + i) % n].get();
        if (!s->idle()) continue;
        BRAID_TRY(room(s));
        next_ = (next_ + i + 1) % n;
        *out = s;
        return okStatus();
      }
      if (n < kMaxSlots) {
        auto s = std::make_unique<Slot>(flags_ + n * kFlagStride, flagsDev_ + n * kFlagStride * sizeof(uint32_t));
        BRAID_TRY(s->init());
        BRAID_TRY(room(s.get()));
        slots_.push_back(std::move(s));
        *out = slots_.back().get();
        return okStatus();
      }
      if (until.expired())
        return errorf(braidTimeout,
                      "%zu device calls of this communicator are in flight and none ended within BRAID_TIMEOUT (%.0f "
                      "s): are their streams waiting for something that comes later?",
                      kMaxSlots, timeoutSec_);
      sched_yield();
    }
  }

  const int device_;
  const double timeoutSec_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t next_ = 0;
  uint32_t* flags_ = nullptr;
  CUdeviceptr flagsDev_ = 0;
  WaitValue32 waitValue_ = nullptr;
  bool toldCopies_ = false;
};

}  // namespace

Status checkStagingStream(int device, CUstream_st* stream) {
  DeviceScope on(device);  // the legacy default stream is the current device's
  BRAID_TRY(on.status());
  return checkStream(device, stream);
}

Status makeDeviceStaging(int device, double timeoutSec, std::unique_ptr<DeviceStaging>* out) {
  auto pool = std::make_unique<Pool>(device, timeoutSec);
  BRAID_TRY(pool->init().withContext("device staging on CUDA device " + std::to_string(device)));
  *out = std::move(pool);
  return okStatus();
}

#else  // !BRAID_HAVE_CUDA

Status checkStagingStream(int, CUstream_st*) {
  return errorf(braidInvalidUsage, "device buffers: CUDA is not compiled in (meson option cuda)");
}

Status makeDeviceStaging(int, double, std::unique_ptr<DeviceStaging>*) {
  return errorf(braidInvalidUsage, "device buffers: CUDA is not compiled in (meson option cuda)");
}

#endif

}  // namespace braid
