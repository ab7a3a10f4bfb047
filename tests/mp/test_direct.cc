// Collectives in place on braidMemAlloc memory (src/direct_coll.cc): every datatype and op, in place
// and not, at sizes around the parts' edges; buffers that are braidMemAlloc memory on some ranks
// only; registration and deregistration; a free while a call uses the memory; calls that differ; a
// rank killed in one; the setting; and direct calls among FIFO and mailbox calls in flight. Each
// test checks whether the calls ran in place (Engine::directCalls): a test of the path that ran on
// the FIFOs instead would pass for nothing.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "src/comm.h"
#include "src/executor.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// BRAID_ALGO pinned empty: an algorithm it forces skips the direct path (scripts/settings_sweep.sh).
const Env kShm = {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_ALGO", ""}};

uint64_t directCalls(braidComm_t comm) { return internalsOf(comm)->engine->directCalls(); }

// braidMemAlloc memory, freed at scope exit.
struct BraidMem {
  void* p = nullptr;
  explicit BraidMem(size_t bytes) {
    if (braidMemAlloc(&p, bytes) != braidSuccess) p = nullptr;
  }
  ~BraidMem() {
    if (p != nullptr) braidMemFree(p);
  }
  char* get() const { return static_cast<char*>(p); }
};

}  // namespace

TEST_CASE(
    "AllReduce, Reduce and ReduceScatter on braidMemAlloc memory run in place: every datatype and op, in "
    "place and not",
    "[mp][shm][direct]") {
  const int n = GENERATE(2, 3, 4);
  // With BRAID_NT_STORES_MIN at 64 KiB the outputs out of place are streamed: the fold then goes in
  // one pass (foldStreamKernel; avg divides each line in it), which these counts end mid-line.
  const bool streamed = GENERATE(false, true);
  INFO("nranks " << n << (streamed ? ", outputs streamed" : ""));
  Env env = kShm;
  if (streamed) env["BRAID_NT_STORES_MIN"] = "64K";
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    if (internalsOf(comm)->directPids.empty()) return fail(rank, "the communicator does not run calls in place");
    const braidDataType_t types[] = {braidInt8,   braidUint8,   braidInt32,    braidUint32,  braidInt64,
                                     braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
    const braidRedOp_t ops[] = {braidSum, braidProd, braidMin, braidMax, braidAvg};
    // Past the mailboxes (64 KiB), with counts that cut the parts off cache lines and off the
    // blocks of the fold.
    const size_t counts[] = {70001, 98317};
    const size_t most = 8 * 98317 * static_cast<size_t>(size) + 4096;
    BraidMem send(most), recv(most);
    if (send.get() == nullptr || recv.get() == nullptr) return fail(rank, "braidMemAlloc");
    uint64_t expected = 0;
    for (braidDataType_t dt : types)
      for (braidRedOp_t op : ops) {
        if (op == braidAvg && !isFloat(dt)) continue;
        for (size_t count : counts)
          for (bool inPlace : {false, true}) {
            if (count * elemSize(dt) <= internalsOf(comm)->mailBytes) continue;
            // An offset into the allocation, as a framework's tensor in a pool would be.
            const size_t at = count == counts[1] ? 64 * 3 + 8 : 0;
            char* s = send.get() + at;
            char* r = recv.get() + at;
            if (allReduceChecked(comm, rank, size, s, r, count, dt, op, inPlace) != 0 ||
                rootedOrScatteredChecked(comm, rank, size, false, s, r, count, dt, op, inPlace) != 0 ||
                rootedOrScatteredChecked(comm, rank, size, true, s, r, count, dt, op, inPlace) != 0)
              return 1;
            expected += 3;
          }
      }
    if (directCalls(comm) != expected)
      return fail(rank, "%llu of %llu calls ran in place", static_cast<unsigned long long>(directCalls(comm)),
                  static_cast<unsigned long long>(expected));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("every other collective on braidMemAlloc memory runs in place: in place and not, every root",
          "[mp][shm][direct]") {
  const int n = GENERATE(2, 3, 4);
  // Streamed outputs (BRAID_NT_STORES_MIN 64 KiB) copy 4 KiB at a time, off the blocks here.
  const bool streamed = GENERATE(false, true);
  INFO("nranks " << n << (streamed ? ", outputs streamed" : ""));
  Env env = kShm;
  if (streamed) env["BRAID_NT_STORES_MIN"] = "64K";
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const size_t sz = static_cast<size_t>(size);
    // Blocks past the mailboxes, cut off cache lines.
    for (braidDataType_t dt : {braidInt32, braidFloat64}) {
      const size_t es = elemSize(dt), b = 40000 + 3;  // elements per block
      BraidMem sendMem(b * sz * es + 4096), recvMem(b * sz * es + 4096);
      char* send = sendMem.get() + 64;  // an interior buffer
      char* recv = recvMem.get() + 128;
      // The value of rank r's element i of its input: every element tells where it came from.
      auto val = [&](int r, size_t i) { return static_cast<double>((r + 1) * 1000003 % 65521 + i % 10007); };
      auto fillSend = [&](char* at, size_t count) {
        for (size_t i = 0; i < count; ++i) storeElem(dt, at, i, val(rank, i));
      };
      auto expect = [&](const char* what, const char* at, size_t count, const std::function<double(size_t)>& want) {
        for (size_t i = 0; i < count; ++i)
          if (loadElem(dt, at, i) != want(i))
            return fail(rank, "%s %s: [%zu] = %g, want %g", typeName(dt), what, i, loadElem(dt, at, i), want(i));
        return 0;
      };
      uint64_t calls = 0;
      for (bool inPlace : {false, true}) {
        const char* how = inPlace ? "in place" : "out of place";
        std::string what;
        // AllGather: in place, the input is this rank's block of the output.
        char* agIn = inPlace ? recv + rank * b * es : send;
        fillSend(agIn, b);
        CHECK_BRAID(rank, braidAllGather(agIn, recv, b, dt, comm, nullptr));
        what = std::string("AllGather ") + how;
        if (expect(what.c_str(), recv, b * sz, [&](size_t i) { return val(static_cast<int>(i / b), i % b); }) != 0)
          return 1;
        // ReduceScatter: sum over ranks of block `rank` of each input.
        fillSend(send, b * sz);
        char* rsOut = inPlace ? send + rank * b * es : recv;
        CHECK_BRAID(rank, braidReduceScatter(send, rsOut, b, dt, braidSum, comm, nullptr));
        what = std::string("ReduceScatter ") + how;
        if (expect(what.c_str(), rsOut, b, [&](size_t i) {
              double t = 0;
              for (int r = 0; r < size; ++r) t += val(r, rank * b + i);
              return t;
            }) != 0)
          return 1;
        // AllToAll (in place it runs on its plan: one call less in place).
        fillSend(inPlace ? recv : send, b * sz);
        CHECK_BRAID(rank, braidAllToAll(inPlace ? recv : send, recv, b, dt, comm, nullptr));
        what = std::string("AllToAll ") + how;
        if (expect(what.c_str(), recv, b * sz,
                   [&](size_t i) { return val(static_cast<int>(i / b), rank * b + i % b); }) != 0)
          return 1;
        calls += inPlace ? 2 : 3;
        for (int root = 0; root < size; ++root) {
          // Broadcast.
          fillSend(inPlace ? recv : send, b);
          CHECK_BRAID(rank, braidBroadcast(inPlace ? recv : send, recv, b, dt, root, comm, nullptr));
          what = std::string("Broadcast ") + how + " root " + std::to_string(root);
          if (expect(what.c_str(), recv, b, [&](size_t i) { return val(root, i); }) != 0) return 1;
          // Reduce: max, the root's output only.
          fillSend(inPlace ? recv : send, b);
          CHECK_BRAID(rank, braidReduce(inPlace ? recv : send, recv, b, dt, braidMax, root, comm, nullptr));
          what = std::string("Reduce ") + how + " root " + std::to_string(root);
          if (rank == root && expect(what.c_str(), recv, b, [&](size_t i) {
                                double m = val(0, i);
                                for (int r = 1; r < size; ++r) m = std::max(m, val(r, i));
                                return m;
                              }) != 0)
            return 1;
          // Gather: in place on the root, its input is its block of the output.
          char* gIn = inPlace && rank == root ? recv + root * b * es : send;
          fillSend(gIn, b);
          CHECK_BRAID(rank, braidGather(gIn, recv, b, dt, root, comm, nullptr));
          what = std::string("Gather ") + how + " root " + std::to_string(root);
          if (rank == root &&
              expect(what.c_str(), recv, b * sz, [&](size_t i) { return val(static_cast<int>(i / b), i % b); }) != 0)
            return 1;
          // Scatter: in place on the root, its output is its block of the input.
          if (rank == root) fillSend(send, b * sz);
          char* sOut = inPlace && rank == root ? send + root * b * es : recv;
          CHECK_BRAID(rank, braidScatter(send, sOut, b, dt, root, comm, nullptr));
          what = std::string("Scatter ") + how + " root " + std::to_string(root);
          if (expect(what.c_str(), sOut, b, [&](size_t i) { return val(root, rank * b + i); }) != 0) return 1;
          calls += 4;
        }
      }
      const uint64_t got = directCalls(comm);
      CHECK_BRAID(rank, braidBarrier(comm, nullptr));
      if (got != calls)
        return fail(rank, "%s: %llu of %llu calls ran in place", typeName(dt), static_cast<unsigned long long>(got),
                    static_cast<unsigned long long>(calls));
      internalsOf(comm)->engine->resetDirectCalls();
    }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("AllReduce in place gives every rank the same bits, the rank-order sum; big calls stream their outputs",
          "[mp][shm][direct]") {
  const int n = GENERATE(2, 3);
  INFO("nranks " << n);
  auto res = runComm(n, kShm, [&](braidComm_t comm, int rank, int size) {
    // 24 MiB: past the last-level cache for 2n buffers, where the outputs take non-temporal stores.
    for (size_t count : {size_t{1} << 16, size_t{6} << 20}) {
      BraidMem in(count * 4), out(count * 4), mine(count * 4);
      std::vector<float> all(count * size);
      float* x = reinterpret_cast<float*>(in.get());
      for (size_t i = 0; i < count; ++i) x[i] = 1.0f / static_cast<float>(1 + (i * 7 + rank * 13) % 1000);
      CHECK_BRAID(rank, braidAllGather(x, all.data(), count, braidFloat32, comm, nullptr));
      const uint64_t before = directCalls(comm);
      CHECK_BRAID(rank, braidAllReduce(x, out.get(), count, braidFloat32, braidSum, comm, nullptr));
      if (directCalls(comm) != before + 1) return fail(rank, "count %zu did not run in place", count);
      const float* y = reinterpret_cast<const float*>(out.get());
      for (size_t i = 0; i < count; ++i) {
        float want = all[i];
        for (int r = 1; r < size; ++r) want += all[r * count + i];
        if (memcmp(&want, &y[i], sizeof(float)) != 0)
          return fail(rank, "count %zu [%zu]: %.9g, the rank-order sum is %.9g", count, i, y[i], want);
      }
    }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("braidMemAlloc memory on some ranks only: every rank runs the plan, and the sums are right",
          "[mp][shm][direct]") {
  const int n = GENERATE(2, 4);
  INFO("nranks " << n);
  auto res = runComm(n, kShm, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 1 << 16;
    BraidMem mem(count * 8);
    std::vector<int64_t> heap(count);
    for (int round = 0; round < 2 * size; ++round) {
      // Ordinary memory on one rank (a different one each round), or its output only.
      const bool plain = rank == round % size;
      char* buf = plain ? reinterpret_cast<char*>(heap.data()) : mem.get();
      if (allReduceChecked(comm, rank, size, buf, buf, count, braidInt64, braidSum, true) != 0) return 1;
      // Out of place: its input only is ordinary memory, then its output only.
      std::vector<int64_t> heapIn(count), heapOut(count);
      BraidMem in(count * 8);
      char* src = plain && round < size ? reinterpret_cast<char*>(heapIn.data()) : in.get();
      char* out = plain && round >= size ? reinterpret_cast<char*>(heapOut.data()) : mem.get();
      if (allReduceChecked(comm, rank, size, src, out, count, braidInt64, braidMax, false) != 0) return 1;
    }
    if (directCalls(comm) != 0)
      return fail(rank, "%llu calls ran in place", static_cast<unsigned long long>(directCalls(comm)));
    // And with every rank's memory from braidMemAlloc again, in place they run.
    if (allReduceChecked(comm, rank, size, mem.get(), mem.get(), count, braidInt64, braidSum, true) != 0) return 1;
    return directCalls(comm) == 1 ? 0 : fail(rank, "the last call did not run in place");
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("registered braidMemAlloc memory: deregistered while idle, it still works; destroy ends the rest",
          "[mp][shm][direct]") {
  auto res = runComm(3, kShm, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 1 << 15;
    BraidMem mem(count * 4);
    void* h = nullptr;
    CHECK_BRAID(rank, braidCommRegister(comm, mem.get(), count * 4, &h));
    if (allReduceChecked(comm, rank, size, mem.get(), mem.get(), count, braidUint32, braidSum, true) != 0) return 1;
    CHECK_BRAID(rank, braidCommDeregister(comm, h));
    if (allReduceChecked(comm, rank, size, mem.get(), mem.get(), count, braidUint32, braidSum, true) != 0) return 1;
    CHECK_BRAID(rank, braidCommRegister(comm, mem.get(), count * 4, &h));
    if (directCalls(comm) != 2) return fail(rank, "%llu calls in place", (unsigned long long)directCalls(comm));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("braidMemFree of memory a call in flight uses is refused and changes nothing; after the wait it frees",
          "[mp][shm][direct]") {
  auto res = runComm(2, kShm, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 1 << 16;
    void* p = nullptr;
    CHECK_BRAID(rank, braidMemAlloc(&p, count * 4 + 4096));
    float* buf = static_cast<float*>(p) + 16;  // an interior buffer pins its whole allocation
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + 1);
    CHECK_BRAID(rank, braidBarrier(comm, nullptr));
    if (rank == 1) usleep(300 * 1000);  // rank 0's call waits for this rank's mail meanwhile
    braidRequest_t req = nullptr;
    CHECK_BRAID(rank, braidIAllReduce(buf, buf, count, braidFloat32, braidSum, comm, nullptr, &req));
    const braidResult_t r = braidMemFree(p);
    if (r != braidInvalidUsage || strstr(braidGetLastError(), "in flight") == nullptr)
      return fail(rank, "braidMemFree during the call: %s, %s", braidGetErrorString(r), braidGetLastError());
    CHECK_BRAID(rank, braidWait(req));
    for (size_t i = 0; i < count; ++i)
      if (buf[i] != 3.0f) return fail(rank, "[%zu] = %g", i, buf[i]);
    if (directCalls(comm) != 1) return fail(rank, "the call did not run in place");
    CHECK_BRAID(rank, braidMemFree(p));
    (void)size;
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("memory a peer frees is unmapped here: a loop of fresh buffers holds a few mappings, not one per buffer",
          "[mp][shm][direct]") {
  auto res = runComm(3, kShm, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 1 << 16;
    size_t most = 0;
    for (int it = 0; it < 150; ++it) {
      BraidMem buf(count * 4);  // a new file each time, freed at the end of the iteration
      if (allReduceChecked(comm, rank, size, buf.get(), buf.get(), count, braidInt32, braidMin, true) != 0) return 1;
      most = std::max(most, internalsOf(comm)->engine->peerMappings());
    }
    if (directCalls(comm) != 150) return fail(rank, "%llu calls in place", (unsigned long long)directCalls(comm));
    // Each call maps one file of each peer; the ones freed since go when the peer's count of frees
    // moves (its next call's mail): two generations per peer at most.
    if (most > 2 * static_cast<size_t>(size - 1)) return fail(rank, "%zu peer files mapped at once", most);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("direct calls that differ between ranks fail on every rank naming both", "[mp][shm][direct][mismatch]") {
  const int form = GENERATE(0, 1);  // the count differs past the check word's 20 bits; the op differs
  INFO("form " << form);
  auto res = runComm(3, kShm, [&](braidComm_t comm, int rank, int) {
    const size_t count = (size_t{1} << 20) + 16;
    BraidMem mem(count * 4 + 4096);
    const size_t mine = rank == 1 && form == 0 ? count + (size_t{1} << 18) : count;
    const braidRedOp_t op = rank == 1 && form == 1 ? braidMax : braidSum;
    const braidResult_t r = braidAllReduce(mem.get(), mem.get(), mine, braidInt32, op, comm, nullptr);
    if (r != braidInvalidUsage)
      return fail(rank, "expected braidInvalidUsage, got %s: %s", braidGetErrorString(r), braidGetLastError());
    const std::string msg = braidGetLastError();
    if (msg.find("mismatched calls") == std::string::npos || msg.find("rank 1 (host") == std::string::npos)
      return fail(rank, "message: %s", msg.c_str());
    if (form == 0 && msg.find("count " + std::to_string(mine)) == std::string::npos)
      return fail(rank, "message lacks this rank's count %zu: %s", mine, msg.c_str());
    if (rank == 0) fprintf(stderr, "form %d: %s\n", form, msg.c_str());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a mismatch in direct call 2 leaves a slow rank's direct call 1 to complete", "[mp][shm][direct][mismatch]") {
  auto res = runComm(3, kShm, [&](braidComm_t comm, int rank, int) {
    const size_t count = (size_t{1} << 18) + 16;
    BraidMem mem(count * 4 + 4096);
    auto* v = reinterpret_cast<int32_t*>(mem.get());
    for (size_t i = 0; i < count; ++i) v[i] = rank + 1;
    if (rank == 0) {
      // Call 1 waited for well after the peers moved on to call 2.
      braidRequest_t rq = nullptr;
      CHECK_BRAID(rank, braidIAllReduce(v, v, count, braidInt32, braidSum, comm, nullptr, &rq));
      usleep(400 * 1000);
      CHECK_BRAID(rank, braidWait(rq));
    } else {
      CHECK_BRAID(rank, braidAllReduce(v, v, count, braidInt32, braidSum, comm, nullptr));
    }
    for (size_t i = 0; i < count; ++i)
      if (v[i] != 6) return fail(rank, "call 1 gave [%zu] = %d, not 6", i, v[i]);
    const braidRedOp_t op = rank == 1 ? braidMax : braidSum;
    const braidResult_t r = braidAllReduce(v, v, count, braidInt32, op, comm, nullptr);
    if (r != braidInvalidUsage) return fail(rank, "call 2: expected braidInvalidUsage, got %s", braidGetErrorString(r));
    const std::string msg = braidGetLastError();
    if (msg.find("mismatched calls") == std::string::npos || msg.find(" #2 ") == std::string::npos)
      return fail(rank, "message: %s", msg.c_str());
    if (directCalls(comm) != 1) return fail(rank, "%llu calls in place", (unsigned long long)directCalls(comm));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a rank killed between direct AllReduces: every other rank fails naming it, none hangs",
          "[mp][shm][direct]") {
  const int victim = GENERATE(0, 2);
  INFO("victim " << victim);
  auto res = runComm(
      3, {{"BRAID_TRANSPORTS", "shm"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_HEARTBEAT_MS", "200"}, {"BRAID_ALGO", ""}},
      [&](braidComm_t comm, int rank, int) {
        const size_t count = 1 << 16;
        BraidMem mem(count * 4);
        braidResult_t r = braidSuccess;
        for (int i = 0; i < 100000 && r == braidSuccess; ++i) {
          if (rank == victim && i == 50) raise(SIGKILL);
          r = braidAllReduce(mem.get(), mem.get(), count, braidFloat32, braidAvg, comm, nullptr);
        }
        if (r != braidRemoteError)
          return fail(rank, "expected braidRemoteError, got %s: %s", braidGetErrorString(r), braidGetLastError());
        const std::string msg = braidGetLastError(), who = "rank " + std::to_string(victim) + " (host ";
        if (msg.find(who) == std::string::npos)
          return fail(rank, "message does not name rank %d: %s", victim, msg.c_str());
        // The victim finished 50 calls. A survivor may see its death before it saw the last one or
        // two of them end (it still waited for the other survivor's done): the failure then fails
        // those calls, so not all 50 need have completed here, but all that did ran in place.
        const uint64_t ran = directCalls(comm);
        return ran >= 48 ? 0 : fail(rank, "%llu of the 50 calls before the kill ran in place", (unsigned long long)ran);
      },
      120);
  INFO(describe(res));
  for (int r = 0; r < 3; ++r) {
    if (r == victim)
      CHECK(res[r].status == 128 + SIGKILL);
    else
      CHECK((res[r].status == 0 && !res[r].timedOut));
  }
}

namespace {

// Rank 1 writes its part of a 64 MiB AllReduce into every rank's output. Rank 0 stops rank 1 in the
// middle of that and kills rank 2: rank 0's call fails (rank 2 died). With `resumeAfterMs` >= 0,
// rank 1 goes on that long after the kill, and once rank 0's call returned, rank 0 owns its output
// again: a sentinel written there must stay. With -1, rank 1 stays stopped until rank 0 is done: rank
// 0's call fails once the grace for letting go is over, and its buffers stay pinned.
int failWithPeerStopped(braidComm_t comm, int rank, int resumeAfterMs) {
  const size_t count = 16u << 20;  // rank 1's part takes about 21 passes of work
  BraidMem send(count * 4), recv(count * 4);
  if (send.get() == nullptr || recv.get() == nullptr) return fail(rank, "braidMemAlloc: %s", braidGetLastError());
  int64_t pid = getpid();
  std::vector<int64_t> pids(3);
  CHECK_BRAID(rank, braidAllGather(&pid, pids.data(), 1, braidInt64, comm, nullptr));
  const pid_t p1 = static_cast<pid_t>(pids[1]), p2 = static_cast<pid_t>(pids[2]);
  float* in = reinterpret_cast<float*>(send.get());
  float* out = reinterpret_cast<float*>(recv.get());
  std::fill(in, in + count, 1.0f);
  const size_t part = ((count + 2) / 3 + 15) / 16 * 16;  // rank 1's part, as workRange cuts it
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::fill(out, out + count, -1.0f);
    braidRequest_t req = nullptr;
    CHECK_BRAID(rank, braidIAllReduce(in, out, count, braidFloat32, braidSum, comm, nullptr, &req));
    if (rank != 0) {
      if (braidWait(req) != braidSuccess) return 0;  // rank 1, once rank 2 died (rank 2 is killed)
      continue;
    }
    volatile const float* first = out + part;
    volatile const float* last = out + 2 * part - 1;
    while (*first == -1.0f) {
    }
    kill(p1, SIGSTOP);
    if (!waitStopped(p1)) return fail(rank, "rank 1 did not stop");
    if (*last != -1.0f) {  // rank 1 was through its part already: again
      kill(p1, SIGCONT);
      CHECK_BRAID(rank, braidWait(req));
      continue;
    }
    kill(p2, SIGKILL);
    std::thread resume([&] {
      if (resumeAfterMs < 0) return;
      usleep(resumeAfterMs * 1000);
      kill(p1, SIGCONT);
    });
    const braidResult_t r = braidWait(req);
    const std::string msg = braidGetLastError();
    resume.join();
    if (r == braidSuccess) return fail(rank, "the call succeeded without rank 2");
    if (resumeAfterMs < 0) {
      const braidResult_t freed = braidMemFree(recv.p);
      kill(p1, SIGCONT);
      if (freed != braidInvalidUsage)
        return fail(rank, "braidMemFree of the output a stopped peer may still write: %s", braidGetErrorString(freed));
      recv.p = nullptr;  // pinned for good
      return 0;
    }
    std::fill(out, out + count, 7.0f);
    usleep(500 * 1000);
    const size_t changed = static_cast<size_t>(std::count_if(out, out + count, [](float v) { return v != 7.0f; }));
    if (changed != 0)
      return fail(rank, "%zu floats of this rank's output changed after its failed call returned (%s)", changed,
                  msg.c_str());
    return 0;
  }
  return fail(rank, "rank 1 was never caught in the middle of its part in 20 calls");
}

}  // namespace

TEST_CASE("a call in place that fails returns only once its live peers let go of its buffers", "[mp][shm][direct]") {
  // Before SmallColls::abandon, rank 0's call returned at rank 2's death and rank 1's late writes
  // landed on the sentinel. A peer stopped for good is waited for BRAID_TIMEOUT (2 s here), then the
  // buffers stay pinned.
  const int resumeAfterMs = GENERATE(300, -1);
  INFO("rank 1 resumed after " << resumeAfterMs << " ms (-1: not before rank 0 is done)");
  auto res = runComm(
      3,
      {{"BRAID_TRANSPORTS", "shm"},
       {"BRAID_TIMEOUT", resumeAfterMs < 0 ? "2" : "60"},
       {"BRAID_HEARTBEAT_MS", "200"},
       {"BRAID_ALGO", ""}},
      [&](braidComm_t comm, int rank, int) { return failWithPeerStopped(comm, rank, resumeAfterMs); }, 120);
  INFO(describe(res));
  CHECK((res[0].status == 0 && !res[0].timedOut));
  CHECK((res[1].status == 0 && !res[1].timedOut));
  CHECK(res[2].status == 128 + SIGKILL);
}

TEST_CASE("BRAID_SHM_DIRECT=0 on one rank turns calls in place off for all; tcp has none", "[mp][shm][direct]") {
  braidUniqueId uid;
  REQUIRE(braidGetUniqueId(&uid) == braidSuccess);
  auto res = forkRanks(3, kShm, [&](int rank, int size) {
    if (rank == 2) setenv("BRAID_SHM_DIRECT", "0", 1);
    braidComm_t comm = nullptr;
    CHECK_BRAID(rank, braidCommInitRank(&comm, size, uid, rank));
    if (!internalsOf(comm)->directPids.empty()) return fail(rank, "calls in place with the setting 0 on rank 2");
    const size_t count = 1 << 16;
    BraidMem mem(count * 4);
    if (allReduceChecked(comm, rank, size, mem.get(), mem.get(), count, braidFloat32, braidSum, true) != 0) return 1;
    if (directCalls(comm) != 0) return fail(rank, "a call ran in place");
    CHECK_BRAID(rank, braidCommDestroy(comm));
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
  auto tcp = runComm(2, {{"BRAID_TRANSPORTS", "tcp"}}, [&](braidComm_t comm, int rank, int) {
    return internalsOf(comm)->directPids.empty() ? 0 : fail(rank, "calls in place over tcp");
  });
  INFO(describe(tcp));
  REQUIRE(allOk(tcp));
}

TEST_CASE("direct calls among FIFO and mailbox calls in flight run in order and right", "[mp][shm][direct]") {
  const int n = GENERATE(2, 3);
  INFO("nranks " << n);
  auto res = runComm(n, kShm, [&](braidComm_t comm, int rank, int size) {
    const size_t big = 1 << 17;
    BraidMem d1(big * 4), d2(big * 4), mixed(big * 4);
    std::vector<int32_t> fifo(big), heap(big), small(8);
    for (int round = 0; round < 20; ++round) {
      auto fill = [&](int32_t* v, size_t count, int salt) {
        for (size_t i = 0; i < count; ++i) v[i] = (rank + 1) * (round + salt) + static_cast<int32_t>(i % 97);
      };
      int32_t* a = reinterpret_cast<int32_t*>(d1.get());
      int32_t* b = reinterpret_cast<int32_t*>(d2.get());
      // Rank 0's buffer is ordinary memory in odd rounds: that call falls back to its plan on all.
      int32_t* c = rank == 0 && round % 2 == 1 ? heap.data() : reinterpret_cast<int32_t*>(mixed.get());
      fill(a, big, 1);
      fill(fifo.data(), big, 2);
      fill(b, big, 3);
      fill(small.data(), small.size(), 4);
      fill(c, big, 5);
      braidRequest_t req[5];
      CHECK_BRAID(rank, braidIAllReduce(a, a, big, braidInt32, braidSum, comm, nullptr, &req[0]));
      CHECK_BRAID(rank, braidIAllReduce(fifo.data(), fifo.data(), big, braidInt32, braidSum, comm, nullptr, &req[1]));
      CHECK_BRAID(rank, braidIAllReduce(b, b, big, braidInt32, braidMax, comm, nullptr, &req[2]));
      CHECK_BRAID(rank, braidIAllReduce(small.data(), small.data(), small.size(), braidInt32, braidSum, comm, nullptr,
                                        &req[3]));
      CHECK_BRAID(rank, braidIAllReduce(c, c, big, braidInt32, braidSum, comm, nullptr, &req[4]));
      for (int k = 4; k >= 0; --k) CHECK_BRAID(rank, braidWait(req[k]));
      const int32_t tri = size * (size + 1) / 2;
      auto check = [&](const int32_t* v, size_t count, int salt, bool max, const char* what) {
        for (size_t i = 0; i < count; ++i) {
          const int32_t base = static_cast<int32_t>(i % 97);
          const int32_t want = max ? size * (round + salt) + base : tri * (round + salt) + size * base;
          if (v[i] != want) return fail(rank, "round %d %s [%zu] = %d, want %d", round, what, i, v[i], want);
        }
        return 0;
      };
      if (check(a, big, 1, false, "direct sum") != 0 || check(fifo.data(), big, 2, false, "fifo sum") != 0 ||
          check(b, big, 3, true, "direct max") != 0 || check(small.data(), small.size(), 4, false, "small") != 0 ||
          check(c, big, 5, false, "mixed") != 0)
        return 1;
    }
    // Two calls a round in place, and the mixed one in even rounds.
    return directCalls(comm) == 50 ? 0 : fail(rank, "%llu calls ran in place", (unsigned long long)directCalls(comm));
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
