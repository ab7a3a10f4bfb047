#include "work.h"

#include <Python.h>
#include <c10/core/StreamGuard.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace braid_torch {

namespace {

// Between two polls of an unfinished request: a few polls back to back (each also moves braid's
// progress), a few yields, then sleeps growing from 10 to 200 us, so the wait leaves the core to
// braid's progress thread and to the other ranks. Measured on the 2-core VM (2 ranks, 1 KiB
// allreduce through torch, load from other users): 16 polls + 16 yields gave a median of 22 us,
// 64 + 64 gave 28 us, 512 + 4096 gave 87 us: spinning longer starves the peer rank it waits for.
void pause(int idle) {
  if (idle < 16) return;
  if (idle < 32) {
    sched_yield();
    return;
  }
  const int us = std::min(200, 10 << std::min(5, (idle - 32) / 32));
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// Runs fn with the GIL released when this thread holds it: braid may block (rank 0 waits for the
// others to leave), and threads that run Python callbacks (the Completer) need the GIL meanwhile.
template <class Fn>
void withoutGil(Fn&& fn) {
  if (Py_IsInitialized() == 0 || PyGILState_Check() == 0) {
    fn();
    return;
  }
  PyThreadState* state = PyEval_SaveThread();
  fn();
  PyEval_RestoreThread(state);
}

// Every Comm still open, for Comm::endAll at interpreter exit; never destroyed itself, so it is
// still there whatever order static destructors run in at process exit.
struct OpenComms {
  std::mutex mu;
  std::vector<std::weak_ptr<Comm>> comms;  // in creation order
};

OpenComms& openComms() {
  static auto* open = new OpenComms;
  return *open;
}

}  // namespace

std::shared_ptr<Comm> Comm::adopt(braidComm_t handle) {
  std::shared_ptr<Comm> comm(new Comm(handle));
  OpenComms& open = openComms();
  std::lock_guard<std::mutex> g(open.mu);
  auto dead = [](const std::weak_ptr<Comm>& c) { return c.expired(); };
  open.comms.erase(std::remove_if(open.comms.begin(), open.comms.end(), dead), open.comms.end());
  open.comms.push_back(comm);
  return comm;
}

Comm::~Comm() { end(); }

void Comm::track(const c10::intrusive_ptr<BraidWork>& work) {
  work->tracked_ = true;
  unfinished_.fetch_add(1, std::memory_order_acq_rel);
  std::lock_guard<std::mutex> g(mu_);
  if (works_.size() >= pruneAt_) {
    auto dead = [](const c10::weak_intrusive_ptr<BraidWork>& w) { return w.expired(); };
    works_.erase(std::remove_if(works_.begin(), works_.end(), dead), works_.end());
    pruneAt_ = std::max<size_t>(64, 2 * works_.size());  // amortized: prune again once it doubled
  }
  works_.emplace_back(work);
}

void Comm::settleDeviceWork(const std::vector<c10::intrusive_ptr<BraidWork>>& live) {
  const auto until = std::chrono::steady_clock::now() + kDeviceGrace;
  for (int idle = 0;; ++idle) {
    bool busy = false;
    for (const auto& w : live) busy = (w->onDevice() && !w->poll()) || busy;
    {
      std::lock_guard<std::mutex> g(mu_);
      (void)reapOrphans();
      for (const Orphan& o : orphans_) busy = busy || o.device;
    }
    if (!busy || std::chrono::steady_clock::now() > until) return;
    pause(idle);
  }
}

bool Comm::adoptOrphan(std::vector<braidRequest_t> requests, std::vector<at::Tensor> buffers, bool device) {
  std::lock_guard<std::mutex> g(mu_);
  if (ended_) return false;
  orphans_.push_back(Orphan{std::move(requests), std::move(buffers), device});
  (void)reapOrphans();  // also releases earlier orphans that finished meanwhile
  return true;
}

bool Comm::reapOrphans() {
  size_t kept = 0;
  for (size_t i = 0; i < orphans_.size(); ++i) {
    Orphan& o = orphans_[i];
    size_t next = 0;
    for (; next < o.requests.size(); ++next) {
      int done = 0;
      // An error also releases the request (or braid refused it): either way it is over.
      if (braidTest(o.requests[next], &done) == braidSuccess && done == 0) break;
    }
    o.requests.erase(o.requests.begin(), o.requests.begin() + static_cast<long>(next));
    if (o.requests.empty()) continue;
    if (kept != i) orphans_[kept] = std::move(o);  // (a self-move would empty it)
    ++kept;
  }
  orphans_.resize(kept);
  return kept == 0;
}

void Comm::end(bool abort) {
  std::vector<c10::intrusive_ptr<BraidWork>> live;
  bool orphansDone = true;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (ended_) return;
    ended_ = true;
    for (auto& w : works_)
      if (auto strong = w.lock()) live.push_back(std::move(strong));
    works_.clear();
  }
  // Device calls queued just before the end finish by themselves once their stream reaches them:
  // they get a moment before they count as pending, which would abort them (and fail the peers'
  // calls) at an ordinary destroy_process_group after training.
  if (!abort) withoutGil([&] { settleDeviceWork(live); });
  {
    std::lock_guard<std::mutex> g(mu_);
    orphansDone = reapOrphans();
  }
  // A Work nobody polled since its operation finished is finished too: poll concludes it. What is
  // still unfinished after that waits for a peer.
  for (auto& w : live) (void)w->poll();
  const bool pending = abort || !orphansDone || unfinished_.load(std::memory_order_acquire) > 0;
  braidResult_t r = braidSuccess;
  withoutGil([&] { r = pending ? braidCommAbort(handle_) : braidCommDestroy(handle_); });
  if (r != braidSuccess)
    std::fprintf(stderr, "braid_torch: %s the communicator: %s\n", pending ? "aborting" : "destroying",
                 braidGetLastError());
  // braidCommAbort released the requests, so the orphans' buffers are free now; the Works still
  // pending fail at their next poll (braid refuses their requests).
  std::lock_guard<std::mutex> g(mu_);
  orphans_.clear();
}

void Comm::endAll(bool abort) {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    OpenComms& open = openComms();
    std::lock_guard<std::mutex> g(open.mu);
    for (auto it = open.comms.rbegin(); it != open.comms.rend(); ++it)
      if (auto c = it->lock()) comms.push_back(std::move(c));
    open.comms.clear();
  }
  for (auto& c : comms) c->end(abort);
}

BraidWork::BraidWork(std::shared_ptr<Comm> comm, std::weak_ptr<Completer> completer, int rank, c10d::OpType type,
                     const char* name, std::chrono::milliseconds timeout, const Placement& where)
    : c10d::Work(rank, type),
      comm_(std::move(comm)),
      completer_(std::move(completer)),
      name_(name),
      timeout_(timeout),
      device_(where.device),
      queue_(where.queue) {}

void BraidWork::issued(std::vector<at::Tensor> outputs) {
  outputs_ = std::move(outputs);
  if (!queue_) return;
  // The caller's current stream is the call's (placeOf read it a moment ago, on this thread).
  {
    std::lock_guard<std::mutex> g(pollMu_);
    for (auto& c : copies_) c.first.copy_(c.second);  // queued after braid's call
    copies_.clear();
  }
  end_.emplace(c10::DeviceType::CUDA);
  end_->record(*queue_);
}

void BraidWork::blockCurrentStream() const {
  if (end_) end_->block(currentStream(device_));
}

BraidWork::~BraidWork() { abandon(); }

// c10's intrusive_ptr calls this instead of the destructor when the last reference goes while weak
// ones remain (Comm::track keeps one): the destructor then only runs once those go too.
void BraidWork::release_resources() {
  abandon();
  // What is left until the weak references go (Comm::track prunes them) is the object itself: not
  // its communicator, nor the caller's tensors.
  comm_.reset();
  outputs_.clear();
  std::lock_guard<std::mutex> g(futureMu_);
  future_.reset();
}

void BraidWork::abandon() {
  if (!comm_) return;  // release_resources ran already
  // Dropped without a successful wait (or never posted, when issuing it failed): the caller's
  // tensors are left alone. braid may still write into the buffers this Work keeps alive: the
  // communicator takes the unfinished requests and those buffers over (it releases them when they
  // finish, or when it ends), so that dropping a Work whose peer never comes does not block.
  {
    std::lock_guard<std::mutex> g(pollMu_);
    copies_.clear();
    if (!concluded_ && next_ < requests_.size()) {
      std::vector<braidRequest_t> rest(requests_.begin() + static_cast<long>(next_), requests_.end());
      if (comm_->adoptOrphan(std::move(rest), std::move(keep_), onDevice())) {
        next_ = requests_.size();
        keep_.clear();
        conclude(std::make_exception_ptr(std::runtime_error("dropped")));  // nobody can see it now
      }
    }
  }
  // Finished, adopted, or the communicator ended already (braid then refuses the requests at once).
  for (int idle = 0; !poll(); ++idle) pause(idle);
}

std::exception_ptr BraidWork::error(const std::string& what) const {
  return std::make_exception_ptr(
      std::runtime_error("braid " + std::string(name_) + " failed on rank " + std::to_string(rank_) + ": " + what));
}

bool BraidWork::poll() {
  {
    std::lock_guard<std::mutex> g(pollMu_);
    while (!concluded_ && next_ < requests_.size()) {
      int done = 0;
      const braidResult_t r = braidTest(requests_[next_], &done);
      if (r != braidSuccess) {
        // With done == 1 the operation failed and braid released the request; with done == 0 braid
        // refused the call itself, and the request must not be touched again either.
        std::exception_ptr e = error(braidGetLastError());
        requests_[next_++] = nullptr;
        conclude(e);
        break;
      }
      if (done == 0) return false;
      requests_[next_++] = nullptr;
    }
    if (!concluded_) conclude(nullptr);
  }
  completeFuture();
  return true;
}

void BraidWork::completeFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> g(futureMu_);
    if (!future_ || futureMarked_) return;
    futureMarked_ = true;
    future = future_;
  }
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> g(mutex_);
    failure = exception_;
  }
  if (failure) {
    future->setError(failure);
  } else {
    future->markCompleted(c10::IValue(outputs_));
  }
}

void BraidWork::conclude(std::exception_ptr failure) {
  // After a failure, the later requests of this Work may still run; braid fails them too once the
  // communicator failed, so this is short. They must finish before their buffers are released.
  for (; next_ < requests_.size(); ++next_) {
    (void)braidWait(requests_[next_]);
    requests_[next_] = nullptr;
  }
  if (!failure) {
    try {
      for (auto& c : copies_) c.first.copy_(c.second);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  concluded_ = true;
  copies_.clear();
  keep_.clear();
  if (tracked_) comm_->workFinished();
  finish(failure);
}

void BraidWork::completeNow() {
  std::lock_guard<std::mutex> g(pollMu_);
  if (!concluded_) conclude(nullptr);
}

void BraidWork::failNow(const std::string& braidError) {
  std::lock_guard<std::mutex> g(pollMu_);
  if (!concluded_) conclude(error(braidError));
}

// CUDA: braid's requests finish with the call on the device; the copies back come after it.
bool BraidWork::isCompleted() { return poll() && (!end_ || end_->query()); }

void BraidWork::synchronize() { blockCurrentStream(); }

int BraidWork::sourceRank() const {
  // Read after the receive completed: braid wrote it before braidTest reported done (pollMu_, taken
  // by that test and here, orders the two).
  std::lock_guard<std::mutex> g(pollMu_);
  TORCH_CHECK(source_ >= 0, "braid ", name_, ": the source rank is known once a receive completed");
  return source_;
}

bool BraidWork::isSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && !exception_;
}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  if (end_) {
    blockCurrentStream();
    (void)poll();  // never blocks: picks up a failure braid reported already
    std::lock_guard<std::mutex> g(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  const std::chrono::milliseconds limit = timeout > kNoTimeout ? timeout : timeout_;
  const auto start = std::chrono::steady_clock::now();
  for (int idle = 0; !poll(); ++idle) {
    if (limit > kNoTimeout && std::chrono::steady_clock::now() - start > limit)
      // " Timed out " as Gloo says it: PyTorch's tests and users match timeouts on those words.
      throw std::runtime_error("braid " + std::string(name_) + " on rank " + std::to_string(rank_) +
                               " did not complete within " + std::to_string(limit.count()) +
                               " ms: Timed out waiting for it (the operation is still pending)");
    pause(idle);
  }
  std::lock_guard<std::mutex> g(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> BraidWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> g(futureMu_);
    if (future_) return future_;
    if (end_) {
      // Marked now, on the call's stream: the future records its own events there and makes
      // whoever waits on it (or runs a callback) wait for them on the device.
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         std::vector<c10::Device>{device_});
      futureMarked_ = true;
      future = future_;
    } else {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      future = future_;
    }
  }
  if (end_) {
    std::exception_ptr failure;
    {
      std::lock_guard<std::mutex> g(mutex_);
      failure = exception_;
    }
    c10::StreamGuard onCall(*queue_);
    if (failure) {
      future->setError(failure);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
    return future;
  }
  // Finished already (poll marks the future then), or watched until it is.
  if (!poll()) {
    if (auto completer = completer_.lock()) {
      completer->watch(c10::intrusive_ptr<BraidWork>::reclaim_copy(this));
    } else {
      for (int idle = 0; !poll(); ++idle) pause(idle);
    }
  }
  return future;
}

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;  // never watched anything
  // A future's callback that dropped the last owner of the group would run this on the thread itself.
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    // Python dropped the group: callbacks chained in Python take the GIL on the thread we join.
    withoutGil([this] { thread_.join(); });
  }
}

void Completer::watch(c10::intrusive_ptr<BraidWork> work) {
  {
    std::lock_guard<std::mutex> g(mu_);
    incoming_.push_back(std::move(work));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });  // started by the first future
  }
  cv_.notify_one();
}

void Completer::loop() {
  std::vector<c10::intrusive_ptr<BraidWork>> watched;
  int idle = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> g(mu_);
      if (watched.empty() && incoming_.empty()) {
        cv_.wait(g, [this] { return stop_ || !incoming_.empty(); });
        if (incoming_.empty()) return;  // stopped with nothing left to watch
        idle = 0;
      }
      for (auto& w : incoming_) watched.push_back(std::move(w));
      incoming_.clear();
    }
    // Marking a future runs its callbacks here, outside mu_; a Work dropped by everyone else is
    // destroyed here too (and with the last one, the communicator).
    size_t kept = 0;
    for (auto& w : watched)
      if (!w->poll()) watched[kept++] = std::move(w);
    const bool progressed = kept < watched.size();
    watched.resize(kept);
    if (progressed) {
      idle = 0;
    } else {
      pause(idle++);
    }
  }
}

}  // namespace braid_torch
