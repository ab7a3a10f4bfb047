// The rendezvous hello, as rank 0 reads it from a stranger: every prefix through checkHelloPrefix
// (the root checks as bytes arrive), then the whole input through decodeHello.
#include <cstring>

#include "fuzz/fuzz_common.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (size_t n = 0; n <= size; ++n)
    if (!checkHelloPrefix(data, n).ok()) break;
  Hello h;
  if (!decodeHello(data, size, fuzz::fuzzId(), fuzz::kNranks, &h).ok()) return 0;
  fuzz::require(size == sizeof(Hello));
  fuzz::require(h.rank >= 1 && h.rank < fuzz::kNranks && h.info.rank == h.rank);
  fuzz::require(sameSecret(h.secret, fuzz::kSecret) && h.commId == fuzz::kCommId);
  fuzz::require(strnlen(h.info.hostname, sizeof(h.info.hostname)) < sizeof(h.info.hostname));
  fuzz::require(strnlen(h.info.hostId, sizeof(h.info.hostId)) < sizeof(h.info.hostId));
  return 0;
}
