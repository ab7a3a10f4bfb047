// The communicator's view of the cluster, built at init: each rank's machine (detected once per
// process, or loaded from BRAID_TOPO_FILE), gathered per host; the cost constants; and the
// selector's table. Every rank must arrive at the same table, or two ranks could run different
// algorithms for one call: a table that differs is an init error naming the rank. Once the links
// are up, what they said about the hosts' copies (gathered alike everywhere) may refine it.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/comm.h"
#include "topology/topology.h"

namespace braid {

namespace {

// Detection walks sysfs and the PCI tree (tens of milliseconds): once per process.
const topo::Machine& localMachine(Status* st) {
  static std::once_flag once;
  static topo::Machine machine;
  static Status status;
  std::call_once(once, [] { status = topo::detectMachine(&machine); });
  *st = status;
  return machine;
}

// BRAID_TOPO_DUMP_FILE with %r (rank) and %h (hostname) expanded.
std::string dumpPath(const std::string& pattern, int rank, const char* host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'r' || pattern[i + 1] == 'h')) {
      out += pattern[i + 1] == 'r' ? std::to_string(rank) : std::string(host);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace

Status setupTopology(braidComm* comm, Deadline deadline, topo::TopoFile* out) {
  topo::TopoFile& local = *out;
  std::string file = paramString("BRAID_TOPO_FILE");
  local.cost = topo::CostParams::defaults();
  if (!file.empty()) {
    topo::TopoFile loaded;
    BRAID_TRY(topo::loadTopoFile(file, &loaded).withContext("BRAID_TOPO_FILE"));
    local.machine = loaded.machine;
    if (loaded.hasCost) local.cost = loaded.cost;
    BRAID_INFO(kLogTopo, "machine and costs loaded from %s", file.c_str());
  } else {
    Status st;
    local.machine = localMachine(&st);
    if (!st.ok()) BRAID_WARN(kLogTopo, "topology detection failed, assuming one core: %s", st.message().c_str());
  }
  BRAID_TRY(local.cost.applyEnv());
  // The plans cut their pieces at the chunk the cost model priced, so that a loaded topology file
  // reproduces the choices and the plans alike. A file's chunk_bytes is any positive number: whole
  // bytes within BRAID_CHUNK_SIZE's range, for the model too.
  const ParamInfo& chunkRange = paramInfo("BRAID_CHUNK_SIZE");
  local.cost.chunkBytes = std::floor(std::clamp(local.cost.chunkBytes, chunkRange.min, chunkRange.max));
  comm->settings.chunkBytes = static_cast<uint64_t>(local.cost.chunkBytes);
  local.hasCost = true;
  bool approx = false;
  BRAID_TRY(paramBool("BRAID_APPROXIMATE", &approx));
  comm->approximate = approx;
  comm->gossipRounds = local.cost.gossipRounds;

  // Hosts, densely numbered in order of their first rank; cores as that rank reports them.
  const int n = comm->nranks;
  int32_t myCores = local.machine.cores;
  std::vector<int32_t> cores(n);
  BRAID_TRY(comm->boot->allGather(&myCores, sizeof(myCores), cores.data(), deadline));
  topo::ClusterShape& c = comm->cluster;
  c.nranks = n;
  c.hostOf.assign(n, -1);
  c.nhosts = 0;
  for (int r = 0; r < n; ++r) {
    if (c.hostOf[r] >= 0) continue;
    c.hostOf[r] = c.nhosts;
    c.hostCores.push_back(cores[r]);
    for (int q = r + 1; q < n; ++q)
      if (strcmp(comm->peers[q].hostId, comm->peers[r].hostId) == 0) c.hostOf[q] = c.nhosts;
    c.nhosts++;
  }
  c.hostSize.assign(c.nhosts, 0);
  for (int h : c.hostOf) c.hostSize[h]++;

  BRAID_TRY(comm->selector.init(c, local.cost, paramString("BRAID_ALGO"), comm->approximate));
  // The table, and the settings that cut device calls, must be the same everywhere: a rank that
  // staged a call in other pieces, or sent it to cuda_ipc where the others staged it, would wait
  // for calls its peers never make.
  struct Agreed {
    uint64_t table;
    uint64_t stagingPiece;  // BRAID_CUDA_STAGING_PIECE
    uint64_t cudaIpcMin;    // BRAID_CUDA_IPC_MIN
  };
  const std::string table = comm->selector.describe();
  const Agreed mine{fnv1a(table, 0), comm->settings.stagingPiece, comm->settings.cudaIpcMin};
  std::vector<Agreed> all(n);
  BRAID_TRY(comm->boot->allGather(&mine, sizeof(mine), all.data(), deadline));
  for (int r = 0; r < n; ++r) {
    if (all[r].table != mine.table)
      return errorf(braidInvalidUsage,
                    "rank %d chose a different algorithm table than rank %d: BRAID_ALGO, BRAID_COST_*, "
                    "BRAID_TOPO_FILE and BRAID_CHUNK_SIZE must be the same on every rank",
                    r, comm->rank);
    const struct {
      const char* name;
      uint64_t theirs, ours;
    } values[] = {{"BRAID_CUDA_STAGING_PIECE", all[r].stagingPiece, mine.stagingPiece},
                  {"BRAID_CUDA_IPC_MIN", all[r].cudaIpcMin, mine.cudaIpcMin}};
    for (const auto& v : values)
      if (v.theirs != v.ours)
        return errorf(braidInvalidUsage, "%s differs: %llu on %s, %llu on rank %d; it must be the same on every rank",
                      v.name, static_cast<unsigned long long>(v.theirs), comm->describeRank(r).c_str(),
                      static_cast<unsigned long long>(v.ours), comm->rank);
  }
  return okStatus();
}

Status tableAfterLinks(braidComm* comm, const std::vector<uint64_t>& twoCopiesFrom, topo::TopoFile* local) {
  topo::ClusterShape& c = comm->cluster;
  const int n = comm->nranks;
  // A host's transfers copy twice only where all its ranks' do: the largest of their values, so a
  // rank on sockets (or alone on its host, which says kNever) keeps the one-copy price for the whole
  // host. Every rank decides from the same bytes (one value per rank, from agreeOnMailboxes).
  c.hostTwoCopiesFrom.assign(c.nhosts, 0);
  for (int r = 0; r < n; ++r) {
    uint64_t& from = c.hostTwoCopiesFrom[c.hostOf[r]];
    from = std::max(from, twoCopiesFrom[r]);
  }
  bool some = false;
  for (uint64_t from : c.hostTwoCopiesFrom) some = some || from != topo::ClusterShape::kNever;
  if (some)
    BRAID_TRY(comm->selector.reshape(c));
  else
    c.hostTwoCopiesFrom.clear();
  if (comm->rank == 0) {
    char fifo[96] = "";
    if (some && c.nhosts == 1)
      snprintf(fifo, sizeof(fifo), " (two copies through the FIFOs above %llu bytes of a call's buffers)",
               static_cast<unsigned long long>(c.hostTwoCopiesFrom[0]));
    BRAID_INFO(kLogTune, "algorithm table for %d ranks on %d hosts%s%s:\n%s", n, c.nhosts,
               c.oversubscribed() ? " (more ranks than cores)" : "", fifo, comm->selector.describe().c_str());
  }

  std::string dump = paramString("BRAID_TOPO_DUMP_FILE");
  if (!dump.empty() && (comm->rank == 0 || dump.find("%r") != std::string::npos)) {
    local->hasCluster = true;
    local->cluster = c;
    std::string path = dumpPath(dump, comm->rank, comm->peers[comm->rank].hostname);
    BRAID_TRY(topo::dumpTopoFile(path, *local).withContext("BRAID_TOPO_DUMP_FILE"));
    BRAID_INFO(kLogTopo, "topology written to %s", path.c_str());
  }
  return okStatus();
}

}  // namespace braid
