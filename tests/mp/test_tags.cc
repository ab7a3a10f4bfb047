// Tagged and any-source point-to-point (braidSendTagged, braidRecvTagged, BRAID_ANY_SOURCE) over
// every transport under test: matching by (peer, tag) in any order of tags, small and large
// messages, receives from any rank that report their source, out-of-order completion, groups,
// argument checks, a length that differs, BRAID_TIMEOUT, and a sender that dies under a pending
// any-source receive.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

const char* transportParam() { return GENERATE(from_range(transportsUnderTest())).c_str(); }

// Message k of rank r: every element says who sent it and which one it was.
std::vector<int32_t> payload(int rank, int k, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(rank * 1000000 + k * 1000 + (i % 997));
  return v;
}

int checkPayload(int rank, const std::vector<int32_t>& got, int from, int k) {
  const std::vector<int32_t> want = payload(from, k, got.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return fail(rank, "message %d of rank %d: element %zu is %d, not %d", k, from, i, got[i], want[i]);
  return 0;
}

}  // namespace

TEST_CASE("tagged messages match by tag: tag 2 sent before tag 1 is received after it, small and large",
          "[mp][p2p][tags]") {
  const char* transport = transportParam();
  // 16 B, one above a shm slot, and 8 MiB: the large ones cannot all sit in a link's buffers.
  const size_t count = GENERATE(size_t{4}, size_t{70000}, size_t{2} << 20);
  INFO(transport << " count " << count);
  auto res =
      runComm(2, {{"BRAID_P2P_TAGS", "1"}, {"BRAID_TRANSPORTS", transport}}, [count](braidComm_t comm, int rank, int) {
        if (rank == 0) {
          // Tag 2 first, then three of tag 1 (kept in order among themselves), then an untagged send,
          // which only braidRecv may take.
          std::vector<std::vector<int32_t>> msgs = {payload(0, 2, count), payload(0, 10, count), payload(0, 11, count),
                                                    payload(0, 12, count), payload(0, 99, count)};
          std::vector<braidRequest_t> reqs(4);
          CHECK_BRAID(rank, braidISendTagged(msgs[0].data(), count, braidInt32, 1, 2, comm, nullptr, &reqs[0]));
          for (int k = 1; k < 4; ++k)
            CHECK_BRAID(rank, braidISendTagged(msgs[k].data(), count, braidInt32, 1, 1, comm, nullptr, &reqs[k]));
          CHECK_BRAID(rank, braidSend(msgs[4].data(), count, braidInt32, 1, comm, nullptr));
          CHECK_BRAID(rank, braidWaitAll(4, reqs.data()));
          return 0;
        }
        std::vector<int32_t> got(count, -1);
        int source = -7;
        // The untagged message first: the tagged ones do not stand in its way.
        CHECK_BRAID(rank, braidRecv(got.data(), count, braidInt32, 0, comm, nullptr));
        if (int e = checkPayload(rank, got, 0, 99)) return e;
        for (int k = 10; k < 13; ++k) {
          CHECK_BRAID(rank, braidRecvTagged(got.data(), count, braidInt32, 0, 1, comm, nullptr, &source));
          if (source != 0) return fail(rank, "source %d, not 0", source);
          if (int e = checkPayload(rank, got, 0, k)) return e;
        }
        CHECK_BRAID(rank, braidRecvTagged(got.data(), count, braidInt32, BRAID_ANY_SOURCE, 2, comm, nullptr, &source));
        if (source != 0) return fail(rank, "any-source receive reports source %d, not 0", source);
        return checkPayload(rank, got, 0, 2);
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("any-source receives take every sender's messages as they arrive and name the source", "[mp][p2p][tags]") {
  const char* transport = transportParam();
  const int n = GENERATE(2, 3, 4);
  const size_t count = GENERATE(size_t{1}, size_t{300000});
  INFO(transport << " nranks " << n << " count " << count);
  constexpr int kPerSender = 3;
  auto res = runComm(
      n, {{"BRAID_P2P_TAGS", "1"}, {"BRAID_TRANSPORTS", transport}}, [count](braidComm_t comm, int rank, int size) {
        if (rank != 0) {
          for (int k = 0; k < kPerSender; ++k) {
            std::vector<int32_t> m = payload(rank, k, count);
            CHECK_BRAID(rank, braidSendTagged(m.data(), count, braidInt32, 0, 7, comm, nullptr));
          }
          return 0;
        }
        std::vector<int> next(size, 0);  // per sender: the message expected next (one pair stays in order)
        for (int i = 0; i < (size - 1) * kPerSender; ++i) {
          std::vector<int32_t> got(count, -1);
          int source = -7;
          CHECK_BRAID(rank,
                      braidRecvTagged(got.data(), count, braidInt32, BRAID_ANY_SOURCE, 7, comm, nullptr, &source));
          if (source < 1 || source >= size) return fail(rank, "source %d out of range", source);
          if (int e = checkPayload(rank, got, source, next[source]++)) return e;
        }
        for (int r = 1; r < size; ++r)
          if (next[r] != kPerSender) return fail(rank, "%d messages from rank %d, not %d", next[r], r, kPerSender);
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tagged receives complete out of issue order; in groups; with collectives between them", "[mp][p2p][tags]") {
  const char* transport = transportParam();
  INFO(transport);
  auto res =
      runComm(2, {{"BRAID_P2P_TAGS", "1"}, {"BRAID_TRANSPORTS", transport}}, [](braidComm_t comm, int rank, int) {
        const int peer = 1 - rank;
        int32_t one = 0, two = 0, three = 0;
        if (rank == 1) {
          // Receives of tag 1 and tag 2 posted in that order; only tag 2 is sent before we answer, so
          // the second must complete while the first is still pending.
          braidRequest_t r1, r2;
          int src1 = -1, src2 = -1;
          CHECK_BRAID(rank, braidIRecvTagged(&one, 1, braidInt32, BRAID_ANY_SOURCE, 1, comm, nullptr, &src1, &r1));
          CHECK_BRAID(rank, braidIRecvTagged(&two, 1, braidInt32, peer, 2, comm, nullptr, &src2, &r2));
          CHECK_BRAID(rank, braidWait(r2));
          if (two != 22 || src2 != 0) return fail(rank, "tag 2: %d from %d", two, src2);
          int done = 1;
          CHECK_BRAID(rank, braidTest(r1, &done));
          if (done) return fail(rank, "the receive of tag 1 completed before tag 1 was sent");
          // A collective while the tagged receive is pending: they do not wait for each other.
          float x = 1, sum = 0;
          CHECK_BRAID(rank, braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm, nullptr));
          if (sum != 2) return fail(rank, "allreduce %g", sum);
          three = 33;
          CHECK_BRAID(rank, braidSendTagged(&three, 1, braidInt32, peer, 3, comm, nullptr));
          CHECK_BRAID(rank, braidWait(r1));
          if (one != 11 || src1 != 0) return fail(rank, "tag 1: %d from %d", one, src1);
        } else {
          two = 22;
          CHECK_BRAID(rank, braidSendTagged(&two, 1, braidInt32, peer, 2, comm, nullptr));
          float x = 1, sum = 0;
          CHECK_BRAID(rank, braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm, nullptr));
          CHECK_BRAID(rank, braidRecvTagged(&three, 1, braidInt32, peer, 3, comm, nullptr, nullptr));
          if (three != 33) return fail(rank, "tag 3: %d", three);
          one = 11;
          CHECK_BRAID(rank, braidSendTagged(&one, 1, braidInt32, peer, 1, comm, nullptr));
        }
        // A pairwise exchange in a group: both blocking calls are posted, End waits for both.
        std::vector<int32_t> mine = payload(rank, 5, 100000), theirs(100000, -1);
        int source = -1;
        CHECK_BRAID(rank, braidGroupStart());
        CHECK_BRAID(rank, braidSendTagged(mine.data(), mine.size(), braidInt32, peer, 9, comm, nullptr));
        CHECK_BRAID(rank, braidRecvTagged(theirs.data(), theirs.size(), braidInt32, peer, 9, comm, nullptr, &source));
        CHECK_BRAID(rank, braidGroupEnd());
        if (source != peer) return fail(rank, "group receive: source %d", source);
        return checkPayload(rank, theirs, peer, 5);
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tagged calls: bad arguments change nothing; a length that differs fails that receive only",
          "[mp][p2p][tags]") {
  auto res = runComm(2, {{"BRAID_P2P_TAGS", "1"}}, [](braidComm_t comm, int rank, int) {
    const int peer = 1 - rank;
    int32_t v[4] = {rank, rank, rank, rank};
    braidRequest_t req = nullptr;
    int source = -5;
    auto expect = [&](braidResult_t got, braidResult_t want, const char* what, const char* words) {
      if (got != want) return fail(rank, "%s: %s, not %s", what, braidGetErrorString(got), braidGetErrorString(want));
      if (strstr(braidGetLastError(), words) == nullptr)
        return fail(rank, "%s: message '%s' lacks '%s'", what, braidGetLastError(), words);
      return 0;
    };
    if (int e = expect(braidSendTagged(v, 1, braidInt32, peer, -1, comm, nullptr), braidInvalidArgument, "tag -1",
                       "negative"))
      return e;
    if (int e = expect(braidSendTagged(v, 1, braidInt32, BRAID_ANY_SOURCE, 0, comm, nullptr), braidInvalidArgument,
                       "send to any", "out of range"))
      return e;
    if (int e = expect(braidRecvTagged(v, 1, braidInt32, rank, 0, comm, nullptr, &source), braidInvalidUsage, "self",
                       "self"))
      return e;
    if (int e = expect(braidIRecvTagged(v, 1, braidInt32, peer, 0, comm, nullptr, &source, nullptr),
                       braidInvalidArgument, "request NULL", "request"))
      return e;
    if (int e = expect(braidRecvTagged(nullptr, 1, braidInt32, peer, 0, comm, nullptr, &source), braidInvalidArgument,
                       "NULL buffer", "NULL"))
      return e;
    if (source != -5 || req != nullptr || v[0] != rank) return fail(rank, "a refused call wrote its outputs");
    if (rank == 0) {
      CHECK_BRAID(rank, braidSendTagged(v, 4, braidInt32, peer, 4, comm, nullptr));
      CHECK_BRAID(rank, braidSendTagged(v, 1, braidInt32, peer, 4, comm, nullptr));
      return 0;
    }
    // The 4-element message meets a 2-element receive: that receive fails, the next one works.
    if (int e = expect(braidRecvTagged(v, 2, braidInt32, peer, 4, comm, nullptr, &source), braidInvalidUsage, "length",
                       "lengths must be equal"))
      return e;
    if (source != -5) return fail(rank, "a failed receive wrote its source");
    CHECK_BRAID(rank, braidRecvTagged(v, 1, braidInt32, BRAID_ANY_SOURCE, 4, comm, nullptr, &source));
    if (v[0] != 0 || source != 0) return fail(rank, "after the failed receive: %d from %d", v[0], source);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("without the tag links (the default) tagged calls are refused; untagged ones still work", "[mp][p2p][tags]") {
  auto res = runComm(2, {{"BRAID_P2P_TAGS", "0"}}, [](braidComm_t comm, int rank, int) {
    int32_t v = rank;
    const braidResult_t r = braidSendTagged(&v, 1, braidInt32, 1 - rank, 0, comm, nullptr);
    if (r != braidInvalidUsage || strstr(braidGetLastError(), "BRAID_P2P_TAGS") == nullptr)
      return fail(rank, "tagged send without tag links: %s: %s", braidGetErrorString(r), braidGetLastError());
    float x = 1, sum = 0;
    CHECK_BRAID(rank, braidAllReduce(&x, &sum, 1, braidFloat32, braidSum, comm, nullptr));
    return sum == 2 ? 0 : fail(rank, "allreduce %g", sum);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a pending any-source receive ends by BRAID_TIMEOUT, naming what it waited for", "[mp][p2p][tags]") {
  auto res = runComm(2, {{"BRAID_P2P_TAGS", "1"}, {"BRAID_TIMEOUT", "2"}}, [](braidComm_t comm, int rank, int) {
    int32_t v = 0;
    if (rank == 0) {
      const braidResult_t r = braidRecvTagged(&v, 1, braidInt32, BRAID_ANY_SOURCE, 3, comm, nullptr, nullptr);
      const char* msg = braidGetLastError();
      if (r != braidTimeout || strstr(msg, "timed out") == nullptr || strstr(msg, "any rank") == nullptr)
        return fail(rank, "unmatched receive: %s: %s", braidGetErrorString(r), msg);
      return 0;
    }
    // The other rank posts nothing (a wait of its own could time out first) and stays (leaving would
    // end the receive as a departure) until rank 0's deadline has passed.
    sleep(4);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a sender that dies under a pending any-source receive is braidRemoteError naming it",
          "[mp][p2p][tags][failure]") {
  const char* transport = transportParam();
  INFO(transport);
  auto res = runComm(
      3,
      {{"BRAID_P2P_TAGS", "1"},
       {"BRAID_TRANSPORTS", transport},
       {"BRAID_TIMEOUT", "60"},
       {"BRAID_HEARTBEAT_MS", "200"}},
      [](braidComm_t comm, int rank, int) {
        int32_t v = rank;
        if (rank == 2) {
          usleep(200 * 1000);  // rank 0 is waiting by now (or soon: either way its receive is pending)
          raise(SIGKILL);
        }
        if (rank == 1) {
          CHECK_BRAID(rank, braidSendTagged(&v, 1, braidInt32, 0, 1, comm, nullptr));
          const braidResult_t r = braidBarrier(comm, nullptr);
          return r == braidRemoteError ? 0 : fail(rank, "barrier: %s", braidGetErrorString(r));
        }
        int source = -1;
        CHECK_BRAID(rank, braidRecvTagged(&v, 1, braidInt32, BRAID_ANY_SOURCE, 1, comm, nullptr, &source));
        if (source != 1 || v != 1) return fail(rank, "first receive: %d from %d", v, source);
        const braidResult_t r = braidRecvTagged(&v, 1, braidInt32, BRAID_ANY_SOURCE, 1, comm, nullptr, &source);
        const char* msg = braidGetLastError();
        if (r != braidRemoteError || strstr(msg, "rank 2") == nullptr)
          return fail(rank, "receive under a dead sender: %s: %s", braidGetErrorString(r), msg);
        return 0;
      },
      120);
  INFO(describe(res));
  REQUIRE(res.size() == 3);
  CHECK(res[0].status == 0);
  CHECK(res[1].status == 0);
  CHECK(res[2].status == 128 + SIGKILL);
}

TEST_CASE("a rank that leaves without sending does not fail a pending any-source receive", "[mp][p2p][tags]") {
  const char* transport = transportParam();
  INFO(transport);
  // Rank 2 never sends and leaves at once (its process exits too); rank 1 sends once rank 2 is gone.
  // Rank 0's receive from any rank reads rank 2's tag link all along and must take the closing as a
  // departure, not a failure.
  auto res =
      runComm(3, {{"BRAID_P2P_TAGS", "1"}, {"BRAID_TRANSPORTS", transport}, {"BRAID_TIMEOUT", "30"}},
              [](braidComm_t comm, int rank, int) {
                int32_t v = rank;
                if (rank == 2) return 0;
                if (rank == 1) {
                  usleep(1500 * 1000);
                  CHECK_BRAID(rank, braidSendTagged(&v, 1, braidInt32, 0, 4, comm, nullptr));
                  return 0;
                }
                int source = -1;
                CHECK_BRAID(rank, braidRecvTagged(&v, 1, braidInt32, BRAID_ANY_SOURCE, 4, comm, nullptr, &source));
                if (source != 1 || v != 1) return fail(rank, "received %d from %d", v, source);
                return 0;
              });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
