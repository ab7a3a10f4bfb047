#include "transports/ibverbs/ib_api.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace braid::ib {

IbvApi gIbvApi;

namespace {

std::once_flag gOnce;
std::string gLibrary;  // what the first loadIbverbs named; written once, under gOnce
Status gLoaded;

// dlerror's text without the file name it starts with when it is the one we asked for
// ("libx.so.1: cannot open shared object file: ..."): the message names it already.
std::string loaderWords(const std::string& library) {
  const char* e = dlerror();
  std::string words = e != nullptr ? e : "unknown dlopen error";
  const std::string prefix = library + ": ";
  if (words.compare(0, prefix.size(), prefix) == 0) words.erase(0, prefix.size());
  return words;
}

}  // namespace

Status openIbverbs(const std::string& library, IbvApi* out) {
  // The messages carry no "ibverbs:" prefix: they become the record's `why`, which the init error
  // prints after the transport's name (as "no RDMA device (...)").
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    return errorf(braidSystemError, "cannot load %s: %s", library.c_str(), loaderWords(library).c_str());
  // dlsym takes each symbol's default version, the one a link against this rdma-core would bind
  // (IBVERBS_1.1 where a 1.0 compat twin exists).
  IbvApi api;
#define BRAID_IBV_RESOLVE(member, symbol)                                   \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(lib, #symbol)); \
  if (api.member == nullptr)                                                \
    return errorf(braidSystemError, "cannot use %s: it has no %s (rdma-core too old?)", library.c_str(), #symbol);
  BRAID_IBV_FUNCTIONS(BRAID_IBV_RESOLVE)
#undef BRAID_IBV_RESOLVE
  api.query_gid_table = reinterpret_cast<decltype(api.query_gid_table)>(dlsym(lib, "_ibv_query_gid_table"));
  *out = api;  // the library stays open (see ib_api.h)
  return okStatus();
}

Status loadIbverbs(const std::string& library) {
  std::call_once(gOnce, [&library] {
    gLibrary = library;
    gLoaded = openIbverbs(library, &gIbvApi);
  });
  if (library != gLibrary)
    return errorf(braidInvalidUsage, "cannot switch to %s: this process chose %s already (once per process)",
                  library.c_str(), gLibrary.c_str());
  return gLoaded;
}

int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  // A provider's context is a verbs_context whose `sz` says which ops it has; an old one may end
  // before query_port, or leave it unset.
  verbs_context* v = verbs_get_ctx(ctx);
  const bool hasOp =
      v != nullptr && v->sz >= sizeof(*v) - offsetof(verbs_context, query_port) && v->query_port != nullptr;
  if (hasOp) return v->query_port(ctx, port, attr, sizeof(*attr));
  // The compat call fills only the leading fields of the old, shorter struct.
  memset(attr, 0, sizeof(*attr));
  return ibv().query_port(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

ssize_t queryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t maxEntries, uint32_t flags) {
  if (ibv().query_gid_table == nullptr) return -ENOSYS;
  return ibv().query_gid_table(ctx, entries, maxEntries, flags, sizeof(*entries));
}

}  // namespace braid::ib
