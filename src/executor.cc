#include "src/executor.h"

#include <sched.h>
#include <unistd.h>

#include <cstring>

#include "src/base/log.h"
#include "src/base/overlap.h"
#include "src/comm.h"
#include "src/compute.h"
#include "src/handles.h"

namespace braid {

namespace {

// Adapts the executor's typed kernel to the transport's type-blind ReduceFn.
void applyKernel(void* out, const void* local, const void* incoming, size_t count, const void* ctx) {
  (*static_cast<const ReduceKernel*>(ctx))(out, local, incoming, count);
}

void applyStreamKernel(void* out, const void* local, const void* incoming, size_t count, const void* ctx) {
  void* outs[] = {out};
  const void* ins[] = {local, incoming};
  (*static_cast<const FoldStreamKernel*>(ctx))(outs, 1, ins, 2, count, 1);
}

// The same two with the incoming operand first (FoldOrder::kIncomingFirst).
void applyKernelIncomingFirst(void* out, const void* local, const void* incoming, size_t count, const void* ctx) {
  applyKernel(out, incoming, local, count, ctx);
}

void applyStreamKernelIncomingFirst(void* out, const void* local, const void* incoming, size_t count, const void* ctx) {
  applyStreamKernel(out, incoming, local, count, ctx);
}

// How an op's receives fold, in either order (Op::reduceSpec): its kernel, and the same with the
// output streamed.
void setReduceSpecs(Op* op, braidDataType_t dtype, braidRedOp_t redop) {
  const braidRedOp_t folded = redop == braidAvg ? braidSum : redop;
  op->kernel = reduceKernel(dtype, folded);
  op->streamKernel = foldStreamKernel(dtype, folded);
  const size_t elem = dtypeSize(dtype);
  op->reduceSpec[0] = ReduceSpec{applyKernel, &op->kernel, elem, applyStreamKernel, &op->streamKernel};
  op->reduceSpec[1] =
      ReduceSpec{applyKernelIncomingFirst, &op->kernel, elem, applyStreamKernelIncomingFirst, &op->streamKernel};
}

inline char* resolve(const Op* op, BufRef ref) {
  return ref.buf == Buf::kAbsolute ? reinterpret_cast<char*>(ref.offset)
                                   : op->bufs[static_cast<int>(ref.buf)] + ref.offset;
}

// op->done[i]: 0 = not yet, kPosted = a receive on its link, kDone = complete.
constexpr uint8_t kPosted = 2, kDone = 1;

inline bool depsDone(const Op* op, const Step& s) {
  return (s.deps[0] < 0 || op->done[s.deps[0]] == kDone) && (s.deps[1] < 0 || op->done[s.deps[1]] == kDone);
}

// Nonblocking posts that send at least this many bytes wake the background thread (worthWaking).
// Measured here (2 ranks, 2 cores): each wake costs the op ~40 us, half of a 512 KiB AllReduce.
constexpr uint64_t kWakeMinBytes = 1 << 20;

// How long a failed link's error waits for a control-plane notice that names the root cause (a
// rank that died), before the link's own peer is blamed. Notices travel in well under this.
constexpr int64_t kBlameGraceNs = 200 * 1000000LL;
// ... and at most this long while the peer's control socket still holds unread bytes, or while
// rank 0 may still relay the notice (progressOnce).
constexpr int64_t kMaxBlameGraceNs = 2000 * 1000000LL;

// The call every message of a plan carries: the call's key (CallRecord::key: what makes two calls
// one) and, where `numbered`, its number among the communicator's collectives (CallRecord::no, the
// same on every rank for one call: point-to-point calls take none), mixed and folded to kCallBits,
// never 0. Xfer::call is numbered; Xfer::callShape, which the chunk protocol announces once per
// change, is not.
uint32_t callPrint(const CallRecord& call, bool numbered) {
  const CallRecord::Key k = call.key();
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](uint64_t v) {
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  };
  for (uint64_t v : {k.coll, k.bytes, k.dtypeOp, k.root, numbered ? call.no : 0}) mix(v);
  const uint32_t v = static_cast<uint32_t>(h ^ h >> kCallBits ^ h >> (2 * kCallBits)) & kCallMask;
  return v != 0 ? v : 1;
}

}  // namespace

Engine::Engine(braidComm* comm, ControlPlane& control) : comm_(comm), control_(control), compute_(makeCpuCompute()) {
  const int n = comm->nranks;
  sendBlocked_.assign(n, 0);
  recvBlocked_.assign(n, 0);
  transportDriven_.assign(comm->transports.size(), 0);
  forwardsTo_.assign(n, -1);
  for (int r = 0; r < n; ++r) {
    const int t = comm->transportOf[r];
    if (t >= 0 && comm->transports[t]->caps().forwards && !comm->settings.forceLowering) forwardsTo_[r] = t;
  }
  p2pSent_.assign(n, 0);
  p2pRecvd_.assign(n, 0);
  tagLeaveSeen_.assign(n, 0);
  active_.reserve(64);
  timeoutSec_ = comm->settings.timeoutSec;
  spinNs_ = comm->settings.spinUs * 1000;
  copyPiece_ = comm->settings.copyPiece;
  // The links are connected before the engine is made, and their capabilities never change.
  plans_.configure(linkCaps(), comm->rank, comm->settings.checkMismatch, comm->settings.forceLowering);
  tagsEnabled_ = !comm->tagLinks.empty();
  if (tagsEnabled_) {
    std::vector<Link*> tagLinks(n, nullptr);
    for (int r = 0; r < n; ++r) tagLinks[r] = comm->tagLinks[r].get();
    tags_.init(std::move(tagLinks));
  }
  // More ranks than cores on this host: a spinning waiter steals the core of the rank it waits for.
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && comm->localRanks > cores) spinNs_ = 0;
  if (comm->mailBytes > 0) {
    std::vector<Link*> links(n, nullptr);
    std::vector<std::string> names(n);
    for (int r = 0; r < n; ++r) {
      links[r] = comm->links[r].get();
      names[r] = comm->describeRank(r);
    }
    small_ = std::make_unique<SmallColls>(comm->rank, std::move(links), std::move(names), comm->directPids);
    if (comm->cudaIpc) small_->enableDevice(comm->cudaDevice, comm->settings.cudaIpcMin, std::move(comm->ipcColl));
    for (int c = 0; c < kNumColls; ++c) {
      smallPlans_[c].coll = static_cast<Coll>(c);
      smallPlans_[c].algorithm = "mailbox";
      smallPlans_[c].rank = comm->rank;
      smallPlans_[c].nranks = n;
    }
  }
}

Engine::~Engine() {
  stop();
  // The pool's request handles die with it: braidWait or braidTest on one is refused from now on.
  for (const auto& op : all_) requestHandles().remove(op->handleSlot, HandleEnd::kDestroyed);
}

Status Engine::start() {
  // The background thread sleeps on the transports too while operations wait on peers: one
  // descriptor per transport, whatever its number of links (two links sharing one would make a
  // second EPOLL_CTL_ADD fail).
  for (const auto& t : comm_->transports) BRAID_TRY(control_.watchLinkFd(t->waitFd()));
  for (const auto& t : comm_->tagTransports) BRAID_TRY(control_.watchLinkFd(t->waitFd()));
  try {
    bg_ = std::thread([this] { bgLoop(); });
  } catch (const std::system_error& e) {
    return errorf(braidSystemError, "cannot start the progress thread: %s", e.what());
  }
  return okStatus();
}

void Engine::stop() {
  if (!bg_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  wake();
  bg_.join();
}

void Engine::lock() {
  while (!tryLock()) sched_yield();
}

Status Engine::takeOp(Op** out) {
  if (!free_.empty()) {
    *out = free_.back();
    free_.pop_back();
    return okStatus();
  }
  // The pool grows: the new entry gets its handle slot, kept until the engine goes.
  auto op = std::make_unique<Op>();
  BRAID_TRY(requestHandles().reserve(&op->handleSlot));
  op->engine = this;
  requestHandles().publish(op->handleSlot, op.get());
  all_.push_back(std::move(op));
  *out = all_.back().get();
  return okStatus();
}

void Engine::releaseOp(Op* op) {
  lock();
  releaseLocked(op);
  unlock();
}

void Engine::releaseLocked(Op* op) {
  if (op->planUsers != nullptr) --*op->planUsers;
  op->planUsers = nullptr;
  op->sharedPlan.reset();
  // Before the entry can be taken again: the released handle must never reach its next operation.
  requestHandles().retire(op->handleSlot, HandleEnd::kReleased);
  op->state.store(Op::kFree, std::memory_order_relaxed);
  op->error.clear();
  op->gate = nullptr;
  op->started = true;
  op->detached = false;
  op->isSmall = false;
  op->streamOut = op->singleCopy = false;  // set by post() alone: groups and shared plans take neither
  op->callPrint = op->callShape = 0;
  op->call = CallRecord{};
  if (op->isDirect) SmallColls::unpin(&op->small);  // failed, or its plan ran
  op->isDirect = false;
  free_.push_back(op);
}

const Plan* Engine::planFor(const CollArgs& shape, uint32_t** users) {
  return plans_.acquire(shape, MemType::kHost, users);
}

std::vector<TransportCaps> Engine::linkCaps() const {
  std::vector<TransportCaps> caps(comm_->nranks);
  for (int r = 0; r < comm_->nranks; ++r)
    if (comm_->transportOf[r] >= 0) caps[r] = comm_->transports[comm_->transportOf[r]]->caps();
  return caps;
}

// Sizes the op's per-step state for its plan (grows only) and queues it. Engine lock held.
void Engine::prepare(Op* op, bool userOwned) {
  const Plan* plan = op->plan;
  const size_t steps = plan->steps.size();
  if (op->xfers.size() < steps) op->xfers.resize(steps);
  if (op->done.size() < steps) op->done.resize(steps);
  if (steps != 0) memset(op->done.data(), 0, steps);  // an empty plan's done.data() may be null (UB in memset)
  op->cursors.assign(plan->peers.size(), Op::Cursor{});
  op->localNext = 0;
  op->localAt = 0;
  op->computeTicket = 0;
  op->remaining = static_cast<uint32_t>(steps);
  op->finished = false;
  op->result = braidSuccess;
  op->userOwned = userOwned;
  op->started = op->gate == nullptr;
  op->gateReleased = false;
  op->callShown = false;
  if (op->gate != nullptr) gatedActive_.fetch_add(1, std::memory_order_relaxed);
  op->seq = ++seq_;
  control_.notePosted(op->seq);  // heartbeats report it
  // The one compare the leave notices cost a post (src/executor_leave.cc).
  if (seq_ > collSeqLimit_) leaveSeen_ = kLeaveRecheck;
  op->deadline = Deadline::afterSeconds(timeoutSec_);
  op->coll = plan->coll;
  // Fails only when out of memory, which the API boundary reports like any bad_alloc.
  if ((op->scratch.capacity() < plan->scratchBytes || op->scratch.memType() != MemType::kHost) &&
      !op->scratch.reserve(plan->scratchBytes, MemType::kHost).ok())
    throw std::bad_alloc();
  op->bufs[static_cast<int>(Buf::kScratch)] = op->scratch.data();
  if (plan->checkAt != UINT64_MAX) {
    // The collective's number, not the op's: point-to-point calls take sequence numbers on some
    // ranks only.
    CallHeader h{kCallHeaderMagic,
                 static_cast<uint8_t>(plan->coll),
                 static_cast<uint8_t>(op->dtype),
                 static_cast<uint8_t>(op->redop),
                 static_cast<uint8_t>(0),
                 op->root,
                 0,
                 op->count,
                 op->call.no};
    memcpy(op->scratch.data() + plan->checkAt, &h, sizeof(h));
  }
  op->state.store(Op::kRunning, std::memory_order_release);
  active_.push_back(op);
  activeCount_.fetch_add(1);  // seq_cst: pairs with bgSleeping_ (Dekker-style handshake)
}

// A call posted after the communicator failed: the failure, and which call it refused.
Status Engine::refused(Coll coll) const {
  failureMet_ = true;
  Status f = control_.failure();
  char ctx[128];
  snprintf(ctx, sizeof(ctx), " [%s #%llu on rank %d: not started, the communicator had failed]", collName(coll),
           static_cast<unsigned long long>(seq_ + 1), comm_->rank);
  return Status(f.code(), f.message() + ctx);
}

// The frame of every post: refuses on a failed communicator, else takes an op, lets fill(op) set
// its plan, buffers and kernel, prepares it (sequence number, deadline, queues), lets log(op) say
// what was posted, and wakes the background thread for a big nonblocking op. fill and log run with
// the engine lock held.
template <class Fill, class Log>
Status Engine::postOp(Coll coll, bool userOwned, Op** out, Fill fill, Log log) {
  lock();
  if (control_.failed()) {
    Status r = refused(coll);  // engine lock held: it reads seq_
    unlock();
    return r;
  }
  Op* op = nullptr;
  Status taken = takeOp(&op);
  if (!taken.ok()) {
    unlock();
    return taken;
  }
  fill(op);
  prepare(op, userOwned);
  log(op);
  // A small call with nothing before it puts its mail out now: its peers need not wait until this
  // rank waits for it (or the background thread looks).
  if (op->isSmall && head_ + 1 == active_.size()) stepSmall(op);
  // A gated op needs the background thread to poll its gate; decided under the lock, because a
  // detached op may be done and back in the pool as soon as it is released.
  const bool wakeBg = userOwned && (op->gate != nullptr || worthWaking(op));
  unlock();
  if (wakeBg && bgSleeping_.load()) wake();
  *out = op;
  return okStatus();
}

Status Engine::post(const PostArgs& a, bool userOwned, Op** out) {
  SmallCall small;
  const bool mailbox = mailboxCall(a, &small);
  if (mailbox && !small.direct) {
    return postOp(
        a.shape.coll, userOwned, out,
        [&](Op* op) {
          small_->number(&small);  // engine lock held: in issue order
          fillSmall(op, small, a.shape.count);
          op->detached = a.detached;
          op->call = numberCall(a.shape.coll, a.shape.count, a.dtype, a.op, a.shape.root);
        },
        [&](const Op* op) {
          BRAID_INFO(kLogColl, "%s #%llu: count %llu %s, root %d, on the mailboxes", collName(a.shape.coll),
                     static_cast<unsigned long long>(op->seq), static_cast<unsigned long long>(a.shape.count),
                     dtypeName(a.dtype), a.shape.root);
        });
  }
  const bool direct = mailbox && small.direct;
  return postOp(
      a.shape.coll, userOwned, out,
      [&](Op* op) {
        op->plan = planFor(a.shape, &op->planUsers);
        op->bufs[static_cast<int>(Buf::kSend)] = const_cast<char*>(static_cast<const char*>(a.send));
        op->bufs[static_cast<int>(Buf::kRecv)] = static_cast<char*>(a.recv);
        op->dtype = a.dtype;
        op->redop = a.op;
        op->count = a.shape.count;
        op->root = a.shape.root;
        setReduceSpecs(op, a.dtype, a.op);
        op->gate = a.gate;
        op->detached = a.detached;
        op->streamOut = a.streamOut;
        op->singleCopy = a.singleCopy;
        if (a.shape.coll != Coll::kSendRecv) {
          op->call = numberCall(a.shape.coll, a.shape.count, a.dtype, a.op, a.shape.root);
          // With BRAID_CHECK_MISMATCH the call header's check says more, and goes first.
          if (!comm_->settings.checkMismatch) {
            op->callPrint = callPrint(op->call, true);
            op->callShape = callPrint(op->call, false);
          }
        }
        if (direct) {
          small_->number(&small);  // engine lock held: in issue order
          small_->pin(&small);
          op->small = small;
          op->isDirect = true;
        }
      },
      [&](const Op* op) {
        BRAID_INFO(kLogColl, "%s #%llu: count %llu %s, root %d, %s, %zu steps%s", collName(a.shape.coll),
                   static_cast<unsigned long long>(op->seq), static_cast<unsigned long long>(a.shape.count),
                   dtypeName(a.dtype), a.shape.root, op->plan->algorithm, op->plan->steps.size(),
                   !direct            ? ""
                   : a.ipc != nullptr ? " (cuda_ipc: in place on the peers' device memory)"
                                      : " (in place if every rank's buffers are braidMemAlloc memory)");
      });
}

// Whether a nonblocking op is big enough to wake the background thread for. A wake costs the
// sleeping thread a core for a moment, which on a full machine can push two spinning ranks onto
// one core; small ops are finished by the caller's wait within microseconds, or by the background
// thread's periodic look (kIdleSleepUs, src/executor_wait.cc) when the caller computes for longer.
bool Engine::worthWaking(const Op* op) const {
  uint64_t bytes = 0;  // what this rank ships
  for (const Step& s : op->plan->steps) {
    if (s.kind == StepKind::kSend) bytes += s.bytes;
    if (bytes >= kWakeMinBytes) return true;
  }
  return false;
}

Status Engine::postPlan(std::shared_ptr<const Plan> plan, const void* send, void* recv, braidDataType_t dtype,
                        bool userOwned, Op** out) {
  const Coll coll = plan->coll;
  return postOp(
      coll, userOwned, out,
      [&](Op* op) {
        op->plan = plan.get();
        op->sharedPlan = std::move(plan);
        op->bufs[static_cast<int>(Buf::kSend)] = const_cast<char*>(static_cast<const char*>(send));
        op->bufs[static_cast<int>(Buf::kRecv)] = static_cast<char*>(recv);
        op->dtype = dtype;
        setReduceSpecs(op, dtype, braidSum);
      },
      [&](const Op* op) {
        BRAID_INFO(kLogColl, "%s #%llu: %s %s, %zu steps", collName(coll), static_cast<unsigned long long>(op->seq),
                   dtypeName(dtype), op->plan->algorithm, op->plan->steps.size());
      });
}

Status Engine::postGroup(Plan* plan, bool userOwned, Op** out, OpGate* gate, bool detached) {
  return postOp(
      plan->coll, userOwned, out,
      [&](Op* op) {
        std::swap(op->ownedPlan, *plan);
        op->ownedPlan.finalize();
        op->plan = &op->ownedPlan;
        countP2p(op->ownedPlan);
        op->kernel = nullptr;
        op->reduceSpec[0] = op->reduceSpec[1] = ReduceSpec{};
        op->gate = gate;
        op->detached = detached;
      },
      [](const Op*) {});
}

// Posts every step whose turn has come: per peer and direction, in plan order, behind the
// unposted steps of earlier operations. Engine lock held.
bool Engine::postSteps(Op* op) {
  const Plan* plan = op->plan;
  bool any = false;
  for (size_t qi = 0; qi < plan->peers.size(); ++qi) {
    const Plan::PeerQueue& q = plan->peers[qi];
    Op::Cursor& c = op->cursors[qi];
    Link* link = comm_->links[q.peer].get();
    if (sendBlocked_[q.peer] != epoch_) {
      while (c.sendPost < q.sends.size()) {
        const int32_t idx = q.sends[c.sendPost];
        const Step& s = plan->steps[idx];
        Xfer* feeder = nullptr;
        if (!depsDone(op, s)) {
          // A forwarded chunk goes out as its receive lands, where one transport carries both.
          const int32_t f = plan->fedBy.empty() ? -1 : plan->fedBy[idx];
          if (f < 0 || op->done[f] != kPosted || forwardsTo_[q.peer] < 0 ||
              forwardsTo_[q.peer] != forwardsTo_[plan->steps[f].peer])
            break;
          feeder = &op->xfers[f];
        }
        Xfer& x = op->xfers[idx];
        x = Xfer{};
        x.data = resolve(op, s.src);
        x.bytes = s.bytes;
        x.singleCopy = op->singleCopy;
        x.call = op->callPrint;
        x.callShape = op->callShape;
        x.callNo = op->call.no;
        if (feeder != nullptr) {
          x.feeder = feeder;
          feeder->feeds = &x;
        }
        Status st = link->postSend(&x);
        if (!st.ok()) {
          control_.fail(st.withContext("posting a send to " + comm_->describeRank(q.peer)), q.peer, true);
          return true;
        }
        ++c.sendPost;
        any = true;
      }
      if (c.sendPost < q.sends.size()) sendBlocked_[q.peer] = epoch_;
    }
    if (recvBlocked_[q.peer] != epoch_) {
      while (c.recvPost < q.recvs.size()) {
        const int32_t idx = q.recvs[c.recvPost];
        const Step& s = plan->steps[idx];
        if (!depsDone(op, s)) break;
        Xfer& x = op->xfers[idx];
        x = Xfer{};
        x.data = resolve(op, s.dst);
        x.bytes = s.bytes;
        x.capacity = s.bytes;
        x.call = op->callPrint;
        x.callShape = op->callShape;
        x.callNo = op->call.no;
        if (s.kind == StepKind::kRecvReduce) {
          x.local = resolve(op, s.src);
          x.reduce = &op->reduceSpec[s.order == FoldOrder::kIncomingFirst ? 1 : 0];
        }
        if (!plan->outputOnly.empty() && plan->outputOnly[idx] != 0) {
          // The call's own outputs may bypass the cache; a scratch chunk that only its forwarded
          // send reads is not written at all where it is forwarded.
          const bool scratch = s.dst.buf == Buf::kScratch;
          x.stream = op->streamOut && !scratch;
          x.forwardOnly = scratch;
        }
        op->done[idx] = kPosted;
        Status st = link->postRecv(&x);
        if (!st.ok()) {
          control_.fail(st.withContext("posting a receive from " + comm_->describeRank(q.peer)), q.peer, true);
          return true;
        }
        ++c.recvPost;
        any = true;
      }
      if (c.recvPost < q.recvs.size()) recvBlocked_[q.peer] = epoch_;
    }
  }
  return any;
}

// Retires completed transfers (in posting order) and runs local steps whose inputs are ready.
bool Engine::reapAndRunLocals(Op* op) {
  const Plan* plan = op->plan;
  bool any = false;
  for (size_t qi = 0; qi < plan->peers.size(); ++qi) {
    const Plan::PeerQueue& q = plan->peers[qi];
    Op::Cursor& c = op->cursors[qi];
    while (c.sendDone < c.sendPost && op->xfers[q.sends[c.sendDone]].complete) {
      op->done[q.sends[c.sendDone++]] = kDone;
      --op->remaining;
      any = true;
    }
    while (c.recvDone < c.recvPost && op->xfers[q.recvs[c.recvDone]].complete) {
      op->done[q.recvs[c.recvDone++]] = kDone;
      --op->remaining;
      any = true;
    }
  }
  while (op->localNext < plan->locals.size()) {
    const int32_t idx = plan->locals[op->localNext];
    const Step& s = plan->steps[idx];
    if (op->computeTicket != 0) {  // issued earlier, finishing elsewhere (a device stream)
      if (!compute_->done(op->computeTicket)) break;
      op->computeTicket = 0;
    } else {
      if (!depsDone(op, s)) break;
      bool whole = true;
      if (!runLocal(op, s, &whole)) return true;  // failed: failAll() finishes the op
      if (op->computeTicket != 0) break;
      if (!whole) {  // a piece of a large copy: the op's transfers get their turn before the next
        any = true;
        break;
      }
    }
    op->done[idx] = kDone;
    --op->remaining;
    ++op->localNext;
    any = true;
  }
  if (op->remaining == 0 && !op->finished) {
    op->finished = true;
    any = true;
  }
  return any;
}

// Starts one local step whose dependencies are done. A closed switch: each kind is named, and one
// that is none of them (a corrupt plan) fails the communicator instead of running as something else.
// Returns false when the communicator failed; op->computeTicket is set when the step finishes later.
bool Engine::runLocal(Op* op, const Step& s, bool* whole) {
  Status st;
  *whole = true;
  switch (s.kind) {
    case StepKind::kJoin:
      return true;
    case StepKind::kCheck: {
      CallHeader mine, theirs;
      memcpy(&mine, resolve(op, s.dst), sizeof(mine));
      memcpy(&theirs, resolve(op, s.src), sizeof(theirs));
      return checkHeaders(mine, theirs);
    }
    case StepKind::kCopy:
    case StepKind::kScale:
    case StepKind::kScaleBy:
    case StepKind::kAxpy:
    case StepKind::kReduce: {
      LocalWork w;
      w.step = &s;
      w.dst = resolve(op, s.dst);
      w.src = resolve(op, s.src);
      if (s.kind == StepKind::kReduce) {
        w.incoming = op->bufs[static_cast<int>(Buf::kScratch)] + s.incoming;
        if (s.order == FoldOrder::kIncomingFirst) std::swap(w.src, w.incoming);  // the kernels fold src op incoming
      }
      w.dtype = op->dtype;
      w.kernel = op->kernel;
      w.nranks = op->plan->nranks;
      w.stream = op->streamOut && s.kind == StepKind::kCopy && s.dst.buf == Buf::kRecv;
      Step piece;
      const uint64_t now = s.kind == StepKind::kCopy ? copyNow(op, s, w) : s.bytes;
      if (now != s.bytes) {
        piece = s;
        piece.bytes = now;
        w.step = &piece;
        w.dst += op->localAt;
        w.src += op->localAt;
        op->localAt += piece.bytes;
        *whole = op->localAt == s.bytes;
        if (*whole) op->localAt = 0;
      }
      st = compute_->issue(w, &op->computeTicket);
      if (st.ok()) return true;
      break;
    }
    case StepKind::kSend:
    case StepKind::kRecv:
    case StepKind::kRecvReduce:
      st = errorf(braidInternalError, "a transfer step among the local steps");
      break;
  }
  if (st.ok()) st = errorf(braidInternalError, "unknown step kind %d", static_cast<int>(s.kind));
  control_.fail(st.withContext(std::string(collName(op->coll)) + " on " + comm_->describeRank(comm_->rank)), -1, true);
  return false;
}

uint64_t Engine::copyNow(const Op* op, const Step& s, const LocalWork& w) const {
  const uint64_t left = s.bytes - op->localAt;
  if (copyPiece_ == 0 || left <= copyPiece_) return left;
  if (op->localAt == 0 && overlaps(w.dst, s.bytes, w.src, s.bytes)) return left;
  // A transfer of the op on the wire: a piece, then the transports. None (the op's transfers wait for
  // this copy, as an out-of-place AllReduce's for its input copy, or are done): the rest at once.
  for (const Op::Cursor& c : op->cursors)
    if (c.sendPost > c.sendDone || c.recvPost > c.recvDone) return copyPiece_;
  return left;
}

void Engine::markDone(Op* op) {
  if (op->gate != nullptr) {
    op->gate->retire();
    gatedActive_.fetch_sub(1, std::memory_order_relaxed);
  }
  activeCount_.fetch_sub(1, std::memory_order_acq_rel);
  op->state.store(Op::kDone, std::memory_order_release);
  // Nobody will wait for a detached op (the blocking form of a device call returned at once): its
  // failure reaches the caller through the communicator's (braidCommGetAsyncError).
  if (op->detached) releaseLocked(op);
}

void Engine::failAll() {
  Status f = control_.failure();
  if (head_ < active_.size() || !tagActive_.empty() || byesPending_ != 0) failureMet_ = true;
  // Calls in place on the peers' memory, and transfers by the peers' own hands (shm's single copy),
  // end only once the peers are out of their buffers: the caller may reuse them as soon as it sees
  // the error.
  keepPeersOut();
  for (size_t i = head_; i < active_.size(); ++i) {
    Op* op = active_[i];
    // A device call's stream must not wait forever for a result that will not come.
    if (op->gate != nullptr && !op->gateReleased) {
      op->gate->release(false);
      op->gateReleased = true;
    }
    op->result = f.code();
    char ctx[96];
    snprintf(ctx, sizeof(ctx), " [%s #%llu on rank %d", collName(op->coll), static_cast<unsigned long long>(op->seq),
             comm_->rank);
    op->error = f.message() + ctx + control_.reachedText(op->seq, f.code() == braidTimeout) + "]";
    markDone(op);
  }
  active_.clear();
  head_ = 0;
  drainStop_ = nullptr;
  if (!tagActive_.empty() || byesPending_ != 0) failTagged(f);
}

bool Engine::failureMet() {
  if (!control_.failed()) return false;
  lock();
  // Operations still pending meet it on the next pass (failAll), or ran before it (a drain).
  const bool met = failureMet_ || head_ < active_.size() || !tagActive_.empty() || byesPending_ != 0;
  unlock();
  return met;
}

bool Engine::driveTransport(int t, int peer) {
  transportDriven_[t] = epoch_;
  Status st = comm_->transports[t]->progress(&peer);
  if (st.ok()) return true;
  if (dropDrainedLeaver(t, peer, st)) return true;
  if (st.code() == braidInvalidUsage) {
    // A message of another call (otherCallError): this rank's own verdict, which no notice could
    // explain better, and no rank failed. Told at once, before a peer that saw it too leaves.
    control_.fail(errorf(braidInvalidUsage, "%s: %s", comm_->describeRank(comm_->rank).c_str(), st.message().c_str()),
                  -1, true);
    return false;
  }
  // A closed link may be a survivor that already gave up because of someone else: hold the
  // blame for kBlameGraceNs so a notice naming the root cause can arrive first.
  linkFailure_ = st;
  linkFailedPeer_ = peer;
  linkFailedAtNs_ = nowNs();
  BRAID_INFO(kLogNet, "link to %s failed (%s); waiting for a failure notice", comm_->describeRank(peer).c_str(),
             st.message().c_str());
  return false;
}

bool Engine::dropDrainedLeaver(int t, int peer, const Status& st) {
  if (drainStop_ == nullptr || peer < 0 || t < 0 || !control_.left(peer) || !leaverFinished(peer)) return false;
  // Draining (checkLeavers): the leaver's link ends under the transfers of the operations past the
  // stop, which fail anyway; those before it have what they needed from it. The transport lets go
  // of the link (the communicator still owns it) and the others go on.
  BRAID_INFO(kLogNet, "link to %s, which left, ended (%s); dropped while earlier operations finish",
             comm_->describeRank(peer).c_str(), st.message().c_str());
  comm_->transports[t]->dropLink(peer);
  return true;
}

bool Engine::progressOnce() {
  if (control_.failed() && !draining()) {
    bool any = head_ < active_.size() || !tagActive_.empty() || byesPending_ != 0;
    failAll();
    return any;
  }
  if (head_ >= active_.size() && tagActive_.empty() && byesPending_ == 0) return false;
  if (drainStop_ == nullptr && leaversToCheck() && checkLeavers()) return true;
  if (linkFailedAtNs_ != 0 && linkFailedTag_ != 0 && control_.left(linkFailedPeer_)) {
    tagPeerLeft(linkFailedTag_ - 1, linkFailedPeer_);  // its goodbye came after all
    linkFailedAtNs_ = 0;
    linkFailedTag_ = 0;
  }
  // A failure held since before the drain began may be the leaver's link ending: dropped too.
  if (linkFailedAtNs_ != 0 && linkFailedTag_ == 0 && linkFailedPeer_ >= 0 &&
      dropDrainedLeaver(comm_->transportOf[linkFailedPeer_], linkFailedPeer_, linkFailure_))
    linkFailedAtNs_ = 0;
  if (linkFailedAtNs_ != 0) {
    const int64_t held = nowNs() - linkFailedAtNs_;
    if (held < kBlameGraceNs) return false;
    // The peer's goodbye (or a notice) may be queued unread on its control socket, the background
    // thread not having run yet on a busy host: let it be read before the blame falls. A rank other
    // than 0 hears of another's death or leaving only through rank 0, whose thread may not have run
    // yet either (a loaded host: mp-failure and mp-leave saw the link's error win by 200 ms), so
    // it waits as long for the notice unless the broken link is the one to rank 0 or rank 0 left
    // (it relays nothing after its goodbye). A link that broke under two live ranks is then blamed
    // up to 2 s later.
    const bool relayed = comm_->rank != 0 && linkFailedPeer_ != 0 && !control_.left(0);
    if (held < kMaxBlameGraceNs && !control_.left(linkFailedPeer_) &&
        (relayed || control_.ctrlPending(linkFailedPeer_)))
      return false;
    // A leaver whose goodbye said how far it got had finished what is still waiting here (what it
    // had not, checkLeavers failed already): the link's own error says what went wrong (a length
    // that differs, bytes that never came). Without that record, its leaving is the likely cause.
    if (control_.left(linkFailedPeer_) && !leaverFinished(linkFailedPeer_))
      linkFailure_ = errorf(braidRemoteError,
                            "%s left the communicator (braidCommDestroy) while an operation of this rank still needed "
                            "it (it did not post the call, or the calls differ)",
                            comm_->describeRank(linkFailedPeer_).c_str());
    control_.fail(linkFailure_, linkFailedPeer_, true);
    failAll();
    return true;
  }
  ++epoch_;
  bool any = false;
  for (size_t i = head_; i < active_.size(); ++i) {
    Op* op = active_[i];
    if (op == drainStop_) break;  // it and the later ones fail once the drain ends
    if (op->finished) continue;
    // A gated op not yet started holds back every later one: links get steps in issue order.
    if (!op->started && !startGated(op)) break;
    if (op->isDirect) {
      any |= stepDirect(op);
      // Until every rank's mail said whether it runs in place, nobody knows whether its plan's
      // steps come before the later ops' on the links (nor while a mismatch is held: it fails).
      if (op->isDirect && (op->small.phase < 3 || op->small.phase == 7) && !op->finished) break;
      if (op->isDirect || op->finished) continue;
    }
    any |= op->isSmall ? stepSmall(op) : postSteps(op);
  }
  for (size_t i = head_; i < active_.size(); ++i) {
    const Plan* plan = active_[i]->plan;
    if (active_[i]->finished || active_[i]->isDirect) continue;
    for (const Plan::PeerQueue& q : plan->peers) {
      // Each transport drives all of its links in one call, once per pass.
      const int t = comm_->transportOf[q.peer];
      if (transportDriven_[t] == epoch_) continue;
      if (!driveTransport(t, q.peer)) return true;
    }
  }
  if (!tagActive_.empty() || byesPending_ != 0) {
    bool linkFailed = false;
    any |= progressTagged(&linkFailed);
    if (linkFailed) return true;
  }
  for (size_t i = head_; i < active_.size() && active_[i] != drainStop_; ++i)
    if (!active_[i]->finished && active_[i]->started && !active_[i]->isSmall && !active_[i]->isDirect)
      any |= reapAndRunLocals(active_[i]);
  // Completion in issue order; a device call's once its result is back on the device too.
  while (head_ < active_.size() && active_[head_]->finished) {
    Op* op = active_[head_];
    if (op->gate != nullptr && !gateSettled(op)) break;
    ++head_;
    op->result = braidSuccess;
    markDone(op);
    any = true;
  }
  if (head_ == active_.size()) {
    active_.clear();
    head_ = 0;
  } else if (head_ > 64 && head_ * 2 > active_.size()) {
    active_.erase(active_.begin(), active_.begin() + static_cast<long>(head_));
    head_ = 0;
  }
  checkDeadline();
  return any;
}

}  // namespace braid
