// braid as a torch.distributed backend: one braid communicator per process group.
//
// PyTorch 1.x: a c10d::ProcessGroup subclass, returned to Backend.register_backend's creator.
// PyTorch 2.x: a c10d::Backend subclass (torch wraps it in a ProcessGroup); the collective
// signatures are the same in both. Only 1.13 was compiled and tested here; the 2.x branch follows
// the 2.x headers and is compile-unverified.
//
// Tensors: CPU, or CUDA when built against a torch with CUDA (placement.h says how those are ordered
// on the current stream and work.h what their Works mean).
//
// Threading: every collective posts nonblocking braid operations (braidI*) and returns a BraidWork
// that polls them; the group's Completer thread marks the futures of unfinished Works. Operations that braid only
// offers in groups (allreduce_coalesced, alltoall with uneven splits or tensor lists) run between braidGroupStart and
// braidGroupEnd, which blocks: their Work is complete when returned. Collectives must be issued in the same order on
// every rank.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "work.h"

namespace braid_torch {

#if TORCH_VERSION_MAJOR >= 2
using GroupBase = c10d::Backend;
#else
using GroupBase = c10d::ProcessGroup;
#endif

// Raises braid's last error as a torch error naming the call and the rank.
[[noreturn]] void throwBraid(const char* what, int rank);

class ProcessGroupBraid : public GroupBase {
 public:
  ProcessGroupBraid(std::shared_ptr<Comm> comm, int rank, int size, std::chrono::milliseconds timeout);

  // The creator registered with torch.distributed: rank 0 makes a braid unique id and publishes it
  // in `store` (the group's prefix store), the others read it, then all call braidCommInitRank.
  // Blocks until every rank of the group joined (or BRAID_TIMEOUT / the store's timeout).
  static c10::intrusive_ptr<ProcessGroupBraid> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::duration<float> timeout);

  // Ends the communicator (Comm::end): destroy_process_group and the last reference going.
  ~ProcessGroupBraid() override;

  const std::string getBackendName() const override { return "braid"; }

#if TORCH_VERSION_MAJOR >= 2
  // torch 2.x's destroy_process_group and abort hooks (torch 2.6 and later declare them virtual in
  // c10d::Backend; without `override`, these still compile against releases that lack them).
  // Both end the communicator as the destructor does: pending operations are aborted.
  void shutdown() { comm_->end(); }
  void abort() { comm_->end(true); }
#endif

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // process_group_gather.cc: braidGather / braidScatter, and one AllGather per tensor.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;

 private:
  c10::intrusive_ptr<BraidWork> newWork(c10d::OpType type, const char* name, std::chrono::milliseconds opTimeout,
                                        const Placement& where);
  // A contiguous buffer with t's data: t itself, or a copy; for an output, the copy goes back into
  // t when the Work succeeds (CUDA: queued on the call's stream right after it, BraidWork::issued).
  // The Work keeps the buffer alive.
  at::Tensor stage(BraidWork& work, const at::Tensor& t, bool output);
  // Posts one nonblocking braid call (fn(&request) returns its result); throws braid's message.
  template <class Fn>
  void post(BraidWork& work, const char* name, Fn&& fn);
  // Records braid's blocking calls made by fn() in a group and runs them (braidGroupEnd blocks).
  template <class Fn>
  void grouped(BraidWork& work, const char* name, Fn&& fn);
  // Sends block i of `input` to rank i and receives block i of `output` from rank i, in one group;
  // blocks are dim-0 rows counted by the splits (each split list has one entry per rank).
  void exchange(BraidWork& work, const Placement& where, const at::Tensor& output, const at::Tensor& input,
                const std::vector<int64_t>& outputSplits, const std::vector<int64_t>& inputSplits);
  // allreduce of a sparse COO tensor (sparse.cc): gathered and summed, SUM only, as gloo does.
  c10::intrusive_ptr<c10d::Work> allreduceSparse(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  // A tagged receive from srcRank (BRAID_ANY_SOURCE: any rank); its Work reports the source.
  c10::intrusive_ptr<c10d::Work> postRecv(std::vector<at::Tensor>& tensors, int srcRank, int tag, const char* name);
  // Refuses what braid's tagged calls would refuse, in torch's words: a negative tag, a peer out of
  // range or this rank.
  void checkPeerAndTag(int peer, int tag, const char* name) const;
  // What a send or receive on CUDA tensors refuses: any source and tags other than 0.
  void checkDeviceP2p(const Placement& where, int peer, int tag, const char* name) const;
  braidComm_t comm() const { return comm_->get(); }
  // The root's checks of gather's outputs / scatter's inputs: one list of size_ tensors shaped as `like`.
  void checkRootList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, const char* op,
                     const char* what) const;

  std::shared_ptr<Comm> comm_;
  // Destroyed first: it finishes the Works it watches while the group still holds the communicator.
  std::shared_ptr<Completer> completer_;
  std::chrono::milliseconds timeout_;
};

template <class Fn>
void ProcessGroupBraid::post(BraidWork& work, const char* name, Fn&& fn) {
  braidRequest_t request = nullptr;
  if (fn(&request) != braidSuccess) throwBraid(name, rank_);
  work.addRequest(request);
}

}  // namespace braid_torch
