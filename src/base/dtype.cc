#include "src/base/dtype.h"

namespace braid {

namespace {
constexpr const char* kDtypeNames[braidNumTypes] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                                    "uint64", "float16", "bfloat16", "float32", "float64"};
constexpr size_t kDtypeSizes[braidNumTypes] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
constexpr const char* kRedopNames[braidNumOps] = {"sum", "prod", "min", "max", "avg"};
}  // namespace

bool validDtype(int dt) { return dt >= 0 && dt < braidNumTypes; }
bool validRedop(int op) { return op >= 0 && op < braidNumOps; }

size_t dtypeSize(braidDataType_t dt) { return validDtype(dt) ? kDtypeSizes[dt] : 0; }
const char* dtypeName(braidDataType_t dt) { return validDtype(dt) ? kDtypeNames[dt] : "invalid"; }
const char* redopName(braidRedOp_t op) { return validRedop(op) ? kRedopNames[op] : "invalid"; }

}  // namespace braid
