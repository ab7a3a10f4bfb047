// Plan caches: the plans of a communicator's collective calls (CollPlans, one per call shape) and
// of a gossip graph's calls (src/api_gossip.cc), built on first use and kept, bounded, for every
// later call of that shape. The executor runs the plans it is handed and never builds one.
//
// A plan depends on the call's shape, on the memory type of its buffers and on what the links can do
// (lowering, src/lower.h). The first two are in the key; the links are fixed for the life of the
// cache's communicator, so CollPlans takes them once, at construction of its engine.
//
// Threads: the owner's lock guards a cache (the engine lock for CollPlans, the graph lock for a
// graph's), including the entries' users counts.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.h"
#include "src/lower.h"
#include "src/plan.h"

namespace braid {

// Everything a cached plan depends on. Fields a kind of plan does not use stay 0.
struct PlanKey {
  uint64_t count = 0;
  uint64_t elemSize = 0;
  int32_t root = 0;
  int32_t variant = 0;  // collectives: gossip rounds; graphs: the rotation
  uint8_t coll = 0;
  uint8_t inPlace = 0;
  uint8_t avg = 0;
  uint8_t algo = 0;
  uint8_t mem = 0;  // MemType of the send and receive buffers
  bool operator==(const PlanKey& o) const {
    return count == o.count && elemSize == o.elemSize && root == o.root && variant == o.variant && coll == o.coll &&
           inPlace == o.inPlace && avg == o.avg && algo == o.algo && mem == o.mem;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    return std::hash<uint64_t>()(k.count * 1000003u ^ (k.elemSize << 40) ^ (static_cast<uint64_t>(k.root) << 20) ^
                                 (static_cast<uint64_t>(k.variant) << 48) ^ (k.coll << 8) ^ (k.algo << 12) ^
                                 (k.inPlace << 4) ^ k.avg ^ (static_cast<uint64_t>(k.mem) << 16));
  }
};

// A bounded map from keys to plans. Operations hold a plan either by counting themselves in its
// entry's `users` (the engine's collectives: no reference count touched per call) or by a copy of
// `plan` (gossip, whose graph and cache may go while its operations still run). An entry with
// users is never evicted; one held only by copies may be, the copies keep the plan alive.
class PlanCache {
 public:
  struct Entry {
    std::shared_ptr<const Plan> plan;
    uint32_t users = 0;
  };

  explicit PlanCache(size_t maxPlans) : maxPlans_(maxPlans) {}

  // The entry for `key`, or null.
  Entry* find(const PlanKey& key) {
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : &it->second;
  }
  // Stores `plan` under `key` (which find() did not have) and returns its entry. When the cache is
  // full, first drops every entry no operation counts itself in (entries survive other erasures).
  Entry* insert(const PlanKey& key, std::unique_ptr<Plan> plan);
  void clear() { plans_.clear(); }
  size_t size() const { return plans_.size(); }

 private:
  size_t maxPlans_;
  std::unordered_map<PlanKey, Entry, PlanKeyHash> plans_;
};

// The plans of a communicator's collectives: built from the call's shape by the algorithms, lowered
// for the links, with the mismatch check when asked for.
class CollPlans {
 public:
  // Plans kept at most, beyond those that running operations hold: a framework with ever-changing
  // sizes must not grow the cache without end.
  static constexpr size_t kMaxPlans = 512;

  // Once the links are connected, before the first acquire(): their capabilities, indexed by rank
  // (`self` has none), whether plans carry the mismatch check (BRAID_CHECK_MISMATCH) and whether
  // every receive-reduce is lowered (BRAID_FORCE_LOWERING).
  void configure(std::vector<TransportCaps> peerCaps, int self, bool checkMismatch, bool forceLowering);

  // The plan for `shape` with buffers of memory type `mem`, built, lowered and checked on first use.
  // Counts the caller in **users until it drops it (--**users): a plan in use is never evicted.
  const Plan* acquire(const CollArgs& shape, MemType mem, uint32_t** users);

  size_t size() const { return cache_.size(); }

 private:
  PlanCache cache_{kMaxPlans};
  // The last key acquired and its entry: a training loop calls the same shape over and over, and a
  // compare is cheaper than the hash and the probe. Reset whenever the cache may drop entries.
  PlanKey lastKey_;
  PlanCache::Entry* last_ = nullptr;
  LowerTarget target_;
  bool checkMismatch_ = false;
  bool linksForward_ = false;  // every peer's link forwards (CollArgs::linksForward)
};

}  // namespace braid
