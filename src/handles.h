// Handle tables: what braid hands out as braidComm_t, braidGraph_t, braidRequest_t and region handles
// (braidCommRegister).
//
// A handle is not a pointer but a number: (generation, kind, slot) packed into the pointer-sized
// value. The slot indexes a process-wide table whose memory is never freed; the generation of a
// slot advances whenever the object it names ends (a communicator or graph destroyed, a request
// released). So a handle that outlived its object, or whose slot now names a newer object, or that
// was never handed out (a stray pointer), is told apart by comparing two integers, without reading
// anything the handle points to. A stale communicator handle can no longer reach a new
// communicator that malloc placed at the old address.
//
// Cost: a lookup is three loads (directory, generation, object), no lock; creating an object (a
// communicator, a graph, a request pool entry) takes the table's mutex once. Requests keep their
// slot for the life of their pool entry: posting reads the slot's generation, releasing advances it.
//
// Limits: 2^20 live objects per table; a generation wraps after 2^41 ends of one slot, so a stale
// handle is caught unless it is used again after about two trillion reuses of its slot.
//
// fork(): a child shares its parent's sockets and shared memory but none of its threads, so it must
// neither use nor tear down the parent's communicators (a child's AllReduce would take the parent's
// place in it; its destroy would say goodbye for it). In the child every handle the parent had is
// ended (HandleEnd::kForked, a pthread_atfork handler, at no cost per call): using one, destroying
// one included, is braidInvalidUsage saying so, and nothing is released. The child may make new
// objects of its own. The tables' mutexes are held across the fork, so the child's are consistent.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "src/base/status.h"

namespace braid {

enum class HandleKind : uint8_t { kComm = 1, kGraph = 2, kRequest = 3, kRegion = 4 };

// Why a handle's generation ended (for the message when a stale handle comes back).
enum class HandleEnd : uint8_t { kNone = 0, kReleased = 1, kDestroyed = 2, kForked = 3 };

class HandleTable {
 public:
  // `what` names the handle in messages ("comm", "graph", "request").
  HandleTable(HandleKind kind, const char* what) : kind_(kind), what_(what) {}
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // A free slot, not yet naming anything (lookups refuse it until publish()). Takes the mutex.
  Status reserve(uint32_t* slot);
  void publish(uint32_t slot, void* obj);
  // The handle of the slot's current generation.
  uint64_t handleOf(uint32_t slot) const;
  // Ends the slot's generation and keeps the slot with its object (a released request's pool entry).
  void retire(uint32_t slot, HandleEnd why);
  // Ends the slot's generation and frees the slot for another object. Takes the mutex.
  void remove(uint32_t slot, HandleEnd why);

  // The object of a live handle into *obj (and its slot), or an error saying what the handle is:
  // NULL, never handed out, or ended (released, destroyed). *obj untouched on error.
  Status find(uint64_t handle, void** obj, uint32_t* slot = nullptr) const {
    void* o = live(handle, slot);
    if (o == nullptr) return whyNot(handle);
    *obj = o;
    return okStatus();
  }
  // The object of a live handle (and its slot), or null. Inline, as find()'s success: it is the
  // first step of every call (a 16-byte collective is a few hundred instructions in all).
  void* live(uint64_t handle, uint32_t* slotOut = nullptr) const {
    const uint32_t slot = static_cast<uint32_t>(handle & (kMaxSlots - 1));
    if (((handle >> kSlotBits) & ((1u << kKindBits) - 1)) != static_cast<uint64_t>(kind_)) return nullptr;  // NULL too
    const Slot* s = slotAt(slot);
    if (s == nullptr || s->gen.load(std::memory_order_acquire) != handle >> (kSlotBits + kKindBits)) return nullptr;
    void* o = s->obj.load(std::memory_order_acquire);
    if (o != nullptr && slotOut != nullptr) *slotOut = slot;
    return o;
  }
  // Why `handle` names no live object (find()'s error).
  Status whyNot(uint64_t handle) const;

  // The pthread_atfork handlers' parts (see the file comment): the mutex held across fork(), and,
  // in the child, every published object's generation ended as kForked.
  void lockForFork() { mu_.lock(); }
  void unlockAfterFork() { mu_.unlock(); }
  void forgetAllInChild();

 private:
  static constexpr int kSlotBits = 20;
  static constexpr int kKindBits = 3;
  static constexpr int kChunkBits = 10;  // slots per chunk: 1024; chunks: 1024
  static constexpr uint32_t kMaxSlots = 1u << kSlotBits;
  static constexpr uint32_t kChunkSlots = 1u << kChunkBits;
  static constexpr uint64_t kGenMask = (uint64_t{1} << (64 - kSlotBits - kKindBits)) - 1;

  struct Slot {
    std::atomic<uint64_t> gen{1};  // the live generation; handles carry it
    std::atomic<void*> obj{nullptr};
    std::atomic<uint8_t> lastEnd{0};  // HandleEnd of generation gen - 1
  };

  Slot* slotAt(uint32_t slot) const {
    Slot* chunk = chunks_[slot >> kChunkBits].load(std::memory_order_acquire);
    return chunk == nullptr ? nullptr : &chunk[slot & (kChunkSlots - 1)];
  }
  void end(Slot* s, HandleEnd why);

  const HandleKind kind_;
  const char* const what_;
  // Chunks are allocated on demand and never freed, so a lookup may read any chunk it finds here.
  std::atomic<Slot*> chunks_[kMaxSlots / kChunkSlots] = {};
  std::mutex mu_;               // reserve() and remove()
  uint32_t used_ = 0;           // mu_: slots handed out so far (the high-water mark)
  std::vector<uint32_t> free_;  // mu_: removed slots, reused first
};

HandleTable& commHandles();
HandleTable& graphHandles();
HandleTable& requestHandles();
HandleTable& regionHandles();

}  // namespace braid
