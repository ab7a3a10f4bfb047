// The C API: versions, errors, communicators, requests. Collectives are in src/api_coll.cc.
#include "src/api.h"

#include "braid/braid.h"
#include "src/comm.h"

using namespace braid;

namespace braid {

namespace {
thread_local std::string tLastError;
}

void setLastError(const std::string& message) { tLastError = message; }

Status checkComm(const braidComm* comm) {
  if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
  if (comm->magic != kCommMagic) return errorf(braidInvalidArgument, "comm is not a live communicator (destroyed?)");
  return okStatus();
}

}  // namespace braid

namespace {

Status checkRequest(braidRequest_t req) {
  if (req == nullptr) return errorf(braidInvalidArgument, "request is NULL");
  if (req->state.load(std::memory_order_acquire) == braidRequest::kFree)
    return errorf(braidInvalidUsage, "request was already completed and released");
  return okStatus();
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
  return guard(__func__, [&] {
    if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
    if (nranks < 1) return errorf(braidInvalidArgument, "nranks %d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks)
      return errorf(braidInvalidArgument, "rank %d is out of range [0, %d)", rank, nranks);
    UniqueIdData id;
    BRAID_TRY(decodeUniqueId(commId, &id));
    braidComm* c = nullptr;
    BRAID_TRY(commInit(id, nranks, rank, &c));
    *comm = c;
    return okStatus();
  });
}

braidResult_t braidCommInitFromEnv(braidComm_t* comm) {
  return guard(__func__, [&] {
    if (comm == nullptr) return errorf(braidInvalidArgument, "comm is NULL");
    braidComm* c = nullptr;
    BRAID_TRY(commInitFromEnv(&c));
    *comm = c;
    return okStatus();
  });
}

braidResult_t braidCommDestroy(braidComm_t comm) {
  return guard(__func__, [&] {
    BRAID_TRY(checkComm(comm));
    return commDestroy(comm);
  });
}

braidResult_t braidCommAbort(braidComm_t comm) {
  return guard(__func__, [&] {
    BRAID_TRY(checkComm(comm));
    commAbort(comm);
    return okStatus();
  });
}

braidResult_t braidCommCount(braidComm_t comm, int* count) {
  return guard(__func__, [&] {
    BRAID_TRY(checkComm(comm));
    if (count == nullptr) return errorf(braidInvalidArgument, "count is NULL");
    *count = comm->nranks;
    return okStatus();
  });
}

braidResult_t braidCommUserRank(braidComm_t comm, int* rank) {
  return guard(__func__, [&] {
    BRAID_TRY(checkComm(comm));
    if (rank == nullptr) return errorf(braidInvalidArgument, "rank is NULL");
    *rank = comm->rank;
    return okStatus();
  });
}

braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError) {
  return guard(__func__, [&] {
    BRAID_TRY(checkComm(comm));
    if (asyncError == nullptr) return errorf(braidInvalidArgument, "asyncError is NULL");
    if (comm->engine->failed()) {
      Status f = comm->engine->failure();
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
    BRAID_TRY(checkRequest(request));
    if (done == nullptr) return errorf(braidInvalidArgument, "done is NULL");
    bool d = false;
    Status s = request->engine->test(request, &d);
    *done = d ? 1 : 0;
    return s;
  });
}

braidResult_t braidWait(braidRequest_t request) {
  return guard(__func__, [&] {
    BRAID_TRY(checkRequest(request));
    return request->engine->wait(request);
  });
}

braidResult_t braidWaitAll(int n, braidRequest_t* requests) {
  return guard(__func__, [&] {
    if (n < 0) return errorf(braidInvalidArgument, "n %d is negative", n);
    if (n > 0 && requests == nullptr) return errorf(braidInvalidArgument, "requests is NULL");
    for (int i = 0; i < n; ++i)
      if (requests[i] != nullptr) BRAID_TRY(checkRequest(requests[i]));
    Status first;
    for (int i = 0; i < n; ++i) {
      if (requests[i] == nullptr) continue;
      Status s = requests[i]->engine->wait(requests[i]);
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  });
}

#pragma GCC visibility pop
