// The communicator: ranks, the bootstrap control plane, one Link per peer, the executor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/bootstrap.h"
#include "src/executor.h"
#include "transports/transport.h"

constexpr uint64_t kCommMagic = 0x6272616964636f6dULL;  // "braidcom"

struct braidComm {
  uint64_t magic = kCommMagic;
  int rank = 0;
  int nranks = 0;
  uint64_t commId = 0;
  std::vector<braid::PeerInfo> peers;
  std::unique_ptr<braid::Bootstrap> boot;
  std::vector<std::unique_ptr<braid::Transport>> transports;
  std::vector<std::unique_ptr<braid::Link>> links;  // indexed by rank; null for this rank
  std::vector<const char*> linkTransport;           // transport name per rank
  std::unique_ptr<braid::Engine> engine;
  double timeoutSec = 300;
  uint64_t chunkBytes = 1 << 18;
  int localRanks = 1;  // ranks on this host

  // "rank 3 (host h1, pid 1234)"
  std::string describeRank(int r) const;
};

namespace braid {

// Collective init over a decoded id (src/comm.cc). *out is set on success only.
Status commInit(const UniqueIdData& id, int nranks, int rank, braidComm** out);
// Reads the launcher's environment (BRAID_*, torchrun, Open MPI, Slurm, PMI).
Status commInitFromEnv(braidComm** out);
Status commDestroy(braidComm* comm);
void commAbort(braidComm* comm);

}  // namespace braid
