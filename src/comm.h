// The communicator: ranks, the bootstrap, the control plane, one Link per peer, the executor.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/hash.h"
#include "src/bootstrap.h"
#include "src/control_plane.h"
#include "src/cuda/staging.h"
#include "src/executor.h"
#include "src/regions.h"
#include "src/settings.h"
#include "topology/select.h"
#include "transports/transport.h"

// A communicator. The C API hands out handles of it (src/handles.h), never this pointer.
struct braidComm {
  int rank = 0;
  int nranks = 0;
  uint64_t commId = 0;
  std::vector<braid::PeerInfo> peers;
  std::unique_ptr<braid::Bootstrap> boot;
  std::vector<std::unique_ptr<braid::Transport>> transports;
  std::vector<std::unique_ptr<braid::Link>> links;  // indexed by rank; null for this rank
  std::vector<int> transportOf;                     // index into transports per rank; -1 for this rank
  // Tagged and any-source point-to-point (src/tags.h): a second link per peer, of the same kind as
  // `links`, that carries only framed messages, made by transports of their own (tagTransports[t]
  // is of the kind of transports[t]) so that the plans' progress never polls them. Both empty with
  // BRAID_P2P_TAGS=0.
  std::vector<std::unique_ptr<braid::Transport>> tagTransports;
  std::vector<std::unique_ptr<braid::Link>> tagLinks;
  // The failure state, notices, goodbyes and heartbeats; declared before the engine, whose
  // background thread uses it, so that it is freed after it.
  std::unique_ptr<braid::ControlPlane> control;
  std::unique_ptr<braid::Engine> engine;
  braid::CommSettings settings;  // read once at init (src/settings.h)
  int localRanks = 1;            // ranks on this host
  // Payload bytes of the mailboxes that every rank has toward every other (src/small_coll.h), agreed
  // at init; 0 when some link has none (another host, another transport, BRAID_SHM_SMALL_BYTES=0).
  size_t mailBytes = 0;
  // With mailBytes: by rank, the process ids of the ranks, when every rank can map every other's
  // braidMemAlloc memory and BRAID_SHM_DIRECT is on everywhere (src/direct_coll.cc); else empty.
  std::vector<int64_t> directPids;
  braid::topo::ClusterShape cluster;  // hosts of the ranks (hostOf feeds the hierarchical plans)
  braid::topo::Selector selector;     // (collective, bytes) -> algorithm
  bool approximate = false;           // BRAID_APPROXIMATE: avg AllReduce may gossip
  int gossipRounds = 0;
  braid::RegionTable regions;  // braidCommRegister's records (src/regions.h)
  // The CUDA device of the communicator (BRAID_CUDA_DEVICE, else the device current at init); -1
  // without CUDA or without a device, and then every buffer is host memory. The staging of its
  // device calls (src/cuda/staging.h) is made at the first one; it outlives the engine, whose
  // operations hold its slots.
  int cudaDevice = -1;
  // Collectives on device buffers run in place on the peers' device memory (src/cuda/ipc_coll.h):
  // every rank is on this host with mailboxes, has a device and reaches every peer's, and
  // BRAID_CUDA_IPC is on everywhere. Agreed at init.
  bool cudaIpc = false;
  std::unique_ptr<braid::IpcColl> ipcColl;  // with cudaIpc, made at init; the engine takes it
  std::mutex stagingMu;
  std::unique_ptr<braid::DeviceStaging> staging;
  // Derived communicators (shrink, split): the id's secret, every rank's long-lived listener (the
  // new rank 0 serves the new rendezvous on its own), and how many of each kind were derived so far.
  // Two counters: a split involves every rank, a shrink only the survivors, so a rank excluded from
  // a shrink would otherwise count one less and never meet the others in their next split.
  uint8_t secret[16] = {};
  braid::Fd listener;
  std::vector<braid::SockAddr> listenAddrs;
  uint64_t splits = 0;
  uint64_t shrinks = 0;
  // Gossip graphs continue on the survivors after a failure: the communicator they share (owned by
  // this one: destroyed or aborted with it) and the ranks it excludes.
  std::mutex successorMu;  // graphs of several threads may move at once
  braidComm* successor = nullptr;
  std::vector<int> successorExcludes;

  // "rank 3 (host h1, pid 1234)"
  std::string describeRank(int r) const;
};

namespace braid {
namespace topo {
struct TopoFile;  // topology/topology.h
}

// Collective init over a decoded id (src/comm.cc), with a config's overrides of the environment.
// *out is set on success only.
Status commInit(const UniqueIdData& id, int nranks, int rank, const ConfigOverrides& over, braidComm** out);
// Reads the launcher's environment (BRAID_*, torchrun, Open MPI, Slurm, PMI).
Status commInitFromEnv(braidComm** out);
Status commDestroy(braidComm* comm);
// Gathers the ranks' hosts and machines and builds the selector (src/comm_topo.cc). `local` keeps
// this rank's machine and costs for tableAfterLinks.
Status setupTopology(braidComm* comm, Deadline deadline, topo::TopoFile* local);
// Once the links are up: `twoCopiesFrom[r]` says from how many bytes of a call's buffers on its
// host rank r's links to the host's other ranks receive with two copies (Link::receiveCopies),
// gathered alike on every rank. A host takes the largest of its ranks' values
// (ClusterShape::hostTwoCopiesFrom); where some host has one, the table is built again. Then it is
// printed (BRAID_DEBUG_SUBSYS=TUNE) and dumped (BRAID_TOPO_DUMP_FILE).
Status tableAfterLinks(braidComm* comm, const std::vector<uint64_t>& twoCopiesFrom, topo::TopoFile* local);
void commAbort(braidComm* comm);
// A communicator of the parent's ranks `members` (new rank i = members[i]), built over the parent's
// listeners; collective over the members. `tag` must be the same on all of them and unique per
// derivation (src/comm_split.cc).
Status commDerive(braidComm* parent, const std::vector<int>& members, const std::string& tag, braidComm** out);
Status commShrink(braidComm* comm, const int* exclude, int nExclude, braidComm** out);
// A blocking ring all-gather of `bytes` from every rank into all[nranks * bytes], posted on the
// engine (internal exchanges: split colors, gossip neighbour lists). Collective.
Status commAllGather(braidComm* comm, const void* mine, size_t bytes, void* all);
Status commSplit(braidComm* comm, int color, int key, braidComm** out);

}  // namespace braid
