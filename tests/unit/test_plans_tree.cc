// The double binary tree: its rank math (algorithms/patterns/tree.h) checked alone, and the plans of
// the tree AllReduce, Broadcast and Reduce checked without a network by the simulator (plan_sim.h):
// a byte reduced twice, a size mismatch, a race, a deadlock or a wrong final buffer fails the test.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/tree.h"
#include "tests/unit/plan_sim.h"

using namespace braid;
using namespace braid::sim;

namespace {

int floorLog2(int n) { return std::bit_width(static_cast<unsigned>(n)) - 1; }

// Checks that `links` (one per rank) form one tree over ranks 0..n-1 rooted at `root`: parents and
// children agree, every rank is reached exactly once from the root, depths and heights are right.
void requireTree(const std::vector<TreeLinks>& links, int root) {
  const int n = static_cast<int>(links.size());
  REQUIRE(links[root].parent == -1);
  REQUIRE(links[root].depth == 0);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    const TreeLinks& l = links[r];
    REQUIRE(l.numChildren >= 0);
    REQUIRE(l.numChildren <= 2);
    if (r != root) {
      REQUIRE(l.parent >= 0);
      REQUIRE(l.parent < n);
      const TreeLinks& p = links[l.parent];
      REQUIRE(std::count(p.children, p.children + p.numChildren, r) == 1);
      REQUIRE(l.depth == p.depth + 1);
    }
    int height = 0;
    for (int k = 0; k < l.numChildren; ++k) {
      REQUIRE(links[l.children[k]].parent == r);
      height = std::max(height, links[l.children[k]].height + 1);
    }
    for (int k = l.numChildren; k < 2; ++k) REQUIRE(l.children[k] == -1);
    REQUIRE(l.height == height);
    if (l.numChildren == 2) REQUIRE(links[l.children[0]].height <= links[l.children[1]].height);
  }
  std::vector<int> seen(n, 0), todo{root};
  while (!todo.empty()) {
    int r = todo.back();
    todo.pop_back();
    ++seen[r];
    for (int k = 0; k < links[r].numChildren; ++k) todo.push_back(links[r].children[k]);
  }
  for (int r = 0; r < n; ++r) REQUIRE(seen[r] == 1);
}

}  // namespace

TEST_CASE("double binary trees: each is one tree of depth floor(log2 n) over every rank", "[unit][pattern]") {
  for (int n = 1; n <= 300; ++n) {
    for (int t = 0; t < 2; ++t) {
      INFO("n=" << n << " tree=" << t);
      std::vector<TreeLinks> links(n);
      for (int r = 0; r < n; ++r) links[r] = dtreeLinks(r, n, t);
      const int root = dtreeRoot(n, t);
      REQUIRE(root >= 0);
      REQUIRE(root < n);
      requireTree(links, root);
      REQUIRE(dtreeHeight(n) == floorLog2(n));
      REQUIRE(links[root].height == dtreeHeight(n));
      for (int r = 0; r < n; ++r) REQUIRE(links[r].depth <= floorLog2(n));
    }
  }
}

TEST_CASE("double binary trees are complementary: no rank is interior in both", "[unit][pattern]") {
  for (int n = 1; n <= 300; ++n) {
    INFO("n=" << n);
    int interior[2] = {0, 0};
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      TreeLinks l0 = dtreeLinks(r, n, 0), l1 = dtreeLinks(r, n, 1);
      REQUIRE((l0.numChildren == 0 || l1.numChildren == 0));
      // The documented sets: odd ranks in tree 0, even ranks below n - 1 in tree 1.
      REQUIRE((l0.numChildren > 0) == (r % 2 == 1));
      REQUIRE((l1.numChildren > 0) == (r % 2 == 0 && r < n - 1));
      interior[0] += l0.numChildren > 0;
      interior[1] += l1.numChildren > 0;
    }
    // Every rank is interior in one tree when n is even; one rank is a leaf in both when n is odd.
    REQUIRE(interior[0] + interior[1] == (n % 2 == 0 ? n : n - 1));
  }
}

TEST_CASE("rooted double binary trees put any root above two complementary trees", "[unit][pattern]") {
  for (int n = 1; n <= 70; ++n) {
    for (int root = 0; root < n; ++root) {
      INFO("n=" << n << " root=" << root);
      std::vector<TreeLinks> links[2];
      for (int t = 0; t < 2; ++t) {
        for (int r = 0; r < n; ++r) links[t].push_back(rootedDtreeLinks(r, n, root, t));
        requireTree(links[t], root);
        REQUIRE(links[t][root].numChildren == (n > 1 ? 1 : 0));
        for (int r = 0; r < n; ++r) REQUIRE(links[t][r].depth <= (n > 1 ? floorLog2(n - 1) + 1 : 0));
      }
      if (n > 1) REQUIRE(links[0][root].children[0] == (root + 1 + dtreeRoot(n - 1, 0)) % n);
      for (int r = 0; r < n; ++r)
        if (r != root) REQUIRE((links[0][r].numChildren == 0 || links[1][r].numChildren == 0));
    }
  }
}

namespace {

// Roots to try: all of them on small communicators, the edges and a middle one on larger ones.
std::vector<int> rootsFor(int n) {
  std::vector<int> roots;
  if (n <= 6) {
    for (int r = 0; r < n; ++r) roots.push_back(r);
  } else {
    roots = {0, 1, n / 2, n - 1};
  }
  return roots;
}

constexpr uint64_t kCounts[] = {0, 1, 2, 3, 7, 33, 100};
constexpr uint64_t kChunks[] = {1, 3, 1 << 20};

// Out of place, no rank's send buffer may be written.
// Rank r's "tree" plan of a call over n ranks.
Plan treePlan(Coll coll, int n, int r, int root, uint64_t count, size_t elemSize, uint64_t chunkBytes) {
  CollArgs a;
  a.coll = coll;
  a.algo = Algo::kTree;
  a.nranks = n;
  a.rank = r;
  a.root = root;
  a.count = count;
  a.elemSize = elemSize;
  a.chunkBytes = chunkBytes;
  Plan p;
  buildPlan(a, &p);
  return p;
}

void requireSendUntouched(const Sim& sim, bool inPlace) {
  if (inPlace) return;
  for (int r = 0; r < sim.n; ++r)
    for (Cell c : sim.ranks[r].send) REQUIRE(c == (Cell(1) << r));
}

}  // namespace

TEST_CASE("tree allreduce plans reduce every byte exactly once and deliver it everywhere", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (uint64_t count : kCounts) {
      for (uint64_t chunk : kChunks) {
        for (bool inPlace : {false, true}) {
          for (bool avg : {false, true}) {
            INFO("n=" << n << " count=" << count << " chunk=" << chunk << " inPlace=" << inPlace << " avg=" << avg);
            Sim sim = simulate(Coll::kAllReduce, n, count, inPlace, avg, 0, chunk, Algo::kTree);
            bool ok = sim.run();
            INFO(sim.error);
            REQUIRE(ok);
            for (int r = 0; r < n; ++r)
              for (uint64_t i = 0; i < count; ++i)
                REQUIRE(sim.ranks[r].recv[i] == (fullMask(n) | (avg && n > 1 ? kScaled : 0)));
            requireSendUntouched(sim, inPlace);
          }
        }
      }
    }
  }
}

TEST_CASE("tree broadcast plans deliver the root's buffer everywhere, from any root", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (int root : rootsFor(n)) {
      for (uint64_t count : kCounts) {
        for (uint64_t chunk : kChunks) {
          for (bool inPlace : {false, true}) {
            INFO("n=" << n << " root=" << root << " count=" << count << " chunk=" << chunk << " inPlace=" << inPlace);
            Sim sim = simulate(Coll::kBroadcast, n, count, inPlace, false, root, chunk, Algo::kTree);
            bool ok = sim.run();
            INFO(sim.error);
            REQUIRE(ok);
            for (int r = 0; r < n; ++r)
              for (uint64_t i = 0; i < count; ++i) REQUIRE(sim.ranks[r].recv[i] == (Cell(1) << root));
            requireSendUntouched(sim, inPlace);
          }
        }
      }
    }
  }
}

TEST_CASE("tree reduce plans give the root every contribution exactly once, from any root", "[unit][plan]") {
  for (int n = 1; n <= 16; ++n) {
    for (int root : rootsFor(n)) {
      for (uint64_t count : kCounts) {
        for (uint64_t chunk : kChunks) {
          for (bool inPlace : {false, true}) {
            for (bool avg : {false, true}) {
              INFO("n=" << n << " root=" << root << " count=" << count << " chunk=" << chunk << " inPlace=" << inPlace
                        << " avg=" << avg);
              Sim sim = simulate(Coll::kReduce, n, count, inPlace, avg, root, chunk, Algo::kTree);
              bool ok = sim.run();
              INFO(sim.error);
              REQUIRE(ok);
              for (uint64_t i = 0; i < count; ++i)
                REQUIRE(sim.ranks[root].recv[i] == (fullMask(n) | (avg && n > 1 ? kScaled : 0)));
              requireSendUntouched(sim, inPlace);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("tree plans name their algorithm and keep every transfer within the chunk size", "[unit][plan]") {
  for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce}) {
    for (int n : {2, 5, 8}) {
      for (int r = 0; r < n; ++r) {
        constexpr uint64_t kChunk = 256;
        const Plan p = treePlan(coll, n, r, n - 1, 1000, 4, kChunk);
        INFO(collName(coll) << " n=" << n << " rank " << r);
        CHECK(std::string(p.algorithm) == "tree");
        for (const Step& s : p.steps) {
          CHECK(s.bytes > 0);
          if (s.kind != StepKind::kCopy) CHECK(s.bytes <= kChunk);
        }
      }
    }
  }
}

TEST_CASE("small tree broadcasts and reduces go whole down one binomial tree: n - 1 messages", "[unit][plan]") {
  // The double binary tree would send each half on its own: 2 (n - 1) messages for a buffer whose
  // messages cost their handling, not their bytes. Above the limit (or a chunk) the halves return.
  for (Coll coll : {Coll::kBroadcast, Coll::kReduce}) {
    for (int n : {2, 3, 4, 7, 8, 13}) {
      for (uint64_t bytes : {uint64_t{4}, kBinomialMaxBytes, kBinomialMaxBytes + 4}) {
        int sends = 0, maxRecvs = 0;
        for (int r = 0; r < n; ++r) {
          const Plan p = treePlan(coll, n, r, n / 2, bytes / 4, 4, 1 << 20);
          int recvs = 0;
          for (const Step& s : p.steps) {
            sends += s.kind == StepKind::kSend;
            recvs += s.kind == StepKind::kRecv || s.kind == StepKind::kRecvReduce;
          }
          maxRecvs = std::max(maxRecvs, recvs);
        }
        INFO(collName(coll) << " n=" << n << " " << bytes << " B");
        if (bytes <= kBinomialMaxBytes) {
          CHECK(sends == n - 1);
          // Broadcast: every rank hears once; Reduce: the root hears once per subtree.
          CHECK(maxRecvs ==
                (coll == Coll::kBroadcast ? 1 : static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1)))));
        } else {
          CHECK(sends == 2 * (n - 1));
        }
      }
    }
  }
}

namespace {

// The time every rank's plan takes when each message occupies its link for one time unit (links are
// one-way and FIFO, any number of them busy at once) and local steps are free. Steps post as the
// executor posts them: per peer and direction in plan order, once their dependencies are done.
// Returns -1 if the plans wait on each other in a cycle (a deadlock).
class PipelineClock {
 public:
  explicit PipelineClock(const std::vector<Plan>& plans) : plans_(plans) {
    const size_t n = plans.size();
    post_.resize(n);
    fin_.resize(n);
    where_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      const size_t steps = plans[r].steps.size();
      post_[r].assign(steps, kUnknown);
      fin_[r].assign(steps, kUnknown);
      where_[r].resize(steps);
      for (const Plan::PeerQueue& q : plans[r].peers) {
        for (size_t k = 0; k < q.sends.size(); ++k) where_[r][q.sends[k]] = {&q.sends, k};
        for (size_t k = 0; k < q.recvs.size(); ++k) where_[r][q.recvs[k]] = {&q.recvs, k};
      }
      for (size_t k = 0; k < plans[r].locals.size(); ++k) where_[r][plans[r].locals[k]] = {&plans[r].locals, k};
    }
  }

  int64_t total() {
    int64_t end = 0;
    for (size_t r = 0; r < plans_.size(); ++r)
      for (size_t i = 0; i < plans_[r].steps.size(); ++i) end = std::max(end, finish(r, i));
    return cycle_ ? -1 : end;
  }

 private:
  static constexpr int64_t kUnknown = -1, kVisiting = -2;
  struct Where {
    const std::vector<int32_t>* queue = nullptr;
    size_t k = 0;
  };

  bool isLocal(size_t r, size_t i) const {
    StepKind k = plans_[r].steps[i].kind;
    return k == StepKind::kCopy || k == StepKind::kScale;
  }

  // Guards a memo entry against cycles; returns false if the value must not be computed now.
  bool enter(int64_t& slot) {
    if (slot == kVisiting) cycle_ = true;
    if (slot != kUnknown) return false;
    slot = kVisiting;
    return true;
  }

  int64_t post(size_t r, size_t i) {
    int64_t& p = post_[r][i];
    if (!enter(p)) return std::max<int64_t>(p, 0);
    int64_t t = 0;
    for (int d : plans_[r].steps[i].deps)
      if (d >= 0) t = std::max(t, finish(r, d));
    const Where& w = where_[r][i];
    if (w.k > 0) {
      size_t prev = (*w.queue)[w.k - 1];
      t = std::max(t, isLocal(r, i) ? finish(r, prev) : post(r, prev));  // locals run one at a time
    }
    return p = t;
  }

  int64_t finish(size_t r, size_t i) {
    int64_t& f = fin_[r][i];
    if (!enter(f)) return std::max<int64_t>(f, 0);
    if (isLocal(r, i)) return f = post(r, i);
    const Step& s = plans_[r].steps[i];
    const Where& w = where_[r][i];
    const bool send = s.kind == StepKind::kSend;
    const Plan& peer = plans_[s.peer];
    size_t j = 0;
    for (const Plan::PeerQueue& q : peer.peers)
      if (q.peer == static_cast<int>(r)) j = (send ? q.recvs : q.sends).at(w.k);
    int64_t t = std::max(post(r, i), post(s.peer, j));
    if (w.k > 0) t = std::max(t, finish(r, (*w.queue)[w.k - 1]));  // the link's previous message
    return f = t + 1;
  }

  const std::vector<Plan>& plans_;
  std::vector<std::vector<int64_t>> post_, fin_;
  std::vector<std::vector<Where>> where_;
  bool cycle_ = false;
};

int64_t pipelineTime(Coll coll, int n, uint64_t count, int root) {
  std::vector<Plan> plans(n);
  for (int r = 0; r < n; ++r) plans[r] = treePlan(coll, n, r, root, count, 1, 1);
  return PipelineClock(plans).total();
}

}  // namespace

TEST_CASE("tree plans pipeline: each further chunk costs a constant, not the tree's depth", "[unit][plan]") {
  // With one-element chunks, count / 2 chunks per half. A chunk-by-chunk schedule would cost about
  // 2 log2(n) time units per AllReduce chunk. The pipeline costs one unit per chunk where each link
  // carries one tree's chunks (Broadcast and Reduce, n > 2), and two where a link carries a chunk of
  // each tree (AllReduce: one tree's up and the other's down), plus the trees' depth once.
  for (int n : {2, 3, 4, 7, 8, 13, 16}) {
    for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce}) {
      const int root = n / 2;
      const int64_t perChunk = coll == Coll::kAllReduce || n == 2 ? 2 : 1;
      int64_t t32 = pipelineTime(coll, n, 2 * 32, root), t64 = pipelineTime(coll, n, 2 * 64, root);
      INFO(collName(coll) << " n=" << n << ": " << t32 << " for 32 chunks per half, " << t64 << " for 64");
      REQUIRE(t32 > 0);
      REQUIRE(t64 - t32 == perChunk * 32);
      REQUIRE(t32 <= perChunk * 32 + 2 * (floorLog2(n) + 1));
    }
  }
}
