// Pure rank math for the AllReduce algorithms that run several phases over one receive buffer
// (rabenseifner, hierarchical, recursive doubling): cells, rings over a subset of the ranks and the
// segments they exchange. The steps these phases emit are built by algorithms/cell_chain.h.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/patterns/ring.h"

namespace braid {

// The cell size for a pipelining chunk: chunkBytes rounded down to whole elements, at least one.
// Every phase cuts its byte ranges at multiples of it, so each message and each local step lies
// inside one cell whatever the phase's segmentation, and no step exceeds the chunk size.
inline uint64_t cellBytesFor(uint64_t elemSize, uint64_t chunkBytes) {
  return (chunkBytes >= elemSize ? chunkBytes / elemSize : 1) * elemSize;
}

// A ring over some of the ranks: members in ring order, and this rank's index among them.
struct SubRing {
  std::vector<int> members;
  int pos = 0;
  int size() const { return static_cast<int>(members.size()); }
};

// The bytes of segment i of the element range `elems` split into n segments (partition()).
inline Range segmentBytes(Range elems, int n, int i, uint64_t elemSize) {
  const Range s = partition(elems.count, n, i);
  return Range{(elems.offset + s.offset) * elemSize, s.count * elemSize};
}

// Ring reduce-scatter over a SubRing: member p sends segment p-1-s and folds segment p-2-s at step
// s (s = 0 .. size()-2), so segment p arrives last, complete.
inline int subRingReduceScatterSendSeg(const SubRing& ring, int s) { return ringPeer(ring.pos, -1 - s, ring.size()); }
inline int subRingReduceScatterRecvSeg(const SubRing& ring, int s) { return ringPeer(ring.pos, -2 - s, ring.size()); }
// Ring all-gather over a SubRing: member p sends segment p-s and receives segment p-1-s at step s.
inline int subRingAllGatherSendSeg(const SubRing& ring, int s) { return ringPeer(ring.pos, -s, ring.size()); }
inline int subRingAllGatherRecvSeg(const SubRing& ring, int s) { return ringPeer(ring.pos, -1 - s, ring.size()); }
// The neighbours on a SubRing of at least two members.
inline int subRingRight(const SubRing& ring) { return ring.members[ringPeer(ring.pos, 1, ring.size())]; }
inline int subRingLeft(const SubRing& ring) { return ring.members[ringPeer(ring.pos, -1, ring.size())]; }

}  // namespace braid
