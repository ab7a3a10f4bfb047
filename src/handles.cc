#include "src/handles.h"

#include <pthread.h>
#include <unistd.h>

namespace braid {

namespace {
// The process this one was forked from (set before each fork), for the message of an inherited handle.
pid_t gForkedFrom = 0;
}  // namespace

Status HandleTable::reserve(uint32_t* slot) {
  std::lock_guard<std::mutex> hold(mu_);
  if (!free_.empty()) {
    *slot = free_.back();
    free_.pop_back();
    return okStatus();
  }
  if (used_ >= kMaxSlots) return errorf(braidSystemError, "too many live %ss (%u)", what_, kMaxSlots);
  const uint32_t s = used_;
  if ((s & (kChunkSlots - 1)) == 0) {
    // Release: a lookup that loads the chunk pointer (acquire) sees its slots constructed.
    chunks_[s >> kChunkBits].store(new Slot[kChunkSlots], std::memory_order_release);
  }
  free_.reserve(used_ + 1);  // remove() then never allocates (it runs on destroy paths)
  ++used_;
  *slot = s;
  return okStatus();
}

void HandleTable::publish(uint32_t slot, void* obj) { slotAt(slot)->obj.store(obj, std::memory_order_release); }

uint64_t HandleTable::handleOf(uint32_t slot) const {
  const uint64_t gen = slotAt(slot)->gen.load(std::memory_order_relaxed);
  return gen << (kSlotBits + kKindBits) | static_cast<uint64_t>(kind_) << kSlotBits | slot;
}

void HandleTable::end(Slot* s, HandleEnd why) {
  s->lastEnd.store(static_cast<uint8_t>(why), std::memory_order_relaxed);
  uint64_t next = (s->gen.load(std::memory_order_relaxed) + 1) & kGenMask;
  if (next == 0) next = 1;
  // Release: whoever sees the new generation sees lastEnd too.
  s->gen.store(next, std::memory_order_release);
}

void HandleTable::retire(uint32_t slot, HandleEnd why) { end(slotAt(slot), why); }

void HandleTable::remove(uint32_t slot, HandleEnd why) {
  Slot* s = slotAt(slot);
  end(s, why);
  s->obj.store(nullptr, std::memory_order_release);
  std::lock_guard<std::mutex> hold(mu_);
  free_.push_back(slot);
}

void HandleTable::forgetAllInChild() {
  // mu_ is held (lockForFork), so used_ is the parent's at the fork. A slot with no object is free,
  // or reserved by a thread the child does not have: nothing to end.
  for (uint32_t i = 0; i < used_; ++i) {
    Slot* s = slotAt(i);
    if (s->obj.load(std::memory_order_relaxed) == nullptr) continue;
    end(s, HandleEnd::kForked);
    s->obj.store(nullptr, std::memory_order_release);  // the slot stays taken: its object is the parent's
  }
}

Status HandleTable::whyNot(uint64_t handle) const {
  if (handle == 0) return errorf(braidInvalidArgument, "%s is NULL", what_);
  const uint32_t slot = static_cast<uint32_t>(handle & (kMaxSlots - 1));
  const uint64_t kind = (handle >> kSlotBits) & ((1u << kKindBits) - 1);
  const uint64_t gen = handle >> (kSlotBits + kKindBits);
  const Slot* s = kind == static_cast<uint64_t>(kind_) ? slotAt(slot) : nullptr;
  const uint64_t live = s == nullptr ? 0 : s->gen.load(std::memory_order_acquire);
  // gen >= live: never handed out, or its slot reserved and not published yet.
  if (s == nullptr || gen == 0 || gen >= live)
    return errorf(braidInvalidArgument, "%s %p is not a %s braid handed out", what_, reinterpret_cast<void*>(handle),
                  what_);
  // Requests misused (released, or their communicator gone) are usage errors, as for a released
  // request before; stale communicators and graphs stay argument errors.
  const braidResult_t code = kind_ == HandleKind::kRequest ? braidInvalidUsage : braidInvalidArgument;
  if (gen + 1 == live) {
    const auto why = static_cast<HandleEnd>(s->lastEnd.load(std::memory_order_relaxed));
    if (why == HandleEnd::kReleased && kind_ == HandleKind::kRegion) return errorf(code, "region was deregistered");
    if (why == HandleEnd::kReleased) return errorf(code, "%s was already completed and released", what_);
    if (why == HandleEnd::kDestroyed && kind_ == HandleKind::kRegion)
      return errorf(code, "region belongs to a communicator that was destroyed (or aborted)");
    if (why == HandleEnd::kDestroyed && kind_ == HandleKind::kRequest)
      return errorf(code, "request belongs to a communicator that was destroyed (or aborted)");
    if (why == HandleEnd::kDestroyed) return errorf(code, "%s was destroyed", what_);
    if (why == HandleEnd::kForked)
      return errorf(braidInvalidUsage,
                    "%s belongs to process %d, which forked this one (%d): a forked child cannot use or destroy its "
                    "parent's communicators, requests, graphs or regions (it may make its own)",
                    what_, static_cast<int>(gForkedFrom), static_cast<int>(getpid()));
  }
  return errorf(code, "%s is stale: it was released or destroyed earlier", what_);
}

namespace {

// Every table, made once per process with the fork handlers. Never destroyed: requests may be
// released by threads still running while the process exits.
struct Tables {
  HandleTable comm{HandleKind::kComm, "comm"};
  HandleTable graph{HandleKind::kGraph, "graph"};
  HandleTable request{HandleKind::kRequest, "request"};
  HandleTable region{HandleKind::kRegion, "region"};

  HandleTable* all[4] = {&comm, &graph, &request, &region};
};

Tables& tables();

void beforeFork() {
  gForkedFrom = getpid();
  for (HandleTable* t : tables().all) t->lockForFork();  // one at a time elsewhere: no order to keep
}
void afterForkInParent() {
  for (HandleTable* t : tables().all) t->unlockAfterFork();
}
void afterForkInChild() {
  for (HandleTable* t : tables().all) {
    t->forgetAllInChild();
    t->unlockAfterFork();
  }
}

Tables& tables() {
  static Tables* t = [] {
    auto* made = new Tables;
    pthread_atfork(beforeFork, afterForkInParent, afterForkInChild);
    return made;
  }();
  return *t;
}

}  // namespace

HandleTable& commHandles() { return tables().comm; }
HandleTable& graphHandles() { return tables().graph; }
HandleTable& requestHandles() { return tables().request; }
HandleTable& regionHandles() { return tables().region; }

}  // namespace braid
