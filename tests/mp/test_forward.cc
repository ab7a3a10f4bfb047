// Forwarding on the shm FIFOs (src/plan.h fedBy, ShmLink::forward): a received chunk that a plan
// sends on is folded (or copied) straight into the slot that sends it, and a big call's outputs take
// non-temporal stores (BRAID_NT_STORES_MIN). Each test checks the results and that pieces were in
// fact forwarded (shm::forwardedPieces): a test that ran the plain path instead would pass for
// nothing. Tiny FIFOs make the forward fail for some pieces, which then go the plain way: both
// kinds in one call.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mp/harness.h"
#include "transports/shm/shm_link.h"

using namespace braidtest;

namespace {

// Several 256 KiB chunks per segment and a ragged end: 3 MiB of float32, plus 7 elements.
constexpr size_t kCount = (3 << 20) / 4 + 7;

// The suite also runs with BRAID_FORCE_LOWERING=1 (mp-shm-lowered), which turns forwarding off:
// these tests say which they test.
Env shmEnv(Env more) {
  more.emplace("BRAID_FORCE_LOWERING", "0");
  more["BRAID_TRANSPORTS"] = "shm";
  more["BRAID_TIMEOUT"] = "60";
  return more;
}

// AllReduce and Reduce (root: the last rank) over every op on int32 and float32, in place and
// not; then Broadcast from every root. Returns 0 or fail().
int runChecked(braidComm_t comm, int rank, int n) {
  std::vector<char> send(kCount * 8 + 64), recv(kCount * 8 + 64);
  for (braidDataType_t dt : {braidInt32, braidFloat32})
    for (braidRedOp_t op : {braidSum, braidMax, braidAvg}) {
      if (op == braidAvg && !isFloat(dt)) continue;
      for (bool inPlace : {false, true}) {
        if (allReduceChecked(comm, rank, n, send.data(), recv.data(), kCount, dt, op, inPlace) != 0 ||
            rootedOrScatteredChecked(comm, rank, n, false, send.data(), recv.data(), kCount, dt, op, inPlace) != 0)
          return 1;
      }
    }
  std::vector<int32_t> b(kCount);
  for (int root = 0; root < n; ++root) {
    for (size_t i = 0; i < kCount; ++i) b[i] = rank == root ? static_cast<int32_t>(i * 7 + root) : -1;
    CHECK_BRAID(rank, braidBroadcast(b.data(), b.data(), kCount, braidInt32, root, comm, nullptr));
    for (size_t i = 0; i < kCount; ++i)
      if (b[i] != static_cast<int32_t>(i * 7 + root))
        return fail(rank, "Broadcast from %d: [%zu] = %d, want %d", root, i, b[i], static_cast<int>(i * 7 + root));
  }
  return 0;
}

}  // namespace

TEST_CASE("shm FIFOs forward received chunks into the slots that send them on, with the right results",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3, 4);
  // Default FIFOs; non-temporal stores for every output; two-slot FIFOs, where many forwards find
  // no free slot and those pieces take the plain path.
  const int form = GENERATE(0, 1, 2);
  INFO("nranks " << n << ", form " << form);
  Env env = form == 0   ? shmEnv({})
            : form == 1 ? shmEnv({{"BRAID_NT_STORES_MIN", "4K"}})
                        : shmEnv({{"BRAID_SHM_SLOTS", "2"}});
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const uint64_t before = braid::shm::forwardedPieces();
    if (runChecked(comm, rank, size) != 0) return 1;
    if (braid::shm::forwardedPieces() == before) return fail(rank, "no piece was forwarded");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("without forwarding (a link that cannot reduce on arrival), the same calls give the same results",
          "[mp][shm][forward]") {
  auto res = runComm(3, shmEnv({{"BRAID_FORCE_LOWERING", "1"}}), [&](braidComm_t comm, int rank, int size) {
    const uint64_t before = braid::shm::forwardedPieces();
    if (runChecked(comm, rank, size) != 0) return 1;
    if (braid::shm::forwardedPieces() != before) return fail(rank, "pieces were forwarded on lowered plans");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
