// The C API of the collectives and point-to-point calls: argument checks (nothing is touched when
// one fails), group recording, and posting to the executor.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "src/api.h"
#include "src/base/overlap.h"
#include "src/comm.h"
#include "src/cuda/runtime.h"

using namespace braid;

namespace {

struct CallArgs {
  Coll coll;
  const void* send;
  void* recv;
  size_t count;
  braidDataType_t dtype;
  braidRedOp_t op;
  int root;  // rooted collectives; the peer for point-to-point
  braidComm_t handle;
  bool isSend = false;        // point-to-point: a send (buffer in `send`) or a receive (in `recv`)
  braidComm* comm = nullptr;  // `handle` resolved: at the call, and again at braidGroupEnd
  // A device call recorded in a group (src/api_cuda.cc): staged on `stream` at braidGroupEnd.
  bool onDevice = false;
  braidStream_t stream = nullptr;
  CallBuffers bufs{};
};

// A call recorded between braidGroupStart and braidGroupEnd.
struct GroupState {
  int depth = 0;
  std::vector<CallArgs> calls;
  std::vector<Op*> posted;  // tagged operations posted inside the group (src/api_p2p.cc)
};
thread_local GroupState tGroup;
// Threads between braidGroupStart and braidGroupEnd: while none is, a call knows it is not in a group
// without looking at its thread's state (a thread-local of a shared library costs a call to
// __tls_get_addr, on every collective's path). A thread's own count is always visible to it.
std::atomic<int> gGroupsOpen{0};
bool inGroupHere() { return gGroupsOpen.load(std::memory_order_relaxed) != 0 && tGroup.depth > 0; }

Status checkCommon(CallArgs* a, braidStream_t stream) {
  return checkCommTypeStream(a->handle, a->dtype, stream, &a->comm);
}

// A collective's arguments as checkColl found them.
struct Checked {
  size_t es = 0;                    // bytes per element
  size_t sendMul = 1, recvMul = 1;  // elements of the send and receive buffers, in units of count
  uint64_t sendBytes = 0;           // of the send buffer this rank reads
  uint64_t recvBytes = 0;           // of the receive buffer this rank writes
  bool inPlace = false;
  braidRedOp_t op = braidSum;  // the call's op where it reduces, else braidSum
  int root = 0;                // the call's root where it has one, else 0
};

// Checks a collective's arguments (the communicator and datatype are checked already). Nothing is
// written but *k, and that only on success.
Status checkColl(const CallArgs& a, Checked* k) {
  const int n = a.comm->nranks, rank = a.comm->rank;
  size_t sendMul = 1, recvMul = 1;
  bool reducing = false, rooted = false;
  switch (a.coll) {
    case Coll::kAllReduce:
      reducing = true;
      break;
    case Coll::kReduce:
      reducing = rooted = true;
      break;
    case Coll::kReduceScatter:
      reducing = true;
      sendMul = n;
      break;
    case Coll::kBroadcast:
      rooted = true;
      break;
    case Coll::kAllGather:
      recvMul = n;
      break;
    case Coll::kAllToAll:
      sendMul = recvMul = n;
      break;
    case Coll::kGather:
      rooted = true;
      recvMul = n;
      break;
    case Coll::kScatter:
      rooted = true;
      sendMul = n;
      break;
    default:
      break;
  }
  if (reducing && !validRedop(a.op)) return errorf(braidInvalidArgument, "op %d is not a braidRedOp_t", a.op);
  if (rooted && (a.root < 0 || a.root >= n))
    return errorf(braidInvalidArgument, "root %d is out of range [0, %d)", a.root, n);
  const size_t es = dtypeSize(a.dtype);
  // count * es * n must fit a ptrdiff_t (a multiplication checked for overflow: no division per call).
  uint64_t allBytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(a.count), es * static_cast<size_t>(n), &allBytes) ||
      allBytes > static_cast<uint64_t>(PTRDIFF_MAX))
    return errorf(braidInvalidArgument, "count %zu overflows the buffer size", a.count);
  uint64_t sendBytes = a.count * sendMul * es, recvBytes = a.count * recvMul * es;
  if (rooted && rank != a.root) {
    // Broadcast and Scatter only read the root's send buffer, Reduce and Gather only write its
    // receive buffer.
    if (a.coll == Coll::kBroadcast || a.coll == Coll::kScatter)
      sendBytes = 0;
    else
      recvBytes = 0;
  }
  if (a.coll == Coll::kBarrier) sendBytes = recvBytes = 0;
  if (sendBytes > 0 && a.send == nullptr) return errorf(braidInvalidArgument, "sendbuff is NULL");
  if (recvBytes > 0 && a.recv == nullptr) return errorf(braidInvalidArgument, "recvbuff is NULL");
  const char* s = static_cast<const char*>(a.send);
  const char* r = static_cast<const char*>(a.recv);
  bool inPlace = false;
  switch (a.coll) {
    case Coll::kAllGather:
      inPlace = s != nullptr && s == r + rank * a.count * es;
      break;
    case Coll::kReduceScatter:
      inPlace = r != nullptr && r == s + rank * a.count * es;
      break;
    case Coll::kGather:  // the root's own block already in its place; the other ranks have no layout
      inPlace = rank == a.root && s != nullptr && s == r + rank * a.count * es;
      break;
    case Coll::kScatter:
      inPlace = rank == a.root && r != nullptr && r == s + rank * a.count * es;
      break;
    default:
      inPlace = s == r && s != nullptr;
      break;
  }
  if (!inPlace && overlaps(s, sendBytes, r, recvBytes))
    return errorf(braidInvalidArgument, "sendbuff and recvbuff overlap without being the in-place layout");
  *k = Checked{es, sendMul, recvMul, sendBytes, recvBytes, inPlace, reducing ? a.op : braidSum, rooted ? a.root : 0};
  return okStatus();
}

// The bytes of a checked call's buffers on all ranks of this host.
uint64_t hostBytesOf(const CallArgs& a, const Checked& k) {
  return (k.sendBytes + k.recvBytes) * static_cast<uint64_t>(a.comm->localRanks);
}

// Past the cache, outputs bypass it (src/base/nt_store.h): out of place, and the call's buffers on
// this host exceed BRAID_NT_STORES_MIN.
bool streamsOut(const CallArgs& a, const Checked& k) {
  return !k.inPlace && hostBytesOf(a, k) > a.comm->settings.ntStoresMin;
}

// The algorithm the selector picks for a checked call.
Algo algoOf(const CallArgs& a, const Checked& k) {
  // The selector prices the whole buffer (AllGather/ReduceScatter/AllToAll: all ranks' pieces).
  const uint64_t callBytes = static_cast<uint64_t>(a.count) * k.es * std::max(k.sendMul, k.recvMul);
  const bool avgFloat = k.op == braidAvg && (a.dtype == braidFloat16 || a.dtype == braidBfloat16 ||
                                             a.dtype == braidFloat32 || a.dtype == braidFloat64);
  return a.comm->selector.pick(a.coll, callBytes, avgFloat);
}

// The plan shape of a checked call into *out, a default-constructed PostArgs of the caller's (only
// what a call derives is set here).
void fillPost(const CallArgs& a, const Checked& k, PostArgs* out) {
  PostArgs& p = *out;
  p.shape.coll = a.coll;
  p.shape.rank = a.comm->rank;
  p.shape.nranks = a.comm->nranks;
  p.shape.count = a.count;
  p.shape.elemSize = k.es;
  p.shape.root = k.root;
  p.shape.inPlace = k.inPlace;
  p.shape.avg = k.op == braidAvg;
  p.shape.chunkBytes = a.comm->settings.chunkBytes;
  p.shape.algo = algoOf(a, k);
  p.shape.hostOf = a.comm->cluster.hostOf.data();
  p.shape.gossipRounds = a.comm->gossipRounds;
  p.send = a.send;
  p.recv = a.recv;
  p.dtype = a.dtype;
  p.op = k.op;
  p.streamOut = streamsOut(a, k);
  // Under the cut, exchanges copy once, on the receiver (shm CMA).
  const uint64_t cut = a.comm->settings.ntStoresMin;
  p.singleCopy = (a.coll == Coll::kAllGather || a.coll == Coll::kAllToAll) && hostBytesOf(a, k) <= cut;
  // One to many (Broadcast, Scatter): over the FIFO the root copies every byte out, and out of place
  // once more into its own output, while each reader copies once; by single copy the readers do all
  // the copying and the root only its own copy. It wins while the data is in cache: up to 1/8 of
  // the cut per host out of place and 1/32 in place (2 and 4 ranks on 2 cores, cut 64 MiB;
  // perf/results/2026-12-02-one-to-many.md). Only the sender's choice matters (ShmLink::usesCma).
  if (a.coll == Coll::kBroadcast || a.coll == Coll::kScatter)
    p.singleCopy = a.count * k.es * static_cast<uint64_t>(a.comm->localRanks) <= cut >> (k.inPlace ? 5 : 3);
}

// Checks a collective's arguments and derives its plan shape, and the bytes of its buffers this rank
// touches (for device buffers, when asked). Nothing is written anywhere but *out and *bufs, and those
// only on success. *out is a default-constructed PostArgs of the caller's.
Status shapeOf(const CallArgs& a, PostArgs* out, CallBuffers* bufs = nullptr) {
  Checked k;
  BRAID_TRY(checkColl(a, &k));
  fillPost(a, k, out);
  if (bufs != nullptr) *bufs = CallBuffers{a.send, k.sendBytes, a.recv, k.recvBytes, k.inPlace};
  return okStatus();
}

Status checkP2p(const CallArgs& a) {
  const int n = a.comm->nranks;
  if (a.root < 0 || a.root >= n) return errorf(braidInvalidArgument, "peer %d is out of range [0, %d)", a.root, n);
  return checkP2pBuffer(a.isSend ? a.send : a.recv, a.count, a.dtype, a.isSend);
}

// Builds the plan of a comm's point-to-point calls, in call order. Self-sends pair with
// self-receives in order and become copies.
Status buildP2pPlan(braidComm* comm, const std::vector<const CallArgs*>& calls, Plan* plan) {
  plan->coll = Coll::kSendRecv;
  plan->algorithm = "p2p";
  plan->rank = comm->rank;
  plan->nranks = comm->nranks;
  std::vector<const CallArgs*> selfSends, selfRecvs;
  for (const CallArgs* c : calls) {
    const bool isSend = c->isSend;
    const uint64_t bytes = c->count * dtypeSize(c->dtype);
    if (c->root == comm->rank) {
      (isSend ? selfSends : selfRecvs).push_back(c);
      continue;
    }
    if (isSend)
      plan->send(c->root, BufRef{Buf::kAbsolute, reinterpret_cast<uint64_t>(c->send)}, bytes);
    else
      plan->recv(c->root, BufRef{Buf::kAbsolute, reinterpret_cast<uint64_t>(c->recv)}, bytes);
  }
  if (selfSends.size() != selfRecvs.size())
    return errorf(braidInvalidUsage, "%zu sends to self but %zu receives from self in one group", selfSends.size(),
                  selfRecvs.size());
  for (size_t i = 0; i < selfSends.size(); ++i) {
    uint64_t sb = selfSends[i]->count * dtypeSize(selfSends[i]->dtype);
    uint64_t rb = selfRecvs[i]->count * dtypeSize(selfRecvs[i]->dtype);
    if (sb != rb)
      return errorf(braidInvalidArgument, "send to self of %llu bytes meets a receive of %llu bytes",
                    static_cast<unsigned long long>(sb), static_cast<unsigned long long>(rb));
    plan->copy(BufRef{Buf::kAbsolute, reinterpret_cast<uint64_t>(selfRecvs[i]->recv)},
               BufRef{Buf::kAbsolute, reinterpret_cast<uint64_t>(selfSends[i]->send)}, sb);
  }
  return okStatus();
}

// A communicator's share of a group: its collectives in call order, then its point-to-point calls.
struct CommCalls {
  braidComm* comm;
  std::vector<const CallArgs*> colls, p2p;
};

// Checks that a communicator's device calls in a group can be staged together: one stream, and
// point-to-point calls all on device buffers or all on host buffers (a call without bytes goes
// either way). *stream: the device calls' stream; *p2pOnDevice: the point-to-point op is staged.
Status checkDeviceGroup(const CommCalls& cc, braidStream_t* stream, bool* p2pOnDevice) {
  bool any = false, p2pDev = false, p2pHost = false;
  auto see = [&](const CallArgs& c) -> Status {
    if (!c.onDevice) return okStatus();
    if (any && c.stream != *stream)
      return errorf(braidInvalidUsage,
                    "a group's device calls on one communicator must use one stream (two were given: %p and %p)",
                    *stream, c.stream);
    any = true;
    *stream = c.stream;
    return okStatus();
  };
  for (const CallArgs* c : cc.colls) BRAID_TRY(see(*c));
  for (const CallArgs* c : cc.p2p) {
    BRAID_TRY(see(*c));
    if (c->onDevice)
      p2pDev = true;
    else if (c->count > 0)
      p2pHost = true;
  }
  if (p2pDev && p2pHost)
    return errorf(braidInvalidUsage,
                  "a group's sends and receives on one communicator mix host and device buffers: the point-to-point "
                  "calls of a group run as one operation, on host or on device buffers");
  *p2pOnDevice = p2pDev;
  return okStatus();
}

Status issueStaged(const CallArgs& a, PostArgs p, const CallBuffers& bufs, braidStream_t stream,
                   braidRequest_t* request, bool nonblocking);
size_t stagingPieces(const CallArgs& a, const PostArgs& p);
Status issueStagedPieces(const CallArgs& a, size_t n, braidStream_t stream, braidRequest_t* request, bool nonblocking);

// Posts one communicator's share of a group. Host operations go to *ops (the caller waits for
// them); device operations are staged together first (one batch on their stream) and posted
// detached, as a blocking device call is: the group returns once they are enqueued.
Status postCommCalls(const CommCalls& cc, bool userOwned, std::vector<Op*>* ops) {
  braidComm* comm = cc.comm;
  braidStream_t stream = nullptr;
  bool p2pOnDevice = false;
  BRAID_TRY(checkDeviceGroup(cc, &stream, &p2pOnDevice));
  if (cc.p2p.empty() && cc.colls.size() == 1 && cc.colls[0]->onDevice) {
    // A group of one device collective (a framework's coalescing of a single call): as the call
    // alone runs, on cuda_ipc or staged in pieces where it would.
    const CallArgs& c = *cc.colls[0];
    PostArgs p;
    BRAID_TRY(shapeOf(c, &p));
    const size_t pieces = stagingPieces(c, p);
    if (pieces > 1) return issueStagedPieces(c, pieces, c.stream, nullptr, false);
    return issueStaged(c, p, c.bufs, c.stream, nullptr, false);
  }
  // The staged operations, in posting order: device collectives, then the point-to-point op.
  std::vector<CallBuffers> bufs;
  std::vector<size_t> first;  // per staged op, its first entry in bufs
  for (const CallArgs* c : cc.colls)
    if (c->onDevice) {
      first.push_back(bufs.size());
      bufs.push_back(c->bufs);
    }
  if (p2pOnDevice) {
    first.push_back(bufs.size());
    for (const CallArgs* c : cc.p2p) bufs.push_back(c->bufs);
  }
  std::vector<StagedCall> staged(bufs.size());
  std::vector<StageOp> stageOps(first.size());
  for (size_t k = 0; k < first.size(); ++k) {
    const size_t end = k + 1 < first.size() ? first[k + 1] : bufs.size();
    stageOps[k] = StageOp{bufs.data() + first[k], end - first[k], staged.data() + first[k]};
  }
  if (!stageOps.empty()) BRAID_TRY(stageDeviceOps(comm, stageOps.data(), stageOps.size(), stream));
  size_t nextStaged = 0;  // the staged ops are posted in order; those not reached are abandoned
  auto abandonRest = [&] {
    for (size_t k = nextStaged; k < stageOps.size(); ++k) abandonDeviceGate(comm, stageOps[k].out[0].gate);
  };
  for (const CallArgs* c : cc.colls) {
    PostArgs p;
    Status st = shapeOf(*c, &p);
    Op* op = nullptr;
    if (st.ok() && c->onDevice) {
      const StagedCall& sc = stageOps[nextStaged].out[0];
      p.send = sc.send;
      p.recv = sc.recv;
      p.gate = sc.gate;
      p.detached = true;
      st = comm->engine->post(p, true, &op);
      if (st.ok()) ++nextStaged;
    } else if (st.ok()) {
      st = comm->engine->post(p, userOwned, &op);
      if (st.ok()) ops->push_back(op);
    }
    if (!st.ok()) {
      abandonRest();
      return st;
    }
  }
  if (cc.p2p.empty()) return okStatus();
  for (const CallArgs* c : cc.p2p)
    BRAID_INFO(kLogP2p, "%s rank %d: %llu bytes%s%s", c->isSend ? "send to" : "receive from", c->root,
               static_cast<unsigned long long>(c->count * dtypeSize(c->dtype)), cc.p2p.size() > 1 ? " (grouped)" : "",
               p2pOnDevice ? " (device)" : "");
  Plan plan;
  Op* op = nullptr;
  Status st;
  if (p2pOnDevice) {
    // The plan runs on the staged copies of the calls' buffers.
    std::vector<CallArgs> onHost;
    onHost.reserve(cc.p2p.size());
    for (size_t i = 0; i < cc.p2p.size(); ++i) {
      onHost.push_back(*cc.p2p[i]);
      onHost.back().send = stageOps[nextStaged].out[i].send;
      onHost.back().recv = stageOps[nextStaged].out[i].recv;
    }
    std::vector<const CallArgs*> ptrs;
    for (const CallArgs& c : onHost) ptrs.push_back(&c);
    st = buildP2pPlan(comm, ptrs, &plan);
    if (st.ok()) st = comm->engine->postGroup(&plan, true, &op, stageOps[nextStaged].out[0].gate, true);
    if (st.ok()) ++nextStaged;
  } else {
    st = buildP2pPlan(comm, cc.p2p, &plan);
    if (st.ok()) st = comm->engine->postGroup(&plan, userOwned, &op);
    if (st.ok()) ops->push_back(op);
  }
  if (!st.ok()) abandonRest();
  return st;
}

// Posts a group's calls, communicator by communicator in order of first appearance. Returns the
// host operations to wait for through `ops`.
Status postCalls(const std::vector<CallArgs>& calls, bool userOwned, std::vector<Op*>* ops) {
  std::vector<CommCalls> comms;
  for (const CallArgs& c : calls) {
    auto it = std::find_if(comms.begin(), comms.end(), [&](const CommCalls& cc) { return cc.comm == c.comm; });
    if (it == comms.end()) it = comms.insert(comms.end(), CommCalls{c.comm, {}, {}});
    (c.coll == Coll::kSendRecv ? it->p2p : it->colls).push_back(&c);
  }
  for (const CommCalls& cc : comms) BRAID_TRY(postCommCalls(cc, userOwned, ops));
  return okStatus();
}

// A call on device buffers (src/api_cuda.cc): staged on `stream` and posted on the staged host
// buffers, or, for a collective the engine runs in place on the peers' device memory (cuda_ipc),
// on the device buffers with their IPC handles. Returns without waiting; the blocking form's op is
// detached (the engine releases it).
Status issueStaged(const CallArgs& a, PostArgs p, const CallBuffers& bufs, braidStream_t stream,
                   braidRequest_t* request, bool nonblocking) {
  StagedCall staged;
  CallBuffers b = bufs;
  // On one host where every rank reaches every peer's GPU: in place on the peers' device memory.
  b.direct = a.coll != Coll::kSendRecv && a.comm->engine->takesDeviceCall(p.shape);
  if (b.direct && a.coll == Coll::kAllToAll && p.shape.inPlace) {
    b.copyApart = true;  // its peers would read blocks it overwrites
    b.inPlace = false;   // staged as two ranges
  }
  BRAID_TRY(stageDeviceCall(a.comm, b, stream, &staged));
  Op* op = nullptr;
  Status posted;
  if (a.coll == Coll::kSendRecv) {
    CallArgs c = a;
    c.send = staged.send;
    c.recv = staged.recv;
    Plan plan;
    posted = buildP2pPlan(a.comm, {&c}, &plan);
    if (posted.ok()) posted = a.comm->engine->postGroup(&plan, true, &op, staged.gate, !nonblocking);
  } else {
    p.send = staged.send;
    p.recv = staged.recv;
    p.gate = staged.gate;
    p.ipc = staged.ipc;
    p.detached = !nonblocking;
    posted = a.comm->engine->post(p, true, &op);
  }
  if (!posted.ok()) {
    abandonDeviceCall(a.comm, staged);
    return posted;
  }
  if (nonblocking) *request = requestHandle(op);
  return okStatus();
}

// How many pieces a device call on host staging is cut into (1: none). An AllReduce, Broadcast or
// Reduce is element by element, so its pieces are calls of their own on consecutive ranges; staged
// together (DeviceStaging::stageBatch: every piece's copy to the host first, then piece by piece
// its wait and its copy back), piece i + 1's copy in overlaps piece i's transfer, and piece i's
// copy back piece i + 1's. Decided from the call and settings every rank shares, so every rank
// cuts alike.
size_t stagingPieces(const CallArgs& a, const PostArgs& p) {
  if (a.coll != Coll::kAllReduce && a.coll != Coll::kBroadcast && a.coll != Coll::kReduce) return 1;
  const uint64_t piece = a.comm->settings.stagingPiece, bytes = a.count * dtypeSize(a.dtype);
  if (piece == 0 || bytes <= piece || a.comm->engine->takesDeviceCall(p.shape)) return 1;
  return static_cast<size_t>(std::min<uint64_t>(kMaxStagedOps, (bytes + piece - 1) / piece));
}

// A device call cut into `n` pieces (stagingPieces), staged together and posted in order, all
// detached but the last in the nonblocking form: ops complete in issue order and a failure fails
// every later op, so the last piece's request answers for the call.
Status issueStagedPieces(const CallArgs& a, size_t n, braidStream_t stream, braidRequest_t* request, bool nonblocking) {
  const size_t es = dtypeSize(a.dtype);
  const size_t line = 64 / es;  // pieces start on cache lines
  const size_t per = ((a.count + n - 1) / n + line - 1) / line * line;
  std::vector<CallArgs> pieces;
  for (size_t at = 0; at < a.count; at += per) {
    CallArgs c = a;
    c.count = std::min(per, a.count - at);
    if (c.send != nullptr) c.send = static_cast<const char*>(a.send) + at * es;
    if (c.recv != nullptr) c.recv = static_cast<char*>(a.recv) + at * es;
    pieces.push_back(c);
  }
  std::vector<PostArgs> posts(pieces.size());
  std::vector<CallBuffers> bufs(pieces.size());
  std::vector<StagedCall> staged(pieces.size());
  std::vector<StageOp> ops(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    BRAID_TRY(shapeOf(pieces[i], &posts[i], &bufs[i]));
    ops[i] = StageOp{&bufs[i], 1, &staged[i]};
  }
  BRAID_TRY(stageDeviceOps(a.comm, ops.data(), ops.size(), stream));
  for (size_t i = 0; i < pieces.size(); ++i) {
    PostArgs& p = posts[i];
    p.send = staged[i].send;
    p.recv = staged[i].recv;
    p.gate = staged[i].gate;
    const bool last = i + 1 == pieces.size();
    p.detached = !(nonblocking && last);
    Op* op = nullptr;
    const Status posted = a.comm->engine->post(p, true, &op);
    if (!posted.ok()) {
      for (size_t j = i; j < pieces.size(); ++j) abandonDeviceGate(a.comm, staged[j].gate);
      return posted.withContext("piece " + std::to_string(i + 1) + " of " + std::to_string(pieces.size()) +
                                " of a staged device call");
    }
    if (nonblocking && last) *request = requestHandle(op);
  }
  return okStatus();
}

Status waitAll(const std::vector<Op*>& ops) {
  Status first;
  for (Op* op : ops) {
    Status s = op->engine->wait(op);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

// A call (its point-to-point arguments checked) on a communicator with a CUDA device: its buffers
// decide (src/api_cuda.cc). *staged: it went through host staging, and is issued; else *p holds its
// shape for the host path.
Status routeOnDevice(const CallArgs& a, braidStream_t stream, braidRequest_t* request, bool nonblocking, PostArgs* p,
                     bool* staged) {
  CallBuffers bufs{};
  if (a.coll == Coll::kSendRecv) {
    const uint64_t bytes = a.count * dtypeSize(a.dtype);
    bufs = a.isSend ? CallBuffers{a.send, bytes, nullptr, 0, false} : CallBuffers{nullptr, 0, a.recv, bytes, false};
  } else {
    BRAID_TRY(shapeOf(a, p, &bufs));
  }
  BRAID_TRY(routeDeviceCall(a.comm, bufs, stream, staged));
  if (!*staged) return okStatus();
  if (inGroupHere()) {
    // Staged with the rest of the group at braidGroupEnd; the stream is checked now.
    if (nonblocking) return errorf(braidInvalidUsage, "nonblocking calls cannot be part of a group");
    BRAID_TRY(checkDeviceStream(a.comm, stream));
    CallArgs c = a;
    c.onDevice = true;
    c.stream = stream;
    c.bufs = bufs;
    tGroup.calls.push_back(c);
    return okStatus();
  }
  if (a.coll == Coll::kSendRecv && a.root == a.comm->rank)
    return errorf(braidInvalidUsage, "a send to or receive from self needs its partner in the same group");
  const size_t pieces = a.coll == Coll::kSendRecv ? 1 : stagingPieces(a, *p);
  if (pieces > 1) return issueStagedPieces(a, pieces, stream, request, nonblocking);
  return issueStaged(a, *p, bufs, stream, request, nonblocking);
}

// A call checked and shaped (p; point-to-point: checked only): posted, or recorded in the group.
Status issueShaped(const CallArgs& a, const PostArgs& p, braidRequest_t* request, bool nonblocking) {
  const bool grouped = inGroupHere();
  if (a.coll != Coll::kSendRecv && !grouped) {
    // The hot path: no group, no allocation (the plan and the op come from the engine's pools).
    // Hotter still: a small blocking call on one host, run on the mailboxes at once. Without a CUDA
    // device issue() offered it to them already, from its checked arguments.
    Status small;
    if (!nonblocking && a.comm->cudaDevice >= 0 && a.comm->engine->runSmall(smallArgsOf(p), &small)) return small;
    Op* op = nullptr;
    BRAID_TRY(a.comm->engine->post(p, nonblocking, &op));
    if (nonblocking) {
      *request = requestHandle(op);
      return okStatus();
    }
    return a.comm->engine->wait(op);
  }
  if (grouped) {
    if (nonblocking) return errorf(braidInvalidUsage, "nonblocking calls cannot be part of a group");
    tGroup.calls.push_back(a);
    return okStatus();
  }
  if (a.coll == Coll::kSendRecv && a.root == a.comm->rank)
    return errorf(braidInvalidUsage, "a send to or receive from self needs its partner in the same group");
  std::vector<Op*> ops;
  BRAID_TRY(postCalls({a}, nonblocking, &ops));
  if (nonblocking) {
    *request = requestHandle(ops.front());
    return okStatus();
  }
  return waitAll(ops);
}

// The one path of every collective and point-to-point call.
Status issue(CallArgs a, braidStream_t stream, braidRequest_t* request, bool nonblocking) {
  BRAID_TRY(checkCommon(&a, stream));
  if (nonblocking && request == nullptr) return errorf(braidInvalidArgument, "request is NULL");
  if (a.coll != Coll::kSendRecv && a.comm->cudaDevice < 0) {
    Checked k;
    BRAID_TRY(checkColl(a, &k));
    if (!nonblocking && !inGroupHere()) {
      // The hottest path: a small blocking call on one host, run on the mailboxes at once from the
      // checked arguments alone (making and filling a PostArgs was a tenth of this path).
      Status small;
      const SmallArgs sa{a.coll, a.send, a.recv,    a.count,          a.count * k.es, a.dtype,
                         k.op,   k.root, k.inPlace, streamsOut(a, k), algoOf(a, k)};
      if (a.comm->engine->runSmall(sa, &small)) return small;
    }
    PostArgs p;
    fillPost(a, k, &p);
    return issueShaped(a, p, request, nonblocking);
  }
  PostArgs p;
  if (a.coll == Coll::kSendRecv) BRAID_TRY(checkP2p(a));
  if (a.comm->cudaDevice >= 0) {
    // Device buffers: only where the communicator has a CUDA device (never in a build without CUDA).
    bool staged = false;
    BRAID_TRY(routeOnDevice(a, stream, request, nonblocking, &p, &staged));
    if (staged) return okStatus();
  }
  return issueShaped(a, p, request, nonblocking);
}

}  // namespace

Status braid::checkCommTypeStream(braidComm_t handle, braidDataType_t dtype, braidStream_t stream, braidComm** comm) {
  BRAID_TRY(commOf(handle, comm));
  if (!validDtype(dtype)) return errorf(braidInvalidArgument, "datatype %d is not a braidDataType_t", dtype);
  // With a device, the buffers decide (routeDeviceCall); without, a stream cannot mean anything.
  if (stream != nullptr && (*comm)->cudaDevice < 0)
    return errorf(braidInvalidUsage, "stream must be NULL: this communicator has no CUDA device (%s)",
                  whyNoCommDevice());
  return okStatus();
}

Status braid::checkP2pBuffer(const void* buf, size_t count, braidDataType_t dtype, bool isSend) {
  if (count > static_cast<size_t>(PTRDIFF_MAX) / dtypeSize(dtype))
    return errorf(braidInvalidArgument, "count %zu overflows the buffer size", count);
  if (count > 0 && buf == nullptr) return errorf(braidInvalidArgument, "%s is NULL", isSend ? "sendbuff" : "recvbuff");
  return okStatus();
}

bool braid::inGroup() { return inGroupHere(); }
void braid::keepForGroupEnd(braidRequest* op) { tGroup.posted.push_back(op); }

#pragma GCC visibility push(default)

#define BRAID_COLL(name, nb, ...) return guard(name, [&] { return issue(CallArgs{__VA_ARGS__}, stream, request, nb); })

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidRedOp_t op, braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm);
}
braidResult_t braidIAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                              braidRedOp_t op, braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm);
}
braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                             braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kBroadcast, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidIBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                              braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kBroadcast, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, braidRedOp_t op,
                          int root, braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm);
}
braidResult_t braidIReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                           braidRedOp_t op, int root, braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm);
}
braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kAllGather, sendbuff, recvbuff, sendcount, datatype, braidSum, 0, comm);
}
braidResult_t braidIAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                              braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kAllGather, sendbuff, recvbuff, sendcount, datatype, braidSum, 0, comm);
}
braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                 braidRedOp_t op, braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm);
}
braidResult_t braidIReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                  braidRedOp_t op, braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm);
}
braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                            braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kAllToAll, sendbuff, recvbuff, count, datatype, braidSum, 0, comm);
}
braidResult_t braidIAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kAllToAll, sendbuff, recvbuff, count, datatype, braidSum, 0, comm);
}
braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                          braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kGather, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidIGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kGather, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kScatter, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidIScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                            braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kScatter, sendbuff, recvbuff, count, datatype, braidSum, root, comm);
}
braidResult_t braidBarrier(braidComm_t comm, braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kBarrier, nullptr, nullptr, 0, braidUint8, braidSum, 0, comm);
}
braidResult_t braidIBarrier(braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kBarrier, nullptr, nullptr, 0, braidUint8, braidSum, 0, comm);
}
// Point-to-point: a send carries its buffer in `send` (recv NULL), a receive in `recv`.
braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kSendRecv, sendbuff, nullptr, count, datatype, braidSum, peer, comm, true);
}
braidResult_t braidISend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                         braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kSendRecv, sendbuff, nullptr, count, datatype, braidSum, peer, comm, true);
}
braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream) {
  braidRequest_t* request = nullptr;
  BRAID_COLL(__func__, false, Coll::kSendRecv, nullptr, recvbuff, count, datatype, braidSum, peer, comm, false);
}
braidResult_t braidIRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                         braidStream_t stream, braidRequest_t* request) {
  BRAID_COLL(__func__, true, Coll::kSendRecv, nullptr, recvbuff, count, datatype, braidSum, peer, comm, false);
}

braidResult_t braidGroupStart(void) {
  return guard(__func__, [&] {
    if (tGroup.depth++ == 0) gGroupsOpen.fetch_add(1, std::memory_order_relaxed);
    return okStatus();
  });
}

braidResult_t braidGroupEnd(void) {
  return guard(__func__, [&] {
    if (tGroup.depth == 0) return errorf(braidInvalidUsage, "braidGroupEnd without braidGroupStart");
    if (--tGroup.depth > 0) return okStatus();
    gGroupsOpen.fetch_sub(1, std::memory_order_relaxed);
    std::vector<CallArgs> calls;
    calls.swap(tGroup.calls);
    // Tagged operations are running already: waited for whatever happens to the rest.
    std::vector<Op*> ops;
    ops.swap(tGroup.posted);
    // A communicator destroyed since its call was recorded: refused before anything is posted.
    for (CallArgs& c : calls) {
      Status s = commOf(c.handle, &c.comm).withContext("a call of the group");
      if (!s.ok()) {
        (void)waitAll(ops);
        return s;
      }
    }
    Status posted = postCalls(calls, false, &ops);
    Status done = waitAll(ops);
    return posted.ok() ? done : posted;
  });
}

#pragma GCC visibility pop
