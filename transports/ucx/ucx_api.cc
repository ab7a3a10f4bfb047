#include "transports/ucx/ucx_api.h"

#include <dlfcn.h>

#include <mutex>

namespace braid {

UcxApi gUcxApi;

namespace {

Status gLoaded;
std::once_flag gOnce;

Status openLibrary() {
  void* lib = dlopen(kUcpLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return errorf(braidSystemError, "ucx: cannot load %s: %s", kUcpLibrary, dlerror());
  // dlsym through libucp's handle also finds the libucs function (ucs_status_string): a handle's
  // lookup covers the libraries it depends on.
  UcxApi api;
#define BRAID_UCX_RESOLVE(name)                                       \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name)); \
  if (api.name == nullptr) return errorf(braidSystemError, "ucx: %s has no %s", kUcpLibrary, #name);
  BRAID_UCX_FUNCTIONS(BRAID_UCX_RESOLVE)
#undef BRAID_UCX_RESOLVE
  gUcxApi = api;  // the library stays open: UCM's hooks cannot be taken out again (see ucx_api.h)
  return okStatus();
}

}  // namespace

Status loadUcx() {
  std::call_once(gOnce, [] { gLoaded = openLibrary(); });
  return gLoaded;
}

}  // namespace braid
