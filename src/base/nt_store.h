// Non-temporal stores for outputs that will not be read again soon: a plain store first reads the
// line it overwrites (write-allocate), a non-temporal one does not, so a big call's outputs cost one
// memory transfer per line instead of two. Shared by the shm FIFOs (transports/shm/shm_link.cc) and
// the collectives in place (src/direct_coll.cc).
#pragma once

#include <cstddef>

namespace braid {

// memcpy with non-temporal stores for the aligned middle (x86-64: SSE2, which every such CPU has;
// elsewhere a memcpy). The stores are weakly ordered: storeFence() must come before anything that
// publishes them to another thread or process.
void copyStreaming(char* dst, const char* src, size_t len);
void storeFence();

// The default of BRAID_NT_STORES_MIN: 32 x the L2 cache of cpu0 from sysfs (64 MiB when sysfs says
// nothing), at most its L3. Read once.
size_t defaultStreamBytes();

}  // namespace braid
