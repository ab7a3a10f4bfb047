// The C API of memory: registration (braidCommRegister/Deregister) and allocation
// (braidMemAlloc/AllocDevice/Free) and the memory-type query. The records live in src/regions.h
// (host) and src/cuda/device_mem.h (device).
#include "braid/braid.h"
#include "src/api.h"
#include "src/comm.h"
#include "src/cuda/device_mem.h"
#include "src/cuda/memtype.h"

using namespace braid;

#pragma GCC visibility push(default)

braidResult_t braidCommRegister(braidComm_t handle, void* buff, size_t size, void** regHandle) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    if (buff == nullptr) return errorf(braidInvalidArgument, "buff is NULL");
    if (size == 0) return errorf(braidInvalidArgument, "size is 0");
    if (regHandle == nullptr) return errorf(braidInvalidArgument, "handle is NULL");
    BRAID_TRY(comm->regions.add(buff, size, regHandle));
    BRAID_INFO(kLogInit, "registered %p (%zu bytes) as region %p", buff, size, *regHandle);
    return okStatus();
  });
}

braidResult_t braidCommDeregister(braidComm_t handle, void* regHandle) {
  return guard(__func__, [&] {
    braidComm* comm = nullptr;
    BRAID_TRY(commOf(handle, &comm));
    return comm->regions.remove(regHandle);
  });
}

braidResult_t braidMemAlloc(void** ptr, size_t size) {
  return guard(__func__, [&] {
    if (ptr == nullptr) return errorf(braidInvalidArgument, "ptr is NULL");
    if (size == 0) return errorf(braidInvalidArgument, "size is 0");
    return hostAlloc(size, ptr);
  });
}

braidResult_t braidMemAllocDevice(void** ptr, size_t size) {
  return guard(__func__, [&] {
    if (ptr == nullptr) return errorf(braidInvalidArgument, "ptr is NULL");
    if (size == 0) return errorf(braidInvalidArgument, "size is 0");
    return deviceAlloc(size, ptr);
  });
}

braidResult_t braidMemFree(void* ptr) {
  return guard(__func__, [&] {
    if (ptr == nullptr) return okStatus();
    Status freed;
    if (deviceFree(ptr, &freed)) return freed;
    return hostFree(ptr);
  });
}

braidResult_t braidMemGetType(const void* ptr, size_t size, braidMemType_t* type) {
  return guard(__func__, [&] {
    if (ptr == nullptr) return errorf(braidInvalidArgument, "ptr is NULL");
    if (type == nullptr) return errorf(braidInvalidArgument, "type is NULL");
    PtrInfo info;
    BRAID_TRY(pointerKind(ptr, size, &info));
    *type = memTypeOf(info.kind) == MemType::kCuda ? braidMemCuda : braidMemHost;
    return okStatus();
  });
}

#pragma GCC visibility pop
