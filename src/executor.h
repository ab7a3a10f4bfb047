// The executor: runs Plans over Links. One Engine per communicator.
//
// Threads. Whoever holds the engine lock drives progress: a thread blocked in a call or in
// braidWait, or the communicator's background thread, which progresses nonblocking operations while
// nobody waits and otherwise sleeps in the control plane (src/control_plane.h: control sockets,
// heartbeats and failure notices, which it serves). Posting and releasing take the same lock
// briefly; the lock is a spinlock, never held across a blocking call.
//
// Failure. The communicator's failure state lives in its ControlPlane: the engine fails the
// communicator there (a link error, a deadline, a mismatch) and, on every pass of progress, fails
// its operations once the control plane says the communicator failed.
//
// Ordering. Operations start in issue order and each Link queue receives an operation's steps only
// after every earlier operation posted all of its steps for that queue, so the k-th message on a
// link is the same on both sides (the transport contract) even with many operations in flight.
// Operations complete, as seen by the caller, in issue order.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/base/clock.h"
#include "src/base/status.h"
#include "src/compute.h"
#include "src/control_plane.h"
#include "src/op_gate.h"
#include "src/plan.h"
#include "src/plan_cache.h"
#include "src/reduce.h"
#include "src/small_coll.h"
#include "src/tags.h"
#include "transports/transport.h"

struct braidComm;

namespace braid {
class Engine;
}

// A posted operation; a braidRequest_t names one through the request handle table (src/handles.h).
// Pooled per communicator.
struct braidRequest {
  enum State : int { kFree = 0, kRunning = 1, kDone = 2 };
  std::atomic<int> state{kFree};
  braidResult_t result = braidSuccess;
  std::string error;  // set on failure only
  bool userOwned = false;
  braid::Engine* engine = nullptr;
  uint32_t handleSlot = 0;  // this pool entry's slot in requestHandles(), for its whole life

  // Execution state (engine lock).
  const braid::Plan* plan = nullptr;
  braid::Plan ownedPlan;                          // point-to-point groups build their plan per call
  uint32_t* planUsers = nullptr;                  // the cache entry's count of ops running its plan
  std::shared_ptr<const braid::Plan> sharedPlan;  // a plan cached outside the engine (postPlan)
  braid::Coll coll = braid::Coll::kAllReduce;
  uint64_t seq = 0;
  braid::Deadline deadline;
  char* bufs[braid::kNumBufs] = {};
  braidDataType_t dtype = braidFloat32;
  braidRedOp_t redop = braidSum;  // for the mismatch check's header
  uint64_t count = 0;
  int32_t root = -1;
  braid::ReduceKernel kernel = nullptr;
  braid::FoldStreamKernel streamKernel = nullptr;  // kernel's fold with its output streamed
  braid::ReduceSpec reduceSpec[2];  // its receives' fold: [0] local op incoming, [1] incoming op local (FoldOrder)
  std::vector<braid::Xfer> xfers;
  std::vector<uint8_t> done;
  bool streamOut = false;   // outputs past the cache: final receives may take non-temporal stores
  bool singleCopy = false;  // PostArgs::singleCopy
  uint32_t callPrint = 0;   // every message's Xfer::call (post() alone sets it: 0, not checked)
  uint32_t callShape = 0;   // ... and Xfer::callShape
  braid::CallRecord call;   // the numbered collective it is (src/call_watch.h); no 0: not one
  bool callShown = false;   // its wait was reported to rank 0 (ControlPlane::noteWaiting)
  struct Cursor {
    uint32_t sendPost = 0, sendDone = 0, recvPost = 0, recvDone = 0;
  };
  std::vector<Cursor> cursors;
  uint32_t localNext = 0;
  uint64_t localAt = 0;        // bytes of locals[localNext] copied so far (a large copy runs in pieces)
  uint64_t computeTicket = 0;  // locals[localNext] was issued and runs on (Compute::done)
  uint32_t remaining = 0;
  bool finished = false;
  braid::ScratchBuffer scratch;  // grows only, reused across ops
  // A tagged send or receive (src/tags.h) has no plan: the tag matcher drives `tagged`.
  bool isTagged = false;
  braid::TagOp tagged;
  // A small collective on the mailboxes (src/small_coll.h): `small` runs it, `plan` is an empty one
  // that only names the collective.
  bool isSmall = false;
  braid::SmallCall small;
  // A collective on braidMemAlloc memory that may run in place (src/direct_coll.cc): `small` runs
  // it until it is done, or until it finds a rank whose buffers are not, and then `plan` does.
  bool isDirect = false;
  // A call on device buffers (src/cuda/staging.h): its steps start once gate->ready() and it
  // completes once gate->drained() after gate->release(). Null for host calls.
  braid::OpGate* gate = nullptr;
  bool started = true;        // false while the gate is closed
  bool gateReleased = false;  // gate->release() was called
  bool detached = false;      // nobody waits for it (a blocking call on a stream): released when done
};

namespace braid {

using Op = ::braidRequest;

// One operation to post: the plan shape plus the buffers and reduction.
struct PostArgs {
  CollArgs shape;
  const void* send = nullptr;
  void* recv = nullptr;
  braidDataType_t dtype = braidUint8;
  braidRedOp_t op = braidSum;
  // A call on device buffers (src/op_gate.h), and whether it is detached: the blocking form on a
  // stream returns at once, and the engine releases the op itself when it is done.
  OpGate* gate = nullptr;
  bool detached = false;
  // A call on device buffers that runs in place on the peers' device memory (the cuda_ipc
  // transport, src/cuda/ipc_coll.h; takesDeviceCall said so): its send and recv buffers' IPC
  // handles, owned by the staging slot behind `gate`.
  const IpcHandle* ipc = nullptr;
  // Out of place, and the call's buffers on all ranks of this host exceed BRAID_NT_STORES_MIN: outputs
  // nothing reads again in the call may bypass the cache (src/base/nt_store.h).
  bool streamOut = false;
  // An exchange (AllGather, AllToAll) whose buffers on the host fit under BRAID_NT_STORES_MIN, or a
  // Broadcast or Scatter under a fraction of it (src/api_coll.cc): its sends may be read by the
  // receivers in place (Xfer::singleCopy).
  bool singleCopy = false;
};

// A collective on host buffers as the mailboxes see it (Engine::runSmall), derived from the checked
// arguments without a PostArgs (src/api_coll.cc): what the small calls' path reads of a call.
struct SmallArgs {
  Coll coll = Coll::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  size_t bytes = 0;  // count x element size: the buffer, or one rank's block (SmallCall::bytes)
  braidDataType_t dtype = braidUint8;
  braidRedOp_t op = braidSum;
  int root = 0;
  bool inPlace = false;
  bool streamOut = false;   // PostArgs::streamOut
  Algo algo = Algo::kRing;  // the selector's pick (gossip never runs here)
};
// A host call's PostArgs as SmallArgs.
SmallArgs smallArgsOf(const PostArgs& a);

class Engine {
 public:
  // `control` is the communicator's control plane, started already; it outlives the engine.
  Engine(braidComm* comm, ControlPlane& control);
  ~Engine();

  // Starts the background thread. Called once the links are connected.
  Status start();
  // Stops and joins the background thread (idempotent).
  void stop();

  // Posts a collective. On success *out is running. userOwned: a nonblocking call (wakes the
  // background thread so the operation progresses while the caller computes).
  Status post(const PostArgs& args, bool userOwned, Op** out);
  // A blocking collective that runs on the mailboxes (src/small_coll.h), run by the caller at once
  // while the engine is idle: no op, no queue. False when it did not take the call (not small, or
  // other operations running): then post() and wait() it. A call that is not done within a few
  // microseconds continues as an op, waited for like any other; *result is the call's result.
  bool runSmall(const SmallArgs& args, Status* result);
  // Whether a collective of `shape` on device buffers runs in place on the peers' device memory
  // (cuda_ipc: src/cuda/ipc_coll.h), the same answer on every rank; then its PostArgs carry the
  // buffers' IPC handles. Otherwise it runs on host staging.
  bool takesDeviceCall(const CollArgs& shape) const;
  // Posts a point-to-point group; `plan` steps use Buf::kAbsolute addresses. Swapped into the op.
  // gate and detached: as in PostArgs.
  Status postGroup(Plan* plan, bool userOwned, Op** out, OpGate* gate = nullptr, bool detached = false);
  // Posts a finalized plan built outside the engine (gossip graphs cache theirs per shape), with
  // `send` and `recv` as its kSend and kRecv buffers and `dtype` for its reductions and weighted
  // steps. The op holds `plan` until it is released (so the graph that cached it may be destroyed
  // meanwhile).
  Status postPlan(std::shared_ptr<const Plan> plan, const void* send, void* recv, braidDataType_t dtype, bool userOwned,
                  Op** out);
  // Posts a tagged send or receive (src/tags.h, src/executor_tags.cc) as `spec` describes it (peer,
  // tag, buffer, bytes; for a receive, where its source goes). Tagged operations complete when
  // their message does, in no particular order, and never hold up the plans' issue order.
  Status postTagged(const TagOp& spec, bool userOwned, Op** out);
  // Destroy, before drain(): tells every peer on its tag link that this rank sends nothing more
  // (src/tags.h, kByeTag), so that their receives from any rank stop reading from it.
  void postTagGoodbyes();

  // Drives progress until `op` completed or failed; releases it. Returns its result.
  Status wait(Op* op);
  // One step of progress; *done when finished, in which case the op is released.
  Status test(Op* op, bool* done);
  // Waits until every posted operation finished or failed (destroy). Bounded by the operations'
  // own deadlines (BRAID_TIMEOUT). Returns what destroy drops: the operations never released (posted
  // and not waited for), and the first failure among them as the result.
  Status drain();

  // After ControlPlane::fail(): completes every pending operation with the failure and returns
  // once no thread is left inside wait() or test() (braidCommAbort frees the engine next).
  void abortWaiters();

  // Destroy, after drain(): how far this rank got, for its goodbye (ControlPlane::sayGoodbye): the
  // collectives it posted and, per peer, the point-to-point messages it sent and received and
  // whether it sent tagged ones. Empty when the communicator failed (the peers heard why already).
  std::string leaveRecord();

  // Collectives that ran in place on braidMemAlloc memory (src/direct_coll.cc), for tests and logs.
  uint64_t directCalls() const { return directCalls_.load(std::memory_order_relaxed); }
  void resetDirectCalls() { directCalls_.store(0, std::memory_order_relaxed); }
  // Files of the peers mapped for those calls now (src/peer_maps.h). Engine lock not taken: tests
  // call it between calls.
  size_t peerMappings() const { return small_ != nullptr ? small_->mappedFiles() : 0; }

  // Whether the communicator's failure reached one of this rank's calls: an operation it failed or
  // will fail (pending now), or a post it refused. False while it has not failed, and
  // when it came while this rank had nothing in flight (gossip then reports it on the next call).
  bool failureMet();

 private:
  bool tryLock() { return !lock_.exchange(true, std::memory_order_acquire); }
  void lock();
  void unlock() { lock_.store(false, std::memory_order_release); }

  Status takeOp(Op** out);
  Status refused(Coll coll) const;
  void releaseOp(Op* op);
  void releaseLocked(Op* op);  // releaseOp with the engine lock held
  // The cached plan for a shape (built on first use); counts the caller in *users until releaseOp.
  const Plan* planFor(const CollArgs& shape, uint32_t** users);
  // What plans are lowered for: each link's capabilities, by rank.
  std::vector<TransportCaps> linkCaps() const;
  void prepare(Op* op, bool userOwned);
  template <class Fill, class Log>
  Status postOp(Coll coll, bool userOwned, Op** out, Fill fill, Log log);
  // Wakes the background thread from its sleep in the control plane.
  void wake() { control_.wake(); }

  bool progressOnce();
  // Leave notices (src/executor_leave.cc): whether a pass must look at the ranks that left (one
  // relaxed load and a compare on the hot path): a notice came, or an op that may need a leaver was
  // posted since the last look (leaveSeen_ = kLeaveRecheck).
  bool leaversToCheck() const { return control_.leaveGen() != leaveSeen_; }
  // Fails the communicator, naming the leaver, when a running operation needs a rank that left
  // before it; true when it did. The operations posted before that one finish first (drain).
  bool checkLeavers();
  // After checkLeavers failed the communicator: whether the operations before drainStop_ still run
  // (unfinished, for 2 s at most, and no rank failed since). False ends the drain.
  bool draining();
  // While draining: when `peer`, whose link on transport t failed with st, is a leaver that finished,
  // has the transport drop the link and returns true (not a failure).
  bool dropDrainedLeaver(int t, int peer, const Status& st);
  // Reads the leave records when a notice came since the last read (or a look was forced).
  void readLeaves();
  // Whether `peer` left with a goodbye that said how far it got (the records read now if news came).
  bool leaverFinished(int peer);
  // A point-to-point group's share of the counts the leave records compare (postGroup: built per
  // call, off the hot path): its messages per peer and direction, and one more group.
  void countP2p(const Plan& plan);
  // Drives transport t once per pass; false when it failed (the failure is held as linkFailure_).
  bool driveTransport(int t, int peer);
  // The tagged operations' share of a pass (src/executor_tags.cc); false-y `any` when idle.
  bool progressTagged(bool* linkFailed);
  void finishTagged(TagOp* t);
  // A tag link closed by a peer that left the communicator: not a failure (src/tags.h).
  void tagPeerLeft(int transport, int peer);
  void failTagged(const Status& f);
  // The oldest tagged operation's deadline; true when it expired (the communicator failed).
  bool taggedDeadline();
  // Opens a gated op whose gate is ready (src/op_gate.h); false while it is closed or when it
  // failed the communicator.
  bool startGated(Op* op);
  // A finished gated op: releases its gate (once) and says whether what it gates is done too.
  bool gateSettled(Op* op);
  // Marks a finished or failed op done; a detached one goes back to the pool.
  void markDone(Op* op);
  bool postSteps(Op* op);
  // Whether a call runs on the mailboxes, or (c->direct) may run in place on one host
  // (src/direct_coll.cc); fills *c when so.
  bool mailboxCall(const PostArgs& a, SmallCall* c) const;
  // mailboxCall of a call on host buffers.
  bool hostMailboxCall(const SmallArgs& a, SmallCall* c) const;
  // Makes `op` the small call `c` (numbered already) of `count` elements; detached is the caller's.
  void fillSmall(Op* op, const SmallCall& c, uint64_t count);
  // A pass over a small op: runs it as far as it goes; true when something changed.
  bool stepSmall(Op* op);
  // Moves a direct op; true on progress. When it falls back to its plan, isDirect is cleared.
  bool stepDirect(Op* op);
  // Whether the peer a mailbox call waits for is found dead (then held for blame, like a link's).
  bool checkSmallPeer(int peer);
  bool reapAndRunLocals(Op* op);
  bool runLocal(Op* op, const Step& s, bool* whole);
  // How many bytes of the copy step s (w: its resolved buffers) to copy now, from op->localAt: all
  // that is left, or copyPiece_ bytes while some transfer of the op is on the wire (posted, not yet
  // reaped) and more than that is left of a copy that does not overlap itself. The transports
  // progress between the pieces, so a rank copying its own AllToAll block keeps its sockets moving
  // (whole, a 2-rank AllToAll over tcp copied 32 MiB while its peer spun on a full send socket and
  // an empty receive one).
  uint64_t copyNow(const Op* op, const Step& s, const LocalWork& w) const;
  // The kCheck step: fails the communicator (braidInvalidUsage naming both ranks) on a mismatch.
  bool checkHeaders(const CallHeader& mine, const CallHeader& theirs);
  void failAll();
  // failAll's first step: the peers are kept out of this rank's buffers before its operations end
  // (Link::stopPeerAccess, SmallColls::abandon), waiting a grace (src/executor_wait.cc) for those
  // inside to leave; a peer still inside after that is named in a warning.
  void keepPeersOut();
  // The oldest operation's deadline; and, once it has waited a heartbeat period, its call goes to
  // rank 0 to be compared with the other ranks' (src/call_watch.h).
  void checkDeadline();
  // Numbers the next collective (every rank numbers its calls alike) and logs it. Engine lock held.
  CallRecord numberCall(Coll coll, uint64_t count, braidDataType_t dt, braidRedOp_t op, int root);
  void backoff(int64_t idleSinceNs);
  bool worthWaking(const Op* op) const;
  // Drives progress until done() holds; false when `backstopSec` seconds passed first.
  template <class Done>
  bool driveUntil(Done done, double backstopSec);
  // A wait that outlived every deadline it should have met (see wait()).
  void failStuckWait(const char* what);
  Status finish(Op* op);

  // The background thread: drives nonblocking operations nobody waits for, sleeps in the control
  // plane otherwise, and has it send and judge heartbeats on every turn.
  void bgLoop();

  braidComm* comm_;
  ControlPlane& control_;
  std::atomic<bool> lock_{false};
  std::unique_ptr<Compute> compute_;  // where local steps run

  // Engine-lock state.
  std::vector<Op*> active_;  // in issue order; head_ is the oldest
  size_t head_ = 0;
  std::vector<Op*> free_;
  std::vector<std::unique_ptr<Op>> all_;
  CollPlans plans_;
  uint64_t epoch_ = 0;
  std::vector<uint64_t> sendBlocked_, recvBlocked_;  // per rank: == epoch_ when set
  std::vector<int> forwardsTo_;                      // per rank: its transport when that transport forwards, else -1
  std::vector<uint64_t> transportDriven_;            // per transport: == epoch_ when driven this pass
  std::unique_ptr<SmallColls> small_;                // null unless the communicator has mailboxes
  SmallCall runCall_;                                // lock_: the call runSmall runs
  Plan smallPlans_[kNumColls];                       // by collective: the plan of a small op
  std::atomic<uint64_t> directCalls_{0};
  mutable bool failureMet_ = false;  // engine lock: see failureMet()
  bool peersKeptOut_ = false;        // keepPeersOut ran (a failure is for good)
  uint64_t seq_ = 0;
  uint64_t calls_ = 0;  // collectives numbered (numberCall)
  Status linkFailure_;  // a link's error, held back briefly (see progressOnce)
  int linkFailedPeer_ = -1;
  int64_t linkFailedAtNs_ = 0;
  uint32_t deadlineTick_ = 0;
  // Tagged point-to-point (src/tags.h): the matcher, and its operations in post order.
  TagMatcher tags_;
  bool tagsEnabled_ = false;
  std::vector<Op*> tagActive_;
  std::vector<TagOp*> tagDone_;
  uint64_t tagSeq_ = 0;    // tagged operations posted (their own numbering: see postTagged)
  int byesPending_ = 0;    // goodbyes posted and not yet out (counted in activeCount_)
  int linkFailedTag_ = 0;  // the held link failure is of tag transport linkFailedTag_ - 1 (0: none)
  // Leaving (src/executor_leave.cc). Collectives match across ranks by their count, point-to-point
  // messages by their count per peer and direction (a link's k-th message is the same on both
  // sides); the leavers' records say how far they got in each.
  // Collectives posted: seq_ - groups_ (nothing counted on their path).
  uint64_t groups_ = 0;                       // point-to-point groups posted
  std::vector<uint64_t> p2pSent_, p2pRecvd_;  // per peer: point-to-point messages posted
  uint32_t leaveSeen_ = 0;                    // control_.leaveGen() when last read, or kLeaveRecheck
  // Never a leaveGen() (which counts goodbyes, one per rank at most): forces the next look.
  static constexpr uint32_t kLeaveRecheck = UINT32_MAX;
  std::vector<ControlPlane::LeaveRecord> leaves_;
  uint64_t collLimit_ = UINT64_MAX;  // collectives past this one need a rank that left (collLeaver_)
  // A sequence number no later op can have without perhaps being such a collective: prepare() asks
  // for a look past it (groups posted meanwhile move it up).
  uint64_t collSeqLimit_ = UINT64_MAX;
  int collLeaver_ = -1;
  std::vector<uint8_t> tagLeaveSeen_;  // per rank: its leave was told to the tag matcher
  // The drain: the first operation that needs a leaver (it and later ones are not stepped and fail
  // when the drain ends), its end at the latest, and the failed ranks known when it began.
  const Op* drainStop_ = nullptr;
  int64_t drainUntilNs_ = 0;
  size_t drainCulprits_ = 0;

  std::atomic<int> activeCount_{0};
  // Gated ops posted and not done: their progress waits on the GPU (the copy in, cuda_ipc's kernels,
  // the copy back), which wakes nobody, so the background thread polls while there are any.
  std::atomic<int> gatedActive_{0};
  std::atomic<int> waiters_{0};
  std::atomic<int> leaving_{0};  // wait() calls past their waiters_ decrement (see wait())
  std::atomic<int> testers_{0};  // test() calls in progress (see test())
  std::atomic<bool> bgSleeping_{false};
  std::atomic<bool> stop_{false};
  std::thread bg_;
  // From the communicator's settings (src/settings.h), whose table holds the defaults.
  int64_t spinNs_ = 0;      // BRAID_SPIN_US; 0 when ranks outnumber cores
  uint64_t copyPiece_ = 0;  // BRAID_COPY_PIECE (Engine::copyNow)
  double timeoutSec_ = 0;   // BRAID_TIMEOUT
};

}  // namespace braid
