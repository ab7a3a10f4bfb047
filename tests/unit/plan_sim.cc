#include "tests/unit/plan_sim.h"

#include "src/lower.h"

namespace braid::sim {

void lowerForced(Plan* plan) {
  LowerTarget t;
  t.force = true;
  t.peerCaps.assign(plan->nranks, TransportCaps{memTypeBit(MemType::kHost), true, false, false, 0});
  lowerPlan(t, plan);
}

Sim simulate(const CollArgs& proto, bool lowered) {
  Sim sim;
  const int n = proto.nranks;
  const uint64_t count = proto.count;
  const Coll coll = proto.coll;
  sim.n = n;
  // Each rank's contribution is a bit, and AllToAll and Scatter tag blocks above them (plan_sim.h).
  const bool tagged = coll == Coll::kAllToAll || coll == Coll::kScatter;
  if (n > kRankBits || (tagged && n > kMaxTagged)) {
    sim.error = "the simulator tracks at most " + std::to_string(tagged ? kMaxTagged : kRankBits) + " ranks here";
    return sim;
  }
  sim.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankState& s = sim.ranks[r];
    CollArgs a = proto;
    a.rank = r;
    buildPlan(a, &s.plan);
    if (lowered) lowerForced(&s.plan);
    uint64_t sendLen = count, recvLen = count;
    if (coll == Coll::kAllGather) recvLen = count * n;
    if (coll == Coll::kReduceScatter) sendLen = count * n;
    if (coll == Coll::kAllToAll) sendLen = recvLen = count * n;
    // Gather and Scatter: only the root's gathered side exists (the others' pointer may be NULL).
    if (coll == Coll::kGather) recvLen = r == proto.root ? count * n : 0;
    if (coll == Coll::kScatter) sendLen = r == proto.root ? count * n : 0;
    s.send.assign(sendLen, rankBit(r));
    if (coll == Coll::kScatter)  // block j is for rank j: tag it as AllToAll does
      for (uint64_t i = 0; i < sendLen; ++i) s.send[i] |= tag(static_cast<int>(i / count));
    if (coll == Coll::kAllToAll)
      for (int j = 0; j < n; ++j)
        for (uint64_t i = 0; i < count; ++i) s.send[j * count + i] = rankBit(r) | tag(j);
    s.recv.assign(coll == Coll::kBarrier ? 0 : recvLen, 0);
    s.scratch.assign(s.plan.scratchBytes, 0);
    const bool rootOnly = coll == Coll::kGather || coll == Coll::kScatter;  // in place on the root only
    if (proto.inPlace && rootOnly && r != proto.root) {
      // nothing aliases
    } else if (proto.inPlace && coll == Coll::kScatter) {
      s.recvAlias = r * count;  // recv = send + r*count
    } else if (proto.inPlace && coll == Coll::kGather) {
      for (uint64_t i = 0; i < s.send.size(); ++i) s.recv[r * count + i] = s.send[i];
      s.sendAlias = r * count;  // send = recv + r*count
    } else if (proto.inPlace && coll == Coll::kReduceScatter) {
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
