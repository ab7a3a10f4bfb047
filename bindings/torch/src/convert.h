// From torch's vocabulary to braid's: tensor checks, dtypes, reduction ops. Every refusal is a
// c10::Error (RuntimeError in Python) naming the collective and what is supported.
#pragma once

#include <ATen/ATen.h>
#include <braid/braid.h>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace braid_torch {

// Throws unless t is a defined, dense tensor (placeOf checks where it is).
void checkTensor(const at::Tensor& t, const char* op);

// The single tensor of a one-tensor argument list (braid has one buffer per process), checked.
const at::Tensor& onlyTensor(const std::vector<at::Tensor>& tensors, const char* op);

// braid's datatype for t's dtype. bool travels as uint8 (0/1 bytes).
braidDataType_t toBraidType(const at::Tensor& t, const char* op);

// braid's op for a reduction on `type`. On bool, SUM is logical or (MAX) and PRODUCT logical and
// (MIN); AVG of bool is refused.
braidRedOp_t toBraidOp(const c10d::ReduceOp& op, at::ScalarType type, const char* name);

// A root rank in range (and root tensor 0: one tensor per process).
void checkRoot(int64_t rootRank, int64_t rootTensor, int size, const char* op);

// Every tensor has the dtype and number of elements of `like`.
void checkAlike(const std::vector<at::Tensor>& tensors, const at::Tensor& like, const char* op);

}  // namespace braid_torch
