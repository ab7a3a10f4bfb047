// The plans of a communicator's collective calls, one per call shape, built on first use and kept
// (bounded) for every later call of that shape: the executor runs them and never builds one. A plan
// depends on the shape, on the memory type of the buffers and on what the links can do (lowering,
// src/lower.h), so all three are in the key.
//
// Threads: the engine lock (src/executor.h) guards the cache and the users counts.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "algorithms/algorithms.h"
#include "src/lower.h"
#include "src/plan.h"

namespace braid {

class PlanCache {
 public:
  // Plans kept at most, beyond those that running operations hold: a framework with ever-changing
  // sizes must not grow the cache without end.
  static constexpr size_t kMaxPlans = 512;

  // Sets what plans are lowered for and whether they carry the mismatch check
  // (BRAID_CHECK_MISMATCH). Before the first acquire(); later calls drop every idle plan.
  void configure(LowerTarget target, bool checkMismatch);
  bool configured() const { return configured_; }

  // The plan for `shape` with buffers of memory type `mem`, built, lowered and checked on first use.
  // Counts the caller in **users until it drops it (--**users): a plan in use is never evicted.
  const Plan* acquire(const CollArgs& shape, MemType mem, uint32_t** users);

  size_t size() const { return plans_.size(); }

 private:
  struct Key {
    uint64_t count;
    uint64_t elemSize;
    uint64_t lowering;  // LowerTarget::signature(): the same for a communicator's life
    int32_t root;
    int32_t gossipRounds;
    uint8_t coll;
    uint8_t inPlace;
    uint8_t avg;
    uint8_t algo;
    uint8_t mem;
    bool operator==(const Key& o) const {
      return count == o.count && elemSize == o.elemSize && lowering == o.lowering && root == o.root &&
             gossipRounds == o.gossipRounds && coll == o.coll && inPlace == o.inPlace && avg == o.avg &&
             algo == o.algo && mem == o.mem;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.count * 1000003u ^ (k.elemSize << 40) ^ (static_cast<uint64_t>(k.root) << 20) ^
                                   (k.coll << 8) ^ (k.algo << 12) ^ (k.inPlace << 4) ^ k.avg ^
                                   (static_cast<uint64_t>(k.mem) << 16) ^ k.lowering);
    }
  };
  struct Entry {
    std::unique_ptr<Plan> plan;
    uint32_t users = 0;  // ops posted with it and not yet released
  };

  std::unordered_map<Key, Entry, KeyHash> plans_;
  LowerTarget target_;
  uint64_t lowering_ = 0;
  bool checkMismatch_ = false;
  bool configured_ = false;
};

}  // namespace braid
