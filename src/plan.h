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
#include <string>
#include <vector>

namespace braid {

enum class StepKind : uint8_t {
  kSend,        // send src[0..bytes) to peer
  kRecv,        // receive bytes from peer into dst
  kRecvReduce,  // receive bytes from peer; dst = src op incoming (src may equal dst)
  kCopy,        // dst = src (local)
  kScale,       // dst /= nranks (local; braidAvg)
  kScaleBy,     // dst = weight * src (local; src may equal dst; gossip)
  kAxpy,        // dst += weight * src (local; gossip)
  kCheck,       // compare the call header received into src with ours in dst (BRAID_CHECK_MISMATCH)
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

struct Step {
  StepKind kind = StepKind::kCopy;
  int32_t peer = -1;
  BufRef dst;
  BufRef src;
  uint64_t bytes = 0;
  int32_t deps[2] = {-1, -1};  // indices of earlier steps that must be complete first
  double weight = 0;           // kScaleBy, kAxpy: applied in the call's datatype (fp16/bf16 via fp32)
};

enum class Coll : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kBarrier,
};
const char* collName(Coll c);  // "AllReduce", ...

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

  // Appends a step and returns its index.
  int32_t add(const Step& s) {
    steps.push_back(s);
    return static_cast<int32_t>(steps.size() - 1);
  }
  void finalize();
  std::string describe() const;  // multi-line, for BRAID_DEBUG_SUBSYS=PLAN and test failures
};

// The call header ranks compare when BRAID_CHECK_MISMATCH=1: 32 bytes at plan.checkAt.
struct CallHeader {
  uint32_t magic;
  uint8_t coll, dtype, redop, algo;
  int32_t root;
  uint32_t pad;
  uint64_t count;
  uint64_t seq;
};
static_assert(sizeof(CallHeader) == 32, "call header is 32 bytes");
constexpr uint32_t kCallHeaderMagic = 0x4c4c4143;  // "CALL"

// Puts a mismatch check in front of a finalized plan: every rank sends its call header to the next
// rank of a ring and compares the one from the previous rank before any other step may start (two
// ranks that disagree are neighbours somewhere on the ring). Re-finalizes the plan.
void addMismatchCheck(Plan* plan);

// Helpers for algorithm files.
inline BufRef sendBuf(uint64_t off) { return {Buf::kSend, off}; }
inline BufRef recvBuf(uint64_t off) { return {Buf::kRecv, off}; }
inline BufRef scratchBuf(uint64_t off) { return {Buf::kScratch, off}; }

}  // namespace braid
