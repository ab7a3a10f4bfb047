// gather, scatter and allgather_coalesced of the braid process group, with gloo's argument rules:
// gather's outputs and scatter's inputs exist on the root only (one list of one tensor per rank,
// each of the other side's dtype and shape), and every other rank passes an empty list. What
// torch.distributed builds on them (gather_object, scatter_object_list) follows.
#include <c10/util/Exception.h>

#include "convert.h"
#include "process_group.h"

namespace braid_torch {

void ProcessGroupBraid::checkRootList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like,
                                      const char* op, const char* what) const {
  TORCH_CHECK(lists.size() == 1, "braid ", op, ": the root expects one ", what, " list, got ", lists.size());
  TORCH_CHECK(static_cast<int>(lists[0].size()) == size_, "braid ", op, ": the ", what, " list has ", lists[0].size(),
              " tensors for a group of ", size_);
  checkAlike(lists[0], like, op);
  for (const at::Tensor& t : lists[0])
    TORCH_CHECK(t.sizes() == like.sizes(), "braid ", op, ": a tensor of the ", what, " list has shape ", t.sizes(),
                ", expected ", like.sizes());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  const at::Tensor& in = onlyTensor(inputs, "gather");
  checkRoot(opts.rootRank, 0, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  if (isRoot) {
    checkRootList(outputs, in, "gather", "output");
  } else {
    TORCH_CHECK(outputs.empty(), "braid gather: only the root (rank ", root, ") takes outputs; rank ", rank_, " got ",
                outputs.size(), " lists");
  }
  const braidDataType_t type = toBraidType(in, "gather");
  const Placement where = placeOf(isRoot ? both(inputs, outputs[0]) : inputs, "gather");
  auto work = newWork(c10d::OpType::GATHER, "gather", opts.timeout, where);
  const int64_t n = in.numel();
  at::Tensor src = stage(*work, in, false);
  // The root gathers into one flat buffer of size_ blocks, then copies each block to its output.
  at::Tensor flat;
  if (isRoot) {
    flat = at::empty({size_ * n}, in.options());
    work->keep(flat);
    for (int i = 0; i < size_; ++i) work->copyBack(outputs[0][i], flat.narrow(0, i * n, n).view(outputs[0][i].sizes()));
  }
  post(*work, "gather", [&](braidRequest_t* r) {
    return braidIGather(src.data_ptr(), isRoot ? flat.data_ptr() : nullptr, n, type, root, comm(), where.stream, r);
  });
  work->issued(isRoot ? outputs[0] : std::vector<at::Tensor>{});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const at::Tensor& out = onlyTensor(outputs, "scatter");
  checkRoot(opts.rootRank, 0, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  if (isRoot) {
    checkRootList(inputs, out, "scatter", "input");
  } else {
    TORCH_CHECK(inputs.empty(), "braid scatter: only the root (rank ", root, ") takes inputs; rank ", rank_, " got ",
                inputs.size(), " lists");
  }
  const braidDataType_t type = toBraidType(out, "scatter");
  const Placement where = placeOf(isRoot ? both(outputs, inputs[0]) : outputs, "scatter");
  auto work = newWork(c10d::OpType::SCATTER, "scatter", opts.timeout, where);
  const int64_t n = out.numel();
  // The root's inputs, block i for rank i, in one flat buffer (copied now: the caller may reuse them).
  at::Tensor flat;
  if (isRoot) {
    flat = at::empty({size_ * n}, out.options());
    for (int i = 0; i < size_; ++i) flat.narrow(0, i * n, n).view(inputs[0][i].sizes()).copy_(inputs[0][i]);
    work->keep(flat);
  }
  at::Tensor dst = stage(*work, out, true);
  post(*work, "scatter", [&](braidRequest_t* r) {
    return braidIScatter(isRoot ? flat.data_ptr() : nullptr, dst.data_ptr(), n, type, root, comm(), where.stream, r);
  });
  work->issued(outputs);
  return work;
}

// As gloo: outputLists[r][i] gets rank r's inputs[i], of inputs[i]'s dtype and shape; tensors may
// be empty, and dtypes may differ between the list's entries. One nonblocking AllGather per input,
// each with its own dtype, all in the one Work (they complete in issue order).
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(!inputs.empty(), "braid allgather_coalesced: requires a non-empty input tensor list");
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "braid allgather_coalesced: ", outputLists.size(),
              " output lists for a group of ", size_, " (output lists should be equal to world size)");
  std::vector<braidDataType_t> types;
  for (const at::Tensor& t : inputs) {
    checkTensor(t, "allgather_coalesced");
    types.push_back(toBraidType(t, "allgather_coalesced"));
  }
  for (const std::vector<at::Tensor>& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "braid allgather_coalesced: an output list has ", list.size(),
                " tensors, expected ", inputs.size());
    for (size_t i = 0; i < list.size(); ++i) {
      checkTensor(list[i], "allgather_coalesced");
      TORCH_CHECK(list[i].sizes() == inputs[i].sizes(),
                  "braid allgather_coalesced: invalid size of output tensor at index ", i, " (", list[i].sizes(),
                  ", input ", inputs[i].sizes(), ")");
      TORCH_CHECK(list[i].scalar_type() == inputs[i].scalar_type(),
                  "braid allgather_coalesced: invalid tensor type at index ", i, " (", list[i].scalar_type(),
                  ", input ", inputs[i].scalar_type(), ")");
    }
  }
  std::vector<at::Tensor> all;
  for (const std::vector<at::Tensor>& list : outputLists) all.insert(all.end(), list.begin(), list.end());
  const Placement where = placeOf(both(inputs, all), "allgather_coalesced");
  auto work = newWork(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", opts.timeout, where);
  std::vector<at::Tensor> flats, srcs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t n = inputs[i].numel();
    srcs.push_back(stage(*work, inputs[i], false));
    flats.push_back(at::empty({size_ * n}, inputs[i].options()));
    work->keep(flats.back());
    for (int r = 0; r < size_; ++r)
      work->copyBack(outputLists[r][i], flats.back().narrow(0, r * n, n).view(outputLists[r][i].sizes()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    post(*work, "allgather_coalesced", [&](braidRequest_t* r) {
      return braidIAllGather(srcs[i].data_ptr(), flats[i].data_ptr(), srcs[i].numel(), types[i], comm(), where.stream,
                             r);
    });
  }
  work->issued(all);
  return work;
}

}  // namespace braid_torch
