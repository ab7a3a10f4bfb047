// Progress tables (kProgress control frames) as a rank decodes them before a failure notice. The
// first byte picks the communicator size (1..64 ranks), the rest is the frame's text.
#include <cstring>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t nranks = 1 + data[0] % 64;
  std::vector<uint64_t> seqs(nranks, 7);
  decodeProgress(data + 1, size - 1, &seqs);
  fuzz::require(seqs.size() == nranks);
  // Every rank is either unknown or holds a sequence number some run of the input carries.
  for (uint64_t s : seqs) {
    if (s == kProgressUnknown) continue;
    bool found = false;
    for (size_t off = 1; off + 12 <= size && !found; off += 12) found = memcmp(data + off, &s, 8) == 0;
    fuzz::require(found);
  }
  // What we send decodes to what we had.
  const std::string text = encodeProgress(seqs);
  fuzz::require(text.size() <= kMaxCtrlText && text.size() % 12 == 0);
  std::vector<uint64_t> again(nranks, 0);
  decodeProgress(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &again);
  fuzz::require(again == seqs);
  return 0;
}
