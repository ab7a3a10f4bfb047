// Internals of the NCCL-compatible library (libbraid_nccl.so). It is a client of libbraid's public
// API (braid.h) like any application: a communicator wraps a braidComm_t, datatypes and ops are
// translated, and braid's results become ncclResult_t at the C boundary. Internally the shim uses
// braid's shared utilities (src/base/: Status with braid's result codes, the datatype table, the
// fp16/bf16 conversions), compiled into this library too, and nothing else of braid's internals.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "braid/nccl.h"
#include "src/base/dtype.h"
#include "src/base/status.h"

namespace braid::nccl {

class Clique;

// A range given to ncclCommRegister; its address is the handle. `region` is braid's registration
// of it (braidCommRegister), NULL for an empty range or a communicator that was still pending; it
// ends with braidCommDeregister or with the braid communicator.
struct Registration {
  void* buff;
  size_t size;
  void* region;
};

// A PreMulSum op: the datatype it was created for and its scalar, stored as that datatype.
struct PreMulSum {
  ncclDataType_t dtype;
  alignas(8) unsigned char scalar[8];
};

}  // namespace braid::nccl

// The object behind ncclComm_t.
struct ncclComm {
  // Lifecycle. kPending: created inside a group, initialized at the outermost ncclGroupEnd by
  // another thread, which publishes `braid` (or `initError`) and then stores the state with
  // release order; readers load it with acquire order before touching either.
  enum State : int { kPending, kReady, kFailed };
  static constexpr uint64_t kMagic = 0x6e63636c62726964ULL;  // "ncclbrid"

  uint64_t magic = kMagic;
  std::atomic<int> state{kPending};
  braidComm_t braid = nullptr;
  braid::Status initError;  // why init failed (kFailed)
  bool blocking = true;     // config->blocking; init completes before returning either way
  std::atomic<bool> finalized{false};
  // Communicators created together in this process (see Clique); null when alone.
  std::shared_ptr<braid::nccl::Clique> clique;

  // Guards the two tables below (op creation, lookups of created ops, registration). Not taken by
  // calls with built-in ops.
  std::mutex mu;
  std::map<int, braid::nccl::PreMulSum> ops;                                  // created ops by value (>= ncclNumOps)
  std::map<void*, std::unique_ptr<braid::nccl::Registration>> registrations;  // by handle
  // PreMulSum's scaled input for calls outside a group, grown to the largest call and reused
  // (communicators are not used by two threads at once, as in NCCL).
  std::vector<unsigned char> preMulScratch;
};

namespace braid::nccl {

// Communicators of one process initialized together (ncclCommInitAll, or several inits or splits
// in one group). braid's rank 0 waits, when destroyed, for the other ranks' goodbyes; a thread that
// destroys its ranks one by one, rank 0 first, would wait on itself. So the clique postpones the
// destruction of its rank-0 members until the last member is released.
class Clique {
 public:
  explicit Clique(int members) : live_(members) {}
  // Called when the user destroys or aborts a member. Returns the braid communicators to destroy
  // now: `comm` itself unless it is postponed, and the postponed ones once no member is left.
  std::vector<braidComm_t> release(braidComm_t comm, bool postpone);

 private:
  std::mutex mu_;
  int live_;
  std::vector<braidComm_t> postponed_;
};

// ---- Errors (errors.cc) ----------------------------------------------------------------------------

// braid's result as an NCCL result: the same meaning, braidTimeout (a silent peer) as
// ncclRemoteError, and anything unknown as ncclInternalError.
ncclResult_t toNccl(braidResult_t r);
// A failed braid call as a Status carrying braid's message (empty: success).
Status fromBraid(braidResult_t r);
// This thread's message for ncclGetLastError.
void setLastError(const std::string& message);

// Runs `body` (returning Status) and converts its outcome, exceptions included, at the C boundary.
template <class F>
ncclResult_t guard(const char* fn, F&& body) {
  Status s = catching(body);
  if (s.ok()) return ncclSuccess;
  setLastError(std::string(fn) + ": " + s.message());
  return toNccl(s.code());
}

// ---- Communicators (comm.cc) -----------------------------------------------------------------------

// The braid communicator of an initialized comm: not NULL, alive, not pending, init succeeded.
Status initialized(ncclComm_t comm, braidComm_t* out);
// As initialized, and not finalized: what collectives need.
Status usable(ncclComm_t comm, braidComm_t* out);
// A live wrapper in any state (for destroy, queries of a failed comm...).
Status live(ncclComm_t comm);

// ---- Groups (group.cc) -----------------------------------------------------------------------------

// True between ncclGroupStart and the matching outermost ncclGroupEnd on this thread.
bool inGroup();
// Defers a blocking collective setup (init, split, shrink) to the outermost ncclGroupEnd, where
// all of a group's setups run concurrently, one thread each. `run` produces the braid communicator
// (NULL for a rank that joins none); `target` is the pending wrapper to complete, or null.
void deferSetup(ncclComm* target, std::function<Status(braidComm_t*)> run);
// Keeps a scratch buffer alive until this thread's group has been issued (PreMulSum copies).
void keepUntilGroupEnd(std::unique_ptr<unsigned char[]> buffer);
// Runs the jobs concurrently (the calling thread takes one) and returns their statuses.
std::vector<Status> runConcurrently(const std::vector<std::function<Status()>>& jobs);

// ---- Datatypes and ops (types.cc) ------------------------------------------------------------------

// The braid datatype for a reduction; fp8 and invalid values are refused.
Status reduceType(ncclDataType_t dt, braidDataType_t* out);
// The braid datatype for moving data: as reduceType, but fp8 moves as bytes (braidUint8).
Status moveType(ncclDataType_t dt, braidDataType_t* out);

// The op to pass to braid. A created PreMulSum op becomes braidSum with *pre set; a built-in op
// leaves *pre untouched. Checks that a created op belongs to comm and to dt.
Status resolveOp(ncclComm* comm, ncclRedOp_t op, ncclDataType_t dt, braidRedOp_t* out, PreMulSum* pre, bool* isPre);
// dst[i] = scalar * src[i], i < count, in the datatype's arithmetic (see nccl.h).
void scaleInto(const PreMulSum& pre, void* dst, const void* src, size_t count);

}  // namespace braid::nccl

// Exports `name` and its profiling twin p<name> (an alias of the same code).
#define NCCL_SHIM_EXPORT __attribute__((visibility("default")))
#define NCCL_SHIM_ALIAS(name) extern "C" NCCL_SHIM_EXPORT __typeof__(name) p##name __attribute__((alias(#name)));
