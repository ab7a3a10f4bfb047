// A peer's tcp AddrRecord from the setup allGather.
#include <sys/socket.h>

#include "fuzz/fuzz_common.h"
#include "transports/tcp/tcp_wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SockAddr a;
  if (!tcp::decodeAddrRecord(data, size, &a).ok()) return 0;
  fuzz::require((a.family() == AF_INET && a.len == sizeof(sockaddr_in)) ||
                (a.family() == AF_INET6 && a.len == sizeof(sockaddr_in6)));
  fuzz::require(a.port() > 0 && !a.toString().empty());
  return 0;
}
