// Derived communicators: shrink (the survivors of a failure, without the launcher) and split (by
// color and key). Both come down to a new rendezvous among some of the parent's ranks: the new
// rank 0 serves it on the listener it has kept since the parent's init, the others connect to that
// listener's address (gathered at the parent's init, while everyone was alive). The new id is
// derived from the parent's id, its secret and a tag that every member computes alike, so a
// rendezvous of one derivation cannot be joined by another, nor by a stranger.
#include <fcntl.h>

#include <algorithm>
#include <cstring>

#include "src/base/log.h"
#include "src/comm.h"

namespace braid {

Status commDerive(braidComm* parent, const std::vector<int>& members, const std::string& tag, braidComm** out) {
  auto me = std::find(members.begin(), members.end(), parent->rank);
  if (me == members.end()) return errorf(braidInternalError, "derived communicator without this rank");
  const int newRank = static_cast<int>(me - members.begin());
  UniqueIdData id;
  id.magic = kUniqueIdMagic;
  id.version = kProtocolVersion;
  id.commId = fnv1a(tag, parent->commId);
  memcpy(id.secret, parent->secret, sizeof(id.secret));
  id.root = parent->listenAddrs[members[0]];
  if (newRank == 0) {
    // The rendezvous takes (and closes) its listener: hand it a duplicate, keep ours for later.
    int dup = fcntl(parent->listener.get(), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return systemError(errno, "dup of the communicator's listener");
    adoptListener(id.commId, Fd(dup));
  }
  BRAID_INFO(kLogInit, "%s: rank %d becomes rank %d of %zu (rendezvous at %s)", tag.c_str(), parent->rank, newRank,
             members.size(), id.root.toString().c_str());
  // A derived communicator keeps what its parent's config asked for.
  Status s = commInit(id, static_cast<int>(members.size()), newRank, parent->settings.overrides, out);
  if (newRank == 0) dropListener(id.commId);  // when init failed before taking it
  return s;
}

Status commAllGather(braidComm* comm, const void* mine, size_t bytes, void* all) {
  PostArgs p;
  p.shape.coll = Coll::kAllGather;
  p.shape.algo = Algo::kRing;
  p.shape.rank = comm->rank;
  p.shape.nranks = comm->nranks;
  p.shape.count = bytes;
  p.shape.elemSize = 1;
  p.shape.chunkBytes = comm->settings.chunkBytes;
  p.send = mine;
  p.recv = all;
  p.dtype = braidUint8;
  Op* op = nullptr;
  BRAID_TRY(comm->engine->post(p, false, &op));
  return comm->engine->wait(op);
}

Status commShrink(braidComm* comm, const int* exclude, int nExclude, braidComm** out) {
  const int n = comm->nranks;
  if (nExclude < 0) return errorf(braidInvalidArgument, "nExclude is negative");
  if (nExclude > 0 && exclude == nullptr) return errorf(braidInvalidArgument, "excludeRanks is NULL");
  std::vector<uint8_t> gone(n, 0);
  for (int i = 0; i < nExclude; ++i) {
    const int r = exclude[i];
    if (r < 0 || r >= n)
      return errorf(braidInvalidArgument, "excludeRanks[%d] = %d is not a rank of 0..%d", i, r, n - 1);
    if (gone[r]) return errorf(braidInvalidArgument, "excludeRanks names rank %d twice", r);
    if (r == comm->rank) return errorf(braidInvalidArgument, "excludeRanks names this rank (%d): it cannot join", r);
    gone[r] = 1;
  }
  std::vector<int> members;
  std::string tag = "shrink/" + std::to_string(comm->shrinks) + "/without";
  for (int r = 0; r < n; ++r) {
    if (gone[r]) {
      tag += ' ';
      tag += std::to_string(r);
    } else
      members.push_back(r);
  }
  ++comm->shrinks;
  Status s = commDerive(comm, members, tag, out);
  if (!s.ok() && s.code() == braidTimeout)
    return s.withContext("shrink: the survivors did not all join (do they all exclude the same ranks?)");
  return s;
}

Status commSplit(braidComm* comm, int color, int key, braidComm** out) {
  if (color < 0 && color != BRAID_SPLIT_NOCOLOR)
    return errorf(braidInvalidArgument, "color %d is negative (BRAID_SPLIT_NOCOLOR is %d)", color, BRAID_SPLIT_NOCOLOR);
  const int n = comm->nranks;
  // Everyone's (color, key), over the parent (which must be healthy).
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(n));
  // Through the engine, not the C API: `comm` is the communicator itself, not a handle of it.
  BRAID_TRY(commAllGather(comm, mine, sizeof(mine), all.data()).withContext("split: exchanging colors"));
  const uint64_t nth = comm->splits++;
  if (color == BRAID_SPLIT_NOCOLOR) {
    *out = nullptr;
    return okStatus();
  }
  std::vector<int> members;
  for (int p = 0; p < n; ++p)
    if (all[2 * p] == color) members.push_back(p);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  return commDerive(comm, members, "split/" + std::to_string(nth) + "/color " + std::to_string(color), out);
}

}  // namespace braid
