// Flags of the *_perf benchmarks (nccl-tests' meanings) and the names of datatypes and ops.
#ifndef BRAID_PERF_OPTIONS_H_
#define BRAID_PERF_OPTIONS_H_

#include <braid/braid.h>

#include <cstddef>
#include <string>
#include <vector>

namespace braid::perf {

struct Options {
  size_t minBytes = 32 << 20;                        // -b
  size_t maxBytes = 32 << 20;                        // -e
  size_t stepFactor = 2;                             // -f
  size_t stepBytes = 0;                              // -i; > 0: additive steps instead of the factor
  int iters = 20;                                    // -n
  int warmup = 5;                                    // -w
  size_t budget = 0;                                 // -B: > 0, iterations per size from a byte budget
  int agg = 1;                                       // -m N
  bool device = false;                               // -m device: buffers in CUDA device memory
  int gpu = -1;                                      // -g: the CUDA device (-1: the current one)
  bool check = true;                                 // -c
  bool blocking = false;                             // -z
  bool registered = false;                           // -R: buffers from braidMemAlloc, registered
  int average = 1;                                   // -a: 0 rank 0's time, 1 mean, 2 min, 3 max
  std::vector<braidDataType_t> types{braidFloat32};  // -d
  std::vector<braidRedOp_t> ops{braidSum};           // -o
  int root = 0;                                      // -r
  bool allRoots = false;                             // -r all
  std::string json;                                  // -J
  std::string algo;                                  // -A
};

// -B's rule, the one of the Open MPI programs in ../shared/peers (mpi_coll_perf.c): a row of `bytes`
// gets clamp(budget / bytes, 5, 1000) timed iterations and a tenth of that (at least 5) to warm up.
void budgetIters(size_t budget, size_t bytes, int* iters, int* warmup);

// A byte count as the flags take it: digits with an optional K, M or G (powers of 1024); false for
// anything else or an overflow.
bool parseSize(const char* s, size_t* out);
// A decimal integer in [lo, hi], nothing after it; false for anything else.
bool parseInt(const char* s, long lo, long hi, int* out);

// Parses argv. -h prints the help and exits 0; a bad flag prints one line and exits 2.
Options parseOptions(int argc, char** argv);

// Names as printed in the table: "float", "half", "bfloat16", ...; "sum", ...; "rank0", "avg", ...
const char* typeName(braidDataType_t type);
size_t typeSize(braidDataType_t type);
bool typeIsFloat(braidDataType_t type);
const char* opName(braidRedOp_t op);
const char* averageName(int average);

}  // namespace braid::perf

#endif  // BRAID_PERF_OPTIONS_H_
