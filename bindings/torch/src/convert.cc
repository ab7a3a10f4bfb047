#include "convert.h"

#include <c10/util/Exception.h>

namespace braid_torch {

void checkTensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "braid ", op, ": undefined tensor");
  TORCH_CHECK(t.layout() == c10::kStrided, "braid ", op, ": only dense tensors are supported (got layout ", t.layout(),
              ")");
  // The device is placeOf's to check (placement.h): CPU, or one CUDA device for the whole call.
}

const at::Tensor& onlyTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "braid ", op, ": expects exactly one tensor per process, got ", tensors.size());
  checkTensor(tensors[0], op);
  return tensors[0];
}

braidDataType_t toBraidType(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return braidFloat32;
    case at::kDouble:
      return braidFloat64;
    case at::kHalf:
      return braidFloat16;
    case at::kBFloat16:
      return braidBfloat16;
    case at::kChar:
      return braidInt8;
    case at::kByte:
    case at::kBool:
      return braidUint8;
    case at::kInt:
      return braidInt32;
    case at::kLong:
      return braidInt64;
    default:
      TORCH_CHECK(false, "braid ", op, ": dtype ", t.scalar_type(),
                  " is not supported (float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool)");
  }
}

namespace {

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "unknown";
  }
}

}  // namespace

braidRedOp_t toBraidOp(const c10d::ReduceOp& op, at::ScalarType type, const char* name) {
  const bool isBool = type == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return isBool ? braidMax : braidSum;
    case c10d::ReduceOp::PRODUCT:
      return isBool ? braidMin : braidProd;
    case c10d::ReduceOp::MIN:
      return braidMin;
    case c10d::ReduceOp::MAX:
      return braidMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!isBool, "braid ", name, ": AVG of bool tensors is not defined");
      return braidAvg;
    default:
      TORCH_CHECK(false, "braid ", name, ": ReduceOp ", opName(op.op_),
                  " is not supported (SUM, PRODUCT, MIN, MAX, AVG)");
  }
}

void checkRoot(int64_t rootRank, int64_t rootTensor, int size, const char* op) {
  TORCH_CHECK(rootTensor == 0, "braid ", op, ": rootTensor must be 0 (one tensor per process)");
  TORCH_CHECK(rootRank >= 0 && rootRank < size, "braid ", op, ": root ", rootRank, " is out of range for a group of ",
              size);
}

void checkAlike(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* op) {
  for (const at::Tensor& t : tensors) {
    checkTensor(t, op);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "braid ", op, ": mixed dtypes (", t.scalar_type(), " and ",
                like.scalar_type(), ")");
    TORCH_CHECK(t.numel() == like.numel(), "braid ", op, ": tensors of ", t.numel(), " and ", like.numel(),
                " elements; every tensor must have ", like.numel());
  }
}

}  // namespace braid_torch
