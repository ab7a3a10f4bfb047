// The executor's gate (src/op_gate.h), which device calls (src/cuda/staging.h) tie their stream to,
// driven here by a gate the test opens and drains itself, so that it runs without a GPU: a gated
// operation does not start while its gate is closed, releases the gate once when it is over,
// completes only once the gate drained, goes back to the pool by itself when detached, and releases
// a closed gate when the communicator fails (a stream must never wait forever).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

#include "src/comm.h"
#include "src/executor.h"
#include "src/op_gate.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

class TestGate final : public braid::OpGate {
 public:
  std::atomic<bool> open{false};
  std::atomic<bool> drain{false};
  std::atomic<int> releases{0};
  std::atomic<int> lastOk{-1};
  std::atomic<int> retires{0};

  bool ready(braid::Status*) override { return open.load(); }
  void release(bool ok) override {
    lastOk.store(ok ? 1 : 0);
    releases.fetch_add(1);
  }
  bool drained() override { return drain.load(); }
  void retire() override { retires.fetch_add(1); }
};

// A one-rank plan that copies src into dst.
braid::Plan copyPlan(const std::vector<int>& src, std::vector<int>* dst) {
  braid::Plan plan;
  plan.coll = braid::Coll::kSendRecv;
  plan.algorithm = "test";
  plan.rank = 0;
  plan.nranks = 1;
  plan.copy(braid::BufRef{braid::Buf::kAbsolute, reinterpret_cast<uint64_t>(dst->data())},
            braid::BufRef{braid::Buf::kAbsolute, reinterpret_cast<uint64_t>(src.data())}, src.size() * sizeof(int));
  return plan;
}

// Drives `op` with test() until cond() holds or 10 s passed; *done tells whether it completed.
template <class Cond>
bool driveUntil(braid::Engine* engine, braid::Op* op, bool* done, Cond cond) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cond()) {
    if (!*done && !engine->test(op, done).ok()) return false;
    if (std::chrono::steady_clock::now() > until) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a gated operation starts when its gate opens and completes once the gate drained", "[requests]") {
  auto res = runComm(1, {}, [](braidComm_t handle, int rank, int) {
    braidComm* comm = internalsOf(handle);
    std::vector<int> src(4099, 7), dst(4099, 0);
    braid::Plan plan = copyPlan(src, &dst);
    TestGate gate;
    braid::Op* op = nullptr;
    if (!comm->engine->postGroup(&plan, true, &op, &gate, false).ok()) return fail(rank, "postGroup failed");
    bool done = false;
    for (int i = 0; i < 1000; ++i) {
      if (!comm->engine->test(op, &done).ok() || done) return fail(rank, "done while its gate was closed");
    }
    if (dst[0] != 0 || gate.releases.load() != 0) return fail(rank, "the operation ran while its gate was closed");
    gate.open = true;
    if (!driveUntil(comm->engine.get(), op, &done, [&] { return gate.releases.load() > 0; }))
      return fail(rank, "the gate was never released");
    if (done || gate.retires.load() != 0) return fail(rank, "done or retired before the gate drained");
    if (dst[4098] != 7 || gate.lastOk.load() != 1) return fail(rank, "released before the copy ran, or as failed");
    gate.drain = true;
    if (!driveUntil(comm->engine.get(), op, &done, [&] { return done; })) return fail(rank, "never completed");
    if (gate.releases.load() != 1 || gate.retires.load() != 1)
      return fail(rank, "the gate was released %d and retired %d times", gate.releases.load(), gate.retires.load());

    // Detached: nobody waits, and the engine puts the op back in its pool itself.
    std::vector<int> dst2(4099, 0);
    braid::Plan plan2 = copyPlan(src, &dst2);
    TestGate gate2;
    gate2.open = true;
    gate2.drain = true;
    braid::Op* op2 = nullptr;
    if (!comm->engine->postGroup(&plan2, true, &op2, &gate2, true).ok()) return fail(rank, "postGroup failed");
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (op2->state.load() != braid::Op::kFree)
      if (std::chrono::steady_clock::now() > until) return fail(rank, "a detached op was never released");
    if (dst2[0] != 7 || gate2.releases.load() != 1 || gate2.retires.load() != 1)
      return fail(rank, "the detached op did not run once");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a communicator that fails releases the closed gates of its operations", "[requests]") {
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(1, {}, [&id](int rank, int) {
    braidComm_t handle = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&handle, 1, id, 0));
    braidComm* comm = internalsOf(handle);
    std::vector<int> src(64, 7), dst(64, 0);
    braid::Plan plan = copyPlan(src, &dst);
    TestGate gate;  // never opens: a stream that never reaches its call
    braid::Op* op = nullptr;
    if (!comm->engine->postGroup(&plan, true, &op, &gate, true).ok()) return fail(rank, "postGroup failed");
    CHECK_BRAID(rank, braidCommAbort(handle));
    if (gate.releases.load() != 1 || gate.lastOk.load() != 0 || gate.retires.load() != 1)
      return fail(rank, "abort released the gate %d times (last ok %d), retired it %d times", gate.releases.load(),
                  gate.lastOk.load(), gate.retires.load());
    if (dst[0] != 0) return fail(rank, "the operation ran without its gate");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
