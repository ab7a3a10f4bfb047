#include "src/base/dtype.h"

namespace braid {

namespace {
constexpr const char* kDtypeNames[braidNumTypes] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                                    "uint64", "float16", "bfloat16", "float32", "float64"};
constexpr const char* kRedopNames[braidNumOps] = {"sum", "prod", "min", "max", "avg"};
}  // namespace

const char* dtypeName(braidDataType_t dt) { return validDtype(dt) ? kDtypeNames[dt] : "invalid"; }
const char* redopName(braidRedOp_t op) { return validRedop(op) ? kRedopNames[op] : "invalid"; }

}  // namespace braid
