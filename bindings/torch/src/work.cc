#include "work.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
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

}  // namespace

Comm::~Comm() {
  // Waits for this rank's pending operations; rank 0 also waits for the others to leave.
  if (braidCommDestroy(handle_) != braidSuccess)
    std::fprintf(stderr, "braid_torch: destroying the communicator: %s\n", braidGetLastError());
}

BraidWork::BraidWork(std::shared_ptr<Comm> comm, int rank, c10d::OpType type, const char* name,
                     std::chrono::milliseconds timeout)
    : c10d::Work(rank, type), comm_(std::move(comm)), name_(name), timeout_(timeout) {}

BraidWork::~BraidWork() {
  // Dropped without a successful wait (or never posted, when issuing it failed): the caller's
  // tensors are left alone. braid may still write into the buffers this Work keeps alive, so wait
  // for the requests (every braid operation ends by BRAID_TIMEOUT at the latest).
  {
    std::lock_guard<std::mutex> g(pollMu_);
    copies_.clear();
  }
  for (int idle = 0; !poll(); ++idle) pause(idle);
}

std::exception_ptr BraidWork::error(const std::string& what) const {
  return std::make_exception_ptr(
      std::runtime_error("braid " + std::string(name_) + " failed on rank " + std::to_string(rank_) + ": " + what));
}

bool BraidWork::poll() {
  std::lock_guard<std::mutex> g(pollMu_);
  if (concluded_) return true;
  while (next_ < requests_.size()) {
    int done = 0;
    const braidResult_t r = braidTest(requests_[next_], &done);
    if (r != braidSuccess) {
      // With done == 1 the operation failed and braid released the request; with done == 0 braid
      // refused the call itself, and the request must not be touched again either.
      std::exception_ptr e = error(braidGetLastError());
      requests_[next_++] = nullptr;
      conclude(e);
      return true;
    }
    if (done == 0) return false;
    requests_[next_++] = nullptr;
  }
  conclude(nullptr);
  return true;
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

bool BraidWork::isCompleted() { return poll(); }

bool BraidWork::isSuccess() const {
  std::lock_guard<std::mutex> g(mutex_);
  return completed_ && !exception_;
}

bool BraidWork::wait(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds limit = timeout > kNoTimeout ? timeout : timeout_;
  const auto start = std::chrono::steady_clock::now();
  for (int idle = 0; !poll(); ++idle) {
    if (limit > kNoTimeout && std::chrono::steady_clock::now() - start > limit)
      throw std::runtime_error("braid " + std::string(name_) + " on rank " + std::to_string(rank_) +
                               " did not complete within " + std::to_string(limit.count()) +
                               " ms (the wait timed out; the operation is still pending)");
    pause(idle);
  }
  std::lock_guard<std::mutex> g(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> BraidWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> BraidWork::getFuture() {
  std::lock_guard<std::mutex> g(futureMu_);
  if (future_) return future_;
  std::exception_ptr failure;
  try {
    wait();
  } catch (...) {
    failure = std::current_exception();
  }
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  if (failure) {
    future->setError(failure);
  } else {
    future->markCompleted(c10::IValue(outputs_));
  }
  future_ = future;
  return future_;
}

}  // namespace braid_torch
