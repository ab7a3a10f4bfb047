#include "process_group.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <numeric>

#include "convert.h"

namespace braid_torch {

void throwBraid(const char* what, int rank) {
  TORCH_CHECK(false, "braid ", what, " failed on rank ", rank, ": ", braidGetLastError());
}

ProcessGroupBraid::ProcessGroupBraid(std::shared_ptr<Comm> comm, int rank, int size, std::chrono::milliseconds timeout)
    : GroupBase(rank, size), comm_(std::move(comm)), completer_(std::make_shared<Completer>()), timeout_(timeout) {
  init();
}

c10::intrusive_ptr<ProcessGroupBraid> ProcessGroupBraid::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                                int size, std::chrono::duration<float> timeout) {
  TORCH_CHECK(store, "braid: no store");
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "braid: rank ", rank, " is out of range for a group of ", size);
  // Every rank counts itself in. Groups created one after the other on the same store (a file://
  // store, or one the caller passes again) get successive generations, so nobody reads an old id:
  // all ranks of generation g add before any rank finishes joining g, hence before any adds for g+1.
  const int64_t joined = store->add("braid/joined", 1);
  const std::string key = "braid/unique_id/" + std::to_string((joined - 1) / size);
  braidUniqueId id;
  if (rank == 0) {
    if (braidGetUniqueId(&id) != braidSuccess) throwBraid("braidGetUniqueId", rank);
    store->set(key, std::vector<uint8_t>(id.internal, id.internal + BRAID_UNIQUE_ID_BYTES));
  } else {
    const std::vector<uint8_t> bytes = store->get(key);  // waits until rank 0 set it (the store's timeout)
    TORCH_CHECK(bytes.size() == BRAID_UNIQUE_ID_BYTES, "braid: the store holds ", bytes.size(), " bytes under '", key,
                "', not a braid unique id (", BRAID_UNIQUE_ID_BYTES, " bytes)");
    std::memcpy(id.internal, bytes.data(), BRAID_UNIQUE_ID_BYTES);
  }
  braidComm_t handle = nullptr;
  // torch's send/recv all go through braid's tagged calls (any tag, any source, as gloo), which need
  // the tag links; BRAID_P2P_TAGS, when the user set it, decides instead.
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  if (std::getenv("BRAID_P2P_TAGS") == nullptr) config.p2pTags = 1;
  if (braidCommInitRankConfig(&handle, size, id, rank, &config) != braidSuccess)
    throwBraid("braidCommInitRankConfig", rank);
  auto comm = Comm::adopt(handle);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return c10::make_intrusive<ProcessGroupBraid>(std::move(comm), rank, size, ms);
}

ProcessGroupBraid::~ProcessGroupBraid() {
  // Before the members go: the Completer waits for the Works it watches, which end with the
  // communicator when their peers never come.
  comm_->end();
}

c10::intrusive_ptr<BraidWork> ProcessGroupBraid::newWork(c10d::OpType type, const char* name,
                                                         std::chrono::milliseconds opTimeout, const Placement& where) {
  auto work = c10::make_intrusive<BraidWork>(comm_, completer_, rank_, type, name,
                                             opTimeout > std::chrono::milliseconds(0) ? opTimeout : timeout_, where);
  comm_->track(work);
  return work;
}

at::Tensor ProcessGroupBraid::stage(BraidWork& work, const at::Tensor& t, bool output) {
  at::Tensor buffer = t.contiguous();
  if (output && !buffer.is_same(t)) work.copyBack(t, buffer);
  work.keep(buffer);
  return buffer;
}

template <class Fn>
void ProcessGroupBraid::grouped(BraidWork& work, const char* name, Fn&& fn) {
  if (braidGroupStart() != braidSuccess) throwBraid(name, rank_);
  // Arguments were checked before: a call refused here is a bug, and the group must still end
  // (it then issues what was recorded).
  const braidResult_t recorded = fn();
  const std::string recordError = recorded == braidSuccess ? "" : braidGetLastError();
  const braidResult_t ran = braidGroupEnd();
  TORCH_CHECK(recorded == braidSuccess, "braid ", name, " failed on rank ", rank_, ": ", recordError);
  if (ran != braidSuccess) {
    work.failNow(braidGetLastError());  // like a failed nonblocking operation: wait() raises it
  } else {
    work.completeNow();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = onlyTensor(tensors, "broadcast");
  checkRoot(opts.rootRank, opts.rootTensor, size_, "broadcast");
  const braidDataType_t type = toBraidType(t, "broadcast");
  const Placement where = placeOf(tensors, "broadcast");
  auto work = newWork(c10d::OpType::BROADCAST, "broadcast", opts.timeout, where);
  at::Tensor buf = stage(*work, t, rank_ != opts.rootRank);
  const int root = static_cast<int>(opts.rootRank);
  post(*work, "broadcast", [&](braidRequest_t* r) {
    return braidIBroadcast(buf.data_ptr(), buf.data_ptr(), buf.numel(), type, root, comm(), where.stream, r);
  });
  work->issued(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  if (!tensors.empty() && tensors[0].defined() && tensors[0].layout() == c10::kSparse)
    return allreduceSparse(tensors, opts);
  const at::Tensor& t = onlyTensor(tensors, "allreduce");
  const braidDataType_t type = toBraidType(t, "allreduce");
  const braidRedOp_t op = toBraidOp(opts.reduceOp, t.scalar_type(), "allreduce");
  const Placement where = placeOf(tensors, "allreduce");
  auto work = newWork(c10d::OpType::ALLREDUCE, "allreduce", opts.timeout, where);
  at::Tensor buf = stage(*work, t, true);
  post(*work, "allreduce", [&](braidRequest_t* r) {
    return braidIAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), type, op, comm(), where.stream, r);
  });
  work->issued(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  std::vector<braidDataType_t> types;
  std::vector<braidRedOp_t> ops;
  for (const at::Tensor& t : tensors) {
    checkTensor(t, "allreduce_coalesced");
    types.push_back(toBraidType(t, "allreduce_coalesced"));
    ops.push_back(toBraidOp(opts.reduceOp, t.scalar_type(), "allreduce_coalesced"));
  }
  const Placement where = placeOf(tensors, "allreduce_coalesced");
  auto work = newWork(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", opts.timeout, where);
  std::vector<at::Tensor> bufs;
  for (const at::Tensor& t : tensors) bufs.push_back(stage(*work, t, true));
  grouped(*work, "allreduce_coalesced", [&] {
    for (size_t i = 0; i < bufs.size(); ++i) {
      void* p = bufs[i].data_ptr();
      const braidResult_t r = braidAllReduce(p, p, bufs[i].numel(), types[i], ops[i], comm(), where.stream);
      if (r != braidSuccess) return r;
    }
    return braidSuccess;
  });
  work->issued(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const at::Tensor& t = onlyTensor(tensors, "reduce");
  checkRoot(opts.rootRank, opts.rootTensor, size_, "reduce");
  const braidDataType_t type = toBraidType(t, "reduce");
  const braidRedOp_t op = toBraidOp(opts.reduceOp, t.scalar_type(), "reduce");
  const Placement where = placeOf(tensors, "reduce");
  auto work = newWork(c10d::OpType::REDUCE, "reduce", opts.timeout, where);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = stage(*work, t, rank_ == root);  // the result exists on the root only
  post(*work, "reduce", [&](braidRequest_t* r) {
    return braidIReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), type, op, root, comm(), where.stream, r);
  });
  work->issued(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = onlyTensor(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "braid allgather: expects one output list per process, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "braid allgather: the output list has ", outputs[0].size(),
              " tensors for a group of ", size_);
  checkAlike(outputs[0], in, "allgather");
  const braidDataType_t type = toBraidType(in, "allgather");
  const Placement where = placeOf(both(inputs, outputs[0]), "allgather");
  auto work = newWork(c10d::OpType::ALLGATHER, "allgather", opts.timeout, where);
  const int64_t n = in.numel();
  at::Tensor src = stage(*work, in, false);
  at::Tensor flat = at::empty({size_ * n}, in.options());
  work->keep(flat);
  for (int i = 0; i < size_; ++i) work->copyBack(outputs[0][i], flat.narrow(0, i * n, n).view(outputs[0][i].sizes()));
  post(*work, "allgather", [&](braidRequest_t* r) {
    return braidIAllGather(src.data_ptr(), flat.data_ptr(), n, type, comm(), where.stream, r);
  });
  work->issued(outputs[0]);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  checkTensor(input, "_allgather_base");
  checkTensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid _allgather_base: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(output.numel() == size_ * input.numel(), "braid _allgather_base: output has ", output.numel(),
              " elements, expected ", size_, " x ", input.numel());
  const braidDataType_t type = toBraidType(input, "_allgather_base");
  const Placement where = placeOf({input, output}, "_allgather_base");
  auto work = newWork(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", opts.timeout, where);
  at::Tensor in = stage(*work, input, false);
  at::Tensor out = stage(*work, output, true);
  post(*work, "_allgather_base", [&](braidRequest_t* r) {
    return braidIAllGather(in.data_ptr(), out.data_ptr(), in.numel(), type, comm(), where.stream, r);
  });
  work->issued({output});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = onlyTensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "braid reduce_scatter: expects one input list per process, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "braid reduce_scatter: the input list has ",
              inputs[0].size(), " tensors for a group of ", size_);
  checkAlike(inputs[0], out, "reduce_scatter");
  const braidDataType_t type = toBraidType(out, "reduce_scatter");
  const braidRedOp_t op = toBraidOp(opts.reduceOp, out.scalar_type(), "reduce_scatter");
  const Placement where = placeOf(both(outputs, inputs[0]), "reduce_scatter");
  auto work = newWork(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", opts.timeout, where);
  const int64_t n = out.numel();
  at::Tensor flat = at::empty({size_ * n}, out.options());
  for (int i = 0; i < size_; ++i) flat.narrow(0, i * n, n).view(inputs[0][i].sizes()).copy_(inputs[0][i]);
  work->keep(flat);
  at::Tensor dst = stage(*work, out, true);
  post(*work, "reduce_scatter", [&](braidRequest_t* r) {
    return braidIReduceScatter(flat.data_ptr(), dst.data_ptr(), n, type, op, comm(), where.stream, r);
  });
  work->issued(outputs);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base");
  checkTensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid _reduce_scatter_base: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  TORCH_CHECK(input.numel() == size_ * output.numel(), "braid _reduce_scatter_base: input has ", input.numel(),
              " elements, expected ", size_, " x ", output.numel());
  const braidDataType_t type = toBraidType(output, "_reduce_scatter_base");
  const braidRedOp_t op = toBraidOp(opts.reduceOp, output.scalar_type(), "_reduce_scatter_base");
  const Placement where = placeOf({input, output}, "_reduce_scatter_base");
  auto work = newWork(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", opts.timeout, where);
  at::Tensor in = stage(*work, input, false);
  at::Tensor out = stage(*work, output, true);
  post(*work, "_reduce_scatter_base", [&](braidRequest_t* r) {
    return braidIReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), type, op, comm(), where.stream, r);
  });
  work->issued({output});
  return work;
}

namespace {

// Split sizes in dim-0 rows: the given list (one entry per rank, none negative, summing to the
// tensor's rows), or an equal split when the list is empty.
std::vector<int64_t> rowSplits(const std::vector<int64_t>& splits, const at::Tensor& t, int size, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "braid alltoall_base: the ", what, " has ", rows,
                " rows, which do not split equally over ", size, " ranks");
    return std::vector<int64_t>(size, rows / size);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "braid alltoall_base: ", splits.size(), " ", what,
              " split sizes for a group of ", size);
  for (int64_t s : splits) TORCH_CHECK(s >= 0, "braid alltoall_base: negative ", what, " split size ", s);
  const int64_t sum = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  TORCH_CHECK(sum == rows, "braid alltoall_base: the ", what, " split sizes add up to ", sum, " rows, the ", what,
              " has ", rows);
  return splits;
}

}  // namespace

void ProcessGroupBraid::exchange(BraidWork& work, const Placement& where, const at::Tensor& output,
                                 const at::Tensor& input, const std::vector<int64_t>& outputSplits,
                                 const std::vector<int64_t>& inputSplits) {
  const std::vector<int64_t> outRows = rowSplits(outputSplits, output, size_, "output");
  const std::vector<int64_t> inRows = rowSplits(inputSplits, input, size_, "input");
  const braidDataType_t type = toBraidType(input, "alltoall_base");
  const int64_t inRow = input.dim() == 0 || input.size(0) == 0 ? 0 : input.numel() / input.size(0);
  const int64_t outRow = output.dim() == 0 || output.size(0) == 0 ? 0 : output.numel() / output.size(0);
  at::Tensor in = stage(work, input, false);
  at::Tensor out = stage(work, output, true);
  const size_t elt = in.element_size();
  grouped(work, "alltoall_base", [&] {
    auto* src = static_cast<char*>(in.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    int64_t inOff = 0, outOff = 0;
    for (int peer = 0; peer < size_; ++peer) {
      const int64_t sendCount = inRows[peer] * inRow, recvCount = outRows[peer] * outRow;
      if (sendCount > 0) {
        const braidResult_t r = braidSend(src + inOff * elt, sendCount, type, peer, comm(), where.stream);
        if (r != braidSuccess) return r;
      }
      if (recvCount > 0) {
        const braidResult_t r = braidRecv(dst + outOff * elt, recvCount, type, peer, comm(), where.stream);
        if (r != braidSuccess) return r;
      }
      inOff += sendCount;
      outOff += recvCount;
    }
    return braidSuccess;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplits,
                                                                std::vector<int64_t>& inputSplits,
                                                                const c10d::AllToAllOptions& opts) {
  checkTensor(input, "alltoall_base");
  checkTensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "braid alltoall_base: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  const Placement where = placeOf({input, output}, "alltoall_base");
  auto work = newWork(c10d::OpType::ALLTOALL_BASE, "alltoall_base", opts.timeout, where);
  if (!outputSplits.empty() || !inputSplits.empty()) {
    exchange(*work, where, output, input, outputSplits, inputSplits);  // uneven: grouped sends and receives
  } else {
    TORCH_CHECK(input.numel() % size_ == 0 && output.numel() == input.numel(), "braid alltoall_base: input of ",
                input.numel(), " and output of ", output.numel(), " elements do not split equally over ", size_,
                " ranks");
    const braidDataType_t type = toBraidType(input, "alltoall_base");
    at::Tensor in = stage(*work, input, false);
    at::Tensor out = stage(*work, output, true);
    post(*work, "alltoall_base", [&](braidRequest_t* r) {
      return braidIAllToAll(in.data_ptr(), out.data_ptr(), in.numel() / size_, type, comm(), where.stream, r);
    });
  }
  work->issued({output});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "braid alltoall: ", inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ", size_);
  const Placement where = placeOf(both(inputs, outputs), "alltoall");
  auto work = newWork(c10d::OpType::ALLTOALL, "alltoall", opts.timeout, where);
  std::vector<at::Tensor> ins, outs;
  std::vector<braidDataType_t> types;
  for (int i = 0; i < size_; ++i) {
    checkTensor(inputs[i], "alltoall");
    checkTensor(outputs[i], "alltoall");
    TORCH_CHECK(inputs[i].scalar_type() == outputs[i].scalar_type(), "braid alltoall: input ", i, " is ",
                inputs[i].scalar_type(), ", output ", i, " is ", outputs[i].scalar_type());
    types.push_back(toBraidType(inputs[i], "alltoall"));
    ins.push_back(stage(*work, inputs[i], false));
    outs.push_back(stage(*work, outputs[i], true));
  }
  grouped(*work, "alltoall", [&] {
    for (int peer = 0; peer < size_; ++peer) {
      braidResult_t r = braidSend(ins[peer].data_ptr(), ins[peer].numel(), types[peer], peer, comm(), where.stream);
      if (r == braidSuccess)
        r = braidRecv(outs[peer].data_ptr(), outs[peer].numel(), types[peer], peer, comm(), where.stream);
      if (r != braidSuccess) return r;
    }
    return braidSuccess;
  });
  work->issued(outputs);
  return work;
}

// Point to point goes through braid's tagged calls, which match as gloo does: by (peer, tag), in
// order per pair, tags in any order, and a receive from any rank (recvAnysource) among them. The
// untagged braidSend/braidRecv would not meet a receive from any rank, so every tag, 0 included,
// takes the tagged path. Except on CUDA tensors: braid's tagged calls take host buffers only, so
// those go untagged, ordered on the current stream (in issue order per pair, as NCCL's): tag 0 and
// a named peer only, and both sides must pass CUDA tensors.
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  const at::Tensor& t = onlyTensor(tensors, "send");
  checkPeerAndTag(dstRank, tag, "send");
  const braidDataType_t type = toBraidType(t, "send");
  const Placement where = placeOf(tensors, "send");
  checkDeviceP2p(where, dstRank, tag, "send");
  auto work = newWork(c10d::OpType::SEND, "send", std::chrono::milliseconds(0), where);
  at::Tensor buf = stage(*work, t, false);
  post(*work, "send", [&](braidRequest_t* r) {
    if (where.onCuda()) return braidISend(buf.data_ptr(), buf.numel(), type, dstRank, comm(), where.stream, r);
    return braidISendTagged(buf.data_ptr(), buf.numel(), type, dstRank, tag, comm(), nullptr, r);
  });
  work->issued(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  checkPeerAndTag(srcRank, tag, "recv");
  return postRecv(tensors, srcRank, tag, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  checkPeerAndTag(BRAID_ANY_SOURCE, tag, "recv_anysource");
  return postRecv(tensors, BRAID_ANY_SOURCE, tag, "recv_anysource");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::postRecv(std::vector<at::Tensor>& tensors, int srcRank, int tag,
                                                           const char* name) {
  const at::Tensor& t = onlyTensor(tensors, name);
  const braidDataType_t type = toBraidType(t, name);
  const Placement where = placeOf(tensors, name);
  checkDeviceP2p(where, srcRank, tag, name);
  auto work = newWork(srcRank == BRAID_ANY_SOURCE ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV, name,
                      std::chrono::milliseconds(0), where);
  at::Tensor buf = stage(*work, t, true);
  int* source = work->sourceSlot(srcRank);
  post(*work, name, [&](braidRequest_t* r) {
    if (where.onCuda()) return braidIRecv(buf.data_ptr(), buf.numel(), type, srcRank, comm(), where.stream, r);
    return braidIRecvTagged(buf.data_ptr(), buf.numel(), type, srcRank, tag, comm(), nullptr, source, r);
  });
  work->issued(tensors);
  return work;
}

void ProcessGroupBraid::checkPeerAndTag(int peer, int tag, const char* name) const {
  TORCH_CHECK(tag >= 0, "braid ", name, ": tag ", tag, " is negative");
  if (peer == BRAID_ANY_SOURCE) {
    TORCH_CHECK(size_ > 1, "braid ", name, ": no other rank to receive from in a group of one");
    return;
  }
  TORCH_CHECK(peer >= 0 && peer < size_, "braid ", name, ": rank ", peer, " is out of range for a group of ", size_);
  TORCH_CHECK(peer != rank_, "braid ", name, ": rank ", peer, " is this rank; braid does not send to itself");
}

void ProcessGroupBraid::checkDeviceP2p(const Placement& where, int peer, int tag, const char* name) const {
  if (!where.onCuda()) return;
  TORCH_CHECK(peer != BRAID_ANY_SOURCE, "braid ", name,
              ": a receive from any rank takes CPU tensors only (braid's device point-to-point names its peer)");
  TORCH_CHECK(tag == 0, "braid ", name, ": tag ", tag,
              " on a CUDA tensor; braid's device point-to-point has no tags (messages between two ranks match in "
              "issue order): use tag 0, or CPU tensors");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::barrier(const c10d::BarrierOptions& opts) {
  auto work = newWork(c10d::OpType::BARRIER, "barrier", opts.timeout, Placement{});  // braid's barrier is on the host
  post(*work, "barrier", [&](braidRequest_t* r) { return braidIBarrier(comm(), nullptr, r); });
  return work;
}

}  // namespace braid_torch
