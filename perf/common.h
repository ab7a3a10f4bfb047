// The shared harness of the *_perf benchmarks.
//
// Each benchmark binary is one rank of a job started by a launcher (braidrun, mpirun, srun,
// torchrun). Its main only describes one collective (a CollDesc): how large its buffers are for a
// given size, how to post it, what each rank puts in and what each rank must find afterwards. The
// harness does the rest: flags, buffers, timing, checking, the nccl-tests style table and JSON.
//
// Only the public API (braid/braid.h) is used, so these binaries also measure what users see.
#ifndef BRAID_PERF_COMMON_H_
#define BRAID_PERF_COMMON_H_

#include <braid/braid.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::perf {

// Everything a CollDesc callback needs to know about the row being measured.
struct Ctx {
  braidComm_t comm = nullptr;
  int rank = 0;
  int nranks = 1;
  braidDataType_t type = braidFloat32;
  size_t eltSize = 4;
  braidRedOp_t op = braidSum;      // meaningful only for reducing collectives
  int root = -1;                   // -1 for collectives without a root
  size_t count = 0;                // the count argument of the call, from CollDesc::sizes
  braidStream_t stream = nullptr;  // -m device: the CUDA stream the calls go on (buffers are device memory)
};

// Buffer shapes of one row, in elements unless named otherwise.
struct Sizes {
  size_t count = 0;      // the count argument of the call
  size_t sendElems = 0;  // elements of sendbuff
  size_t recvElems = 0;  // elements of recvbuff
  size_t bytes = 0;      // the "size" column: what algbw divides by
  // In-place runs use one buffer of max(sendElems, recvElems) elements; these say where sendbuff
  // and recvbuff start inside it (AllGather and ReduceScatter put them at rank * count).
  size_t inPlaceSendOffset = 0;
  size_t inPlaceRecvOffset = 0;
};

// What one element of recvbuff must hold after the check run.
struct Expect {
  enum Kind : uint8_t { kValue, kUntouched, kAny };
  Kind kind = kAny;
  double value = 0;  // for kValue: a small integer, or a fraction for avg on floating types

  static Expect Value(double v) { return {kValue, v}; }
  static Expect Untouched() { return {kUntouched, 0}; }  // must still hold the harness's poison
  static Expect Any() { return {kAny, 0}; }
};

// Requests of nonblocking posts; the harness waits for all of them. Capacity is reserved up front
// so that add() never allocates while timing.
class Requests {
 public:
  void reserve(size_t n) { reqs_.reserve(n); }
  braidRequest_t* add();
  void clear() { reqs_.clear(); }
  int size() const { return static_cast<int>(reqs_.size()); }
  braidRequest_t* data() { return reqs_.data(); }

 private:
  std::vector<braidRequest_t> reqs_;
};

struct CollDesc {
  const char* name;  // for messages and JSON, e.g. "all_reduce"
  bool reduces;      // takes a reduction op (-o)
  bool rooted;       // takes a root (-r)
  int maxRequestsPerOp;
  double (*busFactor)(int nranks);
  Sizes (*sizes)(const Ctx& ctx, size_t bytes);
  // Posts one operation. reqs == nullptr: blocking call; else nonblocking, adding its requests.
  // Failures go through PERF_CHECK (print and exit), so there is nothing to return.
  void (*post)(const Ctx& ctx, const void* sendbuff, void* recvbuff, Requests* reqs);
  // Value of element `index` of sendbuff on rank `rank`.
  double (*input)(const Ctx& ctx, int rank, size_t index);
  // What element `index` of recvbuff (recvElems of them) must hold on this rank.
  Expect (*expect)(const Ctx& ctx, bool inPlace, size_t index);
  bool hostOnly = false;  // refuses -m device (the call takes no stream)
};

// Runs the benchmark program: parses argv, initializes the communicator from the environment,
// sweeps the rows and prints. Returns the process exit status.
int benchMain(int argc, char** argv, const CollDesc& desc);

// ---- Input patterns --------------------------------------------------------------------------
// All values are small non-negative integers, exact in every datatype (bfloat16 holds integers up
// to 256 exactly), so results compare with zero tolerance.

// Data for collectives that only move bytes: distinct streams give distinct sequences.
double copyValue(uint64_t stream, size_t index);
// Rank `rank`'s input at `index` for a reduction with ctx.op. Chosen so that sums stay small,
// products are powers of two up to 8, and min/max differ between ranks.
double reduceInput(const Ctx& ctx, int rank, size_t index);
// The reduction with ctx.op over all ranks of reduceInput(ctx, r, index).
double reduceExpected(const Ctx& ctx, size_t index);

// ---- Errors ------------------------------------------------------------------------------------
// Prints "rank R: <call> failed: <result>: <last error>", aborts the communicator so that peers
// learn promptly, and exits 1.
[[noreturn]] void failCall(braidResult_t result, const char* expr);
inline void checkCall(braidResult_t result, const char* expr) {
  if (result != braidSuccess) failCall(result, expr);
}
#define PERF_CHECK(call) ::braid::perf::checkCall((call), #call)

}  // namespace braid::perf

#endif  // BRAID_PERF_COMMON_H_
