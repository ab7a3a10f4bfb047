// braid's datatypes and reduction ops as data: sizes, names, validity. Shared by the library and
// the NCCL shim (which translates NCCL's types to these); the kernels are in src/reduce.h.
#pragma once

#include <cstddef>

#include "braid/braid.h"

namespace braid {

// Bytes per element; 0 for an invalid datatype.
size_t dtypeSize(braidDataType_t dt);
const char* dtypeName(braidDataType_t dt);  // "float32", "bfloat16", ...; "invalid" otherwise
const char* redopName(braidRedOp_t op);     // "sum", ...; "invalid" otherwise
bool validDtype(int dt);
bool validRedop(int op);

}  // namespace braid
