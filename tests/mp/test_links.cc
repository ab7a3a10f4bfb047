// The Link contract (transports/transport.h), checked on every transport under test with real
// processes and braid's own point-to-point and collective calls: a send or receive of the API is
// one Xfer on the link (point-to-point steps are not chunked), so these calls reach the contract
// directly. Small slots and chunks (kSmallPieces) make every message above a few hundred bytes
// travel in many pieces, of sizes that do not divide the messages.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// shm slots of 192 bytes (a multiple of 64, not a power of two), tcp socket calls of 4097 bytes
// (odd: a reduce receive then carries a partial element from one read into the next), ibverbs rings
// of four 192-byte slots (credits run out within every large message), ucx rma rings of four
// 4160-byte slots with chunks up to 1000 bytes inline (so a message's chunks mix puts and inline
// ones), and collective chunks large enough that a collective's messages span many of those pieces.
Env linkEnv(const std::string& transport, const char* forceLowering = "0") {
  return {{"BRAID_TRANSPORTS", transport},        {"BRAID_TIMEOUT", "60"},
          {"BRAID_SHM_SLOT_SIZE", "192"},         {"BRAID_TCP_CHUNK", "4097"},
          {"BRAID_IB_SLOT_SIZE", "192"},          {"BRAID_IB_SLOTS", "4"},
          {"BRAID_UCX_RMA_SLOT_SIZE", "4160"},    {"BRAID_UCX_RMA_SLOTS", "4"},
          {"BRAID_UCX_RMA_INLINE", "1000"},       {"BRAID_CHUNK_SIZE", "1M"},
          {"BRAID_FORCE_LOWERING", forceLowering}};
}

// Byte `off` of message `msg` from rank `from`: differs between neighbouring bytes, messages and
// senders, so a piece delivered at the wrong offset, into the wrong message or from the wrong peer
// shows.
uint8_t pattern(int from, size_t msg, size_t off) { return static_cast<uint8_t>(from * 61 + msg * 131 + off * 7 + 1); }

std::vector<uint8_t> messageFrom(int from, size_t msg, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = pattern(from, msg, i);
  return v;
}

// Checks a received message; reports the first wrong byte.
int checkMessage(int rank, int from, size_t msg, const std::vector<uint8_t>& got) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != pattern(from, msg, i))
      return fail(rank, "message %zu from rank %d (%zu bytes): byte %zu is %u, expected %u", msg, from, got.size(), i,
                  got[i], pattern(from, msg, i));
  return 0;
}

// Every rank sends `sizes` (in order) to every other rank and receives theirs, all in one group: the
// transfers are posted together before any progress, sends and receives interleaved per peer.
int exchangeAll(braidComm_t comm, int rank, int n, const std::vector<size_t>& sizes) {
  std::vector<std::vector<uint8_t>> out, in;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m) {
      out.push_back(messageFrom(rank, m, sizes[m]));
      // Poisoned, so that a receive that was never written shows.
      in.emplace_back(sizes[m], static_cast<uint8_t>(0xEE));
    }
  }
  CHECK_BRAID(rank, braidGroupStart());
  size_t k = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m, ++k) {
      CHECK_BRAID(rank, braidSend(out[k].data(), sizes[m], braidUint8, p, comm, nullptr));
      CHECK_BRAID(rank, braidRecv(in[k].data(), sizes[m], braidUint8, p, comm, nullptr));
    }
  }
  CHECK_BRAID(rank, braidGroupEnd());
  k = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m, ++k)
      if (checkMessage(rank, p, m, in[k]) != 0) return 1;
  }
  return 0;
}

void requireAllOk(const std::vector<RankResult>& res) {
  INFO(describe(res));
  REQUIRE(allOk(res));
}

}  // namespace

TEST_CASE("link contract: messages of distinct sizes arrive in posting order, byte-exact", "[mp][links]") {
  const std::string transport = GENERATE(from_range(transportsUnderTest()));
  const int n = GENERATE(2, 3);
  INFO(transport << " nranks " << n);
  // Zero-byte messages among the others (first, middle, last), odd sizes, sizes around the inline
  // limit, the slot and the chunk, and messages of many pieces that end in a partial one.
  const std::vector<size_t> sizes = {0,    1,    3,    7,     63,    64,    65, 0,      191,   192,    193,
                                     383,  4096, 4097, 4098,  8195,  10007, 0,  65537,  99999, 300001, 1,
                                     1234, 0,    5,    12289, 40961, 2,     0,  200003, 17,    0};
  requireAllOk(runComm(n, linkEnv(transport),
                       [&](braidComm_t comm, int rank, int size) { return exchangeAll(comm, rank, size, sizes); }));
}

TEST_CASE("link contract: 64 messages queued at once before any progress", "[mp][links]") {
  const std::string transport = GENERATE(from_range(transportsUnderTest()));
  const int n = GENERATE(2, 3);
  INFO(transport << " nranks " << n);
  std::vector<size_t> sizes;
  for (size_t i = 0; i < 64; ++i) sizes.push_back(i % 8 == 0 ? 0 : i * 613 % 5003 + i);  // zero-byte ones too
  requireAllOk(runComm(n, linkEnv(transport), [&](braidComm_t comm, int rank, int size) {
    // Twice: the second round finds the queues drained and the links' state reset.
    for (int round = 0; round < 2; ++round)
      if (exchangeAll(comm, rank, size, sizes) != 0) return 1;
    return 0;
  }));
}

TEST_CASE("link contract: receive-reduces split across pieces, fused and lowered, give exact sums", "[mp][links]") {
  const std::string transport = GENERATE(from_range(transportsUnderTest()));
  const char* lowering = GENERATE("0", "1");
  const int n = GENERATE(2, 3);
  INFO(transport << " nranks " << n << " BRAID_FORCE_LOWERING=" << lowering);
  requireAllOk(runComm(n, linkEnv(transport, lowering), [](braidComm_t comm, int rank, int size) {
    // Element sizes 1, 2, 4 and 8; counts whose bytes divide neither the 192-byte slot nor the
    // 4097-byte tcp read, odd byte counts for the 1-byte type.
    const braidDataType_t types[] = {braidInt8, braidFloat16, braidBfloat16, braidFloat32, braidInt64, braidFloat64};
    const size_t counts[] = {1, 97, 2049, 4097 * 3 + 1, 65537};
    for (braidDataType_t dt : types) {
      for (size_t count : counts) {
        const size_t es = elemSize(dt);
        std::vector<uint8_t> buf(count * es);
        for (size_t i = 0; i < count; ++i) storeElem(dt, buf.data(), i, inputValue(braidSum, rank, i, size));
        CHECK_BRAID(rank, braidAllReduce(buf.data(), buf.data(), count, dt, braidSum, comm, nullptr));
        for (size_t i = 0; i < count; ++i) {
          const double want = expectedValue(dt, braidSum, i, size), got = loadElem(dt, buf.data(), i);
          if (!matches(dt, braidSum, got, want))
            return fail(rank, "%s count %zu: element %zu is %g, expected %g", typeName(dt), count, i, got, want);
        }
      }
    }
    return 0;
  }));
}

TEST_CASE("link contract: a length mismatch is braidRemoteError naming the sender", "[mp][links]") {
  const std::string transport = GENERATE(from_range(transportsUnderTest()));
  // Receive shorter and longer than sent; small ones (one piece) and ones of many pieces.
  const std::pair<size_t, size_t> sizes =
      GENERATE(std::pair<size_t, size_t>{100, 64}, std::pair<size_t, size_t>{64, 100},
               std::pair<size_t, size_t>{50000, 50001}, std::pair<size_t, size_t>{0, 8});
  const size_t sent = sizes.first, posted = sizes.second;
  INFO(transport << " sent " << sent << " posted " << posted);
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(2, linkEnv(transport), [&](int rank, int size) {
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
    std::vector<uint8_t> buf(std::max(sent, posted), 1);
    if (rank == 0) {
      // The send may complete (the bytes left) or fail once rank 1 reports the mismatch: either is
      // fine, the contract is about the receiver.
      (void)braidSend(buf.data(), sent, braidUint8, 1, comm, nullptr);
      (void)braidCommDestroy(comm);
      return 0;
    }
    braidResult_t r = braidRecv(buf.data(), posted, braidUint8, 0, comm, nullptr);
    const std::string msg = braidGetLastError();
    (void)braidCommDestroy(comm);
    if (r != braidRemoteError) return fail(rank, "receive returned %s: %s", braidGetErrorString(r), msg.c_str());
    const std::string want = std::to_string(sent) + " bytes";
    if (msg.find("rank 0") == std::string::npos || msg.find(want) == std::string::npos)
      return fail(rank, "the error does not name rank 0 and the %s it sent: %s", want.c_str(), msg.c_str());
    return 0;
  });
  requireAllOk(res);
}

TEST_CASE("link contract: a peer killed mid-transfer fails the survivors naming it, no hang", "[mp][links]") {
  const std::string transport = GENERATE(from_range(transportsUnderTest()));
  const int n = GENERATE(2, 3);
  const int victim = n - 1;
  INFO(transport << " nranks " << n << " victim " << victim);
  constexpr size_t kBytes = 64 << 20;  // far more than any socket buffer or FIFO holds
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(n, linkEnv(transport), [&](int rank, int size) {
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, id, rank));
    std::vector<uint8_t> buf(kBytes, 3);
    if (rank == victim) {
      std::vector<braidRequest_t> reqs;
      for (int p = 0; p < size; ++p) {
        if (p == rank) continue;
        braidRequest_t r = nullptr;
        CHECK_BRAID(rank, braidISend(buf.data(), kBytes, braidUint8, p, comm, nullptr, &r));
        reqs.push_back(r);
      }
      // Let part of it travel (braidTest drives it), then die. A fast transport on a quiet machine
      // may move all 64 MiB in these milliseconds (ucx over loopback did): the survivors' second
      // receive, which the victim never sends, fails then, so a death is always seen.
      int done = 0;
      for (int i = 0; i < 20; ++i) {
        if (done == 0) CHECK_BRAID(rank, braidTest(reqs.front(), &done));  // a done request is released
        usleep(1000);
      }
      raise(SIGKILL);
    }
    braidResult_t r = braidRecv(buf.data(), kBytes, braidUint8, victim, comm, nullptr);
    if (r == braidSuccess) r = braidRecv(buf.data(), kBytes, braidUint8, victim, comm, nullptr);
    const std::string msg = braidGetLastError();
    braidCommAbort(comm);
    if (r != braidRemoteError) return fail(rank, "receive returned %s: %s", braidGetErrorString(r), msg.c_str());
    if (msg.find("rank " + std::to_string(victim)) == std::string::npos)
      return fail(rank, "the error does not name rank %d: %s", victim, msg.c_str());
    return 0;
  });
  INFO(describe(res));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(res[r].status == (r == victim ? 128 + SIGKILL : 0));
  }
}
