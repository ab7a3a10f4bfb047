// Memory: allocation (braidMemAllocDevice: refused without a CUDA device), registration
// (braidCommRegister), windows (refused).
// The reasons are in include/braid/nccl.h.
#include "shim/nccl/shim.h"

using namespace braid;
using namespace braid::nccl;

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return guard(__func__, [&] {
    // NCCL returns device memory, which callers hand to kernels: host memory in its place would fail
    // later and far away, so without a device this is refused.
    return fromBraid(braidMemAllocDevice(ptr, size))
        .withContext(
            "ncclMemAlloc allocates CUDA device memory; without a device use host memory (malloc) with a "
            "NULL stream");
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  return guard(__func__, [&] {
    if (ptr == nullptr) return okStatus();
    // braidMemFree also frees braidMemAlloc's host memory, which ncclMemAlloc never returns.
    braidMemType_t where = braidMemHost;
    if (braidMemGetType(ptr, 1, &where) != braidSuccess || where != braidMemCuda)
      return errorf(braidInvalidArgument, "%p was not allocated by ncclMemAlloc (it is not device memory)", ptr);
    const Status freed = fromBraid(braidMemFree(ptr));
    if (freed.code() == braidInvalidArgument)
      return errorf(braidInvalidArgument, "%p was not allocated by ncclMemAlloc: %s", ptr, freed.message().c_str());
    return freed;
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    if (handle == nullptr) return errorf(braidInvalidArgument, "handle is NULL");
    if (buff == nullptr && size > 0) return errorf(braidInvalidArgument, "buff is NULL");
    auto reg = std::make_unique<Registration>(Registration{buff, size, nullptr});
    // NCCL accepts an empty range, and a communicator still being created in a group; braid's
    // registration needs bytes and a communicator, so those stay records of the shim alone.
    if (size > 0 && comm->state.load(std::memory_order_acquire) == ncclComm::kReady)
      BRAID_TRY(fromBraid(braidCommRegister(comm->braid, buff, size, &reg->region)));
    void* h = reg.get();
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->registrations.emplace(h, std::move(reg));
    *handle = h;
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    std::unique_ptr<Registration> reg;
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      auto it = comm->registrations.find(handle);
      if (it == comm->registrations.end())
        return errorf(braidInvalidArgument, "handle %p is not registered on this communicator", handle);
      reg = std::move(it->second);
      comm->registrations.erase(it);
    }
    if (reg->region != nullptr) return fromBraid(braidCommDeregister(comm->braid, reg->region));
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                     int winFlags) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    (void)buff, (void)size, (void)win, (void)winFlags;
    return errorf(braidInvalidUsage, "symmetric memory windows are device memory: they need a CUDA build of braid");
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    return errorf(braidInvalidArgument, "window %p was not registered (this build registers none)",
                  static_cast<void*>(win));
  });
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclMemAlloc)
NCCL_SHIM_ALIAS(ncclMemFree)
NCCL_SHIM_ALIAS(ncclCommRegister)
NCCL_SHIM_ALIAS(ncclCommDeregister)
NCCL_SHIM_ALIAS(ncclCommWindowRegister)
NCCL_SHIM_ALIAS(ncclCommWindowDeregister)
