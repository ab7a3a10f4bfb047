// The cost model. Each algorithm's time is a sum of message steps on a critical path (alpha each),
// bytes moved through one rank (beta: a rank sends and receives at once, so beta prices a byte in
// plus a byte out) and bytes it reduces (gamma). Steps between hosts use the inter-host constants;
// an algorithm whose critical path crosses hosts at every step (ring, trees over ranks) is priced
// wholly at the inter-host rate once the communicator spans hosts.
//
// Sharing a core: when a host runs f = ranks / cores > 1 ranks per core, every rank gets 1/f of a
// core's memory bandwidth and reduction throughput, and each message step waits on average for (f -
// 1) other ranks to be scheduled: alpha grows by oversubUs * (f - 1). That wait is the transport's:
// a rank blocked on a socket needs the kernel to wake it, where one that waits on shared memory
// spins a while and then yields its core, so that the rank it waits for runs at once. On one host
// of two or more ranks a core whose ranks talk through shared memory (hostTwoCopiesFrom known) a
// step waits oversubShmUs per extra rank a core instead: 1 KiB AllReduces on 4-8 ranks of 2 cores
// over the shm FIFOs (mailboxes off) took 0.6-3.0 us a step per extra rank a core, 1.75 the median
// over four algorithms, where over loopback tcp they took 12-16
// (perf/results/2026-12-07-oversub-shm.md). With it Rabenseifner takes the 4-rank AllReduce at
// 64-128 KiB (1.16-2.09x the doubling call by call, 1.05-1.42x in the benchmarks), the ring the
// 5-rank one at 48-128 KiB (1.34-1.61x; even at 64 KiB in the benchmark) and the AllGather of 1-2
// MiB on 5-12 ranks (1.23-1.60x the linear plan); it loses up to 37% at some points of 6-7 ranks at
// 32-128 KiB, 9-12 ranks at 256 KiB and the 16-rank ReduceScatter of 2 MiB (that file). Where the
// cores are shared by fewer (3 ranks on 2: 3.6-5.2 us per extra rank a core, and the AllReduce and
// AllGather the shorter wait moved to the ring lost 8-35% at 128 KiB), across hosts (not measured),
// and for Broadcast and Reduce it stays the socket's. Those two run their chain ahead from call to
// call (a rank starts the next once its own part is done), which a call priced alone does not see:
// with the shorter wait their trees took 4-6 ranks at 32-128 KiB, 1.0-1.55x the chain's speed alone
// but 0.43-0.78 of it back to back, as benchmarks and training steps call them.
//
// Sharing a host's links (BRAID_COST_INTER_LINKS = L > 0): a host's ranks whose steps cross hosts at the
// same time share its L links, so an inter-host byte costs ceil(k / L) times beta, k being the most
// ranks of one host that cross at once in that algorithm: the ring's edges that leave a host (1 when
// ranks sit on hosts in blocks), the ranks whose recursive partner is elsewhere, every local rank in the
// hierarchical algorithm's inter-host rings, and for the trees (whose edges do not follow hosts) all of
// a host's ranks once their pipeline is full: a bound, reached when none of a host's tree edges stays
// inside it (8 ranks on 4 hosts).
// With L = 0 every rank has a link of its own. Measured on tests/netns (perf/results/2026-12-01-netns.md):
// 4 hosts x 2 ranks on 1 Gbit/s links, where per-rank links predicted hierarchical and tree 2-3x too fast.
//
// Default constants were fitted on the development VM (2 cores, shared memory, TCP over loopback
// for emulated hosts); the fit and the measurements it came from are in perf/results/. A topology
// file's cost line replaces them, and BRAID_COST_* replaces both.
#include "topology/cost.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "algorithms/patterns/binomial.h"
#include "algorithms/patterns/recursive.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/patterns/tree.h"
#include "src/base/config.h"

namespace braid::topo {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The knob of each of the first seven fields of costFields(); chunk_bytes's is BRAID_CHUNK_SIZE.
const char* const kEnvFields[] = {"BRAID_COST_INTRA_ALPHA_US", "BRAID_COST_INTRA_GBPS",  "BRAID_COST_INTER_ALPHA_US",
                                  "BRAID_COST_INTER_GBPS",     "BRAID_COST_REDUCE_GBPS", "BRAID_COST_OVERSUB_US",
                                  "BRAID_COST_OVERSUB_SHM_US"};

int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

// Per-call view of the cluster: the rates a step runs at.
struct Rates {
  double alphaUs;  // per message step
  double betaUs;   // per byte moved in and out
  double gammaUs;  // per byte reduced
};

class Model {
 public:
  Model(const ClusterShape& c, const CostParams& p, Coll coll) : c_(c), p_(p) {
    share_ = perCore(c.hostSize);
    shmWait_ = c.nhosts == 1 && share_ >= 2 && c.twoCopiesFrom(0) != ClusterShape::kNever && coll != Coll::kBroadcast &&
               coll != Coll::kReduce;
  }

  // `senders`: how many ranks of one host cross hosts at once in this step (see the top of the file).
  // `share`: the ranks per core of a step in which not every rank works (0: share_, all of them).
  Rates rates(bool inter, int senders = 1, double share = 0) const {
    const LinkCost l = p_.link(inter);
    const double links = inter && p_.interLinks > 0 ? std::ceil(static_cast<double>(senders) / p_.interLinks) : 1.0;
    const double f = share > 0 ? share : share_;
    const double wait = !inter && shmWait_ ? p_.oversubShmUs : p_.oversubUs;
    return Rates{l.alphaUs + wait * (f - 1.0), f * std::max(1.0, links) / (l.gbps * 1e3), f / (p_.reduceGbps * 1e3)};
  }
  // The ranks per core of the busiest host, at least 1, for `onHost[h]` working ranks on host h
  // (hosts of unknown cores left out).
  double perCore(const std::vector<int>& onHost) const {
    double f = 1.0;
    for (int h = 0; h < c_.nhosts; ++h)
      if (h < static_cast<int>(c_.hostCores.size()) && c_.hostCores[h] > 0 && h < static_cast<int>(onHost.size()))
        f = std::max(f, static_cast<double>(onHost[h]) / c_.hostCores[h]);
    return f;
  }
  // The same counting only ranks [0, k): what a step in which only those work shares the cores with.
  double shareOfFirst(int k) const {
    std::vector<int> on(c_.nhosts, 0);
    for (int r = 0; r < std::min(k, c_.nranks); ++r) ++on[c_.hostOf[r]];
    return std::min(perCore(on), share_);
  }
  // The most ranks of one host whose partner peer(r) lives on another host.
  template <class Peer>
  int crossing(Peer peer) const {
    std::vector<int> out(c_.nhosts, 0);
    int most = 0;
    for (int r = 0; r < c_.nranks; ++r) {
      const int q = peer(r);
      if (q >= 0 && q < c_.nranks && c_.hostOf[q] != c_.hostOf[r]) most = std::max(most, ++out[c_.hostOf[r]]);
    }
    return most;
  }
  // The same for the partners at ring distance d (the ring's neighbour at 1).
  int ringCrossing(int d = 1) const {
    return crossing([this, d](int r) { return (r + d) % c_.nranks; });
  }
  bool multiHost() const { return c_.nhosts > 1; }
  // Whether some rank's partner at distance `d` (XOR) lives on another host.
  bool crossesHosts(int d) const {
    for (int r = 0; r < c_.nranks; ++r) {
      int q = r ^ d;
      if (q < c_.nranks && c_.hostOf[r] != c_.hostOf[q]) return true;
    }
    return false;
  }
  int n() const { return c_.nranks; }
  double chunk() const { return std::max(64.0, p_.chunkBytes); }

  // A Broadcast of a few KiB on one host (the binomial tree's sizes) is priced as one call of a
  // stream of three, not alone. Broadcasts overlap back to back (a rank starts its next call once
  // its own part is done: the root once its sends are out), so a stream goes at the pace of the
  // rank that sends most, and on one host there is no wire: a step's alpha is its sender's work
  // (over loopback tcp the sender runs the receiver's half of the stack too). The binomial tree
  // (ceil(log2 n) hops, its root sending ceil(log2 n) messages a call) keeps its price: its path
  // and its pace are the same. The chain, n - 1 hops but one message a rank, averages
  // (n - 1 + 2 x 1) / 3 steps a call: below the tree's up to 7 ranks and at 9-10, equal at 8 and
  // 11, above from 12 ranks, where its hops would cost an isolated call dearly. Measured
  // (perf/results/2026-12-07-small-broadcast-stream.md). Across hosts alpha is mostly the wire's,
  // which the root does not spend, and the call alone is priced as before (not measured).
  bool smallOneHostBroadcast(double S) const {
    return !multiHost() && binomialTreeFits(static_cast<uint64_t>(S), static_cast<uint64_t>(chunk()));
  }

  double ring(Coll coll, double S) const {
    const int p = n();
    // AllToAll goes pairwise, to every other rank: all of a host's ranks cross at once.
    const Rates r = rates(multiHost(), coll == Coll::kAllToAll ? c_.maxHostSize() : ringCrossing());
    const double seg = S / p;
    switch (coll) {
      case Coll::kAllReduce: {
        const double t = 2.0 * (p - 1) * (r.alphaUs + seg * r.betaUs) + (p - 1) * seg * r.gammaUs;
        if (p != 2 || multiHost()) return t;
        // Two ranks on one host: the all-gather's first chunk waits for the reduce-scatter's
        // first chunk to be sent and folded, and the last fold for the last send: the ring pays
        // two of its chunks (twoRankRingChunk) on top. Recursive doubling has no such wait.
        // Measured (shm, 2 ranks, AMD VM, 7 interleaved rounds, out of place / in place, us):
        // ring 15.0 / 14.6, 24.9 / 24.8, 47.7 / 45.3, 69.7 / 67.3, 138 / 128 at 128 KiB .. 2 MiB,
        // recursive doubling 8.5 / 9.4, 17.7 / 19.4, 33.2 / 41.9, 68.9 / 85.3, 133 / 165; over
        // tcp on one host recursive doubling was 1.1x faster at 128-256 KiB, even at 512 KiB and
        // behind from 1 MiB. This term puts the switch between 512 KiB and 1 MiB.
        const double c =
            static_cast<double>(twoRankRingChunk(static_cast<uint64_t>(seg), static_cast<uint64_t>(chunk())));
        return t + 2 * std::min(c, seg) * r.betaUs;
      }
      case Coll::kReduceScatter:
        return (p - 1) * (r.alphaUs + seg * (r.betaUs + r.gammaUs));
      case Coll::kAllGather:
      case Coll::kAllToAll:
        return (p - 1) * (r.alphaUs + seg * r.betaUs);
      case Coll::kBroadcast:
      case Coll::kReduce: {  // pipelined chain: (n - 1) hops to fill, then one chunk per step
        const double k = std::max(1.0, std::ceil(S / chunk())), c = S / k;
        const double g = coll == Coll::kReduce ? c * r.gammaUs : 0;
        if (coll == Coll::kBroadcast && smallOneHostBroadcast(S)) return (p + 1) / 3.0 * (r.alphaUs + S * r.betaUs);
        return (p - 2 + k) * (r.alphaUs + c * r.betaUs + g);
      }
      case Coll::kBarrier:
        return ceilLog2(p) * r.alphaUs;
      case Coll::kSendRecv:
      case Coll::kGather:
      case Coll::kScatter:
        return kInf;
    }
    return kInf;
  }

  // AllToAll by Bruck (algorithms/alltoall/bruck.cc; S: a rank's whole buffer, n blocks), small
  // calls only (halfInOneChunk): ceil(log2 n) rounds of one message, the round of distance d moving
  // the blocks whose index has that bit (about n / 2), where the pairwise exchange sends n - 1
  // messages; every block a round moves is packed by a copy, and every block is copied into place
  // at the end (priced at beta, a copy being a pass in and out like a byte moved).
  double bruckAllToAll(double S) const {
    if (!halfInOneChunk(S)) return kInf;
    const int p = n();
    const double block = S / p;
    double t = 0, copied = p - 1;
    for (int d = 1; d < p; d <<= 1) {
      int moving = 0;
      for (int i = 1; i < p; ++i) moving += (i & d) != 0;
      copied += moving;
      const int cross = ringCrossing(d);
      const Rates r = rates(cross > 0, cross);
      t += r.alphaUs + moving * block * r.betaUs;
    }
    return t + copied * block * rates(false).betaUs;
  }

  // Gather/Scatter (S: the root's whole buffer), linear: the root takes or gives the n - 1 blocks one
  // message after another, while every other rank of a host sends or receives at once.
  double linear(double S) const {
    const int p = n();
    const Rates r = rates(multiHost(), c_.maxHostSize());
    return (p - 1) * (r.alphaUs + S / p * r.betaUs);
  }

  // AllGather, linear: every block goes straight to every rank, all messages at once, so the gather
  // is one message latency plus the bytes. On one host only: across hosts every rank's n - 1 messages
  // hit the network together, where the ring keeps each link to one neighbour.
  // Through FIFOs with two copies (ClusterShape::hostTwoCopiesFrom) a rank copies its own block into n - 1
  // FIFOs and each of the others out of one, where the ring (the shm transport forwards) copies each
  // block it passes on out of one FIFO into the output and the next FIFO in one pass: 4n - 4 passes
  // over a block in the transfers against the ring's 3n - 2 (the own block's copy into the output,
  // the same in both, is not in beta's bytes). Measured (perf/results/2026-12-06-allgather-ring-shm.md
  // and 2026-12-06-allgather-fifo-table.md, 3-4 ranks on 2 cores, single copy off): the ring ahead
  // from 512 KiB-1 MiB, 1.05-1.5x; over sockets the linear plan stays ahead (tcp: 1.4-1.7x from
  // 1 MiB), and by single copy (under the cut) it reads each block once where the ring cannot do
  // better. With these passes the table switched at 1 MiB for 3 and 4 ranks of 2 cores; with the
  // small gathers' price below and the doubling beside it, at 256 KiB for 3 ranks and 512 KiB for
  // 4 (the ring measured behind at 192 KiB and ahead at 384 KiB on 3 ranks,
  // 2026-12-07-allgather-doubling.md).
  //
  // A small gather (halfInOneChunk) is its messages' handling, not their bytes: each rank sends
  // n - 1 and takes n - 1. They go at once, so past the first a message costs its handling at both ends
  // but no latency of its own; on one host, where a step's alpha is mostly that work (there is no
  // wire), 3/4 of a step. Fitted to tcp on 2 cores (perf/results/2026-12-07-allgather-doubling.md):
  // 64 B-1 KiB, the linear plan about as fast as the doubling on 3 ranks and 1.04-1.1x the ring,
  // 0.8-0.9x the doubling on 4 ranks, 0.6-0.7x on 8.
  double linearAllGather(double S) const {
    if (multiHost()) return kInf;
    const int p = n();
    const Rates r = rates(false, c_.maxHostSize());
    const double steps = halfInOneChunk(S) ? 1 + 0.75 * (p - 2) : 1;
    return steps * r.alphaUs + (p - 1) * (S / p) * r.betaUs * gatherPasses(S);
  }

  // The passes over a block of a one-host gather that copies every block it moves twice through
  // the FIFOs against the ring's (above). The call's buffers on the host, as src/api_coll.cc counts
  // them for the single-copy cut: each rank's block in and the whole output, S / n + S on each of
  // n ranks.
  double gatherPasses(double S) const {
    const int p = n();
    return !multiHost() && c_.twoCopies(0, S * (p + 1)) ? (4.0 * p - 4) / (3.0 * p - 2) : 1.0;
  }

  // A call of S bytes whose half, the largest message of the doubling AllGather and of Bruck's
  // AllToAll, fits one chunk: where those two are priced. Beyond, the gathers are bytes: over
  // sockets the linear plan's n - 1 connections at once moved 4-16 MiB 1.6-1.9x faster than the
  // ring or the doubling (4 ranks on 2 cores), through the FIFOs the ring's forwarding wins, and
  // across hosts every library keeps the ring's neighbours for large gathers (the doubling's far
  // partners contend in the network, which this model does not see).
  bool halfInOneChunk(double S) const { return S <= 2 * chunk(); }

  // AllGather by doubling (algorithms/allgather/doubling.cc), small gathers only: ceil(log2 n)
  // rounds, the round of distance d moving min(d, n - d) blocks to the rank d below; every block
  // moved is copied in and out as in the linear plan (gatherPasses). Measured over tcp on 2 cores
  // (the same file): 1.04-1.33x the linear plan at 64 B-256 KiB on 4 ranks, 1.5-1.6x on 8, about
  // the same on 3; over shm FIFOs (4 ranks, 256 KiB) 1.2-1.3x the linear plan and about 1.5x the ring.
  double doublingAllGather(double S) const {
    if (!halfInOneChunk(S)) return kInf;
    const int p = n();
    const double passes = gatherPasses(S);
    double t = 0;
    for (int d = 1; d < p; d <<= 1) {
      // Rank r sends to r - d and takes from r + d: the links at ring distance d.
      const int cross = ringCrossing(d);
      const Rates r = rates(cross > 0, cross);
      t += r.alphaUs + std::min(d, p - d) * (S / p) * r.betaUs * passes;
    }
    return t;
  }

  // Gather/Scatter, binomial tree: ceil(log2 n) message steps on the critical path, and the root
  // still moves all n - 1 blocks. A block whose rank sits at depth d (the popcount of its distance
  // from the root) is forwarded d - 1 times by interior ranks; those copies compete with the root's
  // blocks for the host's memory bandwidth (shared memory) or its links (across hosts), so they are
  // priced as bytes through the root. Hence the tree wins by its fewer message steps for small blocks
  // and loses by its forwarding for large ones.
  double binomial(double S) const {
    const int p = n();
    const Rates r = rates(multiHost());
    double forwarded = 0;
    for (int v = 1; v < p; ++v) forwarded += std::popcount(static_cast<unsigned>(v)) - 1;
    return ceilLog2(p) * r.alphaUs + (p - 1 + forwarded) * (S / p) * r.betaUs;
  }

  // Two pipelined binary trees, half the data each; each rank is inner in at most one of them.
  double tree(Coll coll, double S) const {
    const int p = n();
    // Filling the pipeline moves one chunk down one edge at a time; once full, every edge carries
    // chunks at once, and a host's ranks share its links (`s`).
    const Rates r = rates(multiHost()), s = rates(multiHost(), c_.maxHostSize());
    const int d = std::max(1, log2Floor(p));  // depth of a binary tree of p nodes
    const double half = S / 2, k = std::max(1.0, std::ceil(half / chunk())), c = half / k;
    if ((coll == Coll::kBroadcast || coll == Coll::kReduce) &&
        binomialTreeFits(static_cast<uint64_t>(S), static_cast<uint64_t>(chunk()))) {
      // Small buffers go whole down one binomial tree (algorithms/broadcast/tree.cc), or up it. A
      // Broadcast's root sends to its ceil(log2 n) children one after another. A Reduce's ranks
      // all send at once, each when its subtree is in: its path is the deepest rank's chain of
      // sends, floor(log2 n) (relative rank v sits popcount(v) deep), and the root only receives,
      // the cheap end over loopback. On 3 ranks that is one step against the chain's two, where
      // the model used to tie them and take the chain; measured over tcp on one host (2 cores,
      // 16 B-4 KiB), the tree 1.01-1.30x the chain call by call (the slowest rank), 2.0-3.9x by
      // the benchmarks' mean over ranks (its leaves run ahead; perf/results/2026-12-07-reduce-three.md).
      const int steps = coll == Coll::kReduce ? log2Floor(p) : ceilLog2(p);
      return steps * (r.alphaUs + S * (r.betaUs + (coll == Coll::kReduce ? r.gammaUs : 0)));
    }
    // Broadcast and Reduce hang both trees under the root (rootedDtreeLinks): one level more than
    // the trees over the other n - 1 ranks. Each level costs two messages in a row, not one: the
    // root sends (or takes) a chunk per tree, an inner rank one per child. Per chunk of each half a
    // rank then moves 2c in and out in two messages, as the chain moves c in one: the same per
    // byte, so the trees win by a shorter fill (2 x the rooted depth - 2 chunk steps against the
    // chain's n - 2), which for a few ranks they do not have. Measured over tcp, 3 and 4 ranks on
    // 2 cores, 16-64 KiB (perf/results/2026-12-05-rooted-tcp.md): the chain 1.3-2.8x faster.
    const int rooted = dtreeHeight(std::max(1, p - 1)) + 1;
    switch (coll) {
      case Coll::kAllReduce:  // up and down overlap: per chunk 4c in and out; 2d hops to fill
        return 2 * d * (r.alphaUs + 2 * c * r.betaUs) + (k - 1) * (s.alphaUs + 4 * c * s.betaUs) + S * r.gammaUs;
      case Coll::kBroadcast:
        return rooted * 2 * (r.alphaUs + c * r.betaUs) + (k - 1) * 2 * (s.alphaUs + c * s.betaUs);
      case Coll::kReduce:
        return rooted * 2 * (r.alphaUs + c * (r.betaUs + r.gammaUs)) +
               (k - 1) * 2 * (s.alphaUs + c * (s.betaUs + s.gammaUs));
      case Coll::kGather:
      case Coll::kScatter:
        return binomial(S);
      default:
        return kInf;
    }
  }

  // Extra cost of folding n down to the power of two below it and back (recursive algorithms).
  // Only the first 2(n - p) ranks work in those two steps, in pairs (algorithms/patterns/
  // recursive.h). On a host with more ranks than cores a step's alpha is mostly the wait for the
  // ranks sharing a core to have their turn, and a rank with nothing to do in the step gives its
  // turn back at once: the fold's alpha waits on its pairs only. Priced as a step of every rank, it
  // made the doubling lose small calls on 3-7 ranks of 2 cores to the double tree, which the
  // doubling beat 1.15-1.9x over tcp up to 32 KiB (and to 48 KiB on 3 ranks, 64 KiB on 6;
  // perf/results/2026-12-07-allreduce-fold.md). Its bytes keep the host's share: priced cheaper,
  // Rabenseifner took 1 MiB on 9 ranks of 2 cores from the ring, which beat it 1.15-1.4x there.
  double fold(double S) const {
    const int p = n(), pof2 = pow2Floor(p);
    if (p == pof2) return 0;
    const Rates r = rates(multiHost());
    const double alpha = rates(multiHost(), 1, shareOfFirst(2 * foldExtra(p))).alphaUs;
    return 2 * (alpha + S * r.betaUs) + S * r.gammaUs;
  }

  double recursiveDoubling(double S) const {
    const int p = n(), pof2 = pow2Floor(p);
    double t = fold(S);
    for (int d = 1; d < pof2; d <<= 1) {
      const Rates r = rates(crossesHosts(d), crossing([d](int q) { return q ^ d; }));
      t += r.alphaUs + S * (r.betaUs + r.gammaUs);
    }
    return t;
  }

  // Reduce-scatter by recursive halving (largest piece to the nearest partner first), then the
  // all-gather in reverse: every round moves half of the previous one.
  double rabenseifner(double S) const {
    const int p = n(), pof2 = pow2Floor(p);
    double t = fold(S), piece = S;
    for (int d = 1; d < pof2; d <<= 1) {
      piece /= 2;
      const Rates r = rates(crossesHosts(d), crossing([d](int q) { return q ^ d; }));
      t += 2 * r.alphaUs + piece * (2 * r.betaUs + r.gammaUs);
    }
    // Two ranks on one host wait as the ring does (ring()), for chunks of chunk(): 2 ranks, shm,
    // 5 rounds, out of place: 96 us at 1 MiB against the ring's 74 and recursive doubling's 72.
    if (p == 2 && !multiHost()) t += 2 * std::min(chunk(), S / 2) * rates(false).betaUs;
    return t;
  }

  // ReduceScatter by recursive halving (algorithms/reduce_scatter/halving.cc): the farthest partner
  // first with half the buffer, each round half the one before; a non-power of two first folds its
  // extra ranks in (a whole buffer reduced) and hands them their block at the end. The ring moves as
  // many bytes in more steps, but forwards each reduced chunk in the pass that reduced it, where a
  // round here reads back from scratch what the round before wrote (one more beta per byte after the
  // first round) and the own block is copied out at the end. Measured, 4 ranks on 2 cores: halving
  // 1.3-1.4x the ring over tcp up to 64 KiB, even at 256 KiB-1 MiB, 0.7-0.95x from 4 MiB.
  double halvingReduceScatter(double S) const {
    const int p = n(), pof2 = pow2Floor(p);
    double t = S / p * rates(false).betaUs, piece = S;  // the own block out of scratch: a local copy
    if (p != pof2) {
      const Rates pair = rates(multiHost());
      t += 2 * pair.alphaUs + S * (pair.betaUs + pair.gammaUs) + S / p * pair.betaUs;
    }
    for (int d = pof2 / 2; d >= 1; d >>= 1) {
      piece /= 2;
      const bool cross = crossesHosts(d);
      const int senders = crossing([d](int q) { return q ^ d; });
      Rates r = rates(cross, senders);
      // Its big early rounds go to the farthest partners, all of a host's ranks at once. Unless
      // BRAID_COST_INTER_LINKS says how many links they share, price them as sharing one: on
      // tests/netns (4 hosts x 2 ranks, 1 Gbit/s) halving lost to the ring from 512 KiB (0.35-0.6x;
      // mixed at 64 KiB) where a link per rank predicted it ahead at every size, and the ring, the
      // only ReduceScatter before it, should keep the calls halving can lose.
      if (cross && p_.interLinks == 0) r.betaUs *= std::max(1, senders);
      t += r.alphaUs + piece * (r.betaUs + r.gammaUs) + (2 * d < pof2 ? piece * r.betaUs : 0);
    }
    return t;
  }

  double hierarchical(double S) const {
    if (!multiHost()) return kInf;  // one host: it is the ring with extra steps
    int m = c_.nranks, big = 0;
    for (int s : c_.hostSize) {
      m = std::min(m, s);
      big = std::max(big, s);
    }
    const int H = c_.nhosts;
    const Rates in = rates(false), out = rates(true, m);  // each of m local ranks runs a ring across hosts
    const double shard = S / m;
    double t = 2.0 * (m - 1) * (in.alphaUs + shard * in.betaUs) + (m - 1) * shard * in.gammaUs;  // RS + AG
    t += 2.0 * (H - 1) * (out.alphaUs + shard / H * out.betaUs) + (H - 1) * shard / H * out.gammaUs;
    if (big > m) t += 2 * (in.alphaUs + S * in.betaUs) + S * in.gammaUs;  // extras fold in and get it back
    return t;
  }

  double gossip(double S, int rounds) const {
    const int k = rounds > 0 ? rounds : ceilLog2(n());
    const Rates r = rates(multiHost());
    return k * (r.alphaUs + S * (r.betaUs + 2 * r.gammaUs));
  }

 private:
  const ClusterShape& c_;
  const CostParams& p_;
  double share_;
  bool shmWait_ = false;  // a step waits oversubShmUs (see the top of the file)
};

}  // namespace

CostParams CostParams::defaults() {
  // The table's defaults only: the environment is applyEnv's, so that a topology file's constants
  // (loaded between the two) are not overridden by a variable nobody set.
  CostParams p;
  for (size_t i = 0; i < std::size(kEnvFields); ++i)
    p.*(costFields()[i].member) = strtod(paramDefault(kEnvFields[i]), nullptr);
  p.chunkBytes = static_cast<double>(paramDefaultInt("BRAID_CHUNK_SIZE"));
  p.gossipRounds = static_cast<int>(paramDefaultInt("BRAID_GOSSIP_ROUNDS"));
  p.interLinks = static_cast<int>(paramDefaultInt("BRAID_COST_INTER_LINKS"));
  return p;
}

Status CostParams::applyEnv() {
  CostParams next = *this;
  for (size_t i = 0; i < std::size(kEnvFields); ++i) {
    if (!paramIsSet(kEnvFields[i])) continue;
    double v = 0;
    BRAID_TRY(paramDouble(kEnvFields[i], &v));
    const bool rate = std::string(costFields()[i].name).find("gbps") != std::string::npos;
    if (v < 0 || (rate && v <= 0))
      return errorf(braidInvalidArgument, "%s=%g: must be %s", kEnvFields[i], v, rate ? "positive" : "non-negative");
    next.*(costFields()[i].member) = v;
  }
  if (paramIsSet("BRAID_CHUNK_SIZE")) {
    size_t chunk = 0;
    BRAID_TRY(paramSize("BRAID_CHUNK_SIZE", &chunk));
    next.chunkBytes = static_cast<double>(chunk);
  }
  if (paramIsSet("BRAID_GOSSIP_ROUNDS")) {
    int64_t k = 0;
    BRAID_TRY(paramInt("BRAID_GOSSIP_ROUNDS", &k));
    if (k < 0 || k > 64) return errorf(braidInvalidArgument, "BRAID_GOSSIP_ROUNDS=%lld: must be 0..64", (long long)k);
    next.gossipRounds = static_cast<int>(k);
  }
  if (paramIsSet("BRAID_COST_INTER_LINKS")) {
    int64_t links = 0;
    BRAID_TRY(paramInt("BRAID_COST_INTER_LINKS", &links));  // the table's range: 0..kMaxRanks
    next.interLinks = static_cast<int>(links);
  }
  *this = next;
  return okStatus();
}

const std::vector<CostField>& costFields() {
  // Order matches kEnvFields for the first seven.
  static const std::vector<CostField> fields = {
      {"intra_alpha_us", &CostParams::intraAlphaUs}, {"intra_gbps", &CostParams::intraGbps},
      {"inter_alpha_us", &CostParams::interAlphaUs}, {"inter_gbps", &CostParams::interGbps},
      {"reduce_gbps", &CostParams::reduceGbps},      {"oversub_us", &CostParams::oversubUs},
      {"oversub_shm_us", &CostParams::oversubShmUs}, {"chunk_bytes", &CostParams::chunkBytes},
  };
  return fields;
}

ClusterShape ClusterShape::single(int nranks, int cores) { return blocks(nranks, 1, cores); }

std::string ClusterShape::twoCopiesList(int hosts) const {
  std::string out;
  bool any = false;
  for (int h = 0; h < hosts; ++h) {
    const uint64_t from = twoCopiesFrom(h);
    any = any || from != kNever;
    if (h != 0) out += ',';
    out += from == kNever ? std::string("-") : std::to_string(from);
  }
  return any ? out : std::string();
}

bool ClusterShape::parseTwoCopiesFrom(std::string_view item, uint64_t* out) {
  if (item == "-") {
    *out = kNever;
    return true;
  }
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
  if (item.empty() || ec != std::errc() || p != item.data() + item.size() || x == kNever) return false;
  *out = x;
  return true;
}

ClusterShape ClusterShape::blocks(int nranks, int hosts, int cores) {
  ClusterShape c;
  c.nranks = std::max(1, nranks);
  hosts = std::clamp(hosts, 1, c.nranks);
  const int per = (c.nranks + hosts - 1) / hosts;  // braidrun --hosts: blocks of ceil(n / hosts)
  c.hostOf.resize(c.nranks);
  for (int r = 0; r < c.nranks; ++r) c.hostOf[r] = r / per;
  c.nhosts = c.hostOf.back() + 1;
  c.hostSize.assign(c.nhosts, 0);
  for (int h : c.hostOf) c.hostSize[h]++;
  c.hostCores.assign(c.nhosts, cores);
  return c;
}

bool ClusterShape::oversubscribed() const {
  for (int h = 0; h < nhosts; ++h)
    if (h < static_cast<int>(hostCores.size()) && hostCores[h] > 0 && hostSize[h] > hostCores[h]) return true;
  return false;
}

int ClusterShape::maxHostSize() const {
  return hostSize.empty() ? nranks : *std::max_element(hostSize.begin(), hostSize.end());
}

double predictUs(Coll coll, Algo algo, uint64_t bytes, const ClusterShape& c, const CostParams& p) {
  if (!algoAvailable(coll, algo)) return kInf;
  if (c.nranks <= 1) return 0;
  const Model m(c, p, coll);
  const double S = static_cast<double>(bytes);
  switch (algo) {
    case Algo::kRing:
      return m.ring(coll, S);
    case Algo::kTree:
      return m.tree(coll, S);
    case Algo::kRabenseifner:
      if (coll == Coll::kReduceScatter) return m.halvingReduceScatter(S);
      return coll == Coll::kAllReduce ? m.rabenseifner(S) : kInf;
    case Algo::kRecursiveDoubling:
      if (coll == Coll::kAllGather) return m.doublingAllGather(S);
      if (coll == Coll::kAllToAll) return m.bruckAllToAll(S);
      return coll == Coll::kAllReduce ? m.recursiveDoubling(S) : kInf;
    case Algo::kHierarchical:
      return coll == Coll::kAllReduce ? m.hierarchical(S) : kInf;
    case Algo::kGossip:
      return coll == Coll::kAllReduce ? m.gossip(S, p.gossipRounds) : kInf;
    case Algo::kLinear:
      if (coll == Coll::kAllGather) return m.linearAllGather(S);
      return coll == Coll::kGather || coll == Coll::kScatter ? m.linear(S) : kInf;
  }
  return kInf;
}

}  // namespace braid::topo
