// all_reduce of a sparse COO tensor, as gloo does it: every rank's (coalesced) indices and values
// are gathered by every rank and summed into one coalesced sparse tensor, which replaces the input.
//
// braid's AllGather takes the same count from every rank, so the ranks first all-gather a small
// header (nnz and the tensor's shape), then pad their indices and values to the largest nnz and
// all-gather those; each rank keeps the first nnz(r) entries of rank r's block. Three blocking
// AllGathers in the calling thread (torch released the GIL); the Work is complete when returned.
// Cost per rank: (size - 1) x max nnz x (sparse dims x 8 bytes + one row of values) received.
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "convert.h"
#include "process_group.h"

namespace braid_torch {

namespace {

// Header slots: nnz, sparse dims, dense dims, then the sizes of up to kMaxDims dimensions. Ranks
// whose headers differ in anything but nnz hold different tensors: all of them refuse, alike.
constexpr int kMaxDims = 16;
constexpr int kHeader = 3 + kMaxDims;

std::vector<int64_t> header(const at::Tensor& t) {
  std::vector<int64_t> h(kHeader, -1);
  h[0] = t._nnz();
  h[1] = t.sparse_dim();
  h[2] = t.dense_dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[3 + d] = t.size(d);
  return h;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduceSparse(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "braid allreduce: expects exactly one tensor per process, got ", tensors.size());
  at::Tensor& t = tensors[0];
  TORCH_CHECK(t.device().is_cpu(), "braid allreduce: the sparse tensor is on ", t.device(),
              "; braid sums sparse CPU tensors only");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM,
              "braid allreduce: sparse tensors are only summed (ReduceOp.SUM, as gloo does); got another op");
  TORCH_CHECK(t.dim() <= kMaxDims, "braid allreduce: sparse tensors of up to ", kMaxDims, " dimensions, got ", t.dim());
  const braidDataType_t type = toBraidType(t, "allreduce");
  auto work = newWork(c10d::OpType::ALLREDUCE, "allreduce", opts.timeout, Placement{});

  const at::Tensor in = t.coalesce();
  const at::Tensor indices = in._indices().contiguous();  // [sparse dims, nnz], int64
  const at::Tensor values = in._values().contiguous();    // [nnz, dense sizes...]
  std::vector<int64_t> mine = header(in);
  std::vector<int64_t> all(static_cast<size_t>(size_) * kHeader);
  if (braidAllGather(mine.data(), all.data(), kHeader, braidInt64, comm(), nullptr) != braidSuccess) {
    work->failNow(braidGetLastError());
    return work;
  }
  int64_t maxNnz = 0;
  for (int r = 0; r < size_; ++r) {
    const int64_t* h = &all[static_cast<size_t>(r) * kHeader];
    TORCH_CHECK(std::equal(h + 1, h + kHeader, mine.begin() + 1), "braid allreduce: rank ", r,
                " passed a sparse tensor of another shape or sparse/dense split than rank ", rank_, "'s ", in.sizes());
    maxNnz = std::max(maxNnz, h[0]);
  }

  const int64_t sparseDims = in.sparse_dim();
  const std::vector<int64_t> rowShape(values.sizes().begin() + 1, values.sizes().end());  // one entry's value
  at::Tensor result = in;  // every rank has nnz 0: the sum is empty too
  if (maxNnz > 0) {
    // Padded to maxNnz entries, so that every rank sends the same count.
    at::Tensor sendIdx = at::zeros({sparseDims, maxNnz}, indices.options());
    sendIdx.narrow(1, 0, in._nnz()).copy_(indices);
    std::vector<int64_t> valShape{maxNnz};
    valShape.insert(valShape.end(), rowShape.begin(), rowShape.end());
    at::Tensor sendVal = at::zeros(valShape, values.options());
    sendVal.narrow(0, 0, in._nnz()).copy_(values);
    at::Tensor gotIdx = at::empty({size_, sparseDims, maxNnz}, indices.options());
    std::vector<int64_t> gotShape{size_};
    gotShape.insert(gotShape.end(), valShape.begin(), valShape.end());
    at::Tensor gotVal = at::empty(gotShape, values.options());
    if (braidAllGather(sendIdx.data_ptr(), gotIdx.data_ptr(), sendIdx.numel(), braidInt64, comm(), nullptr) !=
            braidSuccess ||
        braidAllGather(sendVal.data_ptr(), gotVal.data_ptr(), sendVal.numel(), type, comm(), nullptr) != braidSuccess) {
      work->failNow(braidGetLastError());
      return work;
    }
    std::vector<at::Tensor> idxParts, valParts;
    for (int r = 0; r < size_; ++r) {
      const int64_t nnz = all[static_cast<size_t>(r) * kHeader];
      idxParts.push_back(gotIdx[r].narrow(1, 0, nnz));
      valParts.push_back(gotVal[r].narrow(0, 0, nnz));
    }
    result = at::_sparse_coo_tensor_unsafe(at::cat(idxParts, 1), at::cat(valParts, 0), in.sizes()).coalesce();
  }
  t.copy_(result);  // a sparse copy takes the result's indices and values, whatever their nnz
  work->issued(tensors);
  work->completeNow();
  return work;
}

}  // namespace braid_torch
