// A c10d Work that wraps braid requests (braidI* calls): completion is polled with braidTest, so a
// waiting Python thread never spins a core for long, and errors carry braid's own message. Futures
// are marked by a Completer thread that polls for them.
#pragma once

#include <ATen/ATen.h>
#include <braid/braid.h>
#include <c10/core/Event.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "placement.h"

namespace braid_torch {

class BraidWork;
class Completer;

// Owns the communicator: the process group and every Work it handed out share it, so a Work that
// outlives its group can still be waited on. The communicator ends when the process group is
// destroyed (destroy_process_group), at interpreter exit (endAll), or with its last owner.
class Comm {
 public:
  // A new owner of `handle`, listed for endAll().
  static std::shared_ptr<Comm> adopt(braidComm_t handle);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  // After end(), braid refuses the handle (and the requests on it) with an error.
  braidComm_t get() const { return handle_; }

  // Remembers a Work handed out on this communicator, so that end() can see whether any is
  // unfinished. Weak: a Work dropped by everyone else is not kept alive.
  void track(const c10::intrusive_ptr<BraidWork>& work);

  // Ends the communicator, once (later calls return at once). When every Work handed out has
  // finished, braidCommDestroy: the peers see this rank leave, and an operation of theirs that
  // still needs it fails naming it (rank 0 waits for the others to leave first, as braid's
  // failure notices go through it). When one has not (an irecv never matched, an operation
  // abandoned by an exception), braidCommAbort: the pending operations fail here and on every
  // peer at once, with an error naming this rank, instead of waiting for BRAID_TIMEOUT. Any
  // thread; the GIL is released while braid blocks. `abort` aborts in any case.
  void end(bool abort = false);

  // Ends every communicator still open, newest first (the same order on every rank, so that no
  // two ranks wait for each other to leave two communicators): braid_torch runs it at interpreter
  // exit, before Python tears down the objects that could still hold them. `abort`: abort them all
  // (the program ends with an uncaught exception).
  static void endAll(bool abort);

  // A Work dropped before its requests finished leaves them here with the buffers braid still
  // uses, instead of blocking its destructor (and with it the Python thread that dropped it) until
  // they end. False when the communicator has ended already: the caller finishes them itself.
  // `device`: a call on CUDA tensors (it ends by itself once its stream reaches it).
  bool adoptOrphan(std::vector<braidRequest_t> requests, std::vector<at::Tensor> buffers, bool device);
  // A tracked Work finished (BraidWork::conclude, once per Work).
  void workFinished() { unfinished_.fetch_sub(1, std::memory_order_acq_rel); }

 private:
  struct Orphan {
    std::vector<braidRequest_t> requests;  // unfinished ones, in issue order
    std::vector<at::Tensor> buffers;
    bool device = false;  // a call on CUDA tensors
  };

  // How long end() lets calls on CUDA tensors still queued on their streams finish.
  static constexpr std::chrono::seconds kDeviceGrace{10};

  explicit Comm(braidComm_t handle) : handle_(handle) {}
  // Tests the orphans' requests, releasing those that finished; true when none is left. Under mu_.
  bool reapOrphans();
  // Polls the Works and orphans on CUDA tensors until they finished or kDeviceGrace passed.
  void settleDeviceWork(const std::vector<c10::intrusive_ptr<BraidWork>>& live);

  const braidComm_t handle_;
  std::atomic<int> unfinished_{0};  // tracked Works not yet concluded, dying ones included
  std::mutex mu_;
  bool ended_ = false;                                     // under mu_
  std::vector<c10::weak_intrusive_ptr<BraidWork>> works_;  // under mu_; expired ones pruned in track()
  size_t pruneAt_ = 64;                                    // under mu_
  std::vector<Orphan> orphans_;                            // under mu_
};

// A Work on CPU tensors finishes when its braid requests do; wait() blocks for them. A Work on CUDA
// tensors (Placement::onCuda) is ordered on the stream its call was queued on, as
// ProcessGroupNCCL's: wait() and synchronize() make the caller's current stream wait for the
// call's end on the device and return at once, raising only a failure braid already reported;
// isCompleted() says whether the device got there; the future is marked when the call is queued,
// so what is chained on it runs after the call on the device. A failure that comes later (a peer
// dies) fails the requests, reaches the next wait(), and is braid's error on the next call.
class BraidWork : public c10d::Work {
 public:
  // `timeout` bounds wait() on CPU tensors when it is called without one (0 = none: braid's
  // BRAID_TIMEOUT still bounds every operation).
  BraidWork(std::shared_ptr<Comm> comm, std::weak_ptr<Completer> completer, int rank, c10d::OpType type,
            const char* name, std::chrono::milliseconds timeout, const Placement& where);
  ~BraidWork() override;
  void release_resources() override;

  // Set up by the process group before the Work is returned (one thread, no locking needed).
  void addRequest(braidRequest_t request) { requests_.push_back(request); }
  // Memory braid reads or writes stays alive until the requests finished.
  void keep(at::Tensor buffer) { keep_.push_back(std::move(buffer)); }
  // On success, dst.copy_(src) in order: staging buffers back into the caller's tensors.
  // (On CUDA tensors they are queued on the call's stream when it is issued instead.)
  void copyBack(at::Tensor dst, at::Tensor src) { copies_.emplace_back(std::move(dst), std::move(src)); }
  // The call was posted, with these outputs: the last step before the Work is handed out. On CUDA
  // tensors it queues the copies back and records the Work's end on the call's stream.
  void issued(std::vector<at::Tensor> outputs);
  // A receive's source: known now (a named peer), or written by braid when the receive from any
  // rank completes (the returned slot, which lives as long as the Work).
  int* sourceSlot(int peer) {
    source_ = peer;
    return &source_;
  }
  // For operations that completed when they were issued (groups): runs the copies, finishes.
  void completeNow();
  // For operations that failed when they were issued: the message names the operation.
  void failNow(const std::string& braidError);

  // torch's Work::sourceRank: the rank a receive got its message from (recv with src=None).
  int sourceRank() const override;
  // On CUDA tensors (its call is ordered on a stream).
  bool onDevice() const { return queue_.has_value(); }
  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  // A future that completes (with the output tensors) or fails when the operation does, marked by
  // the process group's Completer thread: callbacks chained with then() (DDP's gradient averaging)
  // run there while the caller goes on. Without a Completer (the group is gone) it waits first.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Tests the pending requests once (they finish in issue order); true once the Work finished, in
  // which case its future (if one was asked for) is marked. Any thread.
  bool poll();

 private:
  // The end of the Work's last reference: hands unfinished requests and their buffers to the
  // communicator, or waits for them where it has ended (braid then refuses them at once).
  void abandon();
  // Marks future_ from the Work's outcome, once; called without pollMu_ (callbacks run inline).
  void completeFuture();
  // Called with pollMu_ held, once: releases the remaining requests and finishes the Work.
  void conclude(std::exception_ptr error);
  std::exception_ptr error(const std::string& what) const;
  // CUDA: makes the current stream of the Work's device wait for end_.
  void blockCurrentStream() const;

  friend class Comm;  // sets tracked_

  std::shared_ptr<Comm> comm_;
  std::weak_ptr<Completer> completer_;
  bool tracked_ = false;  // counted in comm_'s unfinished Works until concluded
  const char* name_;
  std::chrono::milliseconds timeout_;

  mutable std::mutex pollMu_;  // one thread at a time tests the requests (braid's rule for a request)
  std::vector<braidRequest_t> requests_;
  size_t next_ = 0;  // requests_[0..next_) have finished and been released by braid
  bool concluded_ = false;

  std::vector<at::Tensor> keep_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;
  std::vector<at::Tensor> outputs_;
  int source_ = -1;  // a receive's source (see sourceSlot); -1 for other operations

  c10::Device device_;                // where the tensors are (Placement::device)
  std::optional<c10::Stream> queue_;  // CUDA: the stream the call is ordered on
  std::optional<c10::Event> end_;     // CUDA: recorded on queue_ after the call and its copies

  std::mutex futureMu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool futureMarked_ = false;
};

// One thread per process group (started by the first future asked for) that polls the Works whose
// futures were asked for and marks each future when its Work finishes. It backs off like a waiting caller (from
// back-to-back polls to 200 us sleeps) and sleeps on a condition variable while it watches nothing.
class Completer {
 public:
  Completer() = default;
  // Keeps watching until every Work it was given finished (each braid operation ends by
  // BRAID_TIMEOUT at the latest), then stops the thread.
  ~Completer();
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void watch(c10::intrusive_ptr<BraidWork> work);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<c10::intrusive_ptr<BraidWork>> incoming_;  // under mu_; the loop takes them over
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace braid_torch
