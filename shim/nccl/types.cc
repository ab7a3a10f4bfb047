// Datatypes and reduction ops: NCCL's values to braid's, and the PreMulSum ops (creation,
// lookup, and the scaling each call applies to its input before braid sums).
#include <cstring>
#include <type_traits>

#include "shim/nccl/shim.h"
#include "src/base/half.h"

namespace braid::nccl {

namespace {

// NCCL numbers the float types 6 fp16, 7 fp32, 8 fp64, 9 bf16; braid 6 fp16, 7 bf16, 8 fp32,
// 9 fp64. Indexed by ncclDataType_t; fp8 (10, 11) has no braid reduction type.
constexpr int kNoType = -1;
constexpr int kBraidType[ncclNumTypes] = {
    braidInt8,    braidUint8,   braidInt32,   braidUint32,   braidInt64, braidUint64,
    braidFloat16, braidFloat32, braidFloat64, braidBfloat16, kNoType,    kNoType,
};

bool isFp8(ncclDataType_t dt) { return dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2; }

Status checkType(ncclDataType_t dt) {
  if (static_cast<unsigned>(dt) >= static_cast<unsigned>(ncclNumTypes))
    return errorf(braidInvalidArgument, "datatype %d is not an ncclDataType_t", static_cast<int>(dt));
  return okStatus();
}

// Integers multiply in their unsigned type (wrapping, as braid's sums do; no signed overflow).
template <class T>
void scaleInt(T* dst, const T* src, size_t count, T scalar) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < count; ++i)
    dst[i] = static_cast<T>(static_cast<U>(static_cast<U>(src[i]) * static_cast<U>(scalar)));
}

template <class T>
void scaleFloat(T* dst, const T* src, size_t count, T scalar) {
  for (size_t i = 0; i < count; ++i) dst[i] = src[i] * scalar;
}

// fp16/bf16: the product of two such values is exact in fp32, so one rounding back to the type
// gives the correctly rounded product.
template <float (*widen)(uint16_t), uint16_t (*narrow)(float)>
void scaleNarrow(uint16_t* dst, const uint16_t* src, size_t count, uint16_t scalar) {
  const float s = widen(scalar);
  for (size_t i = 0; i < count; ++i) dst[i] = narrow(widen(src[i]) * s);
}

template <class T>
T scalarAs(const PreMulSum& pre) {
  T v;
  memcpy(&v, pre.scalar, sizeof(T));
  return v;
}

}  // namespace

Status reduceType(ncclDataType_t dt, braidDataType_t* out) {
  BRAID_TRY(checkType(dt));
  if (isFp8(dt))
    return errorf(braidInvalidArgument, "braid cannot reduce fp8 (datatype %d); it only moves fp8 data",
                  static_cast<int>(dt));
  *out = static_cast<braidDataType_t>(kBraidType[dt]);
  return okStatus();
}

Status moveType(ncclDataType_t dt, braidDataType_t* out) {
  BRAID_TRY(checkType(dt));
  *out = isFp8(dt) ? braidUint8 : static_cast<braidDataType_t>(kBraidType[dt]);
  return okStatus();
}

Status resolveOp(ncclComm* comm, ncclRedOp_t op, ncclDataType_t dt, braidRedOp_t* out, PreMulSum* pre, bool* isPre) {
  // The built-in ops by NCCL's value (NCCL numbers max 2 and min 3; braid the other way round).
  static constexpr braidRedOp_t kBraidOp[ncclNumOps] = {braidSum, braidProd, braidMax, braidMin, braidAvg};
  *isPre = false;
  const int value = static_cast<int>(op);
  if (value >= 0 && value < static_cast<int>(ncclNumOps)) {
    *out = kBraidOp[value];
    return okStatus();
  }
  if (value < 0) return errorf(braidInvalidArgument, "op %d is not an ncclRedOp_t", value);
  std::lock_guard<std::mutex> lock(comm->mu);
  auto it = comm->ops.find(value);
  if (it == comm->ops.end())
    return errorf(braidInvalidArgument, "op %d was not created on this communicator (or was destroyed)", value);
  if (it->second.dtype != dt)
    return errorf(braidInvalidArgument, "op %d was created for datatype %d, not %d", value,
                  static_cast<int>(it->second.dtype), static_cast<int>(dt));
  *pre = it->second;
  *isPre = true;
  *out = braidSum;
  return okStatus();
}

void scaleInto(const PreMulSum& pre, void* dst, const void* src, size_t count) {
  // Integers wrap (scaleInt multiplies in the unsigned type), so signed and unsigned of one width
  // give the same bits.
  switch (pre.dtype) {
    case ncclInt8:
    case ncclUint8:
      return scaleInt(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, scalarAs<uint8_t>(pre));
    case ncclInt32:
    case ncclUint32:
      return scaleInt(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), count, scalarAs<uint32_t>(pre));
    case ncclInt64:
    case ncclUint64:
      return scaleInt(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), count, scalarAs<uint64_t>(pre));
    case ncclFloat16:
      return scaleNarrow<halfToFloat, floatToHalf>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                                   count, scalarAs<uint16_t>(pre));
    case ncclBfloat16:
      return scaleNarrow<bf16ToFloat, floatToBf16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                                   count, scalarAs<uint16_t>(pre));
    case ncclFloat32:
      return scaleFloat(static_cast<float*>(dst), static_cast<const float*>(src), count, scalarAs<float>(pre));
    case ncclFloat64:
      return scaleFloat(static_cast<double*>(dst), static_cast<const double*>(src), count, scalarAs<double>(pre));
    default:
      return;  // creation admits only the types above
  }
}

}  // namespace braid::nccl

using namespace braid;
using namespace braid::nccl;

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                       ncclScalarResidence_t residence, ncclComm_t comm) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(usable(comm, &b));
    if (op == nullptr) return errorf(braidInvalidArgument, "op is NULL");
    if (scalar == nullptr) return errorf(braidInvalidArgument, "scalar is NULL");
    braidDataType_t bt;
    BRAID_TRY(reduceType(datatype, &bt));
    if (residence == ncclScalarDevice)
      return errorf(braidInvalidUsage,
                    "a device scalar (ncclScalarDevice) needs a CUDA build; pass a host scalar with "
                    "ncclScalarHostImmediate");
    if (residence != ncclScalarHostImmediate)
      return errorf(braidInvalidArgument, "residence %d is not an ncclScalarResidence_t", static_cast<int>(residence));
    PreMulSum pre{};
    pre.dtype = datatype;
    memcpy(pre.scalar, scalar, dtypeSize(bt));
    std::lock_guard<std::mutex> lock(comm->mu);
    // The smallest free value: values are reused after ncclRedOpDestroy, as in NCCL.
    int value = ncclNumOps;
    for (const auto& [v, unused] : comm->ops) {
      if (v != value) break;
      ++value;
    }
    if (value == static_cast<int>(ncclMaxRedOp)) return errorf(braidInvalidUsage, "too many ops on this communicator");
    comm->ops.emplace(value, pre);
    *op = static_cast<ncclRedOp_t>(value);
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guard(__func__, [&] {
    BRAID_TRY(live(comm));
    const int value = static_cast<int>(op);
    if (value >= 0 && value < static_cast<int>(ncclNumOps))
      return errorf(braidInvalidArgument, "op %d is built in; only created ops can be destroyed", value);
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->ops.erase(value) == 0)
      return errorf(braidInvalidArgument, "op %d was not created on this communicator (or was destroyed)", value);
    return okStatus();
  });
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclRedOpCreatePreMulSum)
NCCL_SHIM_ALIAS(ncclRedOpDestroy)
