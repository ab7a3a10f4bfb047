#include "src/plan_cache.h"

#include "src/log.h"

namespace braid {

void PlanCache::configure(LowerTarget target, bool checkMismatch) {
  target_ = std::move(target);
  lowering_ = target_.signature();
  checkMismatch_ = checkMismatch;
  configured_ = true;
  std::erase_if(plans_, [](const auto& kv) { return kv.second.users == 0; });
}

const Plan* PlanCache::acquire(const CollArgs& shape, MemType mem, uint32_t** users) {
  const Key key{shape.count,
                shape.elemSize,
                lowering_,
                shape.root,
                shape.gossipRounds,
                static_cast<uint8_t>(shape.coll),
                static_cast<uint8_t>(shape.inPlace),
                static_cast<uint8_t>(shape.avg),
                static_cast<uint8_t>(shape.algo),
                static_cast<uint8_t>(mem)};
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    BRAID_INFO(kLogPlan, "plan %s/%s rank %d: %zu steps (built earlier, shown then)", collName(shape.coll),
               it->second.plan->algorithm, shape.rank, it->second.plan->steps.size());
    *users = &it->second.users;
    ++it->second.users;
    return it->second.plan.get();
  }
  // Plans that an op still runs stay (map references survive other erasures).
  if (plans_.size() >= kMaxPlans) std::erase_if(plans_, [](const auto& kv) { return kv.second.users == 0; });
  auto plan = std::make_unique<Plan>();
  buildPlan(shape, plan.get());
  LowerTarget target = target_;
  target.bufMem[static_cast<int>(Buf::kSend)] = target.bufMem[static_cast<int>(Buf::kRecv)] = mem;
  const bool lowered = lowerPlan(target, plan.get());
  if (checkMismatch_) addMismatchCheck(plan.get());
  BRAID_INFO(kLogPlan, "%s%s", lowered ? "(lowered) " : "", plan->describe().c_str());
  const Plan* p = plan.get();
  Entry& entry = plans_[key];
  entry.plan = std::move(plan);
  entry.users = 1;
  *users = &entry.users;
  return p;
}

}  // namespace braid
