// Hierarchical AllReduce: intra-host reduce-scatter, inter-host allreduce of each shard, intra-host
// all-gather, so each byte crosses the network once per direction per host instead of per rank.
//
// Roles (algorithms/patterns/hosts.h): with m the rank count of the smallest host, local ranks
// 0..m-1 of every host own shards 0..m-1 of the buffer; every other local rank l is an extra of owner
// l % m. Phases, on a host with e extras per owner at most and H hosts, S = buffer bytes:
//  1. each extra sends its buffer to its owner, which folds it in: S per extra;
//  2. the owners ring-reduce-scatter the buffer into m shards: (m-1)/m * S each way per owner;
//  3. owner j of every host ring-allreduces shard j across hosts (one member per host): 2(H-1)/H *
//     S/m each way per owner, scaling (avg) its segment of the shard once before spreading it;
//  4. the owners ring-all-gather the shards: (m-1)/m * S each way per owner;
//  5. each owner sends the result to its extras: S per extra.
// Steps: per chunk (cut at multiples of chunkBytes), 1 send and 1 receive per extra at an owner and
// at an extra, 2(m-1) in phases 2 and 4 and 2(H-1) in phase 3. Valid for any n >= 1, count >= 0 and
// any host layout: hosts of unequal sizes, host ids interleaved. One host: a ring allreduce among all
// ranks; one rank per host: a ring allreduce across hosts. Each element is reduced and scaled on one
// rank, so every rank ends with bitwise the same result. No scratch: every phase works in the receive
// buffer, with the dependencies of CellChain (cell_chain.h).
#include "algorithms/algorithms.h"
#include "algorithms/cell_chain.h"
#include "algorithms/patterns/hosts.h"

namespace braid {

void buildHierarchicalAllReduce(const CollArgs& a, Plan* plan) {
  const int n = a.nranks, r = a.rank;
  const uint64_t es = a.elemSize, bytes = a.count * es;
  plan->coll = Coll::kAllReduce;
  plan->algorithm = "hierarchical";
  if (n == 1 || bytes == 0) {
    plan->selfCopy(a.inPlace, bytes);
    return;
  }
  const HostGroups hosts = hostGroups(a.hostOf, n);
  const int m = hosts.owners(), host = hosts.groupOf[r], local = hosts.localOf[r];
  const std::vector<int>& mine = hosts.members[host];
  const Buf input = a.inPlace ? Buf::kRecv : Buf::kSend;
  const Range whole{0, bytes};
  CellChain cells(plan, bytes, cellBytesFor(es, a.chunkBytes));
  if (local >= m) {  // an extra: hand the buffer to the owner, get the result back
    const int owner = mine[ownerLocal(local, m)];
    cells.send(owner, input, whole);
    cells.recv(owner, whole);
    return;
  }
  const std::vector<int> extras = extrasOf(local, m, static_cast<int>(mine.size()));
  Buf contrib = input;
  for (int e : extras) {
    cells.recvReduce(mine[e], contrib, whole);
    contrib = Buf::kRecv;
  }
  const SubRing intra{std::vector<int>(mine.begin(), mine.begin() + m), local};
  const Range all{0, a.count};
  contrib = appendRingReduceScatter(&cells, intra, all, es, contrib);
  appendRingAllReduce(&cells, SubRing{shardGroup(hosts, local), host}, shardOf(a.count, m, local), es, contrib, a.avg);
  appendRingAllGather(&cells, intra, all, es);
  for (int e : extras) cells.send(mine[e], Buf::kRecv, whole);
}

}  // namespace braid
