// The allGather length word. Input: the 8-byte length the receiver expects, then the word.
#include <cstring>

#include "fuzz/fuzz_common.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(uint64_t)) return 0;
  uint64_t expected;
  memcpy(&expected, data, sizeof(expected));
  const uint8_t* word = data + sizeof(uint64_t);
  const size_t len = size - sizeof(uint64_t);
  if (!decodeGatherLength(word, len, expected).ok()) return 0;
  uint64_t got;
  fuzz::require(len == sizeof(got));
  memcpy(&got, word, sizeof(got));
  fuzz::require(got == expected);
  return 0;
}
