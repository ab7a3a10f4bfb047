// The cost model: how long each algorithm takes for a collective of S bytes on a cluster, from
// per-link-class alpha (latency per message), beta (1 / bandwidth) and gamma (1 / local reduction
// throughput). The selector (select.h) evaluates it once per communicator into a table; braid-topo
// --plan prints it for clusters that do not exist here. Formulas and constants: topology/cost.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/coll.h"

namespace braid::topo {

// Constants per link class (intra: ranks on one host, over shared memory or NVLink; inter: ranks on
// different hosts). alpha: microseconds per message step; gbps: GB/s (bytes per ns) a rank moves in
// and out at once while its peers do the same.
struct LinkCost {
  double alphaUs = 0;
  double gbps = 0;
};

struct CostParams {
  double intraAlphaUs = 0, intraGbps = 0;
  double interAlphaUs = 0, interGbps = 0;
  double reduceGbps = 0;    // bytes of one input a rank reduces per ns
  double oversubUs = 0;     // extra per message step per extra rank sharing a core, over sockets
  double oversubShmUs = 0;  // the same between ranks of a host that talk through shared memory
  double chunkBytes = 0;    // pipelining chunk the algorithms use (BRAID_CHUNK_SIZE)
  int gossipRounds = 0;     // BRAID_GOSSIP_ROUNDS (not a cost; changes gossip's price)
  // BRAID_COST_INTER_LINKS: inter-host links per host, each interGbps, shared by the host's ranks whose
  // steps cross hosts at once; 0 = one link per rank (the ranks never share). Not in a file's cost line.
  int interLinks = 0;

  LinkCost link(bool inter) const {
    return inter ? LinkCost{interAlphaUs, interGbps} : LinkCost{intraAlphaUs, intraGbps};
  }

  // The declared defaults of src/base/config.cc (BRAID_COST_*, BRAID_CHUNK_SIZE, BRAID_GOSSIP_ROUNDS:
  // calibrated on the development machine), whatever the environment says. A topology file's cost
  // line overrides them, then applyEnv the variables that are set.
  static CostParams defaults();
  // Applies the BRAID_COST_*, BRAID_CHUNK_SIZE and BRAID_GOSSIP_ROUNDS variables that are set; a
  // malformed value is braidInvalidArgument naming it.
  Status applyEnv();
};

// The fields by name, for the topology file's `cost` line and braid-topo --json. Stable names:
// intra_alpha_us intra_gbps inter_alpha_us inter_gbps reduce_gbps oversub_us oversub_shm_us chunk_bytes.
struct CostField {
  const char* name;
  double CostParams::*member;
};
const std::vector<CostField>& costFields();

// The cluster a communicator spans, as the cost model sees it.
struct ClusterShape {
  int nranks = 1;
  std::vector<int> hostOf;  // rank -> dense host index 0..nhosts-1
  int nhosts = 1;
  std::vector<int> hostSize;   // ranks per host
  std::vector<int> hostCores;  // cores per host (0 = unknown)
  // Per host, the bytes of a call's buffers on the host (all its ranks' send and receive buffers)
  // from which transfers between its ranks copy each byte twice, through FIFOs both sides map
  // (Link::receiveCopies): 0 where single copy is off, the single-copy cut (BRAID_NT_STORES_MIN,
  // above which calls do not ask for it) where it is on, kNever for sockets, a host of one rank, or
  // a shape made up for braid-topo (also what an empty vector means). Learnt after the links
  // connect (src/comm_topo.cc tableAfterLinks); a topology file's cluster line may say it (fifo_from=).
  static constexpr uint64_t kNever = UINT64_MAX;
  std::vector<uint64_t> hostTwoCopiesFrom;

  // Every rank on one host; `cores` per host.
  static ClusterShape single(int nranks, int cores);
  // `hosts` hosts, ranks assigned in blocks of nranks/hosts (the last hosts get fewer when it does
  // not divide), `cores` each: the layout braidrun --hosts gives.
  static ClusterShape blocks(int nranks, int hosts, int cores);
  bool oversubscribed() const;  // some host runs more ranks than it has cores
  int maxHostSize() const;
  uint64_t twoCopiesFrom(int host) const {
    return host >= 0 && host < static_cast<int>(hostTwoCopiesFrom.size()) ? hostTwoCopiesFrom[host] : kNever;
  }
  // Hosts 0..hosts-1's values as a topology file's fifo_from= lists them ("0,-,33554432"), or ""
  // when every one is kNever.
  std::string twoCopiesList(int hosts) const;
  // One entry of such a list: a byte count below kNever into *out, or "-" for kNever; false for
  // anything else (a suffix, a sign, an overflow, kNever's own digits).
  static bool parseTwoCopiesFrom(std::string_view item, uint64_t* out);
  // Whether a call with `hostBytes` on `host` moves its transfers there with two copies.
  bool twoCopies(int host, double hostBytes) const {
    const uint64_t from = twoCopiesFrom(host);
    return from != kNever && hostBytes > static_cast<double>(from);
  }
};

// Predicted microseconds for `coll` of `bytes` (the call's buffer: AllReduce/Broadcast/Reduce the
// whole buffer, AllGather/ReduceScatter/Gather/Scatter the gathered total, AllToAll the per-rank total) with `algo`;
// +infinity when the algorithm does not apply (algoAvailable false, or gossip on an exact comm).
double predictUs(Coll coll, Algo algo, uint64_t bytes, const ClusterShape& c, const CostParams& p);

}  // namespace braid::topo
