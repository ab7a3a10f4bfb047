// A rank that leaves cleanly (braidCommDestroy, nothing pending) while the others go on: its goodbye
// says how far it got, rank 0 passes it on, and every other rank fails at once exactly the
// operations that need it (src/executor_leave.cc); the ones it finished complete, and operations
// among the others keep working. Every transport under test; BRAID_TIMEOUT=60, so an operation
// that waited for its deadline instead would end braidTimeout, not braidRemoteError. Times are
// printed, not judged.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

const char* transportParam() { return GENERATE(from_range(transportsUnderTest())).c_str(); }

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// An error that names `who` as a rank that left after operation `after`, as braidRemoteError.
int expectLeft(int rank, braidResult_t r, const char* who, const char* after) {
  const char* msg = braidGetLastError();
  if (r != braidRemoteError) return fail(rank, "expected braidRemoteError, got %s: %s", braidGetErrorString(r), msg);
  if (strstr(msg, who) == nullptr || strstr(msg, "left the communicator (braidCommDestroy)") == nullptr ||
      strstr(msg, after) == nullptr)
    return fail(rank, "the error does not say that %s left %s: %s", who, after, msg);
  return 0;
}

Env leaveEnv(const char* transport, bool tags = false) {
  Env env{{"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "60"}};
  if (tags) env.emplace("BRAID_P2P_TAGS", std::string("1"));
  return env;
}

constexpr int kBefore = 3;  // collectives every rank finishes before one leaves

// Three ranks run body on a communicator over `transport`; runComm destroys it when body returns,
// which is where the leaver leaves. Every rank must return 0.
void runLeave(const char* transport, bool tags, const std::function<int(braidComm_t, int)>& body) {
  auto res = runComm(3, leaveEnv(transport, tags), [&](braidComm_t comm, int rank, int) { return body(comm, rank); });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// A call (`op`, for the printout) that must fail because `who` left after `after`: prints how long
// it took, then checks.
template <class Call>
int timedLeft(const char* transport, const char* op, int rank, const char* who, const char* after, Call call) {
  const auto t0 = std::chrono::steady_clock::now();
  braidResult_t r = call();
  fprintf(stderr, "%s: rank %d: %s failed %.3f s after its post\n", transport, rank, op, secondsSince(t0));
  return expectLeft(rank, r, who, after);
}

}  // namespace

TEST_CASE("a rank that leaves after k collectives fails collective k+1 on the others at once, naming it",
          "[mp][leave]") {
  const char* transport = transportParam();
  INFO(transport);
  runLeave(transport, false, [&](braidComm_t comm, int rank) {
    float x = 1, y = 0;
    for (int i = 0; i < kBefore; ++i)
      CHECK_BRAID(rank, braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr));
    if (rank == 1) return 0;             // leaves
    usleep(rank == 0 ? 0 : 300 * 1000);  // rank 0 posts before the notice comes, rank 2 likely after
    return timedLeft(transport, "AllReduce #4", rank, "rank 1 (host", "after operation #3",
                     [&] { return braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr); });
  });
}

TEST_CASE("rank 0 leaves cleanly at once while the others wait in a collective it never joins", "[mp][leave]") {
  const char* transport = transportParam();
  INFO(transport);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(3, leaveEnv(transport), [&](int rank, int size) {
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
    float x = 1, y = 0;
    for (int i = 0; i < kBefore; ++i)
      CHECK_BRAID(rank, braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr));
    if (rank == 0) {
      usleep(200 * 1000);  // the others wait in collective k+1 by then
      const auto t0 = std::chrono::steady_clock::now();
      CHECK_BRAID(rank, braidCommDestroy(comm));
      fprintf(stderr, "%s: rank 0: braidCommDestroy took %.3f s\n", transport, secondsSince(t0));
      return 0;
    }
    if (int bad = timedLeft(transport, "AllReduce #4 (rank 0 left 0.2 s after its post)", rank, "rank 0 (host",
                            "after operation #3",
                            [&] { return braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr); }))
      return bad;
    // The communicator failed: a later call is refused at once, and destroy returns.
    if (braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr) == braidSuccess)
      return fail(rank, "a collective after rank 0 left succeeded");
    (void)braidCommDestroy(comm);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("the leaver's last collective completes on the others though its bytes were still in flight", "[mp][leave]") {
  const char* transport = transportParam();
  // Small: the whole broadcast sits in the links' buffers when the leaver goes, and the notice
  // reaches the others before they even post it. Large: the leaver's last sends are still being
  // read when it leaves.
  const size_t count = GENERATE(size_t{16} << 10, size_t{2} << 20);
  INFO(transport << " count " << count);
  runLeave(transport, false, [&](braidComm_t comm, int rank) {
    std::vector<float> buf(count, rank == 1 ? 7.0f : 0.0f);
    if (rank != 1 && count < (size_t{1} << 20)) usleep(500 * 1000);  // the notice comes first
    CHECK_BRAID(rank, braidBroadcast(buf.data(), buf.data(), count, braidFloat32, 1, comm, nullptr));
    if (rank == 1) return 0;  // leaves
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != 7.0f) return fail(rank, "element %zu is %g", i, static_cast<double>(buf[i]));
    float x = 1, y = 0;
    return timedLeft(transport, "AllReduce #2, after the broadcast succeeded,", rank, "rank 1 (host",
                     "after operation #1",
                     [&] { return braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr); });
  });
}

TEST_CASE(
    "after a rank left, point-to-point among the others and their sub-communicator work; a receive from the "
    "leaver fails",
    "[mp][leave]") {
  const char* transport = transportParam();
  INFO(transport);
  runLeave(transport, false, [&](braidComm_t comm, int rank) {
    float x = 1, y = 0;
    CHECK_BRAID(rank, braidAllReduce(&x, &y, 1, braidFloat32, braidSum, comm, nullptr));
    braidComm_t pair = nullptr;  // ranks 0 and 2
    CHECK_BRAID(rank, braidCommSplit(comm, rank == 1 ? BRAID_SPLIT_NOCOLOR : 0, rank, &pair));
    int32_t got = -1, v = 100 + rank;
    if (rank == 1) {
      CHECK_BRAID(rank, braidSend(&v, 1, braidInt32, 0, comm, nullptr));  // one message, then it leaves
      return 0;
    }
    usleep(500 * 1000);  // rank 1 left by now, and everyone heard
    const int other = 2 - rank;
    for (int i = 0; i < 20; ++i) {
      int32_t mine = rank * 1000 + i;
      CHECK_BRAID(rank, braidGroupStart());
      CHECK_BRAID(rank, braidSend(&mine, 1, braidInt32, other, comm, nullptr));
      CHECK_BRAID(rank, braidRecv(&got, 1, braidInt32, other, comm, nullptr));
      CHECK_BRAID(rank, braidGroupEnd());
      if (got != other * 1000 + i) return fail(rank, "exchange %d got %d", i, got);
    }
    for (int i = 0; i < 5; ++i) {
      CHECK_BRAID(rank, braidAllReduce(&x, &y, 1, braidFloat32, braidSum, pair, nullptr));
      if (y != 2.0f) return fail(rank, "the sub-communicator's sum is %g", static_cast<double>(y));
    }
    CHECK_BRAID(rank, braidCommDestroy(pair));
    if (rank == 2) return 0;
    // Rank 1's one message is still there to be read; a second one never comes.
    CHECK_BRAID(rank, braidRecv(&got, 1, braidInt32, 1, comm, nullptr));
    if (got != 101) return fail(rank, "received %d from rank 1", got);
    return timedLeft(transport, "a second receive from rank 1", rank, "rank 1 (host",
                     "after sending rank 0 1 point-to-point message(s)",
                     [&] { return braidRecv(&got, 1, braidInt32, 1, comm, nullptr); });
  });
}

TEST_CASE("a tagged receive from a rank that left fails at once; any-source ones still match the others",
          "[mp][leave][tags]") {
  const char* transport = transportParam();
  INFO(transport);
  runLeave(transport, true, [&](braidComm_t comm, int rank) {
    int32_t v = 100 + rank;
    if (rank == 1) return 0;  // sends nothing tagged, and leaves
    if (rank == 0) {
      usleep(800 * 1000);  // after rank 1 left
      CHECK_BRAID(rank, braidSendTagged(&v, 1, braidInt32, 2, 9, comm, nullptr));
      // Rank 2 takes it and leaves at once, maybe before the transport here reported the send
      // complete (ucx did not): its goodbye says it received it, so the send succeeds.
      return 0;
    }
    // Rank 2 hears of rank 1's leaving only through rank 0's relay. The receive is posted before rank
    // 1 leaves (most likely) and waits when the notice comes. The tagged error says that rank 1 left,
    // not after which operation (tagged calls have no such count).
    if (int bad = timedLeft(transport, "a tagged receive from rank 1", rank, "rank 1", "left the communicator",
                            [&] { return braidRecvTagged(&v, 1, braidInt32, 1, 5, comm, nullptr, nullptr); }))
      return bad;
    int source = -1;
    CHECK_BRAID(rank, braidRecvTagged(&v, 1, braidInt32, BRAID_ANY_SOURCE, 9, comm, nullptr, &source));
    if (source != 0 || v != 100) return fail(rank, "the any-source receive got %d from %d", v, source);
    return 0;
  });
}
