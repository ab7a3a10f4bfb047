// Pure rank math of the recursive-doubling and recursive-halving algorithms (AllReduce
// "recursive_doubling" and "rabenseifner"). No I/O, unit-tested alone (tests/unit/test_plans_rd.cc).
//
// Folding. Both algorithms want a power of two of ranks. With n = p + x ranks, p the largest power of
// two <= n, the first 2x ranks pair up as (2i, 2i+1): the odd one hands its whole buffer to the even
// one and sits out, and gets the result back at the end. The p remaining ranks take the virtual ranks
// 0..p-1 in rank order: rank 2i (i < x) is virtual rank i, rank r >= 2x is virtual rank r - x.
//
// Recursive halving over p = 2^L virtual ranks splits the buffer into p pieces. In round k (mask 2^k)
// virtual rank v and its partner v ^ 2^k hold the same span of pieces; v keeps the lower half when bit
// k of v is clear, the upper half when it is set, and gives the partner the other half. After L rounds
// v keeps exactly one piece: the one numbered by v's L bits reversed. Recursive doubling (the
// all-gather) runs the rounds backwards and sends what was kept, receiving what was given.
#pragma once

#include <bit>
#include <cstdint>

#include "algorithms/patterns/ring.h"

namespace braid {

// The largest power of two <= n (n >= 1), and its exponent.
inline int pow2Floor(int n) { return static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }
inline int log2Floor(int n) { return std::bit_width(static_cast<unsigned>(n)) - 1; }

// The fold of n ranks onto pow2Floor(n) (see the top of this file).
inline int foldExtra(int n) { return n - pow2Floor(n); }
// Rank r's virtual rank, or -1 when r sits out.
inline int foldVrank(int r, int n) {
  const int x = foldExtra(n);
  if (r < 2 * x) return r % 2 == 0 ? r / 2 : -1;
  return r - x;
}
// The rank holding virtual rank v.
inline int foldRank(int v, int n) {
  const int x = foldExtra(n);
  return v < x ? 2 * v : v + x;
}
// The other rank of r's pair, or -1 when r is not paired.
inline int foldPartner(int r, int n) { return r < 2 * foldExtra(n) ? r ^ 1 : -1; }

// A span [begin, end) of piece indices.
struct PieceSpan {
  int begin = 0;
  int end = 0;
};

// The pieces virtual rank v keeps after round k of recursive halving over p pieces (k = -1: all).
// Round k splits on bit k of v, the partner being v ^ 2^k, and v ends with piece bitreverse(v)
// (AllReduce "rabenseifner": the nearest partner first). fromTop: round k splits on bit L-1-k (L =
// log2 p), the partner being v ^ 2^(L-1-k), and v ends with piece v (ReduceScatter's halving: the
// farthest partner first, the blocks in rank order).
inline PieceSpan halvingKept(int v, int p, int k, bool fromTop = false) {
  const int bits = log2Floor(p);
  PieceSpan s{0, p};
  for (int i = 0; i <= k; ++i) {
    const int mid = (s.begin + s.end) / 2;
    if ((v >> (fromTop ? bits - 1 - i : i)) & 1)
      s.begin = mid;
    else
      s.end = mid;
  }
  return s;
}

// The pieces virtual rank v gives its partner in round k (the half of its span it drops).
inline PieceSpan halvingGiven(int v, int p, int k, bool fromTop = false) {
  const PieceSpan before = halvingKept(v, p, k - 1, fromTop), kept = halvingKept(v, p, k, fromTop);
  return kept.begin == before.begin ? PieceSpan{kept.end, before.end} : PieceSpan{before.begin, kept.begin};
}

// The elements of pieces [s.begin, s.end) of `count` elements split into `parts` pieces by
// partition() (ring.h): contiguous, since the pieces are laid out in order.
inline Range pieceElems(uint64_t count, uint64_t parts, PieceSpan s) {
  if (s.begin == s.end) return Range{};
  const Range first = partition(count, parts, s.begin), last = partition(count, parts, s.end - 1);
  return Range{first.offset, last.offset + last.count - first.offset};
}

}  // namespace braid
