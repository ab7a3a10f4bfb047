#include "transports/ucx/ucx_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

namespace braid {

UcxApi gUcxApi;

namespace {

Status gLoaded;
std::once_flag gOnce;
pid_t gLoadedBy = 0;  // the process whose loadUcx opened the library; a forked child inherits it

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
  std::call_once(gOnce, [] {
    gLoaded = openLibrary();
    gLoadedBy = getpid();
  });
  if (gLoaded.ok() && gLoadedBy != getpid())
    return errorf(braidInvalidUsage,
                  "ucx: this process (pid %d) was forked from process %d after UCX was loaded there, and UCX does "
                  "not work in a forked child (its memory hooks' lock may be held by a thread the child lacks); "
                  "use shm or tcp in the child, or start it with exec",
                  static_cast<int>(getpid()), static_cast<int>(gLoadedBy));
  return gLoaded;
}

}  // namespace braid
