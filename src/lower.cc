#include "src/lower.h"

#include <algorithm>
#include <iterator>

namespace braid {

namespace {

// Scratch blocks start on a cache line: a reduce kernel reads them with vector loads.
constexpr uint64_t kBlockAlign = 64;

// Scratch slots per peer for lowered receive-reduces: the m-th one from a peer lands in slot m % kSlots,
// after the reduce that read the slot's previous message. Enough to keep a pipelined link busy
// (algorithms cut messages at the chunk size), and scratch stays kSlots chunks per peer, not the
// whole message volume.
constexpr uint64_t kSlots = 8;

uint64_t takeBlock(Plan* plan, uint64_t bytes) {
  const uint64_t at = (plan->scratchBytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  plan->scratchBytes = at + bytes;
  return at;
}

}  // namespace

bool lowerPlan(const LowerTarget& t, Plan* plan) {
  auto touches = [&t](int peer, Buf b) {
    if (b == Buf::kAbsolute) return true;  // point-to-point groups: the caller's own memory type
    const uint32_t types = peer >= 0 && peer < static_cast<int>(t.peerCaps.size()) ? t.peerCaps[peer].memTypes
                                                                                   : memTypeBit(MemType::kHost);
    return (types & memTypeBit(t.bufMem[static_cast<int>(b)])) != 0;
  };
  auto reducesOnRecv = [&t](int peer) {
    return !t.force && peer >= 0 && peer < static_cast<int>(t.peerCaps.size()) && t.peerCaps[peer].reduceOnRecv;
  };
  bool needed = false;
  for (const Step& s : plan->steps) {
    if (s.kind == StepKind::kRecvReduce && !reducesOnRecv(s.peer)) needed = true;
    if (s.kind == StepKind::kSend && !touches(s.peer, s.src.buf)) needed = true;
    if ((s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce) && !touches(s.peer, s.dst.buf)) needed = true;
  }
  if (!needed) return false;

  // Steps are rebuilt in order; done[old] is the new step that completes old step `old` (the reduce
  // or copy that ends a lowered transfer), so dependencies are remapped through it.
  Plan out;
  out.coll = plan->coll;
  out.algorithm = plan->algorithm;
  out.rank = plan->rank;
  out.nranks = plan->nranks;
  out.scratchBytes = plan->scratchBytes;
  out.checkAt = plan->checkAt;
  out.steps.reserve(plan->steps.size() * 2);
  std::vector<int32_t> doneAt(plan->steps.size(), -1);
  // Per peer: the receive-reduces lowered so far, the slot size (its largest), where the slots
  // start, and the reduce that last read each slot.
  struct Slots {
    uint64_t lowered = 0, bytes = 0, base = 0;
    int32_t reader[kSlots];
  };
  std::vector<Slots> slots(static_cast<size_t>(std::max(plan->nranks, 1)));
  for (const Step& s : plan->steps)
    if (s.kind == StepKind::kRecvReduce && (!reducesOnRecv(s.peer) || !touches(s.peer, s.dst.buf)))
      slots[s.peer].bytes = std::max(slots[s.peer].bytes, s.bytes);
  for (Slots& sl : slots) {
    std::fill(std::begin(sl.reader), std::end(sl.reader), -1);
    if (sl.bytes > 0) sl.base = takeBlock(&out, kSlots * ((sl.bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign));
  }
  // A lowered receive writes its destination in a local step, after the receive completed. Fused,
  // the link's order put that write before any later message from the same peer landed; so a later
  // receive from the peer into overlapping bytes now waits for the local write (then every receive
  // after it is posted later still, so one wait retires the entry).
  struct Pending {
    int32_t peer, writer;
    BufRef dst;
    uint64_t bytes;
  };
  std::vector<Pending> pending;
  std::vector<int32_t> deps;
  auto overlaps = [](BufRef a, uint64_t an, BufRef b, uint64_t bn) {
    // In place the send and receive buffers may be one: treat them as the same memory.
    const bool same = a.buf == b.buf || (a.buf != Buf::kScratch && b.buf != Buf::kScratch);
    return same && an > 0 && bn > 0 && a.offset < b.offset + bn && b.offset < a.offset + an;
  };
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    Step s = plan->steps[i];
    for (int32_t& d : s.deps)
      if (d >= 0) d = doneAt[d];
    deps.assign({s.deps[0], s.deps[1]});
    const bool isRecv = s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce;
    if (isRecv) {
      for (size_t k = 0; k < pending.size();) {
        if (pending[k].peer == s.peer && overlaps(pending[k].dst, pending[k].bytes, s.dst, s.bytes)) {
          deps.push_back(pending[k].writer);
          pending[k] = pending.back();
          pending.pop_back();
        } else {
          ++k;
        }
      }
    }
    if (s.kind == StepKind::kSend && !touches(s.peer, s.src.buf)) {
      const uint64_t block = takeBlock(&out, s.bytes);
      const int32_t staged = out.copy(scratchBuf(block), s.src, s.bytes, deps);
      doneAt[i] = out.send(s.peer, scratchBuf(block), s.bytes, staged);
    } else if (s.kind == StepKind::kRecv && !touches(s.peer, s.dst.buf)) {
      const uint64_t block = takeBlock(&out, s.bytes);
      const int32_t got = out.recv(s.peer, scratchBuf(block), s.bytes, deps);
      doneAt[i] = out.copy(s.dst, scratchBuf(block), s.bytes, got);
      pending.push_back(Pending{s.peer, doneAt[i], s.dst, s.bytes});
    } else if (s.kind == StepKind::kRecvReduce && (!reducesOnRecv(s.peer) || !touches(s.peer, s.dst.buf))) {
      // The receive keeps the step's dependencies (it was posted no earlier before either) and
      // waits for its slot to be read by the previous reduce from it.
      Slots& sl = slots[s.peer];
      const uint64_t slot = sl.lowered++ % kSlots;
      const uint64_t block = sl.base + slot * ((sl.bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign);
      deps.push_back(sl.reader[slot]);
      const int32_t got = out.recv(s.peer, scratchBuf(block), s.bytes, deps);
      doneAt[i] = sl.reader[slot] = out.reduce(s.dst, s.src, block, s.bytes, got, s.order);
      pending.push_back(Pending{s.peer, doneAt[i], s.dst, s.bytes});
    } else if (s.kind == StepKind::kRecv) {
      doneAt[i] = out.recv(s.peer, s.dst, s.bytes, deps);
    } else if (s.kind == StepKind::kRecvReduce) {
      doneAt[i] = out.recvReduce(s.peer, s.dst, s.src, s.bytes, deps, s.order);
    } else {
      doneAt[i] = out.add(s);  // local steps and sends the link runs as they are
    }
  }
  *plan = std::move(out);
  plan->finalize();
  return true;
}

}  // namespace braid
