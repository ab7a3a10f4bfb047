// The device side of the cuda_ipc transport (issue "GPUs"): a collective on device buffers of ranks
// of one host, done by each rank on its peers' buffers where they lie, as the direct calls of
// src/direct_coll.cc do on braidMemAlloc host memory. The mailboxes carry each rank's IPC handles
// (src/cuda/ipc.h); IpcColl opens them, enqueues this rank's share of the work on a stream of its
// own, and says when it is done.
//
// A peer allocation, once opened, stays open until the communicator ends (src/cuda/ipc.h:
// IpcImports, keyed by the allocation's handle, process and buffer id, so an allocation made where
// a freed one was is opened as itself; the mapping is shared with the process's other
// communicators and closed after the last), as UCX's cuda_ipc cache does. Two things decided that:
//   - closing during a call is out: unmapping may wait for the process's streams, and the caller's
//     stream waits for this very call (it would never end);
//   - opening and closing per call would cost a cudaIpcOpenMemHandle per peer allocation and call.
// The price: CUDA leaves undefined what freeing an allocation another process has open does, and a
// caller may free its buffers once a call is over (a caching allocator does, now and then), so a
// freed allocation can stay mapped here until the communicator ends. Nothing of it is read again.
// Not measured yet: gpu_check.sh prints both paths at every size, and cuda_ipc_perf what an open
// and a close cost.
//
// COMPILE-ONLY: built and linked with nvcc 13, never run on a GPU.
//
// Each rank's share (the same split as on the host, so every rank ends with the very same bits):
//   AllReduce      part p of the buffer (cut as src/direct_coll.cc cuts it): rank p folds part p of
//                  all n inputs in rank order and writes the result into part p of all n outputs
//   Reduce         the same parts, written into the root's output only
//   ReduceScatter  rank p folds block p of all n inputs into its own output
//   AllGather      rank p copies every rank's input into its own output (Gather: the root only)
//   AllToAll       rank p copies block p of every rank's input into its own output
//   Broadcast      rank p copies the root's input into its own output (Scatter: block p of it)
// With two ranks a fold is one pass of the fused reduce-copy (src/cuda/kernels.h: both outputs
// written from the registers); with more, the fold runs through a buffer of this rank's (an output
// may be an input a later fold step still reads, in place) and is copied out from there.
//
// The stream is non-blocking with respect to the legacy default stream: the caller's stream (maybe
// that one) waits for this work to be over (src/cuda/staging.h's flag), so a stream that waited for
// it in turn would deadlock.
//
// Threads: one caller at a time (the engine lock); it makes the device current for each call.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "src/base/status.h"
#include "src/coll.h"
#include "src/cuda/ipc.h"

namespace braid {

// One rank's share of a direct call on device memory. ins and outs: by rank, addresses in this
// process (this rank's own buffers and the peers' opened ones), null where the call does not use
// them. bytes: as SmallCall::bytes (the buffer, or one rank's block). [lo, hi): the part of an
// AllReduce or Reduce this rank folds, in bytes.
struct DeviceShare {
  Coll coll = Coll::kAllReduce;
  braidDataType_t dtype = braidUint8;
  braidRedOp_t op = braidSum;
  int root = 0;
  int rank = 0;
  int nranks = 1;
  size_t bytes = 0;
  size_t lo = 0, hi = 0;
  const char* const* ins = nullptr;
  char* const* outs = nullptr;
};

class IpcColl {
 public:
  virtual ~IpcColl() = default;
  // The address in this process of the peer's range `h` names (opened once per allocation).
  virtual Status open(const IpcHandle& h, void** ptr) = 0;
  // Enqueues the share's kernels and copies and an event after them; returns at once.
  virtual Status launch(const DeviceShare& s) = 0;
  // Whether the last launch's work finished: 1 done, 0 still running, -1 failed (*err says how: a
  // fault of a kernel or copy, which also ends the CUDA context's use here).
  virtual int poll(Status* err) = 0;
  // How many peer allocations are open.
  virtual size_t openCount() const = 0;
};

// An IpcColl on `device`: its stream, event and fold buffer are made here, once (comm init makes
// it, while no call can be waiting on the device: cudaFree and cudaMalloc may wait for the device's
// streams, and the caller's stream waits for the call). Creates the device's CUDA context if nothing
// did. Without CUDA or a device: braidInvalidUsage saying so. *out set on success only.
Status makeIpcColl(int device, std::unique_ptr<IpcColl>* out);

// Whether a direct call on device memory can reach every peer's device, from this process:
// `busIds` by rank (this rank's own included, "" for a rank without a device). Sets *ok, and *why
// to the first reason it cannot. Without CUDA: *ok false.
Status ipcReachesAll(int device, const std::vector<std::string>& busIds, int rank, bool* ok, std::string* why);

// This process's PCI bus id of `device` ("" when there is none or CUDA is not compiled in).
void ipcBusId(int device, char out[32]);

}  // namespace braid
