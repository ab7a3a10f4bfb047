// decodeUniqueId: the 128 bytes a user passes to braidCommInitRank (from anywhere: a file, the
// network, a launcher). A decoded id must encode back to an id that decodes to the same fields.
#include <cstring>

#include "fuzz/fuzz_common.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  UniqueIdData d;
  if (!decodeUniqueId(data, size, &d).ok()) return 0;
  fuzz::require(d.root.len == sizeof(sockaddr_in) || d.root.len == sizeof(sockaddr_in6));
  fuzz::require(!d.root.toString().empty());
  braidUniqueId again;
  encodeUniqueId(d, &again);
  UniqueIdData e;
  fuzz::require(decodeUniqueId(again, &e).ok());
  fuzz::require(e.commId == d.commId && memcmp(e.secret, d.secret, sizeof(e.secret)) == 0 && e.root.len == d.root.len &&
                memcmp(&e.root.storage, &d.root.storage, d.root.len) == 0);
  return 0;
}
