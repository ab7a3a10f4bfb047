// Random streams of collectives with several in flight at once, across every path a transport has:
// over shm (2, 3 and 4 ranks) the mailboxes (up to BRAID_SHM_SMALL_BYTES a peer), the FIFOs,
// single copy where it is fast enough, and calls in place on braidMemAlloc memory, on every rank or
// on some only; tcp and ucx with 3 ranks. Every rank draws the same calls from one seed (the call,
// type, op, count, placement, root and how many go in flight together) and, alone, where its
// buffers lie, at what offset, and in which order it waits for them; every element of every output
// is checked (tests/mp/collective_case.h). BRAIDTEST_STRESS_SEED picks the seed (else a fixed one)
// and BRAIDTEST_STRESS_CALLS how many calls each run makes: a failure prints both, so it can be
// replayed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/mp/collective_case.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

constexpr size_t kMaxBytes = size_t{6} << 20;  // the largest allocation of one call, per buffer

uint64_t envNumber(const char* name, uint64_t dflt) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtoull(v, nullptr, 0) : dflt;
}

// One call in flight: its shape and buffers (allocation base, and the offset the call uses).
struct InFlight {
  Case k{};
  bool memAlloc = false;
  char* sendBase = nullptr;
  char* recvBase = nullptr;
  size_t offset = 0;  // bytes, into both allocations
  size_t recvAlloc = 0;
  braidRequest_t req = nullptr;
};

char* allocate(bool memAlloc, size_t bytes) {
  void* p = nullptr;
  if (memAlloc) return braidMemAlloc(&p, bytes) == braidSuccess ? static_cast<char*>(p) : nullptr;
  return static_cast<char*>(malloc(bytes));
}

void release(const InFlight& f) {
  for (char* p : {f.sendBase, f.recvBase}) {
    if (p == nullptr) continue;
    if (f.memAlloc)
      (void)braidMemFree(p);
    else
      free(p);
  }
}

// The count of a call: mostly small (the mailboxes), some up to 64 KiB a peer, a few large.
size_t drawCount(std::mt19937_64& rng, C c, int n, size_t es) {
  const unsigned kind = rng() % 100;
  size_t count = kind < 15   ? rng() % 9
                 : kind < 55 ? 9 + rng() % 1000
                 : kind < 85 ? 1000 + rng() % 16000
                             : rng() % 400000;
  const size_t blocks = c == C::kReduceScatter || c == C::kAllGather || c == C::kAllToAll ? n : 1;
  const size_t most = kMaxBytes / es / blocks;
  return count < most ? count : most;
}

int stress(braidComm_t comm, int rank, int n, uint64_t seed, uint64_t calls) {
  std::mt19937_64 shared(seed);                              // every rank draws the same from this
  std::mt19937_64 own(seed * 0x9E3779B97F4A7C15ull + rank);  // and this rank's own choices from this
  const C colls[] = {C::kAllReduce, C::kReduce, C::kReduceScatter, C::kAllGather, C::kBroadcast, C::kAllToAll};
  uint64_t made = 0;
  while (made < calls) {
    const size_t batch = 1 + shared() % 6;
    std::vector<InFlight> flight;
    for (size_t b = 0; b < batch && made < calls; ++b, ++made) {
      InFlight f;
      const C c = colls[shared() % 6];
      const braidDataType_t dt = kTypes[shared() % (sizeof(kTypes) / sizeof(kTypes[0]))];
      const bool reducing = c == C::kAllReduce || c == C::kReduce || c == C::kReduceScatter;
      const braidRedOp_t op = reducing ? kOps[shared() % (sizeof(kOps) / sizeof(kOps[0]))] : braidSum;
      const size_t es = elemSize(dt);
      const size_t count = drawCount(shared, c, n, es);
      const bool inPlace = shared() % 2 == 0;
      const int root = static_cast<int>(shared() % n);
      f.k = Case{c, dt, op, count, inPlace, root};
      // This rank's own: braidMemAlloc memory (in place it runs without the FIFOs where every rank
      // has it), and an offset of a few elements into the allocations.
      f.memAlloc = own() % 3 == 0;
      f.offset = (own() % 4) * es;
      size_t sendElems = 0, recvElems = 0;
      caseSizes(f.k, n, &sendElems, &recvElems);
      f.recvAlloc = std::max(sendElems, recvElems);
      const size_t bytes = f.offset + std::max<size_t>(f.recvAlloc, 1) * es;
      f.sendBase = allocate(f.memAlloc, bytes);
      f.recvBase = allocate(f.memAlloc, bytes);
      if (f.sendBase == nullptr || f.recvBase == nullptr) {
        release(f);
        return fail(rank, "could not allocate %zu bytes (%s)", bytes, f.memAlloc ? "braidMemAlloc" : "malloc");
      }
      char* send = f.sendBase + f.offset;
      char* recv = f.recvBase + f.offset;
      fillCase(f.k, rank, n, send, recv, f.recvAlloc);
      // A batch of one is sometimes a blocking call.
      const bool blocking = batch == 1 && shared() % 2 == 0;
      const braidResult_t r = postCase(f.k, rank, comm, send, recv, nullptr, blocking ? nullptr : &f.req);
      flight.push_back(f);
      if (r != braidSuccess) {
        for (InFlight& g : flight) {
          if (g.req != nullptr) (void)braidWait(g.req);
          release(g);
        }
        return fail(rank, "call %llu (%s): %s: %s", static_cast<unsigned long long>(made), describeCase(f.k).c_str(),
                    braidGetErrorString(r), braidGetLastError());
      }
    }
    // Wait in an order of this rank's own, then check every output.
    std::vector<size_t> order(flight.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), own);
    int bad = 0;
    for (size_t i : order) {
      InFlight& f = flight[i];
      if (f.req == nullptr) continue;
      const braidResult_t r = braidWait(f.req);
      if (r != braidSuccess && bad == 0)
        bad = fail(rank, "waiting for %s: %s: %s", describeCase(f.k).c_str(), braidGetErrorString(r),
                   braidGetLastError());
    }
    for (InFlight& f : flight) {
      if (bad == 0) bad = checkCase(f.k, rank, n, f.recvBase + f.offset, f.recvAlloc);
      release(f);
    }
    if (bad != 0) return fail(rank, "in the batch ending at call %llu", static_cast<unsigned long long>(made));
  }
  return 0;
}

}  // namespace

TEST_CASE("random streams of collectives, several in flight, on every path: every output exact", "[mp][stress]") {
  const uint64_t seed = envNumber("BRAIDTEST_STRESS_SEED", 20261205);
  const uint64_t calls = envNumber("BRAIDTEST_STRESS_CALLS", 300);
  const auto run = GENERATE(std::make_pair("shm", 3), std::make_pair("shm", 4), std::make_pair("tcp", 3),
                            std::make_pair("shm", 2), std::make_pair("ucx", 3));
  if (!underTest(run.first)) return;
  INFO("BRAID_TRANSPORTS=" << run.first << ", " << run.second << " ranks, BRAIDTEST_STRESS_SEED=" << seed
                           << " BRAIDTEST_STRESS_CALLS=" << calls);
  const Env env = {{"BRAID_TRANSPORTS", run.first}, {"BRAID_TIMEOUT", "120"}};
  auto res = runComm(
      run.second, env, [&](braidComm_t comm, int rank, int n) { return stress(comm, rank, n, seed, calls); }, 600);
  INFO(describe(res));
  REQUIRE(allOk(res));
}
