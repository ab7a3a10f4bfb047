// The C API for fault tolerance and derived communicators: failed ranks, shrink, split.
#include <algorithm>

#include "braid/braid.h"
#include "src/api.h"
#include "src/comm.h"

using namespace braid;

#pragma GCC visibility push(default)

braidResult_t braidCommGetFailedRanks(braidComm_t handle, int* ranks, int max, int* n) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (n == nullptr) return errorf(braidInvalidArgument, "n is NULL");
    if (max < 0) return errorf(braidInvalidArgument, "max is negative");
    if (max > 0 && ranks == nullptr) return errorf(braidInvalidArgument, "ranks is NULL");
    std::vector<int> failed = comm->control->failedRanks();
    std::copy_n(failed.begin(), std::min<size_t>(failed.size(), static_cast<size_t>(max)), ranks);
    *n = static_cast<int>(failed.size());
    return okStatus();
  });
}

braidResult_t braidCommShrink(braidComm_t handle, const int* excludeRanks, int nExclude, braidComm_t* newcomm) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (newcomm == nullptr) return errorf(braidInvalidArgument, "newcomm is NULL");
    return publishHandle<braidComm_t, braidComm>(
        commHandles(), newcomm, [&](braidComm** out) { return commShrink(comm, excludeRanks, nExclude, out); });
  });
}

braidResult_t braidCommSplit(braidComm_t handle, int color, int key, braidComm_t* newcomm) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (newcomm == nullptr) return errorf(braidInvalidArgument, "newcomm is NULL");
    return publishHandle<braidComm_t, braidComm>(commHandles(), newcomm,
                                                 [&](braidComm** out) { return commSplit(comm, color, key, out); });
  });
}

#pragma GCC visibility pop
