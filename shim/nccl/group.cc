// Groups. Collectives inside a group are braid's business (braidGroupStart/End record and issue
// them). The shim adds what NCCL groups also do: communicator setups (init, split, shrink) inside a
// group are deferred and run together, one thread each, at the outermost ncclGroupEnd, so that one
// thread can set up several ranks; and PreMulSum scratch copies live until the group is issued.
#include <thread>

#include "shim/nccl/shim.h"

namespace braid::nccl {

namespace {

struct Setup {
  ncclComm* target;  // the pending wrapper; null for a rank that joins no communicator
  std::function<Status(braidComm_t*)> run;
};

struct GroupState {
  int depth = 0;
  std::vector<Setup> setups;
  std::vector<std::unique_ptr<unsigned char[]>> scratch;
};
thread_local GroupState tGroup;

// A job's exceptions stay in its thread: they become its Status.
Status runJob(const std::function<Status()>& job) { return catching(job); }

// Runs a group's setups and completes their wrappers: ready (sharing one Clique when several
// communicators were made) or failed with the setup's error. Returns the first failure.
Status runSetups(const std::vector<Setup>& setups) {
  std::vector<braidComm_t> made(setups.size(), nullptr);
  std::vector<std::function<Status()>> jobs;
  for (size_t i = 0; i < setups.size(); ++i) jobs.push_back([&, i] { return setups[i].run(&made[i]); });
  std::vector<Status> results = runConcurrently(jobs);
  for (size_t i = 0; i < setups.size(); ++i) {
    if (results[i].ok() && (made[i] != nullptr) != (setups[i].target != nullptr)) {
      results[i] = errorf(braidInternalError, "braid %s a communicator for this rank",
                          made[i] != nullptr ? "unexpectedly returned" : "returned no");
      if (made[i] != nullptr) (void)braidCommAbort(made[i]);
      made[i] = nullptr;
    }
  }
  int members = 0;
  for (size_t i = 0; i < setups.size(); ++i) members += made[i] != nullptr ? 1 : 0;
  auto clique = members > 1 ? std::make_shared<Clique>(members) : nullptr;
  Status first;
  for (size_t i = 0; i < setups.size(); ++i) {
    ncclComm* t = setups[i].target;
    if (!results[i].ok() && first.ok()) first = results[i];
    if (t == nullptr) continue;
    if (results[i].ok()) {
      t->braid = made[i];
      t->clique = clique;
      t->state.store(ncclComm::kReady, std::memory_order_release);
    } else {
      t->initError = results[i];
      t->state.store(ncclComm::kFailed, std::memory_order_release);
    }
  }
  return first;
}

}  // namespace

bool inGroup() { return tGroup.depth > 0; }

void deferSetup(ncclComm* target, std::function<Status(braidComm_t*)> run) {
  tGroup.setups.push_back(Setup{target, std::move(run)});
}

void keepUntilGroupEnd(std::unique_ptr<unsigned char[]> buffer) { tGroup.scratch.push_back(std::move(buffer)); }

std::vector<Status> runConcurrently(const std::vector<std::function<Status()>>& jobs) {
  std::vector<Status> out(jobs.size());
  if (jobs.empty()) return out;
  {
    std::vector<std::jthread> threads;  // joined when this scope ends, also on an exception
    threads.reserve(jobs.size() - 1);
    for (size_t i = 1; i < jobs.size(); ++i) threads.emplace_back([&, i] { out[i] = runJob(jobs[i]); });
    out[0] = runJob(jobs[0]);
  }
  return out;
}

}  // namespace braid::nccl

using namespace braid;
using namespace braid::nccl;

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclGroupStart(void) {
  return guard(__func__, [&] {
    BRAID_TRY(fromBraid(braidGroupStart()));
    ++tGroup.depth;
    return okStatus();
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclGroupEnd(void) {
  return guard(__func__, [&] {
    if (tGroup.depth == 0) return errorf(braidInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    --tGroup.depth;
    // braid issues the group's collectives and waits for them (at the outermost level only).
    Status issued = fromBraid(braidGroupEnd());
    if (tGroup.depth > 0) return issued;
    std::vector<Setup> setups;
    setups.swap(tGroup.setups);
    Status made = setups.empty() ? okStatus() : runSetups(setups);
    tGroup.scratch.clear();
    return issued.ok() ? made : issued;
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guard(__func__, [&] {
    (void)simInfo;
    return errorf(braidInvalidUsage,
                  "braid does not simulate groups through the NCCL API (braid-topo --plan does); the group is "
                  "still open: end it with ncclGroupEnd");
  });
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclGroupStart)
NCCL_SHIM_ALIAS(ncclGroupEnd)
NCCL_SHIM_ALIAS(ncclGroupSimulateEnd)
