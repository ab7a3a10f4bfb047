// The transport registry: every transport compiled into this build, in priority order. The first
// one whose canConnect accepts a pair carries it; BRAID_TRANSPORTS restricts and reorders the
// list by these names. A transport behind a build option (ucx, ibverbs, cuda) adds its row under
// that option's #if, so a build knows exactly the transports it can make.
#include <cstring>

#include "braid_build_config.h"
#include "transports/transport.h"

namespace braid {

std::string peerHostname(const TransportContext& ctx, int rank) {
  if (ctx.peers == nullptr || rank < 0 || static_cast<size_t>(rank) >= ctx.peers->size()) return "?";
  const char* h = (*ctx.peers)[rank].hostname;
  return std::string(h, strnlen(h, sizeof((*ctx.peers)[rank].hostname)));
}

bool onSameHost(const TransportContext& ctx, int a, int b) {
  const auto& p = *ctx.peers;
  return strncmp(p[a].hostId, p[b].hostId, sizeof(p[a].hostId)) == 0;
}

const std::vector<TransportEntry>& transportRegistry() {
  static const std::vector<TransportEntry> kRegistry = {
    {"shm", makeShmTransport},
#if BRAID_HAVE_IBVERBS
    {"ibverbs", makeIbverbsTransport},
#endif
#if BRAID_HAVE_UCX
    {"ucx", makeUcxTransport},
#endif
    {"tcp", makeTcpTransport},
  };
  return kRegistry;
}

}  // namespace braid
