// What the CUDA benchmarks that link braid's internals share (cuda_reduce_perf, cuda_ipc_perf): their
// flags, CUDA errors and Status failures that end the program naming the step, and CUDA-event timing.
#pragma once

#include <cuda_runtime_api.h>
#include <errno.h>  // program_invocation_short_name

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "perf/options.h"
#include "src/base/status.h"

namespace braid::perf {

// Exits with the CUDA error: a benchmark has no one to hand a Status to.
inline void must(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, cudaGetErrorString(err));
  std::exit(1);
}

inline void must(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, s.message().c_str());
  std::exit(1);
}

// The shared flags (perf/options.h) with 1M..1G as the default sizes, after the integer flags
// `mine` ("-g", "-B", ...) are taken out of argv into their variables.
inline Options parseCudaBenchFlags(int argc, char** argv, std::initializer_list<std::pair<const char*, int*>> mine) {
  // Defaults first, so that the caller's -b/-e override them.
  std::vector<char*> rest{argv[0], const_cast<char*>("-b"), const_cast<char*>("1M"), const_cast<char*>("-e"),
                          const_cast<char*>("1G")};
  for (int i = 1; i < argc; ++i) {
    int* into = nullptr;
    for (const auto& [flag, var] : mine)
      if (std::strcmp(argv[i], flag) == 0) into = var;
    if (into != nullptr && i + 1 < argc)
      *into = std::atoi(argv[++i]);
    else
      rest.push_back(argv[i]);
  }
  return parseOptions(static_cast<int>(rest.size()), rest.data());
}

// Microseconds per call of `body`, over `iters` calls after `warmup` untimed ones, from CUDA events
// on `stream` around the timed calls.
template <class F>
double timeUs(int warmup, int iters, cudaStream_t stream, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  cudaEvent_t start, stop;
  must(cudaEventCreate(&start), "cudaEventCreate");
  must(cudaEventCreate(&stop), "cudaEventCreate");
  must(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) body();
  must(cudaEventRecord(stop, stream), "cudaEventRecord");
  must(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  must(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1000.0 / iters;
}

}  // namespace braid::perf
