// A schedule-independent check of a plan's ordering, for the plan tests: every pair of steps that
// touch the same bytes, one of them writing, must be ordered by dependencies and by the in-order
// execution of local steps. The simulator (plan_sim.h) runs one schedule; this covers them all.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "src/plan.h"

namespace braid::sim {

// The bytes a step reads or writes, in the buffer they live in: in place the send buffer is the
// receive buffer.
struct Access {
  int buf = -1;  // -1: none
  uint64_t begin = 0, end = 0;
  bool overlaps(const Access& o) const { return buf >= 0 && buf == o.buf && begin < o.end && o.begin < end; }
};
inline Access access(BufRef ref, uint64_t bytes, bool inPlace) {
  if (bytes == 0) return Access{};
  const Buf b = ref.buf == Buf::kSend && inPlace ? Buf::kRecv : ref.buf;
  return Access{static_cast<int>(b), ref.offset, ref.offset + bytes};
}
inline Access readOf(const Step& s, bool inPlace) {
  switch (s.kind) {
    case StepKind::kSend:
    case StepKind::kRecvReduce:
    case StepKind::kCopy:
      return access(s.src, s.bytes, inPlace);
    case StepKind::kScale:
      return access(s.dst, s.bytes, inPlace);
    default:
      return Access{};
  }
}
inline Access writeOf(const Step& s, bool inPlace) {
  return s.kind == StepKind::kSend ? Access{} : access(s.dst, s.bytes, inPlace);
}

// Checks, independently of any schedule, that a plan orders every pair of steps that touch the same
// bytes when one of them writes: the earlier must be an ancestor of the later through dependencies
// and the in-order execution of local steps. The simulator runs one schedule, in which a pairwise
// exchange completes both sends at once; this also catches a receive that may land while a send to a
// third rank still reads its bytes. Out of place, nothing may write the send buffer.
inline void requireOrdered(const Plan& p, bool inPlace) {
  const size_t n = p.steps.size();
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> anc(n * words, 0);
  auto has = [&](size_t i, size_t j) { return (anc[i * words + j / 64] >> (j % 64)) & 1; };
  auto inherit = [&](size_t i, size_t j) {
    for (size_t w = 0; w < words; ++w) anc[i * words + w] |= anc[j * words + w];
    anc[i * words + j / 64] |= uint64_t(1) << (j % 64);
  };
  int prevLocal = -1;
  for (size_t i = 0; i < n; ++i) {
    const Step& s = p.steps[i];
    for (int d : s.deps)
      if (d >= 0) inherit(i, d);
    if (s.peer < 0) {
      if (prevLocal >= 0) inherit(i, prevLocal);
      prevLocal = static_cast<int>(i);
    }
    const Access w = writeOf(s, inPlace), r = readOf(s, inPlace);
    if (!inPlace && w.buf == static_cast<int>(Buf::kSend)) FAIL("step " << i << " writes the send buffer");
    for (size_t j = 0; j < i; ++j) {
      const Access wj = writeOf(p.steps[j], inPlace), rj = readOf(p.steps[j], inPlace);
      if ((w.overlaps(wj) || w.overlaps(rj) || r.overlaps(wj)) && !has(i, j)) {
        FAIL("steps " << j << " and " << i << " touch the same bytes unordered\n" << p.describe());
      }
    }
  }
}

}  // namespace braid::sim
