// The C API: versions, errors, communicators, requests. Collectives are in src/api_coll.cc.
#include "src/api.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "braid/braid.h"
#include "src/comm.h"

using namespace braid;

namespace braid {

namespace {
thread_local std::string tLastError;
}

void setLastError(const std::string& message) { tLastError = message; }

Status requestOf(braidRequest_t handle, braidRequest** out) {
  void* obj = nullptr;
  BRAID_TRY(requestHandles().find(reinterpret_cast<uintptr_t>(handle), &obj));
  *out = static_cast<braidRequest*>(obj);
  return okStatus();
}

braidRequest_t requestHandle(const braidRequest* op) {
  return reinterpret_cast<braidRequest_t>(static_cast<uintptr_t>(requestHandles().handleOf(op->handleSlot)));
}

}  // namespace braid

namespace {

// requests[0..n) of braidWaitAll, checked before anything is waited for: live, and none twice.
// Pairwise for the usual handful of requests; a sorted copy beyond.
Status checkWaitAll(int n, braidRequest_t* requests) {
  braidRequest* op = nullptr;
  for (int i = 0; i < n; ++i) {
    if (requests[i] == nullptr) continue;
    Status s = requestOf(requests[i], &op);
    if (!s.ok()) return s.withContext("requests[" + std::to_string(i) + "]");  // no string built otherwise
  }
  auto repeated = [](int i, int j) {
    return errorf(braidInvalidArgument, "requests[%d] repeats requests[%d] (a request is waited for once)", i, j);
  };
  constexpr int kPairwiseMax = 64;
  if (n <= kPairwiseMax) {
    for (int i = 1; i < n; ++i)
      for (int j = 0; j < i; ++j)
        if (requests[i] != nullptr && requests[i] == requests[j]) return repeated(i, j);
    return okStatus();
  }
  std::vector<std::pair<uintptr_t, int>> sorted;
  sorted.reserve(n);
  for (int i = 0; i < n; ++i)
    if (requests[i] != nullptr) sorted.emplace_back(reinterpret_cast<uintptr_t>(requests[i]), i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 1; k < sorted.size(); ++k)
    if (sorted[k].first == sorted[k - 1].first) return repeated(sorted[k].second, sorted[k - 1].second);
  return okStatus();
}

// braidCommInitRank and braidCommInitRankConfig (NULL config: the environment alone).
Status initRank(braidComm_t* comm, int nranks, const braidUniqueId& commId, int rank, const braidConfig_t* config) {
  if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
  if (nranks < 1) return errorf(braidInvalidArgument, "nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return errorf(braidInvalidArgument, "rank %d is out of range [0, %d)", rank, nranks);
  ConfigOverrides over;
  BRAID_TRY(parseConfig(config, &over));
  UniqueIdData id;
  BRAID_TRY(decodeUniqueId(commId, &id));
  return publishHandle<braidComm_t, braidComm>(commHandles(), comm,
                                               [&](braidComm** c) { return commInit(id, nranks, rank, over, c); });
}

}  // namespace

#pragma GCC visibility push(default)

braidResult_t braidGetVersion(int* version) {
  return guard(__func__, [&] {
    if (version == nullptr) return errorf(braidInvalidArgument, "version is NULL");
    *version = BRAID_VERSION_CODE;
    return okStatus();
  });
}

const char* braidGetErrorString(braidResult_t result) {
  switch (result) {
    case braidSuccess:
      return "no error";
    case braidInternalError:
      return "internal error (a bug in braid)";
    case braidSystemError:
      return "system call or allocation failed";
    case braidInvalidArgument:
      return "invalid argument";
    case braidInvalidUsage:
      return "invalid usage";
    case braidRemoteError:
      return "remote process failed or broke the protocol";
    case braidInProgress:
      return "operation in progress";
    case braidTimeout:
      return "timed out";
    default:
      return "unknown result code";
  }
}

const char* braidGetLastError(void) { return tLastError.c_str(); }

braidResult_t braidGetUniqueId(braidUniqueId* uniqueId) {
  return guard(__func__, [&] {
    if (uniqueId == nullptr) return errorf(braidInvalidArgument, "uniqueId is NULL");
    UniqueIdData d;
    BRAID_TRY(createUniqueId(&d));
    encodeUniqueId(d, uniqueId);
    return okStatus();
  });
}

braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank) {
  return guard(__func__, [&] { return initRank(comm, nranks, commId, rank, nullptr); });
}

braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId, int rank,
                                      braidConfig_t* config) {
  return guard(__func__, [&] { return initRank(comm, nranks, commId, rank, config); });
}

braidResult_t braidCommInitFromEnv(braidComm_t* comm) {
  return guard(__func__, [&] {
    if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
    return publishHandle<braidComm_t, braidComm>(commHandles(), comm, [](braidComm** c) { return commInitFromEnv(c); });
  });
}

braidResult_t braidCommDestroy(braidComm_t handle) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    uint32_t slot = 0;
    BRAID_TRY(commOf(handle, &comm, &slot));
    // The handle dies first: from here on every call with it is refused, also while destroy waits.
    commHandles().remove(slot, HandleEnd::kDestroyed);
    return commDestroy(comm);
  });
}

braidResult_t braidCommAbort(braidComm_t handle) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    uint32_t slot = 0;
    BRAID_TRY(commOf(handle, &comm, &slot));
    commHandles().remove(slot, HandleEnd::kDestroyed);
    commAbort(comm);
    return okStatus();
  });
}

braidResult_t braidCommCount(braidComm_t handle, int* count) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (count == nullptr) return errorf(braidInvalidArgument, "count is NULL");
    *count = comm->nranks;
    return okStatus();
  });
}

braidResult_t braidCommUserRank(braidComm_t handle, int* rank) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (rank == nullptr) return errorf(braidInvalidArgument, "rank is NULL");
    *rank = comm->rank;
    return okStatus();
  });
}

braidResult_t braidCommCuDevice(braidComm_t handle, int* device) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (device == nullptr) return errorf(braidInvalidArgument, "device is NULL");
    if (comm->cudaDevice < 0)
      return errorf(braidInvalidUsage, "this communicator has no CUDA device (%s)", whyNoCommDevice());
    *device = comm->cudaDevice;
    return okStatus();
  });
}

braidResult_t braidCommGetAsyncError(braidComm_t handle, braidResult_t* asyncError) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (asyncError == nullptr) return errorf(braidInvalidArgument, "asyncError is NULL");
    if (comm->control->failed()) {
      Status f = comm->control->failure();
      setLastError(f.message());
      *asyncError = f.code();
    } else {
      *asyncError = braidSuccess;
    }
    return okStatus();
  });
}

braidResult_t braidTest(braidRequest_t request, int* done) {
  return guard(__func__, [&] {
    braidRequest* op = nullptr;
    BRAID_TRY(requestOf(request, &op));
    if (done == nullptr) return errorf(braidInvalidArgument, "done is NULL");
    bool d = false;
    Status s = op->engine->test(op, &d);
    *done = d ? 1 : 0;
    return s;
  });
}

braidResult_t braidWait(braidRequest_t request) {
  return guard(__func__, [&] {
    braidRequest* op = nullptr;
    BRAID_TRY(requestOf(request, &op));
    return op->engine->wait(op);
  });
}

braidResult_t braidWaitAll(int n, braidRequest_t* requests) {
  return guard(__func__, [&] {
    if (n < 0) return errorf(braidInvalidArgument, "n %d is negative", n);
    if (n > 0 && requests == nullptr) return errorf(braidInvalidArgument, "requests is NULL");
    BRAID_TRY(checkWaitAll(n, requests));
    Status first;
    for (int i = 0; i < n; ++i) {
      if (requests[i] == nullptr) continue;
      braidRequest* op = nullptr;
      Status s = requestOf(requests[i], &op);  // live: checked above, and waited for once
      if (s.ok()) s = op->engine->wait(op);
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  });
}

#pragma GCC visibility pop
