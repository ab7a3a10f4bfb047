// The plan simulator of the unit tests: every rank's plan of one call runs against the others with
// no network. It follows the transport contract (the k-th send on a link matches the k-th receive)
// under the strictest timing a transport may show: a send is posted when its dependencies are done
// and completes only when the receiver takes its bytes (rendezvous), and local steps run in plan
// order, as the executor runs them. So a plan that passes here cannot deadlock on a transport that
// buffers less. Races are reported:
//  - bytes landing (a receive completing, a local step writing) where a posted send of the same
//    rank still reads: a real transport may read the source at any time until the send completes;
//  - a local step touching bytes that a posted receive may still write.
//
// One engine, two kinds of data (the Values policy):
//  - Symbolic (Sim): each byte holds the set of ranks whose contributions it carries (a bit each),
//    so a contribution reduced twice or missing is seen exactly; for the collective algorithms.
//  - Numeric (NumSim): each 8-byte element holds a double, so weighted means (gossip's kScaleBy and
//    kAxpy) can be checked; for the mixing plans (tests/unit/test_graph.cc).
// Lowered plans (src/lower.h: kRecv into scratch plus kReduce) run on both.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"

namespace braid::sim {

// Bit i (i < kRankBits) = rank i's contribution. AllToAll and Scatter tag a block with its target
// rank t as bit kTagShift + t (tag(t)), below kScaled: those runs take at most kMaxTagged ranks.
// (With 32-bit cells, tags began at bit 16 and ran into kScaled and past the word from 15 ranks on.)
using Cell = uint64_t;
constexpr int kRankBits = 32;
constexpr int kTagShift = kRankBits;
constexpr Cell kScaled = Cell(1) << 63;     // set by a scale step (avg); never part of a tag
constexpr int kMaxTagged = 63 - kTagShift;  // tags stay below kScaled

inline Cell fullMask(int n) { return (Cell(1) << std::min(n, kRankBits)) - 1; }
inline Cell rankBit(int r) { return Cell(1) << r; }
inline Cell tag(int t) { return Cell(1) << (kTagShift + t); }

// Symbolic values: one Cell per byte. Each operation returns an error message, or null.
struct Symbolic {
  using Value = Cell;
  static constexpr uint64_t kUnit = 1;  // bytes per value
  static const char* reduce(Value* out, Value local, Value msg) {
    *out = local | msg;
    if ((local & msg) != 0) return "a contribution was reduced twice";
    if (((local | msg) & kScaled) != 0) return "a scaled value was reduced again";
    return nullptr;
  }
  static const char* scale(Value* v) {
    if ((*v & kScaled) != 0) return "a value was scaled twice";
    *v |= kScaled;
    return nullptr;
  }
  static const char* scaleBy(Value*, Value, double) { return "a weighted step in a symbolic plan"; }
  static const char* axpy(Value*, Value, double) { return "a weighted step in a symbolic plan"; }
};

// Numeric values: one double per 8 bytes; reductions are sums, as gossip averages them.
struct Numeric {
  using Value = double;
  static constexpr uint64_t kUnit = sizeof(double);
  static const char* reduce(Value* out, Value local, Value msg) {
    *out = local + msg;
    return nullptr;
  }
  static const char* scale(Value*) { return "a scale step in a numeric plan (it has no rank count)"; }
  static const char* scaleBy(Value* d, Value x, double w) {
    *d = w * x;
    return nullptr;
  }
  static const char* axpy(Value* d, Value x, double w) {
    *d += w * x;
    return nullptr;
  }
};

template <class Values>
struct Rank {
  using Value = typename Values::Value;
  Plan plan;
  std::vector<Value> send, recv, scratch;
  uint64_t sendAlias = UINT64_MAX;  // in-place: send buffer = recv + this offset (in values)
  uint64_t recvAlias = UINT64_MAX;  // in-place ReduceScatter: recv buffer = send + this offset
  std::vector<char> done, posted;
  size_t localNext = 0;
  std::map<int, size_t> sendNext, recvNext;    // per peer: next step to post
  std::map<int, size_t> sendMatch, recvMatch;  // per peer: next posted step to match
};

template <class Values>
class Simulator {
 public:
  using Value = typename Values::Value;
  using RankState = Rank<Values>;
  int n = 0;
  std::vector<RankState> ranks;
  std::string error;

  // Runs every plan to the end. False (with `error` set) on a size mismatch, a race, a deadlock,
  // out-of-range bytes or an unreceived message. Sizes each rank's step state and scratch first.
  bool run();

 private:
  struct Span {
    std::vector<Value>* vec = nullptr;
    uint64_t begin = 0, end = 0;  // in values
    bool overlaps(const Span& o) const { return vec != nullptr && vec == o.vec && begin < o.end && o.begin < end; }
  };
  // The values a step's `bytes` at `ref` cover; sets `error` when they lie outside the buffer.
  Span span(RankState& s, BufRef ref, uint64_t bytes);
  bool depsDone(const RankState& s, const Step& st) const {
    for (int d : st.deps)
      if (d >= 0 && !s.done[d]) return false;
    return true;
  }
  // Whether `sp` (of step `self` of rank r) meets the source of a posted, unfinished send
  // (vsSends) or the destination of a posted, unfinished receive (vsRecvs); sets `error` if so.
  // Receives land in link order, so a landing is checked against sends only.
  bool race(int r, int self, const Span& sp, bool vsSends, bool vsRecvs, const char* what);
  bool fail(const char* e) {
    if (e != nullptr && error.empty()) error = e;
    return e == nullptr;
  }
  bool postRank(int r);
  bool matchRank(int r);
  bool runLocals(int r);
};

using Sim = Simulator<Symbolic>;
using RankState = Sim::RankState;
using NumSim = Simulator<Numeric>;

// Builds every rank's plan for `proto` (its rank field is ignored), fills the buffers with each
// rank's contribution (in place: the input lives in the receive buffer) and returns the simulator,
// not yet run. lowered: every plan goes through the lowering pass with lowering forced (src/lower.h),
// as BRAID_FORCE_LOWERING=1 runs them.
Sim simulate(const CollArgs& proto, bool lowered = false);

// Shorthand for the common case.
Sim simulate(Coll coll, int n, uint64_t count, bool inPlace, bool avg, int root = 0, uint64_t chunk = 3,
             Algo algo = Algo::kRing, const int* hostOf = nullptr);

// Lowers `plan` as BRAID_FORCE_LOWERING=1 does on links that could reduce on receive.
void lowerForced(Plan* plan);

// ---- implementation ----------------------------------------------------------------------------

template <class V>
typename Simulator<V>::Span Simulator<V>::span(RankState& s, BufRef ref, uint64_t bytes) {
  if (bytes == 0) return Span{};  // zero-byte steps (barrier, joins) touch nothing
  std::vector<Value>* v = nullptr;
  uint64_t alias = 0;
  switch (ref.buf) {
    case Buf::kSend:
      v = s.sendAlias != UINT64_MAX ? &s.recv : &s.send;
      alias = s.sendAlias != UINT64_MAX ? s.sendAlias : 0;
      break;
    case Buf::kRecv:
      v = s.recvAlias != UINT64_MAX ? &s.send : &s.recv;
      alias = s.recvAlias != UINT64_MAX ? s.recvAlias : 0;
      break;
    case Buf::kScratch:
      v = &s.scratch;
      break;
    case Buf::kAbsolute:
      break;
  }
  if (v == nullptr || ref.offset % V::kUnit != 0 || bytes % V::kUnit != 0 ||
      alias + (ref.offset + bytes) / V::kUnit > v->size()) {
    fail("step touches bytes out of its buffer");
    return Span{};
  }
  return Span{v, alias + ref.offset / V::kUnit, alias + (ref.offset + bytes) / V::kUnit};
}

template <class V>
bool Simulator<V>::race(int r, int self, const Span& sp, bool vsSends, bool vsRecvs, const char* what) {
  RankState& s = ranks[r];
  if (sp.vec == nullptr) return false;
  for (size_t i = 0; i < s.plan.steps.size(); ++i) {
    if (!s.posted[i] || s.done[i] || static_cast<int>(i) == self) continue;
    const Step& o = s.plan.steps[i];
    const bool oWrites = o.kind == StepKind::kRecv || o.kind == StepKind::kRecvReduce;
    if (oWrites ? !vsRecvs : !(o.kind == StepKind::kSend && vsSends)) continue;
    if (!sp.overlaps(span(s, oWrites ? o.dst : o.src, o.bytes))) continue;
    error = "rank " + std::to_string(r) + ": step " + std::to_string(self) + " " + what + " bytes that posted step " +
            std::to_string(i) + (oWrites ? " may still write" : " still sends") + "\n" + s.plan.describe();
    return true;
  }
  return false;
}

// Posts what each queue head allows. A posted receive reserves its destination.
template <class V>
bool Simulator<V>::postRank(int r) {
  RankState& s = ranks[r];
  bool any = false;
  for (const auto& q : s.plan.peers) {
    for (auto [list, next] : {std::pair{&q.sends, &s.sendNext[q.peer]}, std::pair{&q.recvs, &s.recvNext[q.peer]}}) {
      while (*next < list->size() && depsDone(s, s.plan.steps[(*list)[*next]])) {
        const Step& st = s.plan.steps[(*list)[*next]];
        span(s, st.kind == StepKind::kSend ? st.src : st.dst, st.bytes);
        if (st.kind == StepKind::kRecvReduce) span(s, st.src, st.bytes);
        if (!error.empty()) return false;
        s.posted[(*list)[(*next)++]] = 1;
        any = true;
      }
    }
  }
  return any;
}

// Completes every receive of rank r whose matching send is posted, in link order.
template <class V>
bool Simulator<V>::matchRank(int r) {
  RankState& s = ranks[r];
  bool any = false;
  for (const auto& q : s.plan.peers) {
    RankState& p = ranks[q.peer];
    const Plan::PeerQueue* back = nullptr;
    for (const auto& pq : p.plan.peers)
      if (pq.peer == r) back = &pq;
    size_t& ri = s.recvMatch[q.peer];
    size_t& si = p.sendMatch[r];
    while (ri < q.recvs.size() && s.posted[q.recvs[ri]]) {
      if (back == nullptr || si >= back->sends.size()) {
        error =
            "rank " + std::to_string(r) + " receives from " + std::to_string(q.peer) + " more messages than it sends";
        return false;
      }
      if (!p.posted[back->sends[si]]) break;
      const Step& rs = s.plan.steps[q.recvs[ri]];
      const Step& ss = p.plan.steps[back->sends[si]];
      if (rs.bytes != ss.bytes) {
        error = "rank " + std::to_string(r) + " expected " + std::to_string(rs.bytes) + " bytes from " +
                std::to_string(q.peer) + ", got " + std::to_string(ss.bytes);
        return false;
      }
      const Span from = span(p, ss.src, ss.bytes), to = span(s, rs.dst, rs.bytes);
      // The bytes land now: no send of this rank may still be reading them.
      if (!error.empty() || race(r, q.recvs[ri], to, true, false, "receives into")) return false;
      if (to.vec != nullptr) {
        std::vector<Value> msg(from.vec->begin() + from.begin, from.vec->begin() + from.end);
        if (rs.kind == StepKind::kRecvReduce) {
          const Span local = span(s, rs.src, rs.bytes);
          if (!error.empty()) return false;
          std::vector<Value> mine(local.vec->begin() + local.begin, local.vec->begin() + local.end);
          for (size_t i = 0; i < msg.size(); ++i) fail(V::reduce(&(*to.vec)[to.begin + i], mine[i], msg[i]));
        } else {
          std::copy(msg.begin(), msg.end(), to.vec->begin() + to.begin);
        }
      }
      s.done[q.recvs[ri++]] = 1;
      p.done[back->sends[si++]] = 1;
      any = true;
    }
  }
  return any;
}

template <class V>
bool Simulator<V>::runLocals(int r) {
  RankState& s = ranks[r];
  bool any = false;
  while (s.localNext < s.plan.locals.size() && depsDone(s, s.plan.steps[s.plan.locals[s.localNext]])) {
    const int idx = s.plan.locals[s.localNext++];
    const Step& st = s.plan.steps[idx];
    const bool reads = st.kind != StepKind::kScale && st.kind != StepKind::kJoin;
    const Span dst = span(s, st.dst, st.bytes);
    const Span src = reads ? span(s, st.src, st.bytes) : Span{};
    const Span in = st.kind == StepKind::kReduce ? span(s, BufRef{Buf::kScratch, st.incoming}, st.bytes) : Span{};
    if (!error.empty() || race(r, idx, dst, true, true, "writes") || race(r, idx, src, false, true, "reads") ||
        race(r, idx, in, false, true, "reads"))
      return false;
    const size_t len = dst.end - dst.begin;
    // Operands are read before anything is written: src and dst may alias exactly.
    std::vector<Value> x = src.vec != nullptr
                               ? std::vector<Value>(src.vec->begin() + src.begin, src.vec->begin() + src.end)
                               : std::vector<Value>();
    for (size_t i = 0; i < len && error.empty(); ++i) {
      Value& d = (*dst.vec)[dst.begin + i];
      switch (st.kind) {
        case StepKind::kCopy:
          d = x[i];
          break;
        case StepKind::kScale:
          fail(V::scale(&d));
          break;
        case StepKind::kScaleBy:
          fail(V::scaleBy(&d, x[i], st.weight));
          break;
        case StepKind::kAxpy:
          fail(V::axpy(&d, x[i], st.weight));
          break;
        case StepKind::kReduce:
          fail(V::reduce(&d, x[i], (*in.vec)[in.begin + i]));
          break;
        case StepKind::kJoin:
          break;
        case StepKind::kSend:
        case StepKind::kRecv:
        case StepKind::kRecvReduce:
        case StepKind::kCheck:
          fail("unexpected local step");
          break;
      }
    }
    if (!error.empty()) return false;
    s.posted[idx] = 1;
    s.done[idx] = 1;
    any = true;
  }
  return any;
}

template <class V>
bool Simulator<V>::run() {
  for (RankState& s : ranks) {
    s.posted.assign(s.plan.steps.size(), 0);
    s.done.assign(s.plan.steps.size(), 0);
    const size_t scratch = (s.plan.scratchBytes + V::kUnit - 1) / V::kUnit;
    if (s.scratch.size() < scratch) s.scratch.resize(scratch, Value{});
  }
  if (n == 0) n = static_cast<int>(ranks.size());
  for (;;) {
    bool any = false;
    for (int r = 0; r < n && error.empty(); ++r) any |= postRank(r);
    for (int r = 0; r < n && error.empty(); ++r) any |= matchRank(r);
    for (int r = 0; r < n && error.empty(); ++r) any |= runLocals(r);
    if (!error.empty()) return false;
    if (!any) break;
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < ranks[r].done.size(); ++i)
      if (!ranks[r].done[i]) {
        error = "deadlock: rank " + std::to_string(r) + " step " + std::to_string(i) + " never completed\n" +
                ranks[r].plan.describe();
        return false;
      }
  return true;
}

}  // namespace braid::sim
