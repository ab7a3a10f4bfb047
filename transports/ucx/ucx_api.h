// The UCX functions the ucx transport calls, taken from libucp.so.0 with dlopen when the first ucx
// transport starts, not linked into libbraid.
//
// Why: libucs's load-time constructor installs UCM's memory hooks, patching mmap, munmap, madvise,
// brk and friends in every object of the process. Linked, that happened to every process that loaded
// libbraid, though the default transports are shm,tcp: each of the application's mmap/munmap then
// went through UCM's event lock, and a new thread's first madvise (glibc's stack guard, before
// ThreadSanitizer has set the thread up) crashed every forked rank under TSan. Loaded on demand,
// only a process whose BRAID_TRANSPORTS names ucx carries UCX.
//
// The library is opened once per process and never closed (UCM's hooks stay in place after a
// dlclose). A machine without libucp.so.0 gets a clear error from loadUcx(), which the transport
// records as "ucx unavailable", and its pairs move to the next transport in BRAID_TRANSPORTS.
//
// fork(): UCX's rule is that a child uses none of its API. A hooked mmap or munmap holds UCM's event
// lock for reading; a parent thread inside one at the fork leaves it held in the child for good, and
// ucp_init there, which takes it for writing to add its handlers, never returned (test_fork.cc). So
// loadUcx() refuses in a process forked from one that had opened the library, and the child's pairs
// move on as on a machine without UCX.
//
// Threads: loadUcx() is thread-safe; ucx() may be called from any thread once loadUcx() succeeded.
#pragma once

#include <ucp/api/ucp.h>

#include "src/base/status.h"

namespace braid {

// Every UCX function braid calls, by its UCX name (ucp_init is an inline that calls
// ucp_init_version).
#define BRAID_UCX_FUNCTIONS(X)      \
  X(ucp_am_data_release)            \
  X(ucp_am_send_nbx)                \
  X(ucp_cleanup)                    \
  X(ucp_config_read)                \
  X(ucp_config_release)             \
  X(ucp_ep_close_nbx)               \
  X(ucp_ep_create)                  \
  X(ucp_ep_flush_nbx)               \
  X(ucp_ep_rkey_unpack)             \
  X(ucp_init_version)               \
  X(ucp_mem_map)                    \
  X(ucp_mem_query)                  \
  X(ucp_mem_unmap)                  \
  X(ucp_put_nbx)                    \
  X(ucp_request_cancel)             \
  X(ucp_request_check_status)       \
  X(ucp_request_free)               \
  X(ucp_rkey_buffer_release)        \
  X(ucp_rkey_destroy)               \
  X(ucp_rkey_pack)                  \
  X(ucp_tag_recv_nbx)               \
  X(ucp_tag_recv_request_test)      \
  X(ucp_tag_send_nbx)               \
  X(ucp_worker_arm)                 \
  X(ucp_worker_create)              \
  X(ucp_worker_destroy)             \
  X(ucp_worker_get_address)         \
  X(ucp_worker_get_efd)             \
  X(ucp_worker_progress)            \
  X(ucp_worker_release_address)     \
  X(ucp_worker_set_am_recv_handler) \
  X(ucs_status_string)

struct UcxApi {
#define BRAID_UCX_MEMBER(name) decltype(&::name) name = nullptr;
  BRAID_UCX_FUNCTIONS(BRAID_UCX_MEMBER)
#undef BRAID_UCX_MEMBER
};

// The library's soname; what loadUcx opens.
inline constexpr const char* kUcpLibrary = "libucp.so.0";

// Opens kUcpLibrary and resolves every function, once per process; later calls return the first
// call's answer. Fails (braidSystemError, with dlerror's words) where the library or one of the
// functions is missing, and (braidInvalidUsage, naming the process that opened it) in a process
// forked from one that had opened it.
Status loadUcx();

// The functions; only after loadUcx() succeeded (written once, by loadUcx, before any call).
extern UcxApi gUcxApi;
inline const UcxApi& ucx() { return gUcxApi; }

}  // namespace braid
