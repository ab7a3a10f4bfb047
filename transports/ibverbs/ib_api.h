// The libibverbs functions the ibverbs transport calls, taken from libibverbs.so.1 (or whatever
// BRAID_IB_LIBRARY names) with dlopen when an ibverbs transport is first made, not linked into
// libbraid.
//
// Why: linked, libibverbs.so.1 was a NEEDED entry of libbraid.so, so a libbraid built where
// rdma-core is installed could not even be loaded where it is not (a GPU box without rdma-core, a
// slim container), though the default transports are shm,tcp. Loaded on demand, only a process
// whose BRAID_TRANSPORTS names ibverbs needs it, and one without it is treated as one without an RDMA
// device: the probe says why, ibverbs refuses every pair, and the pairs move to the next transport.
//
// verbs.h turns some calls into macros or static inlines over other symbols; the table holds the
// symbols, and queryPort and queryGidTable below do what those inlines do. The data path's
// calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are inlines that jump
// through the context's provider ops: they need no symbol and are called as verbs.h has them.
//
// The library is opened once per process and never closed (memory regions, queue pairs and the
// provider libraries it loads may outlive any one transport).
//
// Threads: loadIbverbs() is thread-safe; ibv() may be called from any thread once it succeeded.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "src/base/status.h"

namespace braid::ib {

// Every libibverbs function braid calls: the table's member, then the library's symbol. The
// members drop the ibv_ prefix: some ibv_ names are function-like macros in verbs.h
// (ibv_query_port, ibv_reg_mr), which would expand at a call `api.ibv_query_port(...)`.
#define BRAID_IBV_FUNCTIONS(X)                      \
  X(ack_cq_events, ibv_ack_cq_events)               \
  X(alloc_pd, ibv_alloc_pd)                         \
  X(close_device, ibv_close_device)                 \
  X(create_comp_channel, ibv_create_comp_channel)   \
  X(create_cq, ibv_create_cq)                       \
  X(create_qp, ibv_create_qp)                       \
  X(dealloc_pd, ibv_dealloc_pd)                     \
  X(dereg_mr, ibv_dereg_mr)                         \
  X(destroy_comp_channel, ibv_destroy_comp_channel) \
  X(destroy_cq, ibv_destroy_cq)                     \
  X(destroy_qp, ibv_destroy_qp)                     \
  X(fork_init, ibv_fork_init)                       \
  X(free_device_list, ibv_free_device_list)         \
  X(get_cq_event, ibv_get_cq_event)                 \
  X(get_device_list, ibv_get_device_list)           \
  X(get_device_name, ibv_get_device_name)           \
  X(modify_qp, ibv_modify_qp)                       \
  X(open_device, ibv_open_device)                   \
  X(port_state_str, ibv_port_state_str)             \
  X(query_device, ibv_query_device)                 \
  X(query_gid, ibv_query_gid)                       \
  X(query_port, ibv_query_port)                     \
  X(reg_mr, ibv_reg_mr)                             \
  X(resize_cq, ibv_resize_cq)                       \
  X(wc_status_str, ibv_wc_status_str)

struct IbvApi {
#define BRAID_IBV_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  BRAID_IBV_FUNCTIONS(BRAID_IBV_MEMBER)
#undef BRAID_IBV_MEMBER
  // Optional (rdma-core v32 and later): null where the library lacks it; queryGidTable then reads
  // the table through ibv_query_gid and sysfs.
  decltype(&::_ibv_query_gid_table) query_gid_table = nullptr;
};

// BRAID_IB_LIBRARY's default: libibverbs' soname.
inline constexpr const char* kIbverbsLibrary = "libibverbs.so.1";

// Opens `library` (dlopen, RTLD_NOW | RTLD_LOCAL) and resolves every function into *out, touching
// no global state; the library stays open. Fails with braidSystemError, in words that name the
// library and say why (dlerror's), where it is missing or lacks one of the functions. For
// loadIbverbs and for tests.
Status openIbverbs(const std::string& library, IbvApi* out);

// openIbverbs into the table ibv() returns, once per process: the first call's library is the one,
// later calls return its answer. A later call naming another library fails (braidInvalidUsage)
// rather than quietly running on the first one.
Status loadIbverbs(const std::string& library);

// The functions; only after loadIbverbs() succeeded (written once, by loadIbverbs, before any call).
extern IbvApi gIbvApi;
inline const IbvApi& ibv() { return gIbvApi; }

// verbs.h's inlines, over the table. queryPort: the context's query_port op where the provider has
// one (it fills every field of ibv_port_attr), else the exported compat call. queryGidTable:
// _ibv_query_gid_table with the entry size of this build; -ENOSYS where the library lacks it (see
// gidTableFromSysfs in ib_device.h). (ibv_reg_mr's inline also picks
// ibv_reg_mr_iova2 for IBV_ACCESS_OPTIONAL_RANGE flags, which braid never passes: the table's
// reg_mr is called directly, and rdma-core older than that symbol still loads.)
int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr);
ssize_t queryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t maxEntries, uint32_t flags);

}  // namespace braid::ib
