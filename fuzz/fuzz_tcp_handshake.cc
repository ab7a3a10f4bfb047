// The tcp transport handshake, as the acceptor reads it from a stranger: every prefix through
// checkHandshakePrefix, then the whole input through decodeHandshake.
#include "fuzz/fuzz_common.h"
#include "transports/tcp/tcp_wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (size_t n = 0; n <= size; ++n)
    if (!tcp::checkHandshakePrefix(data, n).ok()) break;
  tcp::HandshakeExpect want;
  want.commId = fuzz::kCommId;
  want.secret = fuzz::kSecret;
  want.rank = fuzz::kSelf;
  want.nranks = fuzz::kNranks;
  tcp::Handshake hs;
  if (!tcp::decodeHandshake(data, size, want, &hs).ok()) return 0;
  fuzz::require(size == sizeof(hs) && hs.to == fuzz::kSelf && hs.from > fuzz::kSelf && hs.from < fuzz::kNranks);
  fuzz::require(sameSecret(hs.secret, fuzz::kSecret) && hs.commId == fuzz::kCommId);
  return 0;
}
