// braid's datatypes and reduction ops as data: sizes, names, validity. Shared by the library and
// the NCCL shim (which translates NCCL's types to these); the kernels are in src/reduce.h.
#pragma once

#include <cstddef>

#include "braid/braid.h"

namespace braid {

// Inline: every call checks its datatype and sizes its buffers with them (the small calls' path
// costs a few hundred instructions in all).
inline bool validDtype(int dt) { return dt >= 0 && dt < braidNumTypes; }
inline bool validRedop(int op) { return op >= 0 && op < braidNumOps; }
// Bytes per element; 0 for an invalid datatype.
inline size_t dtypeSize(braidDataType_t dt) {
  constexpr unsigned char kSizes[braidNumTypes] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
  return validDtype(dt) ? kSizes[dt] : 0;
}
const char* dtypeName(braidDataType_t dt);  // "float32", "bfloat16", ...; "invalid" otherwise
const char* redopName(braidRedOp_t op);     // "sum", ...; "invalid" otherwise

}  // namespace braid
