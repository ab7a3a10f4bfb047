// Control frames as Bootstrap::pollCtrl consumes them: decode from the front of the buffer until a
// frame is incomplete or malformed.
#include "fuzz/fuzz_common.h"
#include "src/bootstrap.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  for (;;) {
    CtrlFrame f;
    size_t used = 0;
    if (!decodeCtrlFrame(data + at, size - at, kCtrlTypes, fuzz::kNranks, &f, &used).ok() || used == 0) break;
    fuzz::require(used >= sizeof(CtrlHeader) && used <= size - at && used == sizeof(CtrlHeader) + f.text.size());
    fuzz::require(f.text.size() <= kMaxCtrlText && f.type < 32 && (kCtrlTypes & (1u << f.type)) != 0);
    fuzz::require(f.rank >= -1 && f.rank < fuzz::kNranks);
    at += used;
  }
  return 0;
}
