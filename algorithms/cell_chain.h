// Step-emitting helpers for the AllReduce algorithms that run several phases over one receive buffer
// (rabenseifner, hierarchical): chunked sends and writes that carry their own dependencies, and ring
// reduce-scatter / all-gather / allreduce among a subset of the ranks over a range of the buffer.
// The rank math (cells, sub-rings, segments) is pure, in algorithms/patterns/subring.h; the steps
// are built here and in algorithms/subring.cc.
//
// Cells (cellBytesFor). The writes to one cell form a chain: each waits for the cell's previous
// write, so one dependency on a cell's last write covers all earlier ones. A write also waits for
// the recorded sends that still read any of its bytes. So a step needs at most two dependencies,
// however the phases before it were segmented.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algorithms/patterns/subring.h"
#include "src/plan.h"

namespace braid {

// Steps over the receive buffer of `totalBytes`, cut into cells. Byte ranges passed in must be whole
// elements. Every write targets the receive buffer; a source is the send or the receive buffer at the
// same offset (AllReduce buffers share one layout).
class CellChain {
 public:
  CellChain(Plan* plan, uint64_t totalBytes, uint64_t cellBytes);

  // Chunked sends of `bytes` read from `src`, each after the last write of its cell.
  void send(int peer, Buf src, Range bytes);
  // Chunked receives into the receive buffer.
  void recv(int peer, Range bytes);
  // Chunked receives that store src op incoming into the receive buffer.
  void recvReduce(int peer, Buf src, Range bytes);
  // Local: receive buffer = src, and receive buffer /= nranks.
  void copy(Buf src, Range bytes);
  void scale(Range bytes);

  // The send steps appended so far, in order (tests and callers that count messages).
  const std::vector<int32_t>& sends() const { return sends_; }

 private:
  struct Reading {
    Range bytes;
    int32_t step = -1;
  };
  // Calls f(cell, part) for each part of `bytes` that lies in one cell, in order.
  template <class F>
  void forEachChunk(Range bytes, F&& f) const {
    for (uint64_t off = bytes.offset, end = bytes.offset + bytes.count; off < end;) {
      const uint64_t cell = off / cellBytes_, next = std::min(end, (cell + 1) * cellBytes_);
      f(cell, Range{off, next - off});
      off = next;
    }
  }
  // The dependencies of a write of `bytes` (inside one cell): the cell's last write and the
  // recorded sends of overlapping bytes, which the write retires. Then last_[cell] = write(deps).
  template <class Write>
  void write(uint64_t cell, Range bytes, Write&& emit);

  Plan* plan_;
  uint64_t cellBytes_;
  std::vector<int32_t> last_;                  // per cell: its last write, -1 = none yet
  std::vector<std::vector<Reading>> reading_;  // per cell: sends no later write has waited for yet
  std::vector<int32_t> sends_;
};

// Ring reduce-scatter of the element range `elems` among ring.members, pipelined by cells: the range
// is split into size() segments by partition() and member i ends with segment i reduced over the ring
// in the receive buffer. `contrib` holds this rank's contribution (the send buffer, or the receive
// buffer in place or after a fold). Returns the buffer that holds the reduced segment: contrib for a
// ring of one, else the receive buffer. Steps: size()-1 sends and receives per chunk; bytes on the
// wire: (size()-1)/size() of the range.
Buf appendRingReduceScatter(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize, Buf contrib);

// Ring all-gather of the element range `elems`: member i starts with segment i in the receive buffer,
// all end with the whole range. Steps and bytes as the reduce-scatter.
void appendRingAllGather(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize);

// Ring allreduce of the element range `elems` = reduce-scatter, scaling (avg) of the own segment, then
// all-gather. Ends with the whole range in the receive buffer on every member.
void appendRingAllReduce(CellChain* cells, const SubRing& ring, Range elems, uint64_t elemSize, Buf contrib, bool avg);

}  // namespace braid
