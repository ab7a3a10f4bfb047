// Pure rank math of the double binary tree (AllReduce, Broadcast and Reduce, algorithm "tree"). No
// I/O, unit-tested alone (tests/unit/test_plans_tree.cc).
//
// Construction. Give the n ranks the labels 1..n. Each label v sits at height ctz(v), the number of
// trailing zero bits of v: with b = v & -v its lowest set bit, v's left child is v - b/2 and its right
// child the first of v + b/2, v + b/4, ..., v + 1 that is at most n (labels above n do not exist, and
// the nearest smaller one takes the place of a missing right child). This is the in-order binary
// search tree of the labels; its root is the largest power of two p <= n. Odd labels (b = 1) have no
// children and even labels always have their left child, so exactly the even labels are interior.
// Every child has a smaller height than its parent, so no rank is deeper than log2(p) = floor(log2 n),
// and the left subtree of v is complete, so v's subtree height is exactly ctz(v).
//
// Tree 0 labels rank r as r + 1: its interior ranks are the odd ranks. Tree 1 is the same tree over
// the ranks shifted by one: rank r gets label (r + 1) % n + 1 (r + 2, with n - 1 wrapping to 1), so
// its interior ranks are the even ranks below n - 1. Hence, for every n >= 1, no rank is interior in
// both trees; every rank is interior in exactly one of them when n is even, and when n is odd rank
// n - 1 is a leaf in both. So a rank has children, and forwards data, in one tree only: per half of
// the buffer it moves at most three chunks each way, not six.
//
// Rooted variant (Broadcast, Reduce with any root): the root sits on top, and the other n - 1 ranks,
// relabelled root+1, root+2, ... as 0..n-2, form the double tree over n - 1 ranks; the root's only
// child in tree t is the root of tree t. Non-root ranks keep the property above.
#pragma once

#include <bit>
#include <initializer_list>

namespace braid {

// One rank's place in one tree.
struct TreeLinks {
  int parent = -1;             // -1 at the root
  int children[2] = {-1, -1};  // ordered by subtree height, the lower first; -1 = none
  int numChildren = 0;
  int height = 0;  // of this rank's subtree: 0 at a leaf
  int depth = 0;   // edges from the root
};

namespace tree_detail {

inline int labelOf(int r, int n, int tree) { return tree == 0 ? r + 1 : (r + 1) % n + 1; }
inline int rankOf(int v, int n, int tree) { return tree == 0 ? v - 1 : (v + n - 2) % n; }
inline int lowBit(int v) { return v & -v; }
inline int heightOf(int v) { return std::countr_zero(static_cast<unsigned>(v)); }
inline int leftChild(int v) { return lowBit(v) > 1 ? v - lowBit(v) / 2 : 0; }  // 0 = none
inline int rightChild(int v, int n) {
  for (int d = lowBit(v) / 2; d >= 1; d /= 2)
    if (v + d <= n) return v + d;
  return 0;
}
inline int rootLabel(int n) { return static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }

}  // namespace tree_detail

// The root of tree 0 or 1 over n >= 1 ranks.
inline int dtreeRoot(int n, int tree) { return tree_detail::rankOf(tree_detail::rootLabel(n), n, tree); }

// The height of both trees over n >= 1 ranks (edges from the root to the deepest leaf).
inline int dtreeHeight(int n) { return tree_detail::heightOf(tree_detail::rootLabel(n)); }

// Rank r's place in tree 0 or 1 over ranks 0..n-1. O(log n): the parent and depth come from a search
// down from the root.
inline TreeLinks dtreeLinks(int r, int n, int tree) {
  using namespace tree_detail;
  const int v = labelOf(r, n, tree);
  TreeLinks l;
  l.height = heightOf(v);
  for (int u = rootLabel(n); u != v; ++l.depth) {
    l.parent = rankOf(u, n, tree);
    u = v < u ? leftChild(u) : rightChild(u, n);
  }
  // The right subtree is never higher than the left one (which is complete), so it comes first.
  for (int c : {rightChild(v, n), leftChild(v)})
    if (c != 0) l.children[l.numChildren++] = rankOf(c, n, tree);
  return l;
}

// Rank r's place in tree 0 or 1 of the rooted variant (see the top of this file), n >= 1.
inline TreeLinks rootedDtreeLinks(int r, int n, int root, int tree) {
  const int m = n - 1;  // ranks below the root
  auto toRank = [&](int i) { return (i + 1 + root) % n; };
  TreeLinks l;
  if (r == root) {
    if (m == 0) return l;
    l.children[0] = toRank(dtreeRoot(m, tree));
    l.numChildren = 1;
    l.height = dtreeHeight(m) + 1;
    return l;
  }
  const int i = (r - root - 1 + n) % n;
  TreeLinks inner = dtreeLinks(i, m, tree);
  l.parent = inner.parent < 0 ? root : toRank(inner.parent);
  for (int k = 0; k < inner.numChildren; ++k) l.children[k] = toRank(inner.children[k]);
  l.numChildren = inner.numChildren;
  l.height = inner.height;
  l.depth = inner.depth + 1;
  return l;
}

}  // namespace braid
