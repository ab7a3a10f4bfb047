// Pure rank math of the binomial tree (Gather and Scatter, algorithm "tree"; Broadcast and Reduce
// "tree" for small buffers). No I/O, unit-tested alone (tests/unit/test_plans_gather.cc).
//
// Ranks are renumbered relative to the root: v = (r - root) mod n, so the root is v = 0. The parent of
// v > 0 is v minus its lowest set bit; the children of v are v + 2^k for every 2^k below v's lowest
// set bit (every 2^k for the root) that stays below n. The subtree of v is the contiguous range of
// relative ranks [v, v + lowbit(v)) clipped to n ([0, n) for the root), so a rank gathers or scatters
// its subtree's blocks as one run of relative ranks. The depth of v is popcount(v), at most
// ceil(log2 n).
//
// A run of relative ranks maps to absolute ranks (v + root) mod n, which wrap past n - 1 at relative
// rank n - root: splitRun() cuts a run there, so each piece is contiguous in both numberings. Both
// ends of a message cut the same run at the same place, so their pieces match one to one.
#pragma once

#include <cstdint>

namespace braid {

// Broadcast and Reduce "tree" buffers of at most this many bytes (and at most one chunk) go whole down one binomial
// tree over all n ranks: n - 1 messages, ceil(log2 n) deep. The double binary tree would cut them in halves and send 2
// (n - 1) messages, 2 + floor(log2 n) deep, for no gain: below a few KiB a message costs its handling, not its bytes
// (and on a host with more ranks than cores, every message costs a turn of the scheduler).
constexpr uint64_t kBinomialMaxBytes = 4096;
// Whether a Broadcast or Reduce "tree" of `bytes` with pipelining chunk `chunkBytes` takes the
// binomial tree: what the plans build and the cost model prices.
inline bool binomialTreeFits(uint64_t bytes, uint64_t chunkBytes) {
  return bytes <= kBinomialMaxBytes && bytes <= chunkBytes;
}

// One rank's place in the binomial tree rooted at `root`, over n >= 1 ranks.
struct BinomialLinks {
  int rel = 0;      // this rank relative to the root
  int parent = -1;  // absolute rank; -1 at the root
  int end = 1;      // the subtree is relative ranks [rel, end)
  int numChildren = 0;
  int children[31];  // relative ranks, the largest subtree first
};

inline int binomialLowBit(int v) { return v & -v; }

inline BinomialLinks binomialLinks(int r, int n, int root) {
  BinomialLinks l;
  l.rel = (r - root + n) % n;
  // The root's span covers every bit below n; another rank's stops at its lowest set bit.
  int span = 1;
  if (l.rel == 0) {
    while (span < n) span <<= 1;
  } else {
    span = binomialLowBit(l.rel);
    l.parent = (l.rel - span + root) % n;
  }
  l.end = l.rel + span < n ? l.rel + span : n;
  for (int d = span >> 1; d >= 1; d >>= 1)
    if (l.rel + d < n) l.children[l.numChildren++] = l.rel + d;
  return l;
}

// The end of the subtree of relative rank `child` (a child's subtree never reaches past its parent's).
inline int binomialSubtreeEnd(int child, int n) {
  const int e = child + binomialLowBit(child);
  return e < n ? e : n;
}

// A run of relative ranks [begin, end) cut where absolute ranks wrap (relative n - root): up to two
// pieces, each contiguous in absolute ranks too.
struct RunPieces {
  int begin[2] = {0, 0};
  int end[2] = {0, 0};
  int count = 0;
};

inline RunPieces splitRun(int begin, int end, int n, int root) {
  RunPieces p;
  const int wrap = root == 0 ? n : n - root;
  if (begin < wrap && wrap < end) {
    p.begin[0] = begin;
    p.end[0] = wrap;
    p.begin[1] = wrap;
    p.end[1] = end;
    p.count = 2;
  } else if (begin < end) {
    p.begin[0] = begin;
    p.end[0] = end;
    p.count = 1;
  }
  return p;
}

// The absolute rank of relative rank v.
inline int binomialAbs(int v, int n, int root) { return (v + root) % n; }

// Calls fn(peer, begin, end) for each piece of each child's run, the children in l's order (the
// largest subtree first): peer is the child's absolute rank, [begin, end) the piece's relative ranks.
template <class Fn>
void forEachChildPiece(const BinomialLinks& l, int n, int root, Fn&& fn) {
  for (int k = 0; k < l.numChildren; ++k) {
    const int c = l.children[k];
    const RunPieces p = splitRun(c, binomialSubtreeEnd(c, n), n, root);
    for (int i = 0; i < p.count; ++i) fn(binomialAbs(c, n, root), p.begin[i], p.end[i]);
  }
}

}  // namespace braid
