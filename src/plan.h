// Plans: what one rank does for one collective call, as plain data. Algorithms (algorithms/) build
// them from pure rank math; the executor (src/executor.cc) runs them over Links; tests check them
// without a network; BRAID_DEBUG_SUBSYS=PLAN prints them.
//
// A Plan is an ordered list of Steps. Buffers are named, not addressed (send, recv, scratch), so a
// plan is built once per (collective, size, ...) and reused for every call of that shape.
//
// Ordering contract with the transports: the k-th send step to peer P in rank R's plan is matched
// with the k-th receive step from R in P's plan, with the same byte count. tests/unit/test_plans.cc
// checks this for every algorithm and rank count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "src/coll.h"

namespace braid {

enum class StepKind : uint8_t {
  kSend,        // send src[0..bytes) to peer
  kRecv,        // receive bytes from peer into dst
  kRecvReduce,  // receive bytes from peer; dst = src op incoming (src may equal dst; see Step::order)
  kCopy,        // dst = src (local)
  kScale,       // dst /= nranks (local; braidAvg)
  kScaleBy,     // dst = weight * src (local; src may equal dst; gossip)
  kAxpy,        // dst += weight * src (local; gossip)
  kCheck,       // compare the call header received into src with ours in dst (BRAID_CHECK_MISMATCH)
  kJoin,        // no work: completes when its dependencies do (steps carry two; joins carry more)
  kReduce,      // dst = src op scratch[incoming] (local; a lowered kRecvReduce, src/lower.h; see Step::order)
};

// Which operand of a fold (kRecvReduce, kReduce) comes first. The ops are commutative in value but
// not in bits: min and max return the second operand for a pair of zeros of opposite sign, and a
// fold of two NaNs keeps the first one's payload. Where two ranks fold the same two partial results
// (recursive doubling's partners), both put the one covering the lower ranks first, so that every
// rank ends with the very same bits.
enum class FoldOrder : uint8_t {
  kLocalFirst,     // dst = src op incoming
  kIncomingFirst,  // dst = incoming op src
};

enum class Buf : uint8_t {
  kSend = 0,
  kRecv = 1,
  kScratch = 2,
  kAbsolute = 3,  // offset is an address (point-to-point groups, built per call)
};
constexpr int kNumBufs = 4;

struct BufRef {
  Buf buf = Buf::kSend;
  uint64_t offset = 0;
};

// 64 bytes: the executor walks steps on every call, so a step stays one cache line. More than two
// dependencies go through kJoin steps (Plan's builders insert them).
struct Step {
  StepKind kind = StepKind::kCopy;
  FoldOrder order = FoldOrder::kLocalFirst;  // kRecvReduce, kReduce
  int32_t peer = -1;
  BufRef dst;
  BufRef src;
  uint64_t bytes = 0;
  int32_t deps[2] = {-1, -1};  // indices of earlier steps that must be complete first
  union {
    double weight = 0;  // kScaleBy, kAxpy: applied in the call's datatype (fp16/bf16 via fp32)
    uint64_t incoming;  // kReduce: scratch offset of the received operand
  };
};
static_assert(sizeof(Step) == 64, "a step is one cache line");

// The dependencies handed to a step builder: any number of earlier step indices, where a negative
// one means "none" and is skipped. Borrows its list: build it in the call, never keep one.
class Deps {
 public:
  Deps() = default;
  Deps(int32_t d) : one_(d), n_(1) {}  // NOLINT: one index converts implicitly
  Deps(std::initializer_list<int32_t> ds) : list_(ds), n_(ds.size()) {}
  Deps(const std::vector<int32_t>& ds) : vec_(ds.data()), n_(ds.size()) {}  // NOLINT
  const int32_t* begin() const { return vec_ != nullptr ? vec_ : list_.size() != 0 ? list_.begin() : &one_; }
  const int32_t* end() const { return begin() + n_; }
  size_t size() const { return n_; }

 private:
  std::initializer_list<int32_t> list_;  // shares the caller's array, alive for the call
  const int32_t* vec_ = nullptr;
  int32_t one_ = -1;
  size_t n_ = 0;
};

struct Plan {
  Coll coll = Coll::kAllReduce;
  const char* algorithm = "";
  int rank = 0;
  int nranks = 1;
  uint64_t scratchBytes = 0;
  uint64_t checkAt = UINT64_MAX;  // scratch offset of the call header (mismatch check), if any
  std::vector<Step> steps;

  // Filled by finalize(): the steps of each peer's send and receive queues, in plan order, and the
  // local steps. The executor walks these with cursors.
  struct PeerQueue {
    int32_t peer = -1;
    std::vector<int32_t> sends;
    std::vector<int32_t> recvs;
  };
  std::vector<PeerQueue> peers;
  std::vector<int32_t> locals;
  // fedBy[i] >= 0 for a send whose only dependency is the receive fedBy[i] and whose bytes are
  // exactly what that receive writes (a ring's forwarded chunk): where both links' transport
  // forwards (TransportCaps::forwards), the send is posted with the receive and its slots are
  // filled as the receive's pieces land, in the same pass where possible. A receive feeds one send
  // at most. Empty when the plan has none.
  std::vector<int32_t> fedBy;
  // outputOnly[i] for a receive whose output no later step reads or writes but the sends it feeds
  // (send and receive buffers counted as one, as they are in place): its bytes may bypass the cache.
  // Empty when no receive lands in a named buffer.
  std::vector<uint8_t> outputOnly;

  // Step builders: each appends one step after `deps` and returns its index (plan order is the
  // order of the calls). More than two dependencies are first joined by kJoin steps.
  int32_t send(int peer, BufRef src, uint64_t bytes, Deps deps = {}) {
    return add(StepKind::kSend, peer, {}, src, bytes, deps);
  }
  int32_t recv(int peer, BufRef dst, uint64_t bytes, Deps deps = {}) {
    return add(StepKind::kRecv, peer, dst, {}, bytes, deps);
  }
  // dst = src op incoming (src may equal dst), or incoming op src.
  int32_t recvReduce(int peer, BufRef dst, BufRef src, uint64_t bytes, Deps deps = {},
                     FoldOrder order = FoldOrder::kLocalFirst) {
    const int32_t i = add(StepKind::kRecvReduce, peer, dst, src, bytes, deps);
    steps[i].order = order;
    return i;
  }
  int32_t copy(BufRef dst, BufRef src, uint64_t bytes, Deps deps = {}) {
    return add(StepKind::kCopy, -1, dst, src, bytes, deps);
  }
  // Out-of-place calls start with (their share of) the input in the receive buffer: recv+dstOffset
  // = send+srcOffset, `bytes` long. Nothing in place or for zero bytes (returns -1 then).
  int32_t selfCopy(bool inPlace, uint64_t bytes, uint64_t dstOffset = 0, uint64_t srcOffset = 0) {
    if (inPlace || bytes == 0) return -1;
    return copy(BufRef{Buf::kRecv, dstOffset}, BufRef{Buf::kSend, srcOffset}, bytes);
  }
  // dst /= nranks (braidAvg).
  int32_t scale(BufRef dst, uint64_t bytes, Deps deps = {}) { return add(StepKind::kScale, -1, dst, {}, bytes, deps); }
  int32_t scaleBy(BufRef dst, BufRef src, uint64_t bytes, double weight, Deps deps = {});
  int32_t axpy(BufRef dst, BufRef src, uint64_t bytes, double weight, Deps deps = {});
  // dst = src op scratch[incoming], or scratch[incoming] op src.
  int32_t reduce(BufRef dst, BufRef src, uint64_t incoming, uint64_t bytes, Deps deps = {},
                 FoldOrder order = FoldOrder::kLocalFirst);
  // Compares the header in `theirs` with ours in `mine`.
  int32_t check(BufRef mine, BufRef theirs, uint64_t bytes, Deps deps = {}) {
    return add(StepKind::kCheck, -1, mine, theirs, bytes, deps);
  }
  // A step that completes when all of `deps` did; returns the single dependency itself when there
  // is only one (and -1 for none), so callers can use it to fold lists.
  int32_t join(Deps deps);

  // Appends a step as given and returns its index (steps copied from another plan).
  int32_t add(const Step& s) {
    steps.push_back(s);
    return static_cast<int32_t>(steps.size() - 1);
  }
  void finalize();
  std::string describe() const;  // multi-line, for BRAID_DEBUG_SUBSYS=PLAN and test failures

 private:
  int32_t add(StepKind kind, int peer, BufRef dst, BufRef src, uint64_t bytes, Deps deps);
  void markOutputOnly();  // fills outputOnly (finalize)
  // Reduces `deps` to at most two (joining the rest) into out.
  void depsInto(Deps deps, int32_t out[2]);
};

// The call header ranks compare when BRAID_CHECK_MISMATCH=1: 32 bytes at plan.checkAt.
struct CallHeader {
  uint32_t magic;
  uint8_t coll, dtype, redop, algo;
  int32_t root;
  uint32_t pad;
  uint64_t count;
  uint64_t seq;  // the collective's number on its communicator (CallRecord::no): every rank's alike
};
static_assert(sizeof(CallHeader) == 32, "call header is 32 bytes");
constexpr uint32_t kCallHeaderMagic = 0x4c4c4143;  // "CALL"
// "AllReduce #7 (count 4, float32, sum)": a call as mismatch errors name it (src/executor_ops.cc).
std::string describeCall(const CallHeader& h);

// Puts a mismatch check in front of a finalized plan: every rank sends its call header to the next
// rank of a ring and compares the one from the previous rank before any other step may start (two
// ranks that disagree are neighbours somewhere on the ring). Re-finalizes the plan.
void addMismatchCheck(Plan* plan);

// Helpers for algorithm files.
inline BufRef sendBuf(uint64_t off) { return {Buf::kSend, off}; }
inline BufRef recvBuf(uint64_t off) { return {Buf::kRecv, off}; }
inline BufRef scratchBuf(uint64_t off) { return {Buf::kScratch, off}; }

}  // namespace braid
