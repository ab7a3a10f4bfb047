#include "src/plan.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>

namespace braid {

void Plan::depsInto(Deps deps, int32_t out[2]) {
  if (deps.size() <= 2) {  // as given, "none" (-1) included: the common case, and describe() shows it
    out[0] = deps.size() > 0 ? deps.begin()[0] : -1;
    out[1] = deps.size() > 1 ? deps.begin()[1] : -1;
    return;
  }
  int32_t held[2] = {-1, -1};
  int n = 0;
  for (int32_t d : deps) {
    if (d < 0) continue;
    if (n == 2) {
      // A third: the two held so far become one join (chained left to right, so a list of k
      // dependencies costs k-2 joins).
      Step j;
      j.kind = StepKind::kJoin;
      j.deps[0] = held[0];
      j.deps[1] = held[1];
      held[0] = add(j);
      n = 1;
    }
    held[n++] = d;
  }
  out[0] = held[0];
  out[1] = held[1];
}

int32_t Plan::add(StepKind kind, int peer, BufRef dst, BufRef src, uint64_t bytes, Deps deps) {
  Step s;
  s.kind = kind;
  s.peer = peer;
  s.dst = dst;
  s.src = src;
  s.bytes = bytes;
  depsInto(deps, s.deps);  // before the push: the joins come first
  return add(s);
}

int32_t Plan::scaleBy(BufRef dst, BufRef src, uint64_t bytes, double weight, Deps deps) {
  const int32_t i = add(StepKind::kScaleBy, -1, dst, src, bytes, deps);
  steps[i].weight = weight;
  return i;
}

int32_t Plan::axpy(BufRef dst, BufRef src, uint64_t bytes, double weight, Deps deps) {
  const int32_t i = add(StepKind::kAxpy, -1, dst, src, bytes, deps);
  steps[i].weight = weight;
  return i;
}

int32_t Plan::reduce(BufRef dst, BufRef src, uint64_t incoming, uint64_t bytes, Deps deps, FoldOrder order) {
  const int32_t i = add(StepKind::kReduce, -1, dst, src, bytes, deps);
  steps[i].incoming = incoming;
  steps[i].order = order;
  return i;
}

int32_t Plan::join(Deps deps) {
  int32_t two[2];
  depsInto(deps, two);
  if (two[0] < 0 || two[1] < 0) return two[0] < 0 ? two[1] : two[0];
  Step j;
  j.kind = StepKind::kJoin;
  j.deps[0] = two[0];
  j.deps[1] = two[1];
  return add(j);
}

void Plan::finalize() {
  peers.clear();
  locals.clear();
  // Peer slots in first-appearance order; plans touch few peers, so a linear search is fine (this
  // runs once per plan shape, not per call).
  auto slot = [this](int32_t peer) -> PeerQueue& {
    for (auto& q : peers)
      if (q.peer == peer) return q;
    peers.push_back(PeerQueue{peer, {}, {}});
    return peers.back();
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    switch (s.kind) {
      case StepKind::kSend:
        slot(s.peer).sends.push_back(static_cast<int32_t>(i));
        break;
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        slot(s.peer).recvs.push_back(static_cast<int32_t>(i));
        break;
      case StepKind::kCopy:
      case StepKind::kScale:
      case StepKind::kScaleBy:
      case StepKind::kAxpy:
      case StepKind::kCheck:
      case StepKind::kJoin:
      case StepKind::kReduce:
        locals.push_back(static_cast<int32_t>(i));
        break;
    }
  }
  fedBy.clear();
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (s.kind != StepKind::kSend || s.deps[0] < 0 || s.deps[1] >= 0 || s.bytes == 0) continue;
    const Step& d = steps[s.deps[0]];
    if ((d.kind != StepKind::kRecv && d.kind != StepKind::kRecvReduce) || d.bytes != s.bytes ||
        d.dst.buf != s.src.buf || d.dst.offset != s.src.offset || d.dst.buf == Buf::kAbsolute)
      continue;
    if (fedBy.empty()) fedBy.assign(steps.size(), -1);
    fedBy[i] = s.deps[0];
  }
  // A receive forwards into one send only: a receive whose bytes two sends take (a tree's two
  // children) writes them where both can read, and neither is fed.
  if (!fedBy.empty()) {
    std::vector<uint8_t> feeds(steps.size(), 0);
    for (int32_t f : fedBy)
      if (f >= 0 && feeds[f] < 2) ++feeds[f];
    for (int32_t& f : fedBy)
      if (f >= 0 && feeds[f] > 1) f = -1;
  }
  markOutputOnly();
}

// Walks the steps backwards with the byte ranges that later steps touch, per buffer (send and
// receive as one; a step's src and dst both count), kept as disjoint intervals.
void Plan::markOutputOnly() {
  outputOnly.clear();
  // Point-to-point plans (built per call) receive into absolute addresses only: nothing to mark.
  if (std::none_of(steps.begin(), steps.end(), [](const Step& s) {
        return (s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce) && s.dst.buf != Buf::kAbsolute;
      }))
    return;
  outputOnly.assign(steps.size(), 0);
  std::map<uint64_t, uint64_t> later[2];  // start -> end; [0] send/receive, [1] scratch
  auto cls = [](Buf b) { return b == Buf::kScratch ? 1 : b == Buf::kAbsolute ? -1 : 0; };
  auto overlaps = [](const std::map<uint64_t, uint64_t>& m, uint64_t lo, uint64_t hi) {
    auto it = m.upper_bound(lo);
    if (it != m.begin() && std::prev(it)->second > lo) return true;
    return it != m.end() && it->first < hi;
  };
  auto insert = [](std::map<uint64_t, uint64_t>& m, uint64_t lo, uint64_t hi) {
    auto it = m.upper_bound(lo);
    if (it != m.begin() && std::prev(it)->second >= lo) {
      --it;
      lo = it->first;
      hi = std::max(hi, it->second);
      it = m.erase(it);
    }
    while (it != m.end() && it->first <= hi) {
      hi = std::max(hi, it->second);
      it = m.erase(it);
    }
    m.emplace(lo, hi);
  };
  auto touch = [&](BufRef b, uint64_t bytes) {
    const int c = cls(b.buf);
    if (c >= 0 && bytes != 0) insert(later[c], b.offset, b.offset + bytes);
  };
  for (size_t i = steps.size(); i-- > 0;) {
    const Step& s = steps[i];
    const bool fed = !fedBy.empty() && fedBy[i] >= 0;
    if ((s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce) && s.bytes != 0) {
      const int c = cls(s.dst.buf);
      if (c >= 0 && !overlaps(later[c], s.dst.offset, s.dst.offset + s.bytes)) outputOnly[i] = 1;
    }
    if (fed) continue;  // reads what its receive wrote, nothing older
    // What each kind touches besides dst: src for the kinds that read one, incoming scratch.
    touch(s.dst, s.kind == StepKind::kSend ? 0 : s.bytes);
    if (s.kind != StepKind::kRecv && s.kind != StepKind::kScale && s.kind != StepKind::kJoin) touch(s.src, s.bytes);
    if (s.kind == StepKind::kReduce) touch(scratchBuf(s.incoming), s.bytes);
  }
}

void addMismatchCheck(Plan* plan) {
  if (plan->nranks < 2) return;
  const uint64_t at = (plan->scratchBytes + 63) / 64 * 64;
  plan->checkAt = at;
  plan->scratchBytes = at + 2 * sizeof(CallHeader);
  const int next = (plan->rank + 1) % plan->nranks;
  const int prev = (plan->rank + plan->nranks - 1) % plan->nranks;
  Plan head;
  head.steps.reserve(plan->steps.size() + 3);
  const int32_t sent = head.send(next, scratchBuf(at), sizeof(CallHeader));
  const int32_t got = head.recv(prev, scratchBuf(at + sizeof(CallHeader)), sizeof(CallHeader));
  head.check(scratchBuf(at), scratchBuf(at + sizeof(CallHeader)), sizeof(CallHeader), {sent, got});
  std::vector<Step> steps = std::move(head.steps);
  for (Step s : plan->steps) {
    // Steps without inputs wait for the check; the rest wait through them.
    if (s.deps[0] < 0 && s.deps[1] < 0)
      s.deps[0] = 2;
    else
      for (int32_t& d : s.deps)
        if (d >= 0) d += 3;
    steps.push_back(s);
  }
  plan->steps = std::move(steps);
  plan->finalize();
}

static const char* kindName(StepKind k) {
  switch (k) {
    case StepKind::kSend:
      return "send";
    case StepKind::kRecv:
      return "recv";
    case StepKind::kRecvReduce:
      return "recv_reduce";
    case StepKind::kCopy:
      return "copy";
    case StepKind::kScale:
      return "scale";
    case StepKind::kScaleBy:
      return "scale_by";
    case StepKind::kAxpy:
      return "axpy";
    case StepKind::kCheck:
      return "check";
    case StepKind::kJoin:
      return "join";
    case StepKind::kReduce:
      return "reduce";
  }
  return "?";
}

static std::string refName(BufRef r) {
  static const char* kNames[] = {"send", "recv", "scratch", "abs"};
  char buf[64];
  snprintf(buf, sizeof(buf), "%s+%llu", kNames[static_cast<int>(r.buf)], static_cast<unsigned long long>(r.offset));
  return buf;
}

std::string Plan::describe() const {
  std::string out;
  char line[256];
  snprintf(line, sizeof(line), "plan %s/%s rank %d of %d: %zu steps, scratch %llu B\n", collName(coll), algorithm, rank,
           nranks, steps.size(), static_cast<unsigned long long>(scratchBytes));
  out += line;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    std::string where;
    switch (s.kind) {
      case StepKind::kSend:
        where = refName(s.src) + " -> peer " + std::to_string(s.peer);
        break;
      case StepKind::kRecv:
        where = "peer " + std::to_string(s.peer) + " -> " + refName(s.dst);
        break;
      case StepKind::kRecvReduce: {
        const std::string peer = "peer " + std::to_string(s.peer);
        where =
            s.order == FoldOrder::kIncomingFirst ? peer + " (+) " + refName(s.src) : refName(s.src) + " (+) " + peer;
        where += " -> " + refName(s.dst);
        break;
      }
      case StepKind::kCopy:
        where = refName(s.src) + " -> " + refName(s.dst);
        break;
      case StepKind::kScale:
        where = refName(s.dst);
        break;
      case StepKind::kScaleBy:
        snprintf(line, sizeof(line), "%.9g * ", s.weight);
        where = line + refName(s.src) + " -> " + refName(s.dst);
        break;
      case StepKind::kAxpy:
        snprintf(line, sizeof(line), " += %.9g * ", s.weight);
        where = refName(s.dst) + line + refName(s.src);
        break;
      case StepKind::kCheck:
        where = refName(s.src) + " == " + refName(s.dst);
        break;
      case StepKind::kJoin:
        break;
      case StepKind::kReduce:
        where = s.order == FoldOrder::kIncomingFirst
                    ? refName(BufRef{Buf::kScratch, s.incoming}) + " (+) " + refName(s.src)
                    : refName(s.src) + " (+) " + refName(BufRef{Buf::kScratch, s.incoming});
        where += " -> " + refName(s.dst);
        break;
    }
    snprintf(line, sizeof(line), "  %4zu %-11s %8llu B  %s  deps %d %d\n", i, kindName(s.kind),
             static_cast<unsigned long long>(s.bytes), where.c_str(), s.deps[0], s.deps[1]);
    out += line;
  }
  return out;
}

}  // namespace braid
