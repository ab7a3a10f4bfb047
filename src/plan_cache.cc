#include "src/plan_cache.h"

#include "src/base/log.h"

namespace braid {

PlanCache::Entry* PlanCache::insert(const PlanKey& key, std::unique_ptr<Plan> plan) {
  if (plans_.size() >= maxPlans_) std::erase_if(plans_, [](const auto& kv) { return kv.second.users == 0; });
  Entry& e = plans_[key];
  e.plan = std::move(plan);
  e.users = 0;
  return &e;
}

void CollPlans::configure(std::vector<TransportCaps> peerCaps, int self, bool checkMismatch, bool forceLowering) {
  // As the engine forwards (Engine::forwardsTo_): not where every receive-reduce is lowered.
  linksForward_ = peerCaps.size() > 1 && !forceLowering;
  for (size_t r = 0; r < peerCaps.size(); ++r)
    if (static_cast<int>(r) != self && !peerCaps[r].forwards) linksForward_ = false;
  target_.peerCaps = std::move(peerCaps);
  target_.force = forceLowering;
  checkMismatch_ = checkMismatch;
}

const Plan* CollPlans::acquire(const CollArgs& shape, MemType mem, uint32_t** users) {
  PlanKey key;
  key.count = shape.count;
  key.elemSize = shape.elemSize;
  key.root = shape.root;
  key.variant = shape.gossipRounds;
  key.coll = static_cast<uint8_t>(shape.coll);
  key.inPlace = static_cast<uint8_t>(shape.inPlace);
  key.avg = static_cast<uint8_t>(shape.avg);
  key.algo = static_cast<uint8_t>(shape.algo);
  key.mem = static_cast<uint8_t>(mem);
  PlanCache::Entry* e = last_ != nullptr && key == lastKey_ ? last_ : cache_.find(key);
  if (e != nullptr) {
    BRAID_INFO(kLogPlan, "plan %s/%s rank %d: %zu steps (built earlier, shown then)", collName(shape.coll),
               e->plan->algorithm, shape.rank, e->plan->steps.size());
  } else {
    auto plan = std::make_unique<Plan>();
    CollArgs linked = shape;
    linked.linksForward = linksForward_;
    buildPlan(linked, plan.get());
    LowerTarget target = target_;
    target.bufMem[static_cast<int>(Buf::kSend)] = target.bufMem[static_cast<int>(Buf::kRecv)] = mem;
    const bool lowered = lowerPlan(target, plan.get());
    if (checkMismatch_) addMismatchCheck(plan.get());
    BRAID_INFO(kLogPlan, "%s%s", lowered ? "(lowered) " : "", plan->describe().c_str());
    last_ = nullptr;  // the insert may evict it
    e = cache_.insert(key, std::move(plan));
  }
  lastKey_ = key;
  last_ = e;
  ++e->users;
  *users = &e->users;
  return e->plan.get();
}

}  // namespace braid
