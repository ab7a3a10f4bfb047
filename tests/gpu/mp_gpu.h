// What the multi-process [gpu] tests share: whether the ranks have a GPU (asked in a child process:
// CUDA set up in the test process would be unusable in the ranks forked from it) and CUDA_OK.
#pragma once

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/cuda/runtime.h"
#include "tests/mp/harness.h"

namespace braidtest {

// Why the ranks cannot use a GPU ("" when they can), asked once per test process in a child.
inline const std::string& gpuAbsence() {
  static const std::string why = [] {
    int fds[2];
    if (pipe(fds) != 0) return std::string("pipe failed");
    pid_t pid = spawnProcess({}, [&] {
      close(fds[0]);
      const std::string w = braid::gpuDeviceCount() > 0 ? "" : braid::gpuAbsentReason();
      ssize_t k = write(fds[1], w.data(), w.size());
      (void)k;
      close(fds[1]);
      return 0;
    });
    close(fds[1]);
    std::string w;
    char buf[256];
    ssize_t k;
    while ((k = read(fds[0], buf, sizeof(buf))) > 0) w.append(buf, static_cast<size_t>(k));
    close(fds[0]);
    const RankResult r = waitProcess(pid, 60);
    if (r.status != 0) return "the process asking CUDA for devices failed (status " + std::to_string(r.status) + ")";
    return w;
  }();
  return why;
}

// True (after a WARN saying why) when the ranks would have no GPU: the test returns and reads as
// skipped in the log.
inline bool noGpu() {
  if (gpuAbsence().empty()) return false;
  WARN("skipped: " << gpuAbsence());
  return true;
}

// gpu_check.sh sets BRAID_TEST_SKIP_CUDA_IPC=1 (and BRAID_CUDA_IPC=0) when its cuda_ipc smoke test
// failed or hung, so that the rest of the [gpu] tests still run within the lent machine's minutes:
// the cuda_ipc variants are then left out, saying so.
inline bool cudaIpcSkipped() {
  const char* v = getenv("BRAID_TEST_SKIP_CUDA_IPC");
  return v != nullptr && v[0] != '\0' && v[0] != '0';
}
inline bool noCudaIpc() {
  if (!cudaIpcSkipped()) return false;
  WARN("skipped: cuda_ipc variants left out (BRAID_TEST_SKIP_CUDA_IPC)");
  return true;
}
// The paths a test runs: cuda_ipc (1) and host staging (0), or host staging alone (ints: Catch2's
// range generator takes no bools).
inline std::vector<int> ipcVariants() {
  if (noCudaIpc()) return {0};
  return {1, 0};
}

#define CUDA_OK(rank, call)                                                                                \
  do {                                                                                                     \
    const cudaError_t e_ = (call);                                                                         \
    if (e_ != cudaSuccess) return ::braidtest::fail(rank, "%s failed: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

}  // namespace braidtest
