// Chunked steps with their own dependencies, and ring collectives among a subset of the ranks
// (algorithms/patterns/subring.h).
#include "algorithms/patterns/subring.h"

namespace braid {

namespace {

// The bytes of segment i of `elems` split into n segments.
Range segmentBytes(Range elems, int n, int i, uint64_t elemSize) {
  const Range s = partition(elems.count, n, i);
  return Range{(elems.offset + s.offset) * elemSize, s.count * elemSize};
}

bool overlaps(Range a, Range b) { return a.offset < b.offset + b.count && b.offset < a.offset + a.count; }

}  // namespace

CellChain::CellChain(Plan* plan, uint64_t totalBytes, uint64_t cellBytes)
    : plan_(plan), cellBytes_(cellBytes), last_((totalBytes + cellBytes - 1) / cellBytes, -1), reading_(last_.size()) {}

void CellChain::send(int peer, Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    const int32_t idx =
        plan_->add(Step{StepKind::kSend, peer, {}, BufRef{src, part.offset}, part.count, {last_[cell], -1}});
    // Sends from the send buffer count too: in place it is the receive buffer. Out of place the extra
    // wait is for a send that the same bytes' write would wait for in place, so it orders nothing new.
    reading_[cell].push_back(Reading{part, idx});
    sends_.push_back(idx);
  });
}

void CellChain::write(uint64_t cell, Step s) {
  const Range bytes{s.dst.offset, s.bytes};
  int32_t after = -1;
  std::vector<Reading>& r = reading_[cell];
  for (size_t i = 0; i < r.size();) {
    if (!overlaps(r[i].bytes, bytes)) {
      ++i;
      continue;
    }
    // More than one send to wait for: join them through a zero-byte local step (steps carry two
    // dependencies at most). The algorithms here never need it; it keeps the helper general.
    after =
        after < 0 ? r[i].step : plan_->add(Step{StepKind::kCopy, -1, recvBuf(0), recvBuf(0), 0, {after, r[i].step}});
    // This write finishing implies the send finished: later writes wait for this one (the chain).
    r[i] = r.back();
    r.pop_back();
  }
  s.deps[0] = last_[cell];
  s.deps[1] = after;
  last_[cell] = plan_->add(s);
}

void CellChain::recv(int peer, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, Step{StepKind::kRecv, peer, recvBuf(part.offset), {}, part.count, {-1, -1}});
  });
}

void CellChain::recvReduce(int peer, Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell,
          Step{StepKind::kRecvReduce, peer, recvBuf(part.offset), BufRef{src, part.offset}, part.count, {-1, -1}});
  });
}

void CellChain::copy(Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, Step{StepKind::kCopy, -1, recvBuf(part.offset), BufRef{src, part.offset}, part.count, {-1, -1}});
  });
}

void CellChain::scale(Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, Step{StepKind::kScale, -1, recvBuf(part.offset), {}, part.count, {-1, -1}});
  });
}

// Member p sends segment p-1-s and folds segment p-2-s at step s, so segment p arrives last, complete.
// Step 0 sends the contribution itself; later steps forward what the previous step folded. A folded
// segment's own share is read from `contrib`, which no earlier step of this ring has written there.
Buf appendRingReduceScatter(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize, Buf contrib) {
  const int n = ring.size(), p = ring.pos;
  if (n == 1) return contrib;
  const int right = ring.members[ringPeer(p, 1, n)], left = ring.members[ringPeer(p, -1, n)];
  for (int s = 0; s < n - 1; ++s) {
    cells->send(right, s == 0 ? contrib : Buf::kRecv, segmentBytes(elems, n, ringPeer(p, -1 - s, n), elemSize));
    cells->recvReduce(left, contrib, segmentBytes(elems, n, ringPeer(p, -2 - s, n), elemSize));
  }
  return Buf::kRecv;
}

// Member p sends segment p-s and receives segment p-1-s at step s.
void appendRingAllGather(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize) {
  const int n = ring.size(), p = ring.pos;
  if (n == 1) return;
  const int right = ring.members[ringPeer(p, 1, n)], left = ring.members[ringPeer(p, -1, n)];
  for (int s = 0; s < n - 1; ++s) {
    cells->send(right, Buf::kRecv, segmentBytes(elems, n, ringPeer(p, -s, n), elemSize));
    cells->recv(left, segmentBytes(elems, n, ringPeer(p, -1 - s, n), elemSize));
  }
}

void appendRingAllReduce(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize, Buf contrib, bool avg) {
  const Buf reduced = appendRingReduceScatter(cells, ring, elems, elemSize, contrib);
  const Range own = segmentBytes(elems, ring.size(), ring.pos, elemSize);
  if (reduced != Buf::kRecv) cells->copy(reduced, own);  // a ring of one, out of place
  if (avg) cells->scale(own);
  appendRingAllGather(cells, ring, elems, elemSize);
}

}  // namespace braid
