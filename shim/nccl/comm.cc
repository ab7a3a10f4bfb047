// Communicators: configs, init (alone, in groups, all ranks of a process), split and shrink,
// finalize, destroy, abort, and queries.
#include <strings.h>

#include <cstddef>
#include <cstring>
#include <set>

#include "shim/nccl/shim.h"

namespace braid::nccl {

#if __SIZEOF_POINTER__ == 8
// The layout this library was built with is NCCL 2.28's.
static_assert(sizeof(ncclConfig_t) == 80 && offsetof(ncclConfig_t, blocking) == 16 &&
                  offsetof(ncclConfig_t, netName) == 32 && offsetof(ncclConfig_t, nvlinkCentricSched) == 76,
              "ncclConfig_t must keep NCCL's layout");
#endif
static_assert(sizeof(ncclUniqueId) == sizeof(braidUniqueId), "unique ids must have the same size");

namespace {

constexpr unsigned kConfigMagic = 0xcafebeef;

struct Settings {
  bool blocking = true;
};

// Reads one int field of a caller's config when the caller's struct is large enough to have it.
bool fieldInt(const ncclConfig_t* c, size_t offset, int* out) {
  if (c->size < offset + sizeof(int)) return false;
  memcpy(out, reinterpret_cast<const char*>(c) + offset, sizeof(int));
  return true;
}

Status checkFlag(const ncclConfig_t* c, size_t offset, const char* name) {
  int v;
  if (fieldInt(c, offset, &v) && v != NCCL_CONFIG_UNDEF_INT && v != 0 && v != 1)
    return errorf(braidInvalidArgument, "config->%s is %d; it must be 0 or 1", name, v);
  return okStatus();
}

// Checks a config (NULL: the defaults, or `inherit` for split and shrink). Only the fields that fit
// in config->size are read: older NCCL headers had smaller structs.
Status readConfig(const ncclConfig_t* c, const Settings& inherit, Settings* out) {
  Settings s = inherit;
  if (c == nullptr) {
    *out = s;
    return okStatus();
  }
  if (c->magic != kConfigMagic)
    return errorf(braidInvalidArgument, "config was not initialized with NCCL_CONFIG_INITIALIZER (magic 0x%x)",
                  c->magic);
  if (c->size < offsetof(ncclConfig_t, blocking) + sizeof(int))
    return errorf(braidInvalidArgument, "config->size %zu is smaller than any NCCL config", c->size);
  BRAID_TRY(checkFlag(c, offsetof(ncclConfig_t, blocking), "blocking"));
  BRAID_TRY(checkFlag(c, offsetof(ncclConfig_t, splitShare), "splitShare"));
  BRAID_TRY(checkFlag(c, offsetof(ncclConfig_t, collnetEnable), "collnetEnable"));
  BRAID_TRY(checkFlag(c, offsetof(ncclConfig_t, shrinkShare), "shrinkShare"));
  int blocking;
  if (fieldInt(c, offsetof(ncclConfig_t, blocking), &blocking) && blocking != NCCL_CONFIG_UNDEF_INT)
    s.blocking = blocking == 1;
  if (c->size >= offsetof(ncclConfig_t, netName) + sizeof(const char*)) {
    const char* net = c->netName;
    if (net != nullptr && strcasecmp(net, "Socket") != 0)
      return errorf(braidInvalidUsage,
                    "config->netName \"%s\": braid's only network is TCP (\"Socket\"), with shared memory "
                    "within a host",
                    net);
  }
  *out = s;
  return okStatus();
}

ncclComm* newWrapper(const Settings& s) {
  auto* c = new ncclComm;
  c->blocking = s.blocking;
  return c;
}

// Frees a wrapper and what it owns (created ops, registrations).
void freeWrapper(ncclComm* c) {
  c->magic = 0;
  delete c;
}

// Blocking setup now, or deferred to the group's end. On success *out is the new wrapper, or
// NULL when `run` joins no communicator (split with NCCL_SPLIT_NOCOLOR decides that up front).
Status setup(const Settings& s, bool joins, std::function<Status(braidComm_t*)> run, ncclComm_t* out) {
  if (inGroup()) {
    ncclComm* c = joins ? newWrapper(s) : nullptr;
    deferSetup(c, std::move(run));
    *out = c;
    return okStatus();
  }
  braidComm_t b = nullptr;
  BRAID_TRY(run(&b));
  if (b == nullptr) {
    *out = nullptr;
    return okStatus();
  }
  ncclComm* c = newWrapper(s);
  c->braid = b;
  c->state.store(ncclComm::kReady, std::memory_order_release);
  *out = c;
  return okStatus();
}

Status initRank(ncclComm_t* comm, int nranks, const ncclUniqueId& commId, int rank, const ncclConfig_t* config) {
  if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
  if (nranks < 1) return errorf(braidInvalidArgument, "nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return errorf(braidInvalidArgument, "rank %d is out of range [0, %d)", rank, nranks);
  Settings s;
  BRAID_TRY(readConfig(config, Settings{}, &s));
  braidUniqueId id;
  memcpy(&id, &commId, sizeof(id));
  return setup(
      s, true, [=](braidComm_t* b) { return fromBraid(braidCommInitRank(b, nranks, id, rank)); }, comm);
}

// Releases a wrapper's braid communicator (destroy or abort) and the wrapper.
Status release(ncclComm* c, bool abort) {
  braidComm_t b = c->braid;
  std::shared_ptr<Clique> clique = c->clique;
  freeWrapper(c);
  if (b == nullptr) return okStatus();  // its init failed: nothing to leave
  std::vector<braidComm_t> now{b};
  if (clique) {
    int rank = -1;
    (void)braidCommUserRank(b, &rank);
    now = clique->release(b, !abort && rank == 0);
  }
  Status first;
  for (braidComm_t x : now) {
    Status s = fromBraid(abort && x == b ? braidCommAbort(x) : braidCommDestroy(x));
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status checkNotPending(ncclComm_t comm) {
  if (comm->state.load(std::memory_order_acquire) == ncclComm::kPending)
    return errorf(braidInvalidUsage, "the communicator is initialized at ncclGroupEnd; end the group first");
  return okStatus();
}

}  // namespace

std::vector<braidComm_t> Clique::release(braidComm_t comm, bool postpone) {
  std::lock_guard<std::mutex> lock(mu_);
  --live_;
  std::vector<braidComm_t> now;
  if (postpone && live_ > 0) {
    postponed_.push_back(comm);
    return now;
  }
  now.push_back(comm);
  if (live_ == 0) {
    now.insert(now.end(), postponed_.begin(), postponed_.end());
    postponed_.clear();
  }
  return now;
}

Status live(ncclComm_t comm) {
  if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
  if (comm->magic != ncclComm::kMagic)
    return errorf(braidInvalidArgument, "comm is not a live communicator (destroyed?)");
  return okStatus();
}

Status initialized(ncclComm_t comm, braidComm_t* out) {
  BRAID_TRY(live(comm));
  switch (comm->state.load(std::memory_order_acquire)) {
    case ncclComm::kPending:
      return errorf(braidInvalidUsage, "the communicator is initialized at ncclGroupEnd; end the group first");
    case ncclComm::kFailed:
      return Status(comm->initError.code(), "the communicator's init failed: " + comm->initError.message());
    default:
      break;
  }
  *out = comm->braid;
  return okStatus();
}

Status usable(ncclComm_t comm, braidComm_t* out) {
  BRAID_TRY(initialized(comm, out));
  if (comm->finalized.load(std::memory_order_relaxed))
    return errorf(braidInvalidUsage, "the communicator was finalized (ncclCommFinalize); destroy it");
  return okStatus();
}

}  // namespace braid::nccl

using namespace braid;
using namespace braid::nccl;

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guard(__func__, [&] {
    if (uniqueId == nullptr) return errorf(braidInvalidArgument, "uniqueId is NULL");
    braidUniqueId id;
    BRAID_TRY(fromBraid(braidGetUniqueId(&id)));
    memcpy(uniqueId, &id, sizeof(id));
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guard(__func__, [&] { return initRank(comm, nranks, commId, rank, nullptr); });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config) {
  return guard(__func__, [&] { return initRank(comm, nranks, commId, rank, config); });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                                       ncclUniqueId* commIds, ncclConfig_t* config) {
  return guard(__func__, [&] {
    if (nId < 1) return errorf(braidInvalidArgument, "nId %d must be at least 1", nId);
    if (commIds == nullptr) return errorf(braidInvalidArgument, "commIds is NULL");
    return initRank(newcomm, nranks, commIds[0], myrank, config);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return guard(__func__, [&] {
    if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
    if (ndev < 1) return errorf(braidInvalidArgument, "ndev %d must be at least 1", ndev);
    if (devlist != nullptr) {
      std::set<int> seen;
      for (int i = 0; i < ndev; ++i) {
        if (devlist[i] < 0) return errorf(braidInvalidArgument, "devlist[%d] is %d", i, devlist[i]);
        if (!seen.insert(devlist[i]).second)
          return errorf(braidInvalidArgument, "devlist[%d] repeats device %d", i, devlist[i]);
      }
    }
    braidUniqueId id;
    BRAID_TRY(fromBraid(braidGetUniqueId(&id)));
    // braid's init is collective and blocking: one thread per rank. Rank r uses device devlist[r]
    // (devices 0..ndev-1 without a list), as NCCL's; where there is no GPU braid ignores it.
    std::vector<braidComm_t> comms(ndev, nullptr);
    std::vector<std::function<Status()>> jobs;
    for (int r = 0; r < ndev; ++r)
      jobs.push_back([&, r] {
        braidConfig_t config = BRAID_CONFIG_INITIALIZER;
        config.cudaDevice = devlist != nullptr ? devlist[r] : r;
        return fromBraid(braidCommInitRankConfig(&comms[r], ndev, id, r, &config));
      });
    std::vector<Status> results = runConcurrently(jobs);
    Status first;
    for (const Status& s : results)
      if (!s.ok() && first.ok()) first = s;
    if (!first.ok()) {
      for (braidComm_t b : comms)
        if (b != nullptr) (void)braidCommAbort(b);
      return first;
    }
    auto clique = ndev > 1 ? std::make_shared<Clique>(ndev) : nullptr;
    std::vector<std::unique_ptr<ncclComm>> made;
    for (int r = 0; r < ndev; ++r) {
      made.emplace_back(new ncclComm);
      made.back()->braid = comms[r];
      made.back()->clique = clique;
      made.back()->state.store(ncclComm::kReady, std::memory_order_release);
    }
    for (int r = 0; r < ndev; ++r) comm[r] = made[r].release();
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                            ncclConfig_t* config) {
  return guard(__func__, [&] {
    braidComm_t parent = nullptr;
    BRAID_TRY(usable(comm, &parent));
    if (newcomm == nullptr) return errorf(braidInvalidArgument, "newcomm is NULL");
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
      return errorf(braidInvalidArgument, "color %d must be non-negative or NCCL_SPLIT_NOCOLOR", color);
    Settings inherit;
    inherit.blocking = comm->blocking;
    Settings s;
    BRAID_TRY(readConfig(config, inherit, &s));
    const int bcolor = color == NCCL_SPLIT_NOCOLOR ? BRAID_SPLIT_NOCOLOR : color;
    return setup(
        s, color != NCCL_SPLIT_NOCOLOR,
        [=](braidComm_t* b) { return fromBraid(braidCommSplit(parent, bcolor, key, b)); }, newcomm);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    BRAID_TRY(checkNotPending(comm));
    if (comm->state.load(std::memory_order_acquire) == ncclComm::kFailed)
      return errorf(braidInvalidUsage, "the communicator's init failed; there is nothing to shrink");
    if (newcomm == nullptr) return errorf(braidInvalidArgument, "newcomm is NULL");
    if (excludeRanksCount < 0) return errorf(braidInvalidArgument, "excludeRanksCount %d", excludeRanksCount);
    if (excludeRanksCount > 0 && excludeRanksList == nullptr)
      return errorf(braidInvalidArgument, "excludeRanksList is NULL");
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
      return errorf(braidInvalidArgument, "shrinkFlags 0x%x is not NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT",
                    shrinkFlags);
    Settings inherit;
    inherit.blocking = comm->blocking;
    Settings s;
    BRAID_TRY(readConfig(config, inherit, &s));
    braidComm_t parent = comm->braid;
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    return setup(
        s, true,
        [=](braidComm_t* b) {
          return fromBraid(braidCommShrink(parent, excluded.data(), static_cast<int>(excluded.size()), b));
        },
        newcomm);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(usable(comm, &b));
    comm->finalized.store(true, std::memory_order_relaxed);
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return guard(__func__, [&] {
    if (comm == nullptr) return okStatus();
    BRAID_TRY(live(comm));
    BRAID_TRY(checkNotPending(comm));
    return release(comm, false);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return guard(__func__, [&] {
    if (comm == nullptr) return okStatus();
    BRAID_TRY(live(comm));
    BRAID_TRY(checkNotPending(comm));
    return release(comm, true);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    (void)revokeFlags;
    return errorf(braidInvalidUsage,
                  "braid cannot revoke a communicator (a failed one already fails its calls); use ncclCommShrink "
                  "or ncclCommAbort");
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    if (asyncError == nullptr) return errorf(braidInvalidArgument, "asyncError is NULL");
    switch (comm->state.load(std::memory_order_acquire)) {
      case ncclComm::kPending:
        *asyncError = ncclInProgress;
        return okStatus();
      case ncclComm::kFailed:
        setLastError(std::string("ncclCommGetAsyncError: init failed: ") + comm->initError.message());
        *asyncError = toNccl(comm->initError.code());
        return okStatus();
      default:
        break;
    }
    braidResult_t r = braidSuccess;
    BRAID_TRY(fromBraid(braidCommGetAsyncError(comm->braid, &r)));
    if (r != braidSuccess) setLastError(std::string("ncclCommGetAsyncError: ") + braidGetLastError());
    *asyncError = toNccl(r);
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(initialized(comm, &b));
    return fromBraid(braidCommCount(b, count));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(initialized(comm, &b));
    return fromBraid(braidCommUserRank(b, rank));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(initialized(comm, &b));
    return fromBraid(braidCommCuDevice(b, device));
  });
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclGetUniqueId)
NCCL_SHIM_ALIAS(ncclCommInitRank)
NCCL_SHIM_ALIAS(ncclCommInitRankConfig)
NCCL_SHIM_ALIAS(ncclCommInitRankScalable)
NCCL_SHIM_ALIAS(ncclCommInitAll)
NCCL_SHIM_ALIAS(ncclCommSplit)
NCCL_SHIM_ALIAS(ncclCommShrink)
NCCL_SHIM_ALIAS(ncclCommFinalize)
NCCL_SHIM_ALIAS(ncclCommDestroy)
NCCL_SHIM_ALIAS(ncclCommAbort)
NCCL_SHIM_ALIAS(ncclCommRevoke)
NCCL_SHIM_ALIAS(ncclCommGetAsyncError)
NCCL_SHIM_ALIAS(ncclCommCount)
NCCL_SHIM_ALIAS(ncclCommUserRank)
NCCL_SHIM_ALIAS(ncclCommCuDevice)
