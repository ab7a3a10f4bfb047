// Plans checked without a network: every rank's plan of an algorithm is run by a small simulator
// that matches the k-th send on each link with the k-th receive (the transport contract), honours
// dependencies and queue order, and tracks which ranks' contributions reached each byte. A byte
// reduced twice, a message whose size differs from its receive, a deadlock or a wrong final buffer
// fails the test.
#include <catch2/catch.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"

using namespace braid;

namespace {

using Cell = uint32_t;                   // bit i = rank i's contribution (low 16 bits); AllToAll tags the target above
constexpr Cell kScaled = Cell(1) << 31;  // set by a scale step (avg); never part of an AllToAll tag

struct RankState {
  Plan plan;
  std::vector<Cell> send, recv, scratch;
  uint64_t sendAlias = UINT64_MAX;  // in-place: send buffer = recv + this offset
  uint64_t recvAlias = UINT64_MAX;  // in-place ReduceScatter: recv buffer = send + this offset
  std::vector<char> done;
  size_t localNext = 0;
  std::map<int, size_t> sendNext, recvNext;  // per peer queue cursors
};

struct Sim {
  int n;
  std::vector<RankState> ranks;
  std::map<std::pair<int, int>, std::deque<std::vector<Cell>>> wire;  // (from, to) -> messages
  std::string error;

  Cell* at(RankState& s, BufRef ref, uint64_t bytes) {
    static Cell empty;
    if (bytes == 0) return &empty;  // zero-byte steps (barrier) touch nothing
    std::vector<Cell>* v = nullptr;
    uint64_t off = ref.offset;
    switch (ref.buf) {
      case Buf::kSend:
        if (s.sendAlias != UINT64_MAX) {
          v = &s.recv;
          off += s.sendAlias;
        } else {
          v = &s.send;
        }
        break;
      case Buf::kRecv:
        if (s.recvAlias != UINT64_MAX) {
          v = &s.send;
          off += s.recvAlias;
        } else {
          v = &s.recv;
        }
        break;
      case Buf::kScratch:
        v = &s.scratch;
        break;
      default:
        break;
    }
    if (v == nullptr || off + bytes > v->size()) {
      error = "step touches bytes out of its buffer";
      return nullptr;
    }
    return v->data() + off;
  }

  bool depsDone(const RankState& s, const Step& st) {
    for (int d : st.deps)
      if (d >= 0 && !s.done[d]) return false;
    return true;
  }

  // Tries the head of each queue of rank r once; returns whether anything ran.
  bool stepRank(int r) {
    RankState& s = ranks[r];
    bool any = false;
    for (const auto& q : s.plan.peers) {
      size_t& si = s.sendNext[q.peer];
      while (si < q.sends.size() && depsDone(s, s.plan.steps[q.sends[si]])) {
        const Step& st = s.plan.steps[q.sends[si]];
        Cell* src = at(s, st.src, st.bytes);
        if (src == nullptr) return false;
        wire[{r, q.peer}].emplace_back(src, src + st.bytes);
        s.done[q.sends[si++]] = 1;
        any = true;
      }
      size_t& ri = s.recvNext[q.peer];
      auto& chan = wire[{q.peer, r}];
      while (ri < q.recvs.size() && !chan.empty() && depsDone(s, s.plan.steps[q.recvs[ri]])) {
        const Step& st = s.plan.steps[q.recvs[ri]];
        std::vector<Cell> msg = std::move(chan.front());
        chan.pop_front();
        if (msg.size() != st.bytes) {
          error = "rank " + std::to_string(r) + " expected " + std::to_string(st.bytes) + " bytes from " +
                  std::to_string(q.peer) + ", got " + std::to_string(msg.size());
          return false;
        }
        Cell* dst = at(s, st.dst, st.bytes);
        if (dst == nullptr) return false;
        if (st.kind == StepKind::kRecvReduce) {
          Cell* local = at(s, st.src, st.bytes);
          if (local == nullptr) return false;
          for (uint64_t i = 0; i < st.bytes; ++i) {
            if ((local[i] & msg[i]) != 0) error = "a contribution was reduced twice";
            if (((local[i] | msg[i]) & kScaled) != 0) error = "a scaled value was reduced again";
            dst[i] = local[i] | msg[i];
          }
        } else {
          for (uint64_t i = 0; i < st.bytes; ++i) dst[i] = msg[i];
        }
        s.done[q.recvs[ri++]] = 1;
        any = true;
      }
    }
    while (s.localNext < s.plan.locals.size() && depsDone(s, s.plan.steps[s.plan.locals[s.localNext]])) {
      int idx = s.plan.locals[s.localNext++];
      const Step& st = s.plan.steps[idx];
      Cell* dst = at(s, st.dst, st.bytes);
      if (dst == nullptr) return false;
      if (st.kind == StepKind::kCopy) {
        Cell* src = at(s, st.src, st.bytes);
        if (src == nullptr) return false;
        std::vector<Cell> tmp(src, src + st.bytes);
        std::copy(tmp.begin(), tmp.end(), dst);
      } else {
        for (uint64_t i = 0; i < st.bytes; ++i) {
          if ((dst[i] & kScaled) != 0) error = "a value was scaled twice";
          dst[i] |= kScaled;
        }
      }
      s.done[idx] = 1;
      any = true;
    }
    return any;
  }

  bool run() {
    for (;;) {
      bool any = false;
      for (int r = 0; r < n; ++r) any |= stepRank(r);
      if (!error.empty()) return false;
      if (!any) break;
    }
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < ranks[r].done.size(); ++i)
        if (!ranks[r].done[i]) {
          error = "deadlock: rank " + std::to_string(r) + " step " + std::to_string(i) + " never ran\n" +
                  ranks[r].plan.describe();
          return false;
        }
    for (auto& [k, q] : wire)
      if (!q.empty()) {
        error = "unreceived message " + std::to_string(k.first) + " -> " + std::to_string(k.second);
        return false;
      }
    return true;
  }
};

// Builds and simulates one collective; returns the sim for checking.
Sim simulate(Coll coll, int n, uint64_t count, bool inPlace, bool avg, int root = 0, uint64_t chunk = 3) {
  Sim sim;
  sim.n = n;
  sim.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankState& s = sim.ranks[r];
    CollArgs a;
    a.coll = coll;
    a.rank = r;
    a.nranks = n;
    a.count = count;
    a.elemSize = 1;
    a.root = root;
    a.inPlace = inPlace;
    a.avg = avg;
    a.chunkBytes = chunk;
    buildPlan(a, &s.plan);
    uint64_t sendLen = count, recvLen = count;
    if (coll == Coll::kAllGather) recvLen = count * n;
    if (coll == Coll::kReduceScatter) sendLen = count * n;
    if (coll == Coll::kAllToAll) sendLen = recvLen = count * n;
    s.send.assign(sendLen, Cell(1) << r);
    if (coll == Coll::kAllToAll)
      for (int j = 0; j < n; ++j)
        for (uint64_t i = 0; i < count; ++i) s.send[j * count + i] = (Cell(1) << r) | (Cell(1) << (16 + j));
    s.recv.assign(coll == Coll::kBarrier ? 0 : recvLen, 0);
    s.scratch.assign(s.plan.scratchBytes, 0);
    if (inPlace && coll == Coll::kReduceScatter) {
      s.recvAlias = r * count;  // recv = send + r*count
    } else if (inPlace) {
      uint64_t alias = coll == Coll::kAllGather ? r * count : 0;
      for (uint64_t i = 0; i < s.send.size(); ++i) s.recv[alias + i] = s.send[i];  // the input lives in recv
      s.sendAlias = alias;
    }
    s.done.assign(s.plan.steps.size(), 0);
  }
  return sim;
}

Cell fullMask(int n) { return n >= 32 ? ~Cell(0) : (Cell(1) << n) - 1; }

}  // namespace

TEST_CASE("ring allreduce plans reduce every byte exactly once and deliver it everywhere", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 2, 7, 16, 33, 100}) {
      for (bool inPlace : {false, true}) {
        for (bool avg : {false, true}) {
          Sim sim = simulate(Coll::kAllReduce, n, count, inPlace, avg);
          INFO("n=" << n << " count=" << count << " inPlace=" << inPlace << " avg=" << avg);
          bool ok = sim.run();
          INFO(sim.error);
          REQUIRE(ok);
          for (int r = 0; r < n; ++r) {
            for (uint64_t i = 0; i < count; ++i)
              REQUIRE(sim.ranks[r].recv[i] == (fullMask(n) | (avg && n > 1 ? kScaled : 0)));
          }
        }
      }
    }
  }
}

TEST_CASE("ring reduce-scatter plans give rank r the full reduction of block r", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 5, 17}) {
      for (bool inPlace : {false, true}) {
        Sim sim = simulate(Coll::kReduceScatter, n, count, inPlace, true);
        INFO("n=" << n << " count=" << count << " inPlace=" << inPlace);
        REQUIRE(sim.run());
        for (int r = 0; r < n; ++r) {
          const std::vector<Cell>& out = inPlace ? sim.ranks[r].send : sim.ranks[r].recv;
          uint64_t base = inPlace ? r * count : 0;
          for (uint64_t i = 0; i < count; ++i) REQUIRE(out[base + i] == (fullMask(n) | (n > 1 ? kScaled : 0)));
        }
      }
    }
  }
}

TEST_CASE("ring allgather, chain broadcast and reduce, pairwise alltoall, barrier plans", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : {0, 1, 6, 13}) {
      for (bool inPlace : {false, true}) {
        INFO("n=" << n << " count=" << count << " inPlace=" << inPlace);
        Sim ag = simulate(Coll::kAllGather, n, count, inPlace, false);
        REQUIRE(ag.run());
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < n; ++j)
            for (uint64_t i = 0; i < count; ++i) REQUIRE(ag.ranks[r].recv[j * count + i] == (Cell(1) << j));
        for (int root : {0, n - 1, n / 2}) {
          Sim bc = simulate(Coll::kBroadcast, n, count, inPlace, false, root);
          REQUIRE(bc.run());
          for (int r = 0; r < n; ++r)
            for (uint64_t i = 0; i < count; ++i) REQUIRE(bc.ranks[r].recv[i] == (Cell(1) << root));
          Sim rd = simulate(Coll::kReduce, n, count, inPlace, true, root);
          REQUIRE(rd.run());
          for (uint64_t i = 0; i < count; ++i) REQUIRE(rd.ranks[root].recv[i] == (fullMask(n) | (n > 1 ? kScaled : 0)));
        }
        Sim a2a = simulate(Coll::kAllToAll, n, count, inPlace, false);
        REQUIRE(a2a.run());
        for (int r = 0; r < n; ++r)
          for (int j = 0; j < n; ++j)
            for (uint64_t i = 0; i < count; ++i)
              REQUIRE(a2a.ranks[r].recv[j * count + i] == ((Cell(1) << j) | (Cell(1) << (16 + r))));
      }
    }
    Sim b = simulate(Coll::kBarrier, n, 0, false, false);
    INFO(b.error);
    REQUIRE(b.run());
  }
}

TEST_CASE("chunking follows the chunk size and plans name their algorithm", "[unit][plan]") {
  CollArgs a;
  a.coll = Coll::kAllReduce;
  a.nranks = 4;
  a.rank = 1;
  a.count = 1 << 20;
  a.elemSize = 4;
  a.chunkBytes = 1 << 18;
  Plan p;
  buildPlan(a, &p);
  CHECK(std::string(p.algorithm) == "ring");
  for (const Step& s : p.steps) CHECK(s.bytes <= a.chunkBytes);
  // 4 segments of 1 MiB, 4 chunks each, 2*(n-1) phases of a send and a receive.
  CHECK(p.steps.size() == 4u * 2 * 3 * 2);
}
