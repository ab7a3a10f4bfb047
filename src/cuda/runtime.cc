#include "src/cuda/runtime.h"

#include <atomic>
#include <string>

#include "braid_build_config.h"
#include "src/base/config.h"

#if BRAID_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "src/cuda/check.h"
#endif

namespace braid {

#if BRAID_HAVE_CUDA

Status cudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return okStatus();
  // A failed call leaves its error as the runtime's last error; reading it here keeps a later,
  // unrelated cudaGetLastError (the user's, say) from reporting braid's failure.
  (void)cudaGetLastError();
  return errorf(braidSystemError, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

void* driverEntryPoint(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

namespace {

// cuCtxGetCurrent / cuCtxSetCurrent (CUresult (CUcontext*) / (CUcontext)), with CUcontext as void*.
using CtxGet = int (*)(void**);
using CtxSet = int (*)(void*);

CtxGet ctxGetFn() {
  static const auto fn = reinterpret_cast<CtxGet>(driverEntryPoint("cuCtxGetCurrent"));
  return fn;
}

CtxSet ctxSetFn() {
  static const auto fn = reinterpret_cast<CtxSet>(driverEntryPoint("cuCtxSetCurrent"));
  return fn;
}

}  // namespace

DeviceScope::DeviceScope(int device) {
  const CtxGet get = ctxGetFn();
  knowCtx_ = get != nullptr && ctxSetFn() != nullptr && get(&previousCtx_) == 0;
  if (!knowCtx_) previousCtx_ = nullptr;
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  // With no context on the thread, "device 0" is only the runtime's default: switch even to 0.
  if (previous_ != device || (knowCtx_ && previousCtx_ == nullptr)) {
    status_ = cudaStatus(cudaSetDevice(device), "cudaSetDevice");
    switched_ = status_.ok();
  }
}

DeviceScope::~DeviceScope() {
  if (!switched_) return;
  if (previousCtx_ != nullptr) {
    (void)ctxSetFn()(previousCtx_);
  } else if (!knowCtx_) {
    // The driver could not say what the thread had: the runtime's device, as before.
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  // else: the thread had no context; it keeps `device`'s (see check.h).
}

namespace {

struct DeviceCount {
  int count = 0;
  std::string why;
};

const DeviceCount& deviceCount() {
  // A function-local static: the driver is asked once, by the first caller, under the compiler's
  // initialization guard; later calls only read it.
  static const DeviceCount answer = [] {
    DeviceCount d;
    int n = 0;
    Status s = cudaStatus(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
    if (!s.ok()) {
      d.why = "no CUDA device: " + s.message();
    } else if (n <= 0) {
      d.why = "no CUDA device: cudaGetDeviceCount found none";
    } else {
      d.count = n;
    }
    return d;
  }();
  return answer;
}

// Devices whose multiprocessor count is cached; more devices than this are asked every time.
constexpr int kMaxCachedDevices = 64;
std::atomic<int> gMultiprocessors[kMaxCachedDevices];

}  // namespace

bool gpuCompiledIn() { return true; }
int gpuDeviceCount() { return deviceCount().count; }
const char* gpuAbsentReason() { return deviceCount().why.c_str(); }

Status gpuCurrentDevice(int* device) {
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  int d = 0;
  BRAID_CUDA_TRY(cudaGetDevice(&d));
  *device = d;
  return okStatus();
}

Status gpuSetDevice(int device) {
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (device < 0 || device >= gpuDeviceCount())
    return errorf(braidInvalidArgument, "CUDA device %d does not exist (this process sees %d)", device,
                  gpuDeviceCount());
  BRAID_CUDA_TRY(cudaSetDevice(device));
  return okStatus();
}

int gpuMultiprocessors(int device) {
  if (device < 0 || device >= gpuDeviceCount()) return 0;
  if (device < kMaxCachedDevices) {
    const int cached = gMultiprocessors[device].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int n = 0;
  if (!cudaStatus(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute").ok())
    return 0;
  // Racing writers store the same value.
  if (device < kMaxCachedDevices) gMultiprocessors[device].store(n, std::memory_order_relaxed);
  return n;
}

#else  // !BRAID_HAVE_CUDA

bool gpuCompiledIn() { return false; }
int gpuDeviceCount() { return 0; }
const char* gpuAbsentReason() { return "CUDA is not compiled in (meson option cuda)"; }
Status gpuCurrentDevice(int*) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }
Status gpuSetDevice(int) { return errorf(braidInvalidUsage, "%s", gpuAbsentReason()); }
int gpuMultiprocessors(int) { return 0; }

#endif

Status gpuCommDevice(int* device, int configured) {
  if (gpuDeviceCount() == 0) return errorf(braidInvalidUsage, "%s", gpuAbsentReason());
  if (configured >= 0) {
    if (configured >= gpuDeviceCount())
      return errorf(braidInvalidArgument, "config->cudaDevice %d: this process sees %d CUDA device(s), 0..%d",
                    configured, gpuDeviceCount(), gpuDeviceCount() - 1);
    *device = configured;
    return okStatus();
  }
  if (!paramIsSet("BRAID_CUDA_DEVICE")) return gpuCurrentDevice(device);
  int64_t wanted = 0;
  BRAID_TRY(paramInt("BRAID_CUDA_DEVICE", &wanted));
  if (wanted >= gpuDeviceCount())
    return errorf(braidInvalidArgument, "BRAID_CUDA_DEVICE=%lld: this process sees %d CUDA device(s), 0..%d",
                  static_cast<long long>(wanted), gpuDeviceCount(), gpuDeviceCount() - 1);
  *device = static_cast<int>(wanted);
  return okStatus();
}

}  // namespace braid
