// Pure rank math of the hierarchical AllReduce: which ranks share a host, which of them own a shard
// of the buffer and which hand their data to an owner. No I/O, unit-tested alone
// (tests/unit/test_plans_rd.cc).
//
// Hosts may run different numbers of ranks. With m the rank count of the smallest host, the ranks of
// each host are numbered 0.. in rank order (their local index); local ranks 0..m-1 are the owners,
// owner j holding shard j of m. A local rank l >= m is an extra: it hands its whole buffer to owner
// l % m of its host and gets the result back from it. Owner j of every host forms the inter-host group
// of shard j, ordered by host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algorithms/patterns/ring.h"

namespace braid {

struct HostGroups {
  std::vector<std::vector<int>> members;  // per host that has ranks, its ranks in rank order
  std::vector<int> groupOf;               // rank -> index into members
  std::vector<int> localOf;               // rank -> position within its host's members

  int numGroups() const { return static_cast<int>(members.size()); }
  // The rank count of the smallest host: the number of owners (shards) on every host.
  int owners() const {
    size_t m = members.empty() ? 0 : members[0].size();
    for (const auto& g : members) m = std::min(m, g.size());
    return static_cast<int>(m);
  }
};

// Groups n ranks by hostOf (rank -> host index; null = all on one host). Host indices need not be
// dense: hosts without ranks are dropped and the rest keep their order.
inline HostGroups hostGroups(const int* hostOf, int n) {
  HostGroups g;
  g.groupOf.assign(n, 0);
  g.localOf.assign(n, 0);
  std::vector<int> hostIds;
  for (int r = 0; r < n; ++r) hostIds.push_back(hostOf == nullptr ? 0 : hostOf[r]);
  std::vector<int> sorted = hostIds;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  g.members.resize(sorted.size());
  for (int r = 0; r < n; ++r) {
    const int gi = static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), hostIds[r]) - sorted.begin());
    g.groupOf[r] = gi;
    g.localOf[r] = static_cast<int>(g.members[gi].size());
    g.members[gi].push_back(r);
  }
  return g;
}

// The local index of the owner that local rank `local` reduces into (itself when it is an owner).
inline int ownerLocal(int local, int owners) { return local % owners; }

// The local indices of the extras that owner j serves on a host of `size` ranks: j + m, j + 2m, ...
inline std::vector<int> extrasOf(int j, int owners, int size) {
  std::vector<int> out;
  for (int l = j + owners; l < size; l += owners) out.push_back(l);
  return out;
}

// Shard j of `count` elements split among m owners, in elements.
inline Range shardOf(uint64_t count, int owners, int j) { return partition(count, owners, j); }

// Owner j of every host, in host order: the group that reduces shard j across hosts.
inline std::vector<int> shardGroup(const HostGroups& g, int j) {
  std::vector<int> out;
  for (const auto& m : g.members) out.push_back(m[j]);
  return out;
}

}  // namespace braid
