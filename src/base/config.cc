#include "src/base/config.h"

#include <strings.h>

#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/base/log.h"

namespace braid {

namespace {

constexpr double kKi = 1024.0;
constexpr double kMi = 1024.0 * 1024;
constexpr double kGi = 1024.0 * 1024 * 1024;
constexpr double kTi = kGi * 1024;
// Rank numbers and sizes: the bootstrap's limit (src/comm.cc envInt).
constexpr double kMaxRanks = 1 << 24;
// BRAID_TIMEOUT: ten years of seconds. Deadlines are int64 nanoseconds (292 years), so a timeout
// up to this bound, plus the monotonic clock's reading, cannot overflow.
constexpr double kMaxTimeoutSec = 10.0 * 365 * 24 * 3600;
// BRAID_HEARTBEAT_MS: an hour. Times BRAID_HEARTBEAT_MISSES (at most 1000), in nanoseconds:
// 3.6e18, below INT64_MAX (9.2e18).
constexpr double kMaxHeartbeatMs = 3600.0 * 1000;
constexpr double kMaxHeartbeatMisses = 1000;
// Cost constants: beyond these a "microsecond" or "GB/s" is surely a typo.
constexpr double kMaxCostUs = 1e6;
constexpr double kMinCostGbps = 1e-3;
constexpr double kMaxCostGbps = 1e6;
constexpr const char* kBoolSpellings = "1|0|true|false|yes|no|on|off";

ParamInfo text(const char* name, const char* def, const char* help) { return {name, def, help}; }
ParamInfo integer(const char* name, const char* def, double min, double max, const char* help, bool zeroToo = false) {
  return {name, def, help, ParamKind::kInt, min, max, zeroToo};
}
ParamInfo bytes(const char* name, const char* def, double min, double max, const char* help, bool zeroToo = false) {
  return {name, def, help, ParamKind::kSize, min, max, zeroToo};
}
ParamInfo real(const char* name, const char* def, double min, double max, const char* help) {
  return {name, def, help, ParamKind::kDouble, min, max};
}
ParamInfo boolean(const char* name, const char* def, const char* help) { return {name, def, help, ParamKind::kBool}; }
ParamInfo oneOf(const char* name, const char* def, const char* allowed, const char* help) {
  return {name, def, help, ParamKind::kEnum, 0, 0, false, allowed};
}
ParamInfo listOf(const char* name, const char* def, const char* allowed, const char* help) {
  return {name, def, help, ParamKind::kList, 0, 0, false, allowed};
}

// The one table of knobs. Keep it sorted by subsystem; `braid-topo --config` prints it as is.
// Bounds on sizes keep the products the code forms (slots x slot size x FIFOs, chunk counts) far
// from overflow.
const std::vector<ParamInfo> kParams = {
    // Launch and bootstrap.
    integer("BRAID_RANK", "", 0, kMaxRanks - 1,
            "this process's rank (set by braidrun; else RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK)"),
    integer("BRAID_WORLD_SIZE", "", 1, kMaxRanks,
            "number of ranks (else WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, PMI_SIZE)"),
    text("BRAID_ROOT", "", "host:port where rank 0 listens for the rendezvous (else MASTER_ADDR:MASTER_PORT+1)"),
    text("BRAID_SECRET", "",
         "32 hex digits shared by the job's ranks; without it the secret is derived from the job id"),
    text("BRAID_JOB_ID", "",
         "any text unique to this run of the job, the same on every rank: the job id when no launcher sets one"),
    text("BRAID_HOSTID", "", "host identity override (default hostname + boot id); emulates several hosts on one"),
    integer("BRAID_TIMEOUT", "300", 1, kMaxTimeoutSec,
            "seconds any wait may last (init, collectives, destroy) before braidTimeout"),
    integer("BRAID_HEARTBEAT_MS", "1000", 1, kMaxHeartbeatMs,
            "liveness heartbeat period between each rank and rank 0, ms (0 = off)", true),
    integer("BRAID_HEARTBEAT_MISSES", "5", 1, kMaxHeartbeatMisses,
            "heartbeat periods of silence after which a peer is declared stopped"),
    boolean("BRAID_CHECK_MISMATCH", "0", "check that all ranks call the same collective, count, type and op"),
    boolean("BRAID_P2P_TAGS", "0",
            "connect a second link per peer for tagged and any-source point-to-point calls (braidSendTagged ...); "
            "without them tagged calls fail with braidInvalidUsage (config->p2pTags overrides; braid_torch sets 1)"),
    boolean("BRAID_FORCE_LOWERING", "0",
            "test knob: plan every receive-reduce as a receive into scratch plus a local reduce, as for a link "
            "that cannot reduce on arrival (and forward nothing: the shm FIFOs' forwarding is off)"),
    // Transports.
    listOf("BRAID_TRANSPORTS", "shm,tcp", "shm|tcp|ucx|ibverbs",
           "transports to use, in order of preference (a name this build lacks is an error at init)"),
    // Long enough for a loaded host (a message both ways is microseconds when all is well), short
    // enough that a broken link costs seconds, not the whole BRAID_TIMEOUT.
    integer("BRAID_LINK_CHECK_MS", "5000", 1, kMaxHeartbeatMs,
            "deadline of the link self-test at init, ms: a link that fails it moves to the next transport (0 = off)",
            true),
    text("BRAID_TEST_LINK_FAULT", "",
         "test knob: break a transport's link between two ranks, TRANSPORT:RANK-RANK:corrupt|drop|error "
         "(comma-separated), to exercise the self-test's fallback"),
    oneOf("BRAID_SOCKET_FAMILY", "auto", "auto|ipv4|ipv6",
          "address family of bootstrap and tcp sockets (auto: IPv6 when BRAID_ROOT is an IPv6 address, else IPv4 "
          "first)"),
    text("BRAID_SOCKET_IFNAME", "", "network interface for bootstrap and tcp (default: first non-loopback IPv4)"),
    bytes("BRAID_SHM_SLOT_SIZE", "256K", 64, 64 * kMi,
          "bytes per shared-memory FIFO slot, a multiple of 64; all FIFOs of a host must fit in half its memory"),
    integer("BRAID_SHM_SLOTS", "8", 1, 4096, "slots per shared-memory FIFO (one FIFO per direction per pair)"),
    // A sender's plain stores take each slot line back from the reader's core; on a VM whose vCPUs the
    // host seemed to move apart, the FIFO ran 3-5x slower then than with streaming stores, which hand the
    // line over through memory, and at its other times plain stores were up to 1.8x faster.
    // perf/results/2026-12-06-slot-stores.md.
    oneOf("BRAID_SHM_SLOT_STORES", "auto", "plain|stream|auto",
          "how a sender writes a FIFO slot of 16 KiB and up: plain stores (the reader takes the lines from this "
          "core's cache), streaming (non-temporal) stores (through memory), or auto: each link times its fills "
          "and the reader its reads, keeps the cheaper kind, and tries the other every 32 fills (128 where it "
          "cost twice as much)"),
    oneOf("BRAID_SHM_CMA", "auto", "0|1|auto",
          "single-copy receives with process_vm_readv for AllGather and AllToAll whose buffers fit under "
          "BRAID_NT_STORES_MIN, and Broadcast and Scatter under a smaller cut (auto: when the kernel allows and "
          "it is fast enough here, BRAID_SHM_CMA_SPEED)"),
    bytes("BRAID_SHM_CMA_MIN", "64K", 0, kTi, "smallest message that uses the single-copy path"),
    // build/perf/cma_probe's cache-hot 256 KiB on 2-core VMs here: an Intel one 0.54 of a memcpy (single
    // copy won), an AMD EPYC one 0.12 (the FIFO beat it by 1.6-2x in AllGather, AllToAll and Broadcast;
    // braid's own measurement there: 120); perf/results/2026-12-04-cma-speed.md.
    integer("BRAID_SHM_CMA_SPEED", "300", 0, 100000,
            "BRAID_SHM_CMA=auto uses the single copy only where, measured at init, process_vm_readv copies at "
            "least this many thousandths of memcpy's rate (a cache-hot 256 KiB; the median of the host's ranks; "
            "0: whatever its speed)"),
    boolean("BRAID_SHM_CMA_SPLIT", "1",
            "a single-copy receive of 128 KiB and up on a link that carries nothing the other way is split: the "
            "sender, waiting for it, writes some of the pieces into the receiver's buffer while the receiver reads "
            "the others"),
    bytes("BRAID_SHM_SMALL_BYTES", "64K", 0, 64 * kKi,
          "collectives of up to this many bytes per peer run on shared-memory mailboxes when every rank is on one "
          "host (0 = off; the same on every rank)"),
    // The same two speeds as the FIFO slots' (BRAID_SHM_SLOT_STORES), in the mailboxes: in the VM's slow
    // hours plain mails of 16-64 KiB ran 3.4-7.2x slower than streamed ones (2 ranks); in its fast ones
    // streamed mails were 1.35-1.7x faster for Broadcast and 1.7x slower for a 64 KiB AllReduce, and with
    // 4 ranks on its 2 cores up to 2.9x slower (Reduce). perf/results/2026-12-06-mailbox-slow-mode.md.
    oneOf("BRAID_SHM_MAIL_STORES", "auto", "plain|stream|auto",
          "how a rank writes a small-collective mail (BRAID_SHM_SMALL_BYTES) of 16 KiB and up: plain stores, "
          "streaming (non-temporal) stores, or auto: each mailbox times its writes and the reader its reads, "
          "streams once that costs at most half as much, goes back as soon as plain stores cost less, and tries "
          "the other kind in one call of every 128 (512 where it cost twice as much)"),
    boolean("BRAID_SHM_DIRECT", "1",
            "on one host, AllReduce on memory from braidMemAlloc reads and writes the peers' buffers in place instead "
            "of through the FIFOs (needs the mailboxes; off on any rank turns it off for all)"),
    bytes("BRAID_NT_STORES_MIN", "0", 0, kTi,
          "out-of-place calls whose send and receive buffers on all ranks of a host exceed this many bytes write "
          "their outputs with non-temporal stores (0: 32 x the L2 cache, at most the L3, from sysfs)"),
    bytes("BRAID_TCP_CHUNK", "512K", 4 * kKi, 256 * kMi, "bytes per socket write/read for large tcp messages"),
    // Smaller socket buffers than 64K make every large message crawl (two 256 KiB collectives took
    // 35 s with 1 byte): the kernel's default, or something that holds a few segments in flight.
    bytes("BRAID_TCP_SOCKBUF", "4M", 64 * kKi, kGi, "SO_SNDBUF/SO_RCVBUF of tcp data sockets (0 = kernel default)",
          true),
    // A 4-rank AllToAll over loopback, 256 KiB-64 MiB: 0.69-1.13 of Open MPI's speed with 8 MiB send
    // buffers, 1.01-1.95 with 256K while crowded (perf/results/2026-12-06-crowded-sends.md); TcpCrowd
    // in tcp_link.h.
    bytes("BRAID_TCP_CROWD_SNDBUF", "256K", 64 * kKi, kGi,
          "SO_SNDBUF of a rank's tcp data sockets to peers on its host while it sends large messages to two or more "
          "of them at once (0 = never changed; only with BRAID_TCP_SOCKBUF above it)",
          true),
    integer("BRAID_NSOCKS", "1", 1, 16,
            "tcp sockets per pair of ranks; messages of 128K and more are cut across them (both ends must agree)"),
    // Measured slower on loopback, where the kernel copies the pages anyway.
    boolean("BRAID_TCP_ZEROCOPY", "0", "tcp sends of 64K and more with MSG_ZEROCOPY"),
    // Test-only stand-ins for netem (absent from this kernel), for the multi-host test bed.
    integer("BRAID_SHM_TEST_CMA_DELAY_US", "0", 0, 1e7,
            "test knob: microseconds a rank waits before each single-copy read, and between claiming a piece of a "
            "peer's split receive and writing it (0 = off)"),
    integer("BRAID_TCP_TEST_DELAY_US", "0", 0, 1e7,
            "test knob: microseconds each tcp message waits after it is posted before it is sent (0 = off)"),
    bytes("BRAID_TCP_TEST_RATE", "0", 1, 1e15, "test knob: tcp send rate limit per peer in bytes/s (0 = off)", true),
    // ibverbs (read once, when the transport is made at init).
    text("BRAID_IB_LIBRARY", "libibverbs.so.1",
         "the libibverbs that ibverbs opens (dlopen) when a transport list names it: a file name the loader looks "
         "up, or a path; the first one opened serves the whole process"),
    text("BRAID_IB_HCA", "",
         "RDMA device and optional port for ibverbs, e.g. mlx5_0:1 (default: the first device with an active port)"),
    integer("BRAID_IB_GID_INDEX", "", 0, 1023,
            "GID table index for ibverbs (default: InfiniBand 0; RoCE the first v2 GID of an IPv4 address, else the "
            "first v2 GID)"),
    oneOf("BRAID_IB_MTU", "", "256|512|1024|2048|4096", "cap on the ibverbs path MTU (default: the port's active MTU)"),
    // The immediate of a write carries a chunk's bytes in 20 bits and its slot in 10: 512K and 1024
    // keep both inside it. All rings of a rank are slots x slot size x 2 x peers of pinned memory.
    bytes("BRAID_IB_SLOT_SIZE", "128K", 64, 512 * kKi, "bytes per ibverbs ring slot (one chunk), a multiple of 64"),
    integer("BRAID_IB_SLOTS", "16", 2, 1024, "slots per ibverbs ring (one ring each way per peer): chunks in flight"),
    // 4.096 us x 2^14 = 67 ms per try, 8 tries, up to 4x that by the spec: about 2 s to report a dead
    // peer; lowered at connect when BRAID_TIMEOUT is shorter.
    integer("BRAID_IB_TIMEOUT", "14", 1, 31, "ibverbs ACK timeout exponent: 4.096 us x 2^value per try"),
    integer("BRAID_IB_RETRY_CNT", "7", 1, 7, "ibverbs retries of an unacknowledged write before the peer is failed"),
    // Peer-failure reports rule out UCX's shared-memory transports; without them a dead peer can
    // abort the survivors inside UCX (cma), hence auto: peer unless UCX_TLS allows shared memory only.
    oneOf("BRAID_UCX_ERR_MODE", "auto", "auto|peer|none",
          "ucx endpoints' error mode: peer = UCX reports a dead peer (no shared memory), none = shared memory allowed, "
          "auto = peer, except between ranks of one host when UCX_TLS names shared-memory transports only"),
    // rma runs the chunk/credit protocol of transports/net/ (the one ibverbs runs) over ucp_put_nbx
    // into ucp_mem_map'ed rings; same immediate limits as ibverbs (20-bit chunk, 10-bit slot).
    oneOf("BRAID_UCX_PROTO", "tag", "tag|rma",
          "ucx data path: tag = tagged messages; rma = chunks put into the peer's registered ring, announced by an "
          "active message (every rank must use the same)"),
    bytes("BRAID_UCX_RMA_SLOT_SIZE", "256K", 64, 512 * kKi,
          "bytes per ucx rma ring slot (one chunk, one put), a multiple of 64"),
    integer("BRAID_UCX_RMA_SLOTS", "16", 2, 1024, "slots per ucx rma ring (one per peer each way): chunks in flight"),
    // UCX's eager messages over tcp and shared memory hold 8K in one piece.
    bytes("BRAID_UCX_RMA_INLINE", "8K", 0, 8 * kKi,
          "ucx rma chunks up to this size travel inside their active message instead of a put and a flush"),
    // UCX 1.13 emulates puts over tcp with active messages whose handler aborts the process when the
    // putting peer has died (transports/ucx/ucx_rma_link.h).
    oneOf("BRAID_UCX_RMA_WRITE", "auto", "auto|put|am",
          "how ucx rma chunks travel: put = ucp_put_nbx into the peer's ring (RDMA fabrics, shared memory), am = in "
          "the active message that announces them; auto = put when UCX_TLS names shared-memory transports only"),
    // Topology, cost model and algorithm choice.
    text("BRAID_TOPO_FILE", "", "load the machine and cost constants from this regular file instead of detecting"),
    text("BRAID_TOPO_DUMP_FILE", "",
         "write the detected topology here at init (%r = rank, %h = host; else rank 0 only); only a regular file or "
         "a new name is written"),
    text("BRAID_ALGO", "", "force algorithms: a name for all (ring) or per collective (allreduce:tree;broadcast:ring)"),
    boolean("BRAID_APPROXIMATE", "0", "AllReduce with op avg on floats may use approximate gossip averaging"),
    integer("BRAID_GOSSIP_ROUNDS", "0", 0, 64,
            "gossip AllReduce rounds; 0 = until exact where the graph allows (log2 n)"),
    real("BRAID_COST_INTRA_ALPHA_US", "0.6", 0, kMaxCostUs,
         "cost model: microseconds per message step between ranks of one host"),
    real("BRAID_COST_INTRA_GBPS", "12", kMinCostGbps, kMaxCostGbps,
         "cost model: GB/s a rank moves in and out at once within a host"),
    real("BRAID_COST_INTER_ALPHA_US", "10", 0, kMaxCostUs, "cost model: microseconds per message step between hosts"),
    real("BRAID_COST_INTER_GBPS", "2", kMinCostGbps, kMaxCostGbps,
         "cost model: GB/s a rank moves in and out at once between hosts"),
    real("BRAID_COST_REDUCE_GBPS", "40", kMinCostGbps, kMaxCostGbps, "cost model: GB/s of one input a rank reduces"),
    integer("BRAID_COST_INTER_LINKS", "0", 0, kMaxRanks,
            "cost model: inter-host links per host, shared by its ranks that cross at once (0 = one per rank; "
            "recursive-halving ReduceScatter then assumes one per host)"),
    real("BRAID_COST_OVERSUB_US", "12", 0, kMaxCostUs,
         "cost model: extra microseconds per step per extra rank sharing a core (wherever "
         "BRAID_COST_OVERSUB_SHM_US does not apply)"),
    real("BRAID_COST_OVERSUB_SHM_US", "2", 0, kMaxCostUs,
         "cost model: the same on a communicator of one host, two or more ranks a core, whose ranks talk "
         "through shared memory (a waiter spins, then yields its core: no wakeup)"),
    // Algorithms and executor.
    bytes("BRAID_CHUNK_SIZE", "256K", 64, kGi, "pipelining chunk of the ring and chain algorithms, in bytes"),
    integer("BRAID_SPIN_US", "50", 0, 1e6, "microseconds a waiter spins before yielding the CPU"),
    // 2-rank AllToAll over tcp at 8-64 MiB: 1.02-1.32x in every measurement but one (0.99), other
    // collectives and shm within the noise (perf/results/2026-12-06-copy-pieces.md).
    bytes("BRAID_COPY_PIECE", "256K", 4 * kKi, kGi,
          "a call's local copy larger than this (an AllToAll's or AllGather's own block, an out-of-place "
          "Broadcast root's) runs in pieces of this size, the transports progressing between them, while a "
          "transfer of the call is on the wire (0: whole)",
          true),
    // Logging.
    oneOf("BRAID_DEBUG", "WARN", "NONE|WARN|INFO|TRACE|0", "log level (0 = NONE)"),
    listOf("BRAID_DEBUG_SUBSYS", "ALL", "^INIT|COLL|NET|SHM|P2P|TOPO|TUNE|PLAN|BOOT|ALL",
           "log subsystems, comma-separated (^ first excludes the ones listed)"),
    text("BRAID_DEBUG_FILE", "",
         "log to this file instead of stderr (%h = host, %p = pid): a regular file, a character device or a pipe "
         "with a reader"),
    oneOf("BRAID_SIMD", "", "scalar|avx2|avx512", "cap the reduction kernels' instruction set"),
    // The bound is far above any machine's device count; the count itself is checked where the
    // device is chosen (src/cuda/runtime.h), since checking it here would start the CUDA driver.
    integer("BRAID_CUDA_DEVICE", "", 0, 1023,
            "CUDA device of a communicator (default: the calling thread's current device at init)"),
    boolean("BRAID_CUDA_IPC", "1",
            "on one host, collectives on device buffers read and write the peers' device memory in place (CUDA "
            "IPC) where every rank reaches every peer's GPU, else they are staged through host memory (off on any "
            "rank turns it off for all)"),
    bytes("BRAID_CUDA_STAGING_PIECE", "8M", 0, kTi,
          "an AllReduce, Broadcast or Reduce on device buffers staged through host memory is cut into pieces of about "
          "this many bytes (at most 32), staged together so that copies to and from the host overlap the pieces' "
          "transfers (0: one piece; the same on every rank)"),
    bytes("BRAID_CUDA_IPC_MIN", "1M", 0, kTi,
          "smallest device collective (bytes per rank's buffer) that takes cuda_ipc; smaller ones are staged through "
          "host memory (0: every call with bytes; the same on every rank)"),
};

const ParamInfo* findParam(const char* name) {
  for (const auto& p : kParams)
    if (strcmp(p.name, name) == 0) return &p;
  return nullptr;
}

const ParamInfo& declared(const char* name) {
  const ParamInfo* p = findParam(name);
  assert(p != nullptr && "undeclared BRAID_* parameter");
  static const ParamInfo kUndeclared = text("?", "", "undeclared");
  return p != nullptr ? *p : kUndeclared;
}

// 1048576 -> "1M", 65 -> "65": a bound as a user would type it.
std::string sizeText(double v) {
  if (v >= kTi && std::fmod(v, kTi) == 0) return std::to_string(static_cast<int64_t>(v / kTi)) + "T";
  if (v >= kGi && std::fmod(v, kGi) == 0) return std::to_string(static_cast<int64_t>(v / kGi)) + "G";
  if (v >= kMi && std::fmod(v, kMi) == 0) return std::to_string(static_cast<int64_t>(v / kMi)) + "M";
  if (v >= kKi && std::fmod(v, kKi) == 0) return std::to_string(static_cast<int64_t>(v / kKi)) + "K";
  return std::to_string(static_cast<int64_t>(v));
}

// The allowed spellings of an enum or list, without the list's ^ marker.
std::vector<std::string> spellings(const ParamInfo& p) {
  std::vector<std::string> out;
  std::string all = p.allowed != nullptr ? p.allowed : "";
  if (!all.empty() && all[0] == '^') all.erase(0, 1);
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t bar = all.find('|', pos);
    if (bar == std::string::npos) bar = all.size();
    out.push_back(all.substr(pos, bar - pos));
    pos = bar + 1;
  }
  return out;
}

Status outOfRange(const ParamInfo& p, const std::string& text, const char* what) {
  return errorf(braidInvalidArgument, "%s=%s %s (accepted: %s)", p.name, text.c_str(), what, paramRange(p).c_str());
}

Status checkRange(const ParamInfo& p, const std::string& text, double v) {
  if (p.zeroToo && v == 0) return okStatus();
  if (!(v >= p.min && v <= p.max)) return outOfRange(p, text, "is out of range");
  return okStatus();
}

Status parseDouble(const ParamInfo& p, const std::string& text, double* value) {
  errno = 0;
  char* end = nullptr;
  double v = strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v))
    return outOfRange(p, text, "is not a number");
  BRAID_TRY(checkRange(p, text, v));
  *value = v;
  return okStatus();
}

Status parseEnum(const ParamInfo& p, const std::string& text, std::string* value) {
  for (const std::string& s : spellings(p))
    if (strcasecmp(s.c_str(), text.c_str()) == 0) {
      *value = s;
      return okStatus();
    }
  return outOfRange(p, text, "is not one of the accepted values");
}

Status parseList(const ParamInfo& p, const std::string& text) {
  const bool negatable = p.allowed != nullptr && p.allowed[0] == '^';
  const size_t start = negatable && !text.empty() && text[0] == '^' ? 1 : 0;
  for (const std::string& item : listItems(text.substr(start))) {
    std::string canonical;
    if (!parseEnum(p, item, &canonical).ok())
      return errorf(braidInvalidArgument, "%s=%s: unknown item '%s' (accepted: %s)", p.name, text.c_str(), item.c_str(),
                    paramRange(p).c_str());
  }
  return okStatus();
}

// The environment's value of a knob, "" when unset or empty.
std::string envValue(const ParamInfo& p) {
  const char* env = getenv(p.name);
  return env != nullptr ? env : "";
}

}  // namespace

const std::vector<ParamInfo>& allParams() { return kParams; }

std::vector<std::string> listItems(const std::string& text) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    if (comma > pos) items.push_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return items;
}

const ParamInfo& paramInfo(const char* name) { return declared(name); }

std::string paramRange(const ParamInfo& p) {
  char buf[96];
  switch (p.kind) {
    case ParamKind::kInt:
      snprintf(buf, sizeof(buf), "%s%.0f..%.0f", p.zeroToo ? "0 or " : "", p.min, p.max);
      return buf;
    case ParamKind::kSize:
      return std::string(p.zeroToo ? "0 or " : "") + sizeText(p.min) + ".." + sizeText(p.max);
    case ParamKind::kDouble:
      snprintf(buf, sizeof(buf), "%g..%g", p.min, p.max);
      return buf;
    case ParamKind::kBool:
      return kBoolSpellings;
    case ParamKind::kEnum:
      return p.allowed;
    case ParamKind::kList: {
      const bool negatable = p.allowed[0] == '^';
      return std::string("list of ") + (negatable ? p.allowed + 1 : p.allowed) + (negatable ? ", ^ excludes" : "");
    }
    case ParamKind::kString:
      break;
  }
  return "";
}

std::string paramString(const char* name) {
  const ParamInfo& p = declared(name);
  const std::string env = envValue(p);
  return !env.empty() ? env : p.defaultValue;
}

Status parseParamInt(const ParamInfo& p, const std::string& text, int64_t* value) {
  errno = 0;
  char* end = nullptr;
  const long long v = strtoll(text.c_str(), &end, 10);
  const bool sized = p.kind == ParamKind::kSize;
  const char* notA = sized ? "is not a size such as 256K" : "is not an integer";
  if (end == text.c_str()) return outOfRange(p, text, notA);
  if (errno == ERANGE) return outOfRange(p, text, "is out of range");
  int64_t mult = 1;
  if (sized && *end != '\0') {
    switch (*end) {
      case 'k':
      case 'K':
        mult = int64_t{1} << 10;
        ++end;
        break;
      case 'm':
      case 'M':
        mult = int64_t{1} << 20;
        ++end;
        break;
      case 'g':
      case 'G':
        mult = int64_t{1} << 30;
        ++end;
        break;
      case 't':
      case 'T':
        mult = int64_t{1} << 40;
        ++end;
        break;
      default:
        break;
    }
  }
  if (*end != '\0') return outOfRange(p, text, notA);
  // 18014398509482240K wraps to 256K in a plain signed multiply.
  int64_t scaled = 0;
  if (__builtin_mul_overflow(static_cast<int64_t>(v), mult, &scaled)) return outOfRange(p, text, "is out of range");
  if (p.kind == ParamKind::kInt || sized) BRAID_TRY(checkRange(p, text, static_cast<double>(scaled)));
  *value = scaled;
  return okStatus();
}

Status parseParamBool(const ParamInfo& p, const std::string& text, bool* value) {
  static const char* kTrue[] = {"1", "true", "yes", "on"};
  static const char* kFalse[] = {"0", "false", "no", "off"};
  for (const char* t : kTrue)
    if (strcasecmp(text.c_str(), t) == 0) {
      *value = true;
      return okStatus();
    }
  for (const char* f : kFalse)
    if (strcasecmp(text.c_str(), f) == 0) {
      *value = false;
      return okStatus();
    }
  return outOfRange(p, text, "is not a boolean");
}

Status paramInt(const char* name, int64_t* value) {
  int64_t v = 0;
  BRAID_TRY(parseParamInt(declared(name), paramString(name), &v));
  *value = v;
  return okStatus();
}

Status paramDouble(const char* name, double* value) {
  double v = 0;
  BRAID_TRY(parseDouble(declared(name), paramString(name), &v));
  *value = v;
  return okStatus();
}

const char* paramDefault(const char* name) { return declared(name).defaultValue; }

int64_t paramDefaultInt(const char* name) {
  const ParamInfo& p = declared(name);
  int64_t v = 0;
  if (p.defaultValue[0] != '\0' && !parseParamInt(p, p.defaultValue, &v).ok()) assert(false && "bad default");
  return v;
}

bool paramIsSet(const char* name) {
  const char* env = getenv(name);
  return env != nullptr && env[0] != '\0';
}

Status paramSize(const char* name, size_t* value) {
  int64_t v = 0;
  BRAID_TRY(parseParamInt(declared(name), paramString(name), &v));
  if (v < 0) return errorf(braidInvalidArgument, "%s must not be negative", name);
  *value = static_cast<size_t>(v);
  return okStatus();
}

Status paramBool(const char* name, bool* value) {
  bool v = false;
  BRAID_TRY(parseParamBool(declared(name), paramString(name), &v));
  *value = v;
  return okStatus();
}

Status paramEnum(const char* name, std::string* value) {
  const ParamInfo& p = declared(name);
  const std::string text = paramString(name);
  std::string v;
  if (!text.empty()) BRAID_TRY(parseEnum(p, text, &v));
  *value = v;
  return okStatus();
}

Status checkParam(const char* name) { return checkParamText(name, envValue(declared(name))); }

Status checkParamText(const char* name, const std::string& text) {
  const ParamInfo& p = declared(name);
  if (text.empty()) return okStatus();
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::string e;
  switch (p.kind) {
    case ParamKind::kInt:
    case ParamKind::kSize:
      return parseParamInt(p, text, &i);
    case ParamKind::kDouble:
      return parseDouble(p, text, &d);
    case ParamKind::kBool:
      return parseParamBool(p, text, &b);
    case ParamKind::kEnum:
      return parseEnum(p, text, &e);
    case ParamKind::kList:
      return parseList(p, text);
    case ParamKind::kString:
      break;
  }
  return okStatus();
}

Status checkParams() {
  for (const ParamInfo& p : kParams) BRAID_TRY(checkParam(p.name));
  // The logger falls back to stderr with a warning (it may run before any communicator); an
  // init with a log file that cannot be used fails instead.
  if (paramIsSet("BRAID_DEBUG_FILE")) BRAID_TRY(checkLogFile().withContext("BRAID_DEBUG_FILE"));
  return okStatus();
}

}  // namespace braid
