#include "tests/unit/plan_sim.h"

#include <algorithm>

namespace braid::sim {

Sim::Span Sim::span(RankState& s, BufRef ref, uint64_t bytes) {
  const std::vector<Cell>* v = nullptr;
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
  return Span{v, off, off + bytes};
}

Cell* Sim::at(RankState& s, BufRef ref, uint64_t bytes) {
  static Cell empty;
  if (bytes == 0) return &empty;  // zero-byte steps (barrier) touch nothing
  Span sp = span(s, ref, bytes);
  if (sp.vec == nullptr || sp.end > sp.vec->size()) {
    error = "step touches bytes out of its buffer";
    return nullptr;
  }
  return const_cast<Cell*>(sp.vec->data()) + sp.begin;
}

bool Sim::depsDone(const RankState& s, const Step& st) const {
  for (int d : st.deps)
    if (d >= 0 && !s.done[d]) return false;
  return true;
}

bool Sim::checkRace(int r, int self, Span sp, bool againstRecvs, const char* what) {
  RankState& s = ranks[r];
  if (sp.vec == nullptr || sp.begin == sp.end) return true;
  for (size_t i = 0; i < s.plan.steps.size(); ++i) {
    if (!s.posted[i] || s.done[i] || static_cast<int>(i) == self) continue;
    const Step& o = s.plan.steps[i];
    if (o.bytes == 0) continue;
    bool oWrites = o.kind == StepKind::kRecv || o.kind == StepKind::kRecvReduce;
    if (oWrites && !againstRecvs) continue;
    if (!oWrites && o.kind != StepKind::kSend) continue;
    Span os = oWrites ? span(s, o.dst, o.bytes) : span(s, o.src, o.bytes);
    if (os.vec == sp.vec && os.begin < sp.end && sp.begin < os.end) {
      error = "rank " + std::to_string(r) + ": step " + std::to_string(self) + " " + what + " bytes that posted step " +
              std::to_string(i) + (oWrites ? " may still write" : " still sends") + "\n" + s.plan.describe();
      return false;
    }
  }
  return true;
}

// Posts what each queue head allows. A posted receive reserves its destination.
bool Sim::postRank(int r) {
  RankState& s = ranks[r];
  bool any = false;
  for (const auto& q : s.plan.peers) {
    size_t& si = s.sendNext[q.peer];
    while (si < q.sends.size() && depsDone(s, s.plan.steps[q.sends[si]])) {
      int idx = q.sends[si];
      const Step& st = s.plan.steps[idx];
      if (at(s, st.src, st.bytes) == nullptr) return false;
      s.posted[idx] = 1;
      ++si;
      any = true;
    }
    size_t& ri = s.recvNext[q.peer];
    while (ri < q.recvs.size() && depsDone(s, s.plan.steps[q.recvs[ri]])) {
      int idx = q.recvs[ri];
      const Step& st = s.plan.steps[idx];
      if (at(s, st.dst, st.bytes) == nullptr) return false;
      if (st.kind == StepKind::kRecvReduce && at(s, st.src, st.bytes) == nullptr) return false;
      s.posted[idx] = 1;
      ++ri;
      any = true;
    }
  }
  return any || !error.empty();
}

// Completes every receive of rank r whose matching send is posted, in link order.
bool Sim::matchRank(int r) {
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
      const Cell* src = at(p, ss.src, ss.bytes);
      Cell* dst = at(s, rs.dst, rs.bytes);
      if (src == nullptr || dst == nullptr) return false;
      // The bytes land now: no send of this rank may still be reading them.
      if (!checkRace(r, q.recvs[ri], span(s, rs.dst, rs.bytes), false, "receives into")) return false;
      std::vector<Cell> msg(src, src + ss.bytes);
      if (rs.kind == StepKind::kRecvReduce) {
        const Cell* local = at(s, rs.src, rs.bytes);
        if (local == nullptr) return false;
        for (uint64_t i = 0; i < rs.bytes; ++i) {
          if ((local[i] & msg[i]) != 0) error = "a contribution was reduced twice";
          if (((local[i] | msg[i]) & kScaled) != 0) error = "a scaled value was reduced again";
          dst[i] = local[i] | msg[i];
        }
      } else {
        std::copy(msg.begin(), msg.end(), dst);
      }
      s.done[q.recvs[ri++]] = 1;
      p.done[back->sends[si++]] = 1;
      any = true;
    }
  }
  return any;
}

bool Sim::runLocals(int r) {
  RankState& s = ranks[r];
  bool any = false;
  while (s.localNext < s.plan.locals.size() && depsDone(s, s.plan.steps[s.plan.locals[s.localNext]])) {
    int idx = s.plan.locals[s.localNext++];
    const Step& st = s.plan.steps[idx];
    Cell* dst = at(s, st.dst, st.bytes);
    if (dst == nullptr) return false;
    if (!checkRace(r, idx, span(s, st.dst, st.bytes), true, "writes")) return false;
    if (st.kind == StepKind::kCopy) {
      Cell* src = at(s, st.src, st.bytes);
      if (src == nullptr) return false;
      if (!checkRace(r, idx, span(s, st.src, st.bytes), true, "copies from")) return false;
      std::vector<Cell> tmp(src, src + st.bytes);
      std::copy(tmp.begin(), tmp.end(), dst);
    } else {
      for (uint64_t i = 0; i < st.bytes; ++i) {
        if ((dst[i] & kScaled) != 0) error = "a value was scaled twice";
        dst[i] |= kScaled;
      }
    }
    s.posted[idx] = 1;
    s.done[idx] = 1;
    any = true;
  }
  return any;
}

bool Sim::run() {
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

Sim simulate(const CollArgs& proto) {
  Sim sim;
  const int n = proto.nranks;
  const uint64_t count = proto.count;
  const Coll coll = proto.coll;
  sim.n = n;
  sim.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankState& s = sim.ranks[r];
    CollArgs a = proto;
    a.rank = r;
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
    if (proto.inPlace && coll == Coll::kReduceScatter) {
      s.recvAlias = r * count;  // recv = send + r*count
    } else if (proto.inPlace) {
      uint64_t alias = coll == Coll::kAllGather ? r * count : 0;
      for (uint64_t i = 0; i < s.send.size(); ++i) s.recv[alias + i] = s.send[i];  // the input lives in recv
      s.sendAlias = alias;
    }
    s.done.assign(s.plan.steps.size(), 0);
    s.posted.assign(s.plan.steps.size(), 0);
  }
  return sim;
}

Sim simulate(Coll coll, int n, uint64_t count, bool inPlace, bool avg, int root, uint64_t chunk, Algo algo,
             const int* hostOf) {
  CollArgs a;
  a.coll = coll;
  a.algo = algo;
  a.nranks = n;
  a.count = count;
  a.elemSize = 1;
  a.root = root;
  a.inPlace = inPlace;
  a.avg = avg;
  a.chunkBytes = chunk;
  a.hostOf = hostOf;
  return simulate(a);
}

}  // namespace braid::sim
