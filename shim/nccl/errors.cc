// Versions, result codes and this thread's last error.
#include "shim/nccl/shim.h"

namespace braid::nccl {

namespace {
thread_local std::string tLastError;
}

void setLastError(const std::string& message) { tLastError = message; }

ncclResult_t toNccl(braidResult_t r) {
  switch (r) {
    case braidSuccess:
      return ncclSuccess;
    case braidInternalError:
      return ncclInternalError;
    case braidSystemError:
      return ncclSystemError;
    case braidInvalidArgument:
      return ncclInvalidArgument;
    case braidInvalidUsage:
      return ncclInvalidUsage;
    case braidRemoteError:
      return ncclRemoteError;
    case braidInProgress:
      return ncclInProgress;
    case braidTimeout:
      // NCCL has no timeout code; a peer that stopped answering is a remote failure, and the
      // message (from braid) says it timed out.
      return ncclRemoteError;
    default:
      return ncclInternalError;
  }
}

Status fromBraid(braidResult_t r) {
  if (r == braidSuccess) return okStatus();
  return Status(r, braidGetLastError());
}

}  // namespace braid::nccl

using namespace braid::nccl;

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclGetVersion(int* version) {
  return guard(__func__, [&] {
    if (version == nullptr) return braid::errorf(braidInvalidArgument, "version is NULL");
    *version = NCCL_VERSION_CODE;
    return braid::okStatus();
  });
}

NCCL_SHIM_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (braid's NCCL shim never returns it)";
    case ncclSystemError:
      return "system call or allocation failed";
    case ncclInternalError:
      return "internal error in braid";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (not supported by braid, or called out of order)";
    case ncclRemoteError:
      return "remote process failed, aborted or stopped answering";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}

NCCL_SHIM_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;  // NCCL's last error is not per communicator either
  return tLastError.c_str();
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclGetVersion)
NCCL_SHIM_ALIAS(ncclGetErrorString)
NCCL_SHIM_ALIAS(ncclGetLastError)
