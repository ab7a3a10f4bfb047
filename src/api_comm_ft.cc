// The C API for fault tolerance and derived communicators: failed ranks, shrink, split.
#include "braid/braid.h"
#include "src/api.h"
#include "src/comm.h"

using namespace braid;

#pragma GCC visibility push(default)

braidResult_t braidCommGetFailedRanks(braidComm_t comm, int* ranks, int max, int* n) {
  return guard(__func__, [&] {
    (void)comm, (void)ranks, (void)max, (void)n;
    return errorf(braidInternalError, "not implemented yet");
  });
}

braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int nExclude, braidComm_t* newcomm) {
  return guard(__func__, [&] {
    (void)comm, (void)excludeRanks, (void)nExclude, (void)newcomm;
    return errorf(braidInternalError, "not implemented yet");
  });
}

braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm) {
  return guard(__func__, [&] {
    (void)comm, (void)color, (void)key, (void)newcomm;
    return errorf(braidInternalError, "not implemented yet");
  });
}

#pragma GCC visibility pop
