// The settings a communicator runs with, read once at init into one struct that the communicator
// holds and hands to whoever needs them (the executor, the transports' setup, the topology). The
// environment is read only here (and for the knobs of one subsystem, by that subsystem's setup),
// with the defaults of the one table in src/base/config.cc; a braidConfig_t overrides the environment
// for one communicator. Nothing on the per-call path reads the environment.
#pragma once

#include <cstdint>
#include <string>

#include "braid/braid.h"
#include "src/base/status.h"

namespace braid {

// What a braidConfig_t asked for, owned (the caller's struct and strings may go away after init).
// Communicators derived from one (split, shrink) inherit it.
struct ConfigOverrides {
  std::string transports;  // "" = BRAID_TRANSPORTS
  int timeoutSec = 0;      // 0 = BRAID_TIMEOUT
  int p2pTags = -1;        // -1 = BRAID_P2P_TAGS; else 0 or 1
  int cudaDevice = -1;     // -1 = BRAID_CUDA_DEVICE, else the current device
};

struct CommSettings {
  double timeoutSec = 0;       // BRAID_TIMEOUT, or config->timeoutSec
  std::string transports;      // BRAID_TRANSPORTS, or config->transports: the preference list
  int64_t spinUs = 0;          // BRAID_SPIN_US
  uint64_t copyPiece = 0;      // BRAID_COPY_PIECE: local copies in pieces while transfers move, 0 = whole
  bool checkMismatch = false;  // BRAID_CHECK_MISMATCH
  bool p2pTags = false;        // BRAID_P2P_TAGS: the second set of links for tagged point-to-point
  bool forceLowering = false;  // BRAID_FORCE_LOWERING (a test knob: src/lower.h)
  uint64_t ntStoresMin = 0;    // BRAID_NT_STORES_MIN, resolved (src/base/nt_store.h)
  bool shmDirect = false;      // BRAID_SHM_DIRECT: collectives on braidMemAlloc memory in place (src/direct_coll.cc)
  uint64_t cudaIpcMin = 0;     // BRAID_CUDA_IPC_MIN: the smallest device collective on cuda_ipc
  uint64_t stagingPiece = 0;   // BRAID_CUDA_STAGING_PIECE: the pieces of a staged device collective
  bool cudaIpc = true;         // BRAID_CUDA_IPC: device collectives in place on the peers' memory (src/cuda/ipc_coll.h)
  int64_t linkCheckMs = 0;     // BRAID_LINK_CHECK_MS: the link self-test's deadline, 0 = off (src/link_check.h)
  std::string linkFaults;      // BRAID_TEST_LINK_FAULT (a test knob: src/link_check.h), checked
  // The pipelining chunk of the plans: the cost model's (BRAID_CHUNK_SIZE, else the topology file's
  // chunk_bytes, else the default), so the plans are the ones the algorithm table was priced for.
  // Set by setupTopology, after the cost constants are known.
  uint64_t chunkBytes = 0;
  ConfigOverrides overrides;  // what the config set, for derived communicators
};

// Checks a caller's config and copies what it sets into *out: NULL sets nothing; a wrong magic, an
// unknown size or version, or a field out of range is braidInvalidArgument naming the field (*out
// untouched).
Status parseConfig(const braidConfig_t* config, ConfigOverrides* out);

// Validates every knob the environment sets (a bad value anywhere fails init on every rank, before
// any rank waits for another), then reads the communicator's settings, `over` overriding the
// environment.
Status readCommSettings(const ConfigOverrides& over, CommSettings* out);

}  // namespace braid
