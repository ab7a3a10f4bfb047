// The device side of the cuda_ipc transport: a rank's share of a direct call on device memory, as
// kernels and copies on a stream of its own. What each collective does is at the top of
// src/cuda/ipc_coll.h.
//
// COMPILE-ONLY: built and linked with nvcc 13, never run on a GPU.
#include "src/cuda/ipc_coll.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "braid_build_config.h"
#include "src/base/dtype.h"
#include "src/cuda/runtime.h"

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "src/cuda/check.h"
#include "src/cuda/kernels.h"
#endif

namespace braid {

#if BRAID_HAVE_CUDA

namespace {

// The fold buffer, made once with the IpcColl: a fold of more goes through it piece by piece (on one
// stream, so a piece's copies out end before the next piece is folded into it). Made once because
// cudaFree, and maybe cudaMalloc, waits for the device's other streams, and the caller's stream
// waits for this very call: a buffer grown during a call could never be freed.
constexpr size_t kFoldBytes = 8 << 20;

class CudaIpcColl final : public IpcColl {
 public:
  explicit CudaIpcColl(int device) : device_(device) {}
  ~CudaIpcColl() override {
    DeviceScope on(device_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);  // nothing may still read a peer's memory
    (void)imports_.closeAll();
    if (fold_ != nullptr) (void)cudaFree(fold_);
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    (void)cudaGetLastError();
  }

  Status init() {
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    BRAID_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BRAID_CUDA_TRY(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    void* p = nullptr;
    BRAID_CUDA_TRY(cudaMalloc(&p, kFoldBytes));
    fold_ = static_cast<char*>(p);
    return okStatus();
  }

  Status open(const IpcHandle& h, void** ptr) override { return imports_.open(h, device_, ptr); }

  Status launch(const DeviceShare& s) override {
    DeviceScope on(device_);
    BRAID_TRY(on.status());
    BRAID_TRY(enqueue(s));
    return cudaStatus(cudaEventRecord(done_, stream_), "cudaEventRecord");
  }

  int poll(Status* err) override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) {
      *err = cudaStatus(e, "a direct call's kernels on device memory (cudaEventQuery)");
      return -1;
    }
    return 1;
  }

  size_t openCount() const override { return imports_.openCount(); }

 private:
  GpuLaunch on() const { return GpuLaunch{stream_, device_, 0}; }

  // Folds [off, off + len) of the n inputs (each from ins[p] + base) in rank order, and writes the
  // result to the ndst destinations.
  Status fold(const DeviceShare& s, size_t base, size_t off, size_t len, char* const* dsts, int ndst) {
    if (len == 0) return okStatus();
    const size_t count = len / dtypeSize(s.dtype);
    const braidRedOp_t op = s.op == braidAvg ? braidSum : s.op;
    auto in = [&](int p) { return s.ins[p] + base + off; };
    if (s.nranks == 2 && s.op != braidAvg && ndst <= 2)  // one pass: both inputs in, every output out
      return gpuReduce(s.dtype, op, dsts[0], ndst == 2 ? dsts[1] : nullptr, in(0), in(1), count, on());
    const size_t es = dtypeSize(s.dtype);
    for (size_t at = 0; at < len; at += kFoldBytes) {
      const size_t piece = std::min(kFoldBytes, len - at), n = piece / es;
      auto src = [&](int p) { return in(p) + at; };
      if (s.nranks == 1) {
        BRAID_TRY(gpuCopy(fold_, src(0), piece, on()));
      } else {
        BRAID_TRY(gpuReduce(s.dtype, op, fold_, nullptr, src(0), src(1), n, on()));
        for (int p = 2; p < s.nranks; ++p) BRAID_TRY(gpuReduce(s.dtype, op, fold_, nullptr, fold_, src(p), n, on()));
      }
      if (s.op == braidAvg) BRAID_TRY(gpuScaleDivide(s.dtype, fold_, n, s.nranks, on()));
      for (int d = 0; d < ndst; ++d) BRAID_TRY(gpuCopy(dsts[d] + at, fold_, piece, on()));
    }
    return okStatus();
  }

  Status enqueue(const DeviceShare& s) {
    const size_t b = s.bytes, r = static_cast<size_t>(s.rank);
    const int n = s.nranks;
    char* mine = s.outs[s.rank];
    switch (s.coll) {
      case Coll::kAllReduce: {
        char* dsts[kMaxLocal];
        if (n > kMaxLocal)
          return errorf(braidInvalidUsage, "%d ranks on one host: cuda_ipc takes at most %d", n, kMaxLocal);
        for (int p = 0; p < n; ++p) dsts[p] = s.outs[p] + s.lo;
        return fold(s, 0, s.lo, s.hi - s.lo, dsts, n);
      }
      case Coll::kReduce: {
        char* dst = s.outs[s.root] + s.lo;
        return fold(s, 0, s.lo, s.hi - s.lo, &dst, 1);
      }
      case Coll::kReduceScatter:
        return fold(s, r * b, 0, b, &mine, 1);
      case Coll::kAllGather:
        for (int q = 0; q < n; ++q) BRAID_TRY(gpuCopy(mine + q * b, s.ins[q], b, on()));
        return okStatus();
      case Coll::kGather:
        if (s.rank != s.root) return okStatus();
        for (int q = 0; q < n; ++q) BRAID_TRY(gpuCopy(mine + q * b, s.ins[q], b, on()));
        return okStatus();
      case Coll::kAllToAll:
        for (int q = 0; q < n; ++q) BRAID_TRY(gpuCopy(mine + q * b, s.ins[q] + r * b, b, on()));
        return okStatus();
      case Coll::kBroadcast:
        return gpuCopy(mine, s.ins[s.root], b, on());
      case Coll::kScatter:
        return gpuCopy(mine, s.ins[s.root] + r * b, b, on());
      default:
        return errorf(braidInternalError, "%s has no direct form on device memory", collName(s.coll));
    }
  }

  // Ranks of one host a share may write to at once (the outputs of an AllReduce).
  static constexpr int kMaxLocal = 256;

  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  char* fold_ = nullptr;  // kFoldBytes
  IpcImports imports_;
};

}  // namespace

Status makeIpcColl(int device, std::unique_ptr<IpcColl>* out) {
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  auto c = std::make_unique<CudaIpcColl>(device);
  BRAID_TRY(c->init().withContext("cuda_ipc on CUDA device " + std::to_string(device)));
  *out = std::move(c);
  return okStatus();
}

void ipcBusId(int device, char out[32]) {
  out[0] = '\0';
  if (device < 0 || gpuDeviceCount() == 0) return;
  if (cudaDeviceGetPCIBusId(out, 32, device) != cudaSuccess) {
    (void)cudaGetLastError();
    out[0] = '\0';
  }
}

Status ipcReachesAll(int device, const std::vector<std::string>& busIds, int rank, bool* ok, std::string* why) {
  *ok = false;
  for (int p = 0; p < static_cast<int>(busIds.size()); ++p) {
    if (p == rank) continue;
    if (busIds[p].empty()) {
      *why = "rank " + std::to_string(p) + " has no CUDA device";
      return okStatus();
    }
    IpcHandle h{};
    snprintf(h.busId, sizeof(h.busId), "%s", busIds[p].c_str());
    int peerDev = -1;
    Status found = ipcLocalDevice(h, &peerDev);
    if (!found.ok()) {
      *why = "rank " + std::to_string(p) + ": " + found.message();
      return okStatus();
    }
    bool reach = false;
    BRAID_TRY(ipcReachable(device, peerDev, &reach));
    if (!reach) {
      *why = "CUDA device " + std::to_string(device) + " cannot reach rank " + std::to_string(p) + "'s GPU " +
             busIds[p] + " (cudaDeviceCanAccessPeer)";
      return okStatus();
    }
  }
  *ok = true;
  return okStatus();
}

#else  // !BRAID_HAVE_CUDA

Status makeIpcColl(int, std::unique_ptr<IpcColl>*) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }

void ipcBusId(int, char out[32]) { out[0] = '\0'; }

Status ipcReachesAll(int, const std::vector<std::string>&, int, bool* ok, std::string* why) {
  *ok = false;
  *why = gpuAbsentReason();
  return okStatus();
}

#endif

}  // namespace braid
