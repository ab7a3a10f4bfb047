// Chunked steps with their own dependencies, and ring collectives among a subset of the ranks
// (algorithms/cell_chain.h; the rank math is algorithms/patterns/subring.h).
#include "algorithms/cell_chain.h"

namespace braid {

namespace {

bool overlaps(Range a, Range b) { return a.offset < b.offset + b.count && b.offset < a.offset + a.count; }

}  // namespace

CellChain::CellChain(Plan* plan, uint64_t totalBytes, uint64_t cellBytes)
    : plan_(plan), cellBytes_(cellBytes), last_((totalBytes + cellBytes - 1) / cellBytes, -1), reading_(last_.size()) {}

void CellChain::send(int peer, Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    const int32_t idx = plan_->send(peer, BufRef{src, part.offset}, part.count, last_[cell]);
    // Sends from the send buffer count too: in place it is the receive buffer. Out of place the extra
    // wait is for a send that the same bytes' write would wait for in place, so it orders nothing new.
    reading_[cell].push_back(Reading{part, idx});
    sends_.push_back(idx);
  });
}

template <class Write>
void CellChain::write(uint64_t cell, Range bytes, Write&& emit) {
  int32_t after = -1;
  std::vector<Reading>& r = reading_[cell];
  for (size_t i = 0; i < r.size();) {
    if (!overlaps(r[i].bytes, bytes)) {
      ++i;
      continue;
    }
    // More than one send to wait for: join them (steps carry two dependencies). The algorithms
    // here never need it; it keeps the helper general.
    after = after < 0 ? r[i].step : plan_->join({after, r[i].step});
    // This write finishing implies the send finished: later writes wait for this one (the chain).
    r[i] = r.back();
    r.pop_back();
  }
  last_[cell] = emit(Deps{last_[cell], after});
}

void CellChain::recv(int peer, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, part, [&](Deps d) { return plan_->recv(peer, recvBuf(part.offset), part.count, d); });
  });
}

void CellChain::recvReduce(int peer, Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, part, [&](Deps d) {
      return plan_->recvReduce(peer, recvBuf(part.offset), BufRef{src, part.offset}, part.count, d);
    });
  });
}

void CellChain::copy(Buf src, Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, part, [&](Deps d) {
      return plan_->copy(recvBuf(part.offset), BufRef{src, part.offset}, part.count, d);
    });
  });
}

void CellChain::scale(Range bytes) {
  forEachChunk(bytes, [&](uint64_t cell, Range part) {
    write(cell, part, [&](Deps d) { return plan_->scale(recvBuf(part.offset), part.count, d); });
  });
}

// Step 0 sends the contribution itself; later steps forward what the previous step folded. A folded
// segment's own share is read from `contrib`, which no earlier step of this ring has written there.
Buf appendRingReduceScatter(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize, Buf contrib) {
  const int n = ring.size();
  if (n == 1) return contrib;
  const int right = subRingRight(ring), left = subRingLeft(ring);
  for (int s = 0; s < n - 1; ++s) {
    cells->send(right, s == 0 ? contrib : Buf::kRecv,
                segmentBytes(elems, n, subRingReduceScatterSendSeg(ring, s), elemSize));
    cells->recvReduce(left, contrib, segmentBytes(elems, n, subRingReduceScatterRecvSeg(ring, s), elemSize));
  }
  return Buf::kRecv;
}

void appendRingAllGather(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize) {
  const int n = ring.size();
  if (n == 1) return;
  const int right = subRingRight(ring), left = subRingLeft(ring);
  for (int s = 0; s < n - 1; ++s) {
    cells->send(right, Buf::kRecv, segmentBytes(elems, n, subRingAllGatherSendSeg(ring, s), elemSize));
    cells->recv(left, segmentBytes(elems, n, subRingAllGatherRecvSeg(ring, s), elemSize));
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
