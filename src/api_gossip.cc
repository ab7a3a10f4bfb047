// The C API of gossip: graphs (explicit and named) and the neighbour AllReduce. Argument checks
// follow src/api_coll.cc: nothing is touched when one fails.
//
// A graph keeps one side of the mixing per rotation (one for static graphs, ceil(log2 n) for
// onepeer_exp2) and caches the plans of the shapes it has seen, keyed by (count, element size,
// in place, rotation). The ops share them (Engine::postPlan): a call of a known shape allocates
// nothing, and a graph destroyed while its nonblocking calls run leaves them their plans.
//
// Failed peers. The call during which a neighbour fails returns its error (braidRemoteError or
// braidTimeout naming it). The next call on any graph of the communicator moves the graph onto the
// survivors: a communicator shrunk by the ranks failure detection reported (collective over the
// survivors, made once and shared by the communicator's graphs), with failed in-neighbours skipped
// and the remaining weights (self included) scaled back to their original sum.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/mixing.h"
#include "algorithms/patterns/graph.h"
#include "braid/braid.h"
#include "src/api.h"
#include "src/base/overlap.h"
#include "src/comm.h"
#include "src/plan_cache.h"

using namespace braid;

namespace {

// |selfWeight + sum(weights) - 1| allowed: row sums of doubles computed by the caller.
constexpr double kWeightSumTolerance = 1e-9;
// Shapes whose plans a graph keeps. Beyond this the cache drops its plans (running ops keep theirs)
// and starts over: frameworks call gossip with a few bucket sizes, far fewer than this.
constexpr size_t kMaxCachedPlans = 256;

}  // namespace

struct braidGraph {
  braidComm* comm = nullptr;
  // The handle `comm` was created with: a call names the graph's communicator by this (a handle of a
  // destroyed communicator never matches, and never names a newer one).
  braidComm_t commHandle = nullptr;
  std::vector<graph::Topology> sides;  // this rank's side per rotation (size 1 for static graphs)
  // Where calls run: `comm`, or after failures its successor of survivors (owned by `comm`), and
  // each original rank's rank there (-1: failed).
  braidComm* runOn = nullptr;
  std::vector<int> toRun;
  // Guarded by `lock`: the rotation of the next call and the plan cache. A spinlock held only to
  // look up (or build, once per shape) and post, never across a wait.
  std::atomic<bool> lock{false};
  uint64_t calls = 0;
  braid::PlanCache plans{kMaxCachedPlans};  // ops hold copies of the plans they run
};

namespace {

class GraphLock {
 public:
  explicit GraphLock(braidGraph* g) : g_(g) {
    while (g_->lock.exchange(true, std::memory_order_acquire)) sched_yield();
  }
  ~GraphLock() { g_->lock.store(false, std::memory_order_release); }
  GraphLock(const GraphLock&) = delete;
  GraphLock& operator=(const GraphLock&) = delete;

 private:
  braidGraph* g_;
};

bool isFloatType(braidDataType_t dt) {
  return dt == braidFloat16 || dt == braidBfloat16 || dt == braidFloat32 || dt == braidFloat64;
}

// This rank's input to braidGraphCreate, checked without the other ranks. Reads neighbors and
// weights only when the pointers and count allow it.
Status checkLocalGraph(braidComm* comm, int nNeighbors, const int* neighbors, const double* weights, double selfWeight,
                       braidGraph_t* graph) {
  const int n = comm->nranks, rank = comm->rank;
  if (graph == nullptr) return errorf(braidInvalidArgument, "graph is NULL");
  if (nNeighbors < 0) return errorf(braidInvalidArgument, "nNeighbors %d is negative", nNeighbors);
  if (nNeighbors > n - 1)
    return errorf(braidInvalidArgument, "nNeighbors %d exceeds the %d other ranks of the communicator", nNeighbors,
                  n - 1);
  if (nNeighbors > 0 && neighbors == nullptr) return errorf(braidInvalidArgument, "neighbors is NULL");
  if (nNeighbors > 0 && weights == nullptr) return errorf(braidInvalidArgument, "weights is NULL");
  if (!std::isfinite(selfWeight)) return errorf(braidInvalidArgument, "selfWeight %g is not finite", selfWeight);
  std::vector<int> seenAt(n, -1);
  double sum = selfWeight;
  for (int i = 0; i < nNeighbors; ++i) {
    const int peer = neighbors[i];
    if (peer < 0 || peer >= n)
      return errorf(braidInvalidArgument, "neighbors[%d] = %d is out of range [0, %d)", i, peer, n);
    if (peer == rank)
      return errorf(braidInvalidArgument, "neighbors[%d] = %d is this rank (its share is selfWeight)", i, peer);
    if (seenAt[peer] >= 0)
      return errorf(braidInvalidArgument, "neighbors[%d] = %d repeats neighbors[%d]", i, peer, seenAt[peer]);
    seenAt[peer] = i;
    if (!std::isfinite(weights[i]))
      return errorf(braidInvalidArgument, "weights[%d] = %g is not finite", i, weights[i]);
    sum += weights[i];
  }
  if (!(std::fabs(sum - 1.0) <= kWeightSumTolerance))
    return errorf(braidInvalidArgument, "selfWeight + sum(weights) = %.17g, must be 1 (within %g)", sum,
                  kWeightSumTolerance);
  return okStatus();
}

// Every rank's record of braidGraphCreate: a validity byte, then a bitmap of the ranks it receives
// from. Gathered with one AllGather so each rank learns who receives from it.
struct Records {
  size_t bytes = 0;  // per rank, a multiple of 8
  std::vector<uint8_t> all;
  bool valid(int r) const { return all[r * bytes] != 0; }
  bool listens(int r, int peer) const { return (all[r * bytes + 8 + peer / 8] >> (peer % 8)) & 1; }
};

// Hands out the handle of a new graph (src/handles.h).
Status publishGraph(std::unique_ptr<braidGraph> g, braidGraph_t* out) {
  return publishHandle<braidGraph_t, braidGraph>(graphHandles(), out, [&](braidGraph** obj) {
    *obj = g.release();
    return okStatus();
  });
}

Status gatherRecords(braidComm* comm, bool valid, int nNeighbors, const int* neighbors, Records* out) {
  const int n = comm->nranks;
  out->bytes = 8 + (static_cast<size_t>(n) + 63) / 64 * 8;
  std::vector<uint8_t> mine(out->bytes, 0);
  mine[0] = valid ? 1 : 0;
  for (int i = 0; valid && i < nNeighbors; ++i)
    mine[8 + neighbors[i] / 8] |= static_cast<uint8_t>(1u << (neighbors[i] % 8));
  out->all.assign(out->bytes * n, 0);
  return commAllGather(comm, mine.data(), out->bytes, out->all.data()).withContext("exchanging the neighbour lists");
}

Status createGraph(braidComm_t handle, int nNeighbors, const int* neighbors, const double* weights, double selfWeight,
                   braidGraph_t* graph) {
  braidComm* comm = nullptr;
  BRAID_TRY(commOf(handle, &comm));
  Status local = checkLocalGraph(comm, nNeighbors, neighbors, weights, selfWeight, graph);
  Records rec;
  BRAID_TRY(gatherRecords(comm, local.ok(), nNeighbors, neighbors, &rec));
  if (!local.ok()) return local;
  for (int r = 0; r < comm->nranks; ++r)
    if (!rec.valid(r))
      return errorf(braidInvalidArgument, "rank %d passed an invalid graph (its error says why); no graph was created",
                    r);
  graph::Topology side;
  side.selfWeight = selfWeight;
  for (int i = 0; i < nNeighbors; ++i) side.in.push_back({neighbors[i], weights[i]});
  for (int r = 0; r < comm->nranks; ++r)
    if (r != comm->rank && rec.listens(r, comm->rank)) side.out.push_back(r);
  auto g = std::make_unique<braidGraph>();
  g->comm = g->runOn = comm;
  g->commHandle = handle;
  for (int r = 0; r < comm->nranks; ++r) g->toRun.push_back(r);
  g->sides.push_back(std::move(side));
  return publishGraph(std::move(g), graph);
}

Status createNamed(braidComm_t handle, const char* name, braidGraph_t* graph) {
  braidComm* comm = nullptr;
  BRAID_TRY(commOf(handle, &comm));
  if (name == nullptr) return errorf(braidInvalidArgument, "name is NULL");
  if (graph == nullptr) return errorf(braidInvalidArgument, "graph is NULL");
  graph::Named kind;
  if (!graph::parseNamed(name, &kind))
    return errorf(braidInvalidArgument, "unknown graph '%s' (valid: %s)", name, graph::kNamedList);
  const int n = comm->nranks;
  if (!graph::namedValid(kind, n))
    return errorf(braidInvalidArgument, "graph '%s' needs a power-of-two rank count, not %d", name, n);
  auto g = std::make_unique<braidGraph>();
  g->comm = g->runOn = comm;
  g->commHandle = handle;
  for (int r = 0; r < n; ++r) g->toRun.push_back(r);
  const int period = graph::rotationPeriod(kind, n);
  for (int t = 0; t < period; ++t) g->sides.push_back(graph::named(kind, comm->rank, n, static_cast<uint64_t>(t)));
  return publishGraph(std::move(g), graph);
}

// This rank's side of rotation t among the survivors, renumbered for g->runOn: failed neighbours
// skipped, the weights of the others and of this rank scaled back to the original row sum.
graph::Topology liveSide(const braidGraph* g, uint32_t t) {
  const graph::Topology& side = g->sides[t];
  graph::Topology live;
  double kept = side.selfWeight, total = side.selfWeight;
  for (const graph::InEdge& e : side.in) {
    total += e.weight;
    if (g->toRun[e.peer] < 0) continue;
    kept += e.weight;
    live.in.push_back({g->toRun[e.peer], e.weight});
  }
  for (int peer : side.out)
    if (g->toRun[peer] >= 0) live.out.push_back(g->toRun[peer]);
  if (std::fabs(kept) < 1e-12) {  // nothing left to scale (signed weights): keep our own value
    live.selfWeight = total;
    for (graph::InEdge& e : live.in) e.weight = 0;
    return live;
  }
  const double scale = total / kept;
  live.selfWeight = side.selfWeight * scale;
  for (graph::InEdge& e : live.in) e.weight *= scale;
  return live;
}

// Renumbers the graph's ranks for `from`'s successor (without the sorted `failed`) and runs it there.
void moveGraph(braidGraph* g, braidComm* from, const std::vector<int>& failed) {
  for (int& r : g->toRun) {
    if (r < 0) continue;
    const auto below = std::lower_bound(failed.begin(), failed.end(), r);
    r = (below != failed.end() && *below == r) ? -1 : r - static_cast<int>(below - failed.begin());
  }
  g->runOn = from->successor;
  g->plans.clear();  // built for the old numbering; running ops keep theirs
  std::string gone;
  for (int r : failed) {
    gone += ' ';
    gone += std::to_string(r);
  }
  BRAID_WARN(kLogColl, "gossip: graph continues on %d survivors (this rank is now %d), without failed rank(s)%s",
             g->runOn->nranks, g->runOn->rank, gone.c_str());
}

// Before a call: when the communicator the graph runs on has failed because ranks failed, moves
// the graph onto its successor of survivors (shrinking once per communicator). Graph lock held.
// The failure is returned once on every rank: by the call it failed, or, where it came while this
// rank had nothing in flight (a rank that is not the failed one's neighbour, between two calls), by
// this call, after the shrink and without posting: then every survivor has one failed call, and
// their calls on the survivors pair up as they would have.
Status moveToSurvivors(braidGraph* g) {
  while (g->runOn->control->failed()) {
    braidComm* from = g->runOn;
    std::vector<int> failed = from->control->failedRanks();
    if (failed.empty()) return from->control->failure();  // not a peer failure (abort, misuse)
    std::lock_guard<std::mutex> hold(from->successorMu);
    if (from->successor == nullptr) {
      const bool met = from->engine->failureMet();
      braidComm* next = nullptr;
      Status s = commShrink(from, failed.data(), static_cast<int>(failed.size()), &next);
      if (!s.ok()) return s.withContext("gossip: moving onto the survivors of the failed ranks");
      from->successor = next;
      from->successorExcludes = failed;
      if (!met) {
        const Status f = from->control->failure();
        moveGraph(g, from, failed);
        ++g->calls;  // it stands for the call the others had fail: rotations stay in step
        return Status(f.code(), f.message() +
                                    " [came while this rank had no call in flight: this call did not run; "
                                    "the next runs on the survivors]");
      }
    } else if (from->successorExcludes != failed) {
      return errorf(braidRemoteError,
                    "gossip: more ranks failed while moving onto the survivors; shrink the communicator yourself");
    }
    moveGraph(g, from, failed);
  }
  return okStatus();
}

// Looks up (or builds) the plan of this call's shape and posts it, advancing the rotation. Graph lock
// held, so the rotation follows the posting order of this graph's calls.
Status postNeighbor(braidGraph* g, const void* send, void* recv, size_t count, braidDataType_t dt, bool inPlace,
                    bool userOwned, Op** op) {
  BRAID_TRY(moveToSurvivors(g));
  braidComm* comm = g->runOn;
  const uint32_t rotation = static_cast<uint32_t>(g->calls % g->sides.size());
  PlanKey key;
  key.count = count;
  key.elemSize = dtypeSize(dt);
  key.variant = static_cast<int32_t>(rotation);
  key.inPlace = inPlace;
  key.coll = static_cast<uint8_t>(Coll::kAllReduce);
  key.algo = static_cast<uint8_t>(Algo::kGossip);
  key.mem = static_cast<uint8_t>(MemType::kHost);
  PlanCache::Entry* e = g->plans.find(key);
  if (e == nullptr) {
    auto plan = std::make_unique<Plan>();
    const MixArgs args{comm->rank, comm->nranks, count, dtypeSize(dt), inPlace, comm->settings.chunkBytes};
    buildNeighborAllReduce(args, g->runOn == g->comm ? g->sides[rotation] : liveSide(g, rotation), plan.get());
    BRAID_INFO(kLogPlan, "%s", plan->describe().c_str());
    e = g->plans.insert(key, std::move(plan));
  }
  BRAID_TRY(comm->engine->postPlan(e->plan, send, recv, dt, userOwned, op));
  ++g->calls;
  return okStatus();
}

Status neighborAllReduce(const void* send, void* recv, size_t count, braidDataType_t dt, braidGraph_t graphHandle,
                         braidComm_t commHandle, braidStream_t stream, braidRequest_t* request, bool nonblocking) {
  braidComm* comm = nullptr;
  BRAID_TRY(commOf(commHandle, &comm));
  if (!validDtype(dt)) return errorf(braidInvalidArgument, "datatype %d is not a braidDataType_t", dt);
  if (!isFloatType(dt))
    return errorf(braidInvalidArgument, "datatype %s: neighbour allreduce takes floating types only", dtypeName(dt));
  braidGraph* graph = nullptr;
  BRAID_TRY(graphOf(graphHandle, &graph));
  if (graph->commHandle != commHandle) {
    braidComm* other = nullptr;
    if (!commOf(graph->commHandle, &other).ok())
      return errorf(braidInvalidArgument, "graph belongs to a communicator that was destroyed");
    return errorf(braidInvalidArgument, "graph belongs to another communicator");
  }
  if (nonblocking && request == nullptr) return errorf(braidInvalidArgument, "request is NULL");
  const size_t es = dtypeSize(dt);
  if (count > static_cast<size_t>(PTRDIFF_MAX) / es)
    return errorf(braidInvalidArgument, "count %zu overflows the buffer size", count);
  const size_t bytes = count * es;
  if (bytes > 0 && send == nullptr) return errorf(braidInvalidArgument, "sendbuff is NULL");
  if (bytes > 0 && recv == nullptr) return errorf(braidInvalidArgument, "recvbuff is NULL");
  const bool inPlace = send == recv && send != nullptr;
  if (!inPlace && overlaps(send, bytes, recv, bytes))
    return errorf(braidInvalidArgument, "sendbuff and recvbuff overlap without being the same buffer");
  // Device buffers would go down the host path (no staging for graph calls yet).
  BRAID_TRY(requireHostBuffer(comm, send, bytes, stream, "sendbuff", "neighbour allreduces"));
  BRAID_TRY(requireHostBuffer(comm, recv, bytes, stream, "recvbuff", "neighbour allreduces"));
  Op* op = nullptr;
  {
    GraphLock hold(graph);
    BRAID_TRY(postNeighbor(graph, send, recv, count, dt, inPlace, nonblocking, &op));
  }
  if (nonblocking) {
    *request = requestHandle(op);
    return okStatus();
  }
  return op->engine->wait(op);
}

}  // namespace

namespace braid {

Status graphOf(braidGraph_t handle, braidGraph** out, uint32_t* slot) {
  void* obj = nullptr;
  BRAID_TRY(graphHandles().find(reinterpret_cast<uintptr_t>(handle), &obj, slot));
  *out = static_cast<braidGraph*>(obj);
  return okStatus();
}

}  // namespace braid

#pragma GCC visibility push(default)

braidResult_t braidGraphCreate(braidComm_t comm, int nNeighbors, const int* neighbors, const double* weights,
                               double selfWeight, braidGraph_t* graph) {
  return guard(__func__, [&] { return createGraph(comm, nNeighbors, neighbors, weights, selfWeight, graph); });
}

braidResult_t braidGraphCreateNamed(braidComm_t comm, const char* name, braidGraph_t* graph) {
  return guard(__func__, [&] { return createNamed(comm, name, graph); });
}

braidResult_t braidGraphDestroy(braidGraph_t handle) {
  return guard(__func__, [&] {
    braidGraph* graph = nullptr;
    uint32_t slot = 0;
    BRAID_TRY(graphOf(handle, &graph, &slot));
    graphHandles().remove(slot, HandleEnd::kDestroyed);
    delete graph;
    return okStatus();
  });
}

braidResult_t braidNeighborAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                                     braidGraph_t graph, braidComm_t comm, braidStream_t stream) {
  return guard(__func__, [&] {
    return neighborAllReduce(sendbuff, recvbuff, count, datatype, graph, comm, stream, nullptr, false);
  });
}

braidResult_t braidINeighborAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                                      braidGraph_t graph, braidComm_t comm, braidStream_t stream,
                                      braidRequest_t* request) {
  return guard(__func__, [&] {
    return neighborAllReduce(sendbuff, recvbuff, count, datatype, graph, comm, stream, request, true);
  });
}

#pragma GCC visibility pop
