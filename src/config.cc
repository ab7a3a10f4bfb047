#include "src/config.h"

#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace braid {

// The one table of knobs. Keep it sorted by subsystem; `braid-topo --config` prints it as is.
static const std::vector<ParamInfo> kParams = {
    // Launch and bootstrap.
    {"BRAID_RANK", "",
     "this process's rank (set by braidrun; else RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK)"},
    {"BRAID_WORLD_SIZE", "", "number of ranks (else WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, PMI_SIZE)"},
    {"BRAID_LOCAL_RANK", "", "rank among the ranks of this host (set by braidrun; informational)"},
    {"BRAID_ROOT", "", "host:port where rank 0 listens for the rendezvous (else MASTER_ADDR:MASTER_PORT+1)"},
    {"BRAID_SECRET", "", "32 hex digits shared by the job's ranks; without it the secret is derived from the job id"},
    {"BRAID_JOB_ID", "",
     "any text unique to this run of the job, the same on every rank: the job id when no launcher sets one"},
    {"BRAID_HOSTID", "", "host identity override (default hostname + boot id); emulates several hosts on one"},
    {"BRAID_TIMEOUT", "300", "seconds any wait may last (init, collectives, destroy) before braidTimeout"},
    {"BRAID_HEARTBEAT_MS", "1000", "liveness heartbeat period between each rank and rank 0, ms (0 = off)"},
    {"BRAID_HEARTBEAT_MISSES", "5", "heartbeat periods of silence after which a peer is declared stopped"},
    {"BRAID_CHECK_MISMATCH", "0", "1 = check that all ranks call the same collective, count, type and op"},
    // Transports.
    {"BRAID_TRANSPORTS", "shm,tcp", "transports to use, in order of preference"},
    {"BRAID_SOCKET_IFNAME", "", "network interface for bootstrap and tcp (default: first non-loopback IPv4)"},
    {"BRAID_SHM_SLOT_SIZE", "256K", "bytes per shared-memory FIFO slot"},
    {"BRAID_SHM_SLOTS", "8", "slots per shared-memory FIFO (one FIFO per direction per pair)"},
    {"BRAID_SHM_CMA", "0",
     "single-copy receives with process_vm_readv: 0, 1, auto (measured slower than the FIFO here)"},
    {"BRAID_SHM_CMA_MIN", "1M", "smallest message that uses the single-copy path"},
    {"BRAID_TCP_CHUNK", "512K", "bytes per socket write/read for large tcp messages"},
    {"BRAID_TCP_SOCKBUF", "4M", "SO_SNDBUF/SO_RCVBUF of tcp data sockets (0 = kernel default)"},
    // Topology, cost model and algorithm choice.
    {"BRAID_TOPO_FILE", "", "load the machine and cost constants from this topology file instead of detecting"},
    {"BRAID_TOPO_DUMP_FILE", "", "write the detected topology here at init (%r = rank, %h = host; else rank 0 only)"},
    {"BRAID_ALGO", "", "force algorithms: a name for all (ring) or per collective (allreduce:tree;broadcast:ring)"},
    {"BRAID_APPROXIMATE", "0", "1 = AllReduce with op avg on floats may use approximate gossip averaging"},
    {"BRAID_GOSSIP_ROUNDS", "0", "gossip AllReduce rounds; 0 = until exact where the graph allows (log2 n)"},
    {"BRAID_COST_INTRA_ALPHA_US", "0.6", "cost model: microseconds per message step between ranks of one host"},
    {"BRAID_COST_INTRA_GBPS", "12", "cost model: GB/s a rank moves in and out at once within a host"},
    {"BRAID_COST_INTER_ALPHA_US", "10", "cost model: microseconds per message step between hosts"},
    {"BRAID_COST_INTER_GBPS", "2", "cost model: GB/s a rank moves in and out at once between hosts"},
    {"BRAID_COST_REDUCE_GBPS", "40", "cost model: GB/s of one input a rank reduces"},
    {"BRAID_COST_OVERSUB_US", "12", "cost model: extra microseconds per step per extra rank sharing a core"},
    // Algorithms and executor.
    {"BRAID_CHUNK_SIZE", "256K", "pipelining chunk of the ring and chain algorithms, in bytes"},
    {"BRAID_SPIN_US", "50", "microseconds a waiter spins before yielding the CPU"},
    // Logging.
    {"BRAID_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE"},
    {"BRAID_DEBUG_SUBSYS", "ALL", "log subsystems: INIT,COLL,NET,SHM,P2P,TOPO,TUNE,PLAN,BOOT (^X excludes)"},
    {"BRAID_DEBUG_FILE", "", "log to this file instead of stderr; %h = host, %p = pid"},
    {"BRAID_SIMD", "", "cap the reduction kernels' instruction set: scalar, avx2, avx512"},
};

const std::vector<ParamInfo>& allParams() { return kParams; }

static const ParamInfo* findParam(const char* name) {
  for (const auto& p : kParams)
    if (strcmp(p.name, name) == 0) return &p;
  return nullptr;
}

std::string paramString(const char* name) {
  const ParamInfo* p = findParam(name);
  assert(p != nullptr && "undeclared BRAID_* parameter");
  const char* env = getenv(name);
  if (env != nullptr && env[0] != '\0') return env;
  return p != nullptr ? p->defaultValue : "";
}

static Status parseInt(const char* name, const std::string& text, int64_t multiplierAllowed, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str())
    return errorf(braidInvalidArgument, "%s=%s is not an integer", name, text.c_str());
  int64_t mult = 1;
  if (multiplierAllowed && *end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1LL << 10;
        ++end;
        break;
      case 'm':
      case 'M':
        mult = 1LL << 20;
        ++end;
        break;
      case 'g':
      case 'G':
        mult = 1LL << 30;
        ++end;
        break;
      default:
        break;
    }
  }
  if (*end != '\0')
    return errorf(braidInvalidArgument, "%s=%s is not %s", name, text.c_str(),
                  multiplierAllowed ? "a size (e.g. 256K)" : "an integer");
  *out = static_cast<int64_t>(v) * mult;
  return okStatus();
}

Status paramInt(const char* name, int64_t* value) {
  int64_t v = 0;
  BRAID_TRY(parseInt(name, paramString(name), 0, &v));
  *value = v;
  return okStatus();
}

int64_t paramIntOr(const char* name, int64_t fallback) {
  int64_t v = 0;
  return paramInt(name, &v).ok() ? v : fallback;
}

Status paramDouble(const char* name, double* value) {
  std::string text = paramString(name);
  errno = 0;
  char* end = nullptr;
  double v = strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v))
    return errorf(braidInvalidArgument, "%s=%s is not a number", name, text.c_str());
  *value = v;
  return okStatus();
}

const char* paramDefault(const char* name) {
  const ParamInfo* p = findParam(name);
  assert(p != nullptr && "undeclared BRAID_* parameter");
  return p != nullptr ? p->defaultValue : "";
}

bool paramIsSet(const char* name) {
  const char* env = getenv(name);
  return env != nullptr && env[0] != '\0';
}

Status paramSize(const char* name, size_t* value) {
  int64_t v = 0;
  BRAID_TRY(parseInt(name, paramString(name), 1, &v));
  if (v < 0) return errorf(braidInvalidArgument, "%s must not be negative", name);
  *value = static_cast<size_t>(v);
  return okStatus();
}

}  // namespace braid
