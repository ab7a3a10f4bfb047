#include "src/comm.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "src/base/config.h"
#include "src/base/log.h"
#include "src/cuda/ipc_coll.h"
#include "src/cuda/runtime.h"
#include "src/link_check.h"
#include "src/peer_maps.h"
#include "topology/topology.h"
#include "transports/mailbox.h"

std::string braidComm::describeRank(int r) const { return braid::describePeer(peers, r); }

namespace braid {

std::string describePeer(const std::vector<PeerInfo>& peers, int r) {
  if (r < 0 || r >= static_cast<int>(peers.size())) return "rank " + std::to_string(r);
  return "rank " + std::to_string(r) + " (host " + peers[r].hostname + ", pid " + std::to_string(peers[r].pid) + ")";
}

namespace {

// hostname + boot id: two containers on one machine share the boot id but not the hostname, and
// two machines with the same hostname differ in boot id.
std::string hostIdentity() {
  std::string over = paramString("BRAID_HOSTID");
  if (!over.empty()) return over;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  return std::string(host) + ":" + boot;
}

PeerInfo localInfo(int rank) {
  PeerInfo me;
  me.rank = rank;
  me.pid = getpid();
  gethostname(me.hostname, sizeof(me.hostname) - 1);
  std::string id = hostIdentity();
  strncpy(me.hostId, id.c_str(), sizeof(me.hostId) - 1);
  return me;
}

// `list`: the settings' preference list (BRAID_TRANSPORTS or the config's), in its order, against
// the registry: the names and the error's list of known ones both come from transportRegistry().
Status makeTransports(const std::string& list, std::vector<std::unique_ptr<Transport>>* out) {
  const std::vector<TransportEntry>& registry = transportRegistry();
  for (const std::string& name : listItems(list)) {
    const TransportEntry* entry = nullptr;
    for (const TransportEntry& e : registry)
      if (name == e.name) entry = &e;
    if (entry == nullptr) {
      std::string known;
      for (const TransportEntry& e : registry) known.append(known.empty() ? "" : ", ").append(e.name);
      return errorf(braidInvalidArgument, "BRAID_TRANSPORTS=%s: unknown transport '%s' (known: %s)", list.c_str(),
                    name.c_str(), known.c_str());
    }
    out->push_back(entry->make());
  }
  if (out->empty()) return errorf(braidInvalidArgument, "BRAID_TRANSPORTS=%s names no transport", list.c_str());
  return okStatus();
}

// Every transport's record from every rank, in one exchange: all[r * nt + t] is rank r's record
// for transports[t].
Status gatherRecords(braidComm* comm, Deadline deadline, std::vector<TransportRecord>* all) {
  const size_t nt = comm->transports.size();
  std::vector<TransportRecord> mine(nt);
  for (size_t t = 0; t < nt; ++t) comm->transports[t]->localRecord(comm->peers[comm->rank], &mine[t]);
  all->assign(nt * static_cast<size_t>(comm->nranks), TransportRecord{});
  return comm->boot->allGather(mine.data(), nt * sizeof(TransportRecord), all->data(), deadline);
}

// Where each pair of ranks stands while the links are made. Every rank evaluates the same
// canConnect calls on the same records, so all of them agree on every pair's next transport
// without asking each other; only self-test failures need an exchange (agreeOnFailures).
struct LinkPlan {
  braidComm* comm = nullptr;
  std::vector<TransportRecord> records;      // records[r * nt + t]: rank r's record for transport t
  std::map<std::pair<int, int>, int> moved;  // pairs (low, high) moved off their first choice: their transport
  std::vector<std::string> notes;            // per peer of ours: why it is on its transport (for INFO)

  size_t nt() const { return comm->transports.size(); }
  Endpoint endpoint(int r, size_t t) const { return Endpoint{&comm->peers[r], &records[r * nt() + t]}; }
  // The first transport after `from` that can connect a and b, or -1.
  int next(int a, int b, int from) const {
    for (size_t t = static_cast<size_t>(from + 1); t < nt(); ++t)
      if (comm->transports[t]->canConnect(endpoint(a, t), endpoint(b, t))) return static_cast<int>(t);
    return -1;
  }
  int current(int a, int b) const {
    auto it = moved.find({std::min(a, b), std::max(a, b)});
    return it != moved.end() ? it->second : next(a, b, -1);
  }
  // "shm: cannot connect; " for each transport in (from, to): next() passed them over, so each
  // refused the pair.
  std::string refusals(int from, int to) const {
    std::string out;
    for (int t = from + 1; t < to; ++t) out.append(comm->transports[t]->name()).append(": cannot connect; ");
    return out;
  }
};

// Connects, transport by transport, the peers in `pending` to their transport (comm->transportOf);
// every rank takes part in the connect of each transport in `connectAll` (also with no peers).
Status connectRound(braidComm* comm, const TransportContext& ctx, const std::vector<int>& pending,
                    const std::vector<bool>& connectAll) {
  for (size_t t = 0; t < comm->transports.size(); ++t) {
    if (!connectAll[t]) continue;
    std::vector<int> peers;
    for (int p : pending)
      if (comm->transportOf[p] == static_cast<int>(t)) peers.push_back(p);
    std::vector<std::unique_ptr<Link>> links;
    Status s = comm->transports[t]->connect(ctx, peers, &links);
    if (!s.ok()) return s.withContext(std::string("transport ") + comm->transports[t]->name());
    if (links.size() != peers.size())
      return errorf(braidInternalError, "transport %s returned %zu links for %zu peers", comm->transports[t]->name(),
                    links.size(), peers.size());
    for (size_t i = 0; i < peers.size(); ++i) comm->links[peers[i]] = std::move(links[i]);
    if (!peers.empty()) BRAID_INFO(kLogInit, "%zu peers over %s", peers.size(), comm->transports[t]->name());
  }
  return okStatus();
}

// Every rank's failed peers, as bitmaps in one exchange: the pairs that move are those that either
// side saw fail, so a failure seen by one side only moves the pair on both.
Status agreeOnFailures(braidComm* comm, Deadline deadline, const std::vector<bool>& failedPeer,
                       std::vector<std::pair<int, int>>* pairs) {
  const int n = comm->nranks;
  const size_t row = (static_cast<size_t>(n) + 7) / 8;
  std::vector<uint8_t> mine(row, 0), all(row * n, 0);
  for (int p = 0; p < n; ++p)
    if (failedPeer[p]) mine[p / 8] |= static_cast<uint8_t>(1u << (p % 8));
  BRAID_TRY(comm->boot->allGather(mine.data(), row, all.data(), deadline));
  // Only the set bits are visited: n^2 pairs would cost seconds at tens of thousands of ranks.
  pairs->clear();
  for (int r = 0; r < n; ++r)
    for (size_t byte = 0; byte < row; ++byte)
      for (uint8_t bits = all[r * row + byte]; bits != 0; bits &= static_cast<uint8_t>(bits - 1)) {
        const int p = static_cast<int>(byte * 8) + __builtin_ctz(bits);
        if (p < n && p != r) pairs->emplace_back(std::min(r, p), std::max(r, p));
      }
  std::sort(pairs->begin(), pairs->end());
  pairs->erase(std::unique(pairs->begin(), pairs->end()), pairs->end());
  return okStatus();
}

// Self-tests the links to `pending`, then moves every pair that failed anywhere to its next
// transport. Fills *pending with this rank's moved peers (connected next round) and connectAll
// with the transports any rank moves a pair to; fails on every rank when a pair has none left.
Status checkRound(LinkPlan* plan, Deadline deadline, std::vector<int>* pending, std::vector<bool>* connectAll) {
  braidComm* comm = plan->comm;
  const int me = comm->rank;
  LinkCheckSet set;
  set.rank = me;
  set.commId = comm->commId;
  set.transports = &comm->transports;
  for (int p : *pending) {
    set.peers.push_back(p);
    set.links.push_back(comm->links[p].get());
    set.transportOf.push_back(comm->transportOf[p]);
  }
  // Declared before the links it tests are destroyed below: a failed link may still hold its
  // transfers.
  LinkCheck check;
  std::vector<std::string> failures;
  Deadline checkDeadline = Deadline::afterMs(comm->settings.linkCheckMs);
  checkDeadline.atNs = std::min(checkDeadline.atNs, deadline.atNs);
  const int64_t startNs = nowNs();
  BRAID_TRY(check.run(set, checkDeadline, &failures));
  const int64_t checkedNs = nowNs();
  std::vector<bool> failedPeer(comm->nranks, false);
  std::vector<std::string> why(comm->nranks);
  for (size_t i = 0; i < set.peers.size(); ++i) {
    failedPeer[set.peers[i]] = !failures[i].empty();
    why[set.peers[i]] = failures[i];
  }
  std::vector<std::pair<int, int>> pairs;
  BRAID_TRY(agreeOnFailures(comm, deadline, failedPeer, &pairs));
  BRAID_INFO(kLogInit, "link self-test of %zu links: %.2f ms, agreeing on %zu failed pairs: %.2f ms", set.peers.size(),
             static_cast<double>(checkedNs - startNs) / 1e6, pairs.size(),
             static_cast<double>(nowNs() - checkedNs) / 1e6);
  pending->clear();
  connectAll->assign(plan->nt(), false);
  std::string stranded;
  for (const auto& [a, b] : pairs) {
    const int cur = plan->current(a, b);
    const int nxt = plan->next(a, b, cur);
    plan->moved[{a, b}] = nxt;
    if (nxt >= 0) (*connectAll)[nxt] = true;
    const char* curName = comm->transports[cur]->name();
    if (a == me || b == me) {
      const int p = a == me ? b : a;
      const std::string what = !why[p].empty() ? why[p] : comm->describeRank(p) + " saw it fail";
      BRAID_WARN(kLogInit | kLogNet, "link self-test of %s between %s and %s failed: %s; %s", curName,
                 comm->describeRank(me).c_str(), comm->describeRank(p).c_str(), what.c_str(),
                 nxt >= 0 ? (std::string("moving the pair to ") + comm->transports[nxt]->name()).c_str()
                          : "no transport left for the pair");
      plan->notes[p].append(curName).append(" failed its self-test: ").append(what).append("; ");
      if (nxt >= 0) plan->notes[p].append(plan->refusals(cur, nxt));
      comm->transports[cur]->dropLink(p);
      comm->links[p].reset();
      comm->transportOf[p] = nxt;
      if (nxt >= 0) pending->push_back(p);
    }
    if (nxt < 0 && stranded.empty()) {
      std::string tried;
      for (int t = plan->next(a, b, -1); t >= 0; t = plan->next(a, b, t))
        tried.append(tried.empty() ? "" : ", ").append(comm->transports[t]->name());
      stranded = "the link between " + comm->describeRank(a) + " and " + comm->describeRank(b) +
                 " failed its self-test on every transport that can connect the pair (tried " + tried +
                 " of BRAID_TRANSPORTS=" + comm->settings.transports + ")";
      const std::string& seen = why[a == me ? b : a];
      if ((a == me || b == me) && !seen.empty()) stranded += "; on " + std::string(curName) + " this rank saw: " + seen;
    }
  }
  if (!stranded.empty()) return errorf(braidRemoteError, "%s", stranded.c_str());
  return okStatus();
}

// The tag links (src/tags.h): a connect of every transport of a second set, each peer over the
// kind its first link settled on (that one passed the self-test, so the second is not tested).
// Separate transports: a tag link keeps a header receive posted once tagged receives were used, and
// polling it on every pass of the collectives would cost them (a system call per pass on tcp).
Status connectTagLinks(braidComm* comm, const TransportContext& ctx) {
  BRAID_TRY(makeTransports(comm->settings.transports, &comm->tagTransports));
  if (comm->tagTransports.size() != comm->transports.size())
    return errorf(braidInternalError, "%zu tag transports for %zu transports", comm->tagTransports.size(),
                  comm->transports.size());
  comm->tagLinks.resize(comm->nranks);
  for (size_t t = 0; t < comm->tagTransports.size(); ++t) {
    std::vector<int> peers;
    for (int p = 0; p < comm->nranks; ++p)
      if (comm->transportOf[p] == static_cast<int>(t)) peers.push_back(p);
    std::vector<std::unique_ptr<Link>> links;
    BRAID_TRY(comm->tagTransports[t]->connect(ctx, peers, &links).withContext("connecting the tag links"));
    if (links.size() != peers.size())
      return errorf(braidInternalError, "transport %s returned %zu tag links for %zu peers",
                    comm->transports[t]->name(), links.size(), peers.size());
    for (size_t i = 0; i < peers.size(); ++i) comm->tagLinks[peers[i]] = std::move(links[i]);
  }
  return okStatus();
}

// Picks a transport per peer (first in preference order that can connect the pair; the transports
// were made by commInit) and connects them, transport by transport; every rank takes part in every transport's connect.
// Then every new link passes the self-test (src/link_check.h) or the pair moves to its next transport, in further
// rounds, until every link passed or a pair has no transport left.
Status connectLinks(braidComm* comm, Deadline deadline, const uint8_t* secret) {
  const std::string& list = comm->settings.transports;
  std::vector<LinkFault> faults;
  BRAID_TRY(parseLinkFaults(comm->settings.linkFaults, &faults));
  wrapFaultyTransports(faults, &comm->transports);
  // Every rank must have the same preference list, or two ranks could pick different transports
  // for the same pair; and the self-test on or off alike, or a rank that tests would wait for
  // messages and an agreement that a rank that does not never sends.
  // BRAID_P2P_TAGS alike too: the tag links are one more connect of every transport.
  const uint64_t mine[3] = {fnv1a(list, 0), comm->settings.linkCheckMs != 0 ? 1u : 0u,
                            comm->settings.p2pTags ? 1u : 0u};
  std::vector<uint64_t> all(3 * static_cast<size_t>(comm->nranks));
  BRAID_TRY(comm->boot->allGather(mine, sizeof(mine), all.data(), deadline));
  for (int r = 0; r < comm->nranks; ++r) {
    if (all[3 * r] != mine[0])
      return errorf(braidInvalidUsage,
                    "rank %d has a different transport list (BRAID_TRANSPORTS or config->transports) than rank %d (%s)",
                    r, comm->rank, list.c_str());
    if (all[3 * r + 1] != mine[1])
      return errorf(braidInvalidUsage, "rank %d has the link self-test %s, rank %d %s (BRAID_LINK_CHECK_MS=0 is off)",
                    r, mine[1] != 0 ? "off" : "on", comm->rank, mine[1] != 0 ? "on" : "off");
    if (all[3 * r + 2] != mine[2])
      return errorf(braidInvalidUsage, "rank %d has BRAID_P2P_TAGS=%d, rank %d has %d", r, mine[2] != 0 ? 0 : 1,
                    comm->rank, mine[2] != 0 ? 1 : 0);
  }
  LinkPlan plan;
  plan.comm = comm;
  BRAID_TRY(gatherRecords(comm, deadline, &plan.records));
  const int n = comm->nranks;
  std::vector<int> choice(n, -1), pending;
  plan.notes.resize(n);
  for (int p = 0; p < n; ++p) {
    if (p == comm->rank) continue;
    choice[p] = plan.next(comm->rank, p, -1);
    if (choice[p] < 0) {
      // Each transport's reason, so that "ibverbs: no RDMA device (...)" reaches the user.
      std::string why;
      for (size_t t = 0; t < plan.nt(); ++t) {
        const std::string w = comm->transports[t]->whyNot(plan.endpoint(comm->rank, t), plan.endpoint(p, t));
        if (!w.empty())
          why.append(why.empty() ? ": " : "; ").append(comm->transports[t]->name()).append(": ").append(w);
      }
      return errorf(braidInvalidUsage, "no transport in BRAID_TRANSPORTS=%s can connect rank %d and %s%s", list.c_str(),
                    comm->rank, comm->describeRank(p).c_str(), why.c_str());
    }
    plan.notes[p] = plan.refusals(-1, choice[p]);
    pending.push_back(p);
  }
  comm->links.resize(n);
  comm->transportOf = choice;
  TransportContext ctx;
  ctx.rank = comm->rank;
  ctx.nranks = n;
  ctx.peers = &comm->peers;
  memcpy(ctx.secret, secret, 16);
  ctx.commId = comm->commId;
  ctx.deadline = deadline;
  Bootstrap* boot = comm->boot.get();
  ctx.allGather = [boot, deadline](const void* m, size_t bytes, void* a) {
    return boot->allGather(m, bytes, a, deadline);
  };
  // The first round connects every transport, as a communicator without the self-test does; a
  // later one only those that some rank moves a pair to. Each round moves a pair one transport
  // down its list, so there are at most as many rounds as transports.
  std::vector<bool> connectAll(plan.nt(), true);
  for (size_t round = 0; round <= plan.nt(); ++round) {
    BRAID_TRY(connectRound(comm, ctx, pending, connectAll));
    if (comm->settings.linkCheckMs == 0) break;
    BRAID_TRY(checkRound(&plan, deadline, &pending, &connectAll));
    if (std::find(connectAll.begin(), connectAll.end(), true) == connectAll.end()) break;
  }
  if (comm->settings.p2pTags) BRAID_TRY(connectTagLinks(comm, ctx));
  if (log_detail::enabled(LogLevel::kInfo, kLogInit | kLogNet)) {
    for (int p = 0; p < n; ++p) {
      if (p == comm->rank) continue;
      const bool sameHost = strcmp(comm->peers[p].hostId, comm->peers[comm->rank].hostId) == 0;
      BRAID_INFO(kLogInit | kLogNet, "%s: %s (%s%s%s)", comm->describeRank(p).c_str(),
                 comm->transports[comm->transportOf[p]]->name(), plan.notes[p].c_str(),
                 sameHost ? "same host" : "different host", comm->settings.linkCheckMs == 0 ? "; self-test off" : "");
    }
  }
  return okStatus();
}

// Small collectives run on mailboxes (src/small_coll.h) only if every rank has them toward every
// other, of one capacity: each rank says what its links have, and all take the same verdict, so
// that every rank runs the same calls there. (A pair that the self-test moved to tcp has none.)
// What each rank says at init about its mailboxes, its memory and its links (agreeOnMailboxes).
struct MailAgreement {
  uint64_t capacity = 0;  // the mailboxes' capacity toward every peer, 0 when some link has none
  int64_t pid = 0;
  uint64_t probeIno = 0;  // a one-page braidMemAlloc-like file the peers try to map (0: none)
  int32_t probeFd = -1;
  int32_t direct = 0;   // BRAID_SHM_DIRECT
  int32_t cudaIpc = 0;  // BRAID_CUDA_IPC, and a CUDA device
  char busId[32] = {};  // that device's PCI bus id
  // From how many bytes of a call's buffers on this host its links to the host's ranks receive
  // with two copies (Link::receiveCopies; ClusterShape::hostTwoCopiesFrom), for tableAfterLinks.
  uint64_t twoCopiesFrom = topo::ClusterShape::kNever;
};

// A memory file of one page for the peers' probe; false without memfd.
bool makeProbe(int* fd, uint64_t* ino) {
  const int f = memfd_create("braid-probe", MFD_CLOEXEC);
  struct stat st;
  if (f < 0) return false;
  if (ftruncate(f, 4096) != 0 || fstat(f, &st) != 0) {
    close(f);
    return false;
  }
  *fd = f;
  *ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

// Device collectives in place on the peers' device memory (src/cuda/ipc_coll.h): when every rank
// has a device and BRAID_CUDA_IPC (all know that from `all`), each rank says whether it reaches
// every peer's GPU, and all take the verdict. Otherwise device calls are staged through host memory.
Status agreeOnCudaIpc(braidComm* comm, const std::vector<MailAgreement>& all, Deadline deadline) {
  for (const MailAgreement& a : all)
    if (a.cudaIpc == 0) return okStatus();
  // Ranks in one process (ncclCommInitAll, threads): CUDA opens no handle in the process that
  // exported it, and such ranks are staged through host memory.
  for (size_t p = 0; p < all.size(); ++p)
    for (size_t q = p + 1; q < all.size(); ++q)
      if (all[p].pid == all[q].pid) {
        BRAID_INFO(kLogInit, "cuda_ipc off: ranks %zu and %zu are one process", p, q);
        return okStatus();
      }
  std::vector<std::string> busIds;
  for (const MailAgreement& a : all) busIds.emplace_back(a.busId, strnlen(a.busId, sizeof(a.busId)));
  bool reach = false;
  std::string why;
  Status asked = ipcReachesAll(comm->cudaDevice, busIds, comm->rank, &reach, &why);
  if (!asked.ok()) {
    reach = false;
    why = asked.message();
  }
  // Its stream, event and fold buffer are made now, while no call can be waiting on the device
  // (src/cuda/ipc_coll.cc says why that matters); a rank that cannot make them votes no.
  if (reach) {
    const Status made = makeIpcColl(comm->cudaDevice, &comm->ipcColl);
    if (!made.ok()) {
      reach = false;
      why = made.message();
    }
  }
  if (!reach) BRAID_INFO(kLogInit, "cuda_ipc off: %s", why.c_str());
  const uint64_t ok = reach ? 1 : 0;
  std::vector<uint64_t> oks(comm->nranks);
  BRAID_TRY(comm->boot->allGather(&ok, sizeof(ok), oks.data(), deadline));
  comm->cudaIpc = std::find(oks.begin(), oks.end(), uint64_t{0}) == oks.end();
  if (!comm->cudaIpc) comm->ipcColl.reset();
  BRAID_INFO(kLogInit, "collectives on device buffers: %s", comm->cudaIpc ? "cuda_ipc (in place)" : "host staging");
  return okStatus();
}

Status agreeOnMailboxes(braidComm* comm, Deadline deadline, std::vector<uint64_t>* twoCopiesFrom) {
  MailAgreement mine;
  // The latest any link of the host gets there: a single-copy link from the cut on, a FIFO at once.
  mine.twoCopiesFrom = comm->localRanks > 1 ? 0 : topo::ClusterShape::kNever;  // localRanks counts this one
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank || strcmp(comm->peers[p].hostId, comm->peers[comm->rank].hostId) != 0) continue;
    const Link::Copies k = comm->links[p] != nullptr ? comm->links[p]->receiveCopies() : Link::Copies::kOther;
    const uint64_t from = k == Link::Copies::kTwo   ? 0
                          : k == Link::Copies::kOne ? comm->settings.ntStoresMin
                                                    : topo::ClusterShape::kNever;
    mine.twoCopiesFrom = std::max(mine.twoCopiesFrom, from);
  }
  mine.capacity = comm->nranks > 1 ? UINT64_MAX : 0;
  for (int p = 0; p < comm->nranks && mine.capacity != 0; ++p) {
    if (p == comm->rank) continue;
    const Mailboxes* m = comm->links[p] != nullptr ? comm->links[p]->mailboxes() : nullptr;
    const uint64_t cap = m != nullptr ? m->capacity : 0;
    mine.capacity = mine.capacity == UINT64_MAX || mine.capacity == cap ? cap : 0;
  }
  mine.pid = static_cast<int64_t>(getpid());
  mine.direct = comm->settings.shmDirect ? 1 : 0;
  if (comm->settings.cudaIpc && comm->cudaDevice >= 0) {
    ipcBusId(comm->cudaDevice, mine.busId);
    mine.cudaIpc = mine.busId[0] != '\0' ? 1 : 0;
  }
  int probe = -1;
  if (mine.capacity > 0 && mine.direct != 0 && makeProbe(&probe, &mine.probeIno)) mine.probeFd = probe;
  struct CloseProbe {
    int fd;
    ~CloseProbe() {
      if (fd >= 0) close(fd);
    }
  } closeProbe{probe};
  std::vector<MailAgreement> all(comm->nranks);
  BRAID_TRY(comm->boot->allGather(&mine, sizeof(mine), all.data(), deadline));
  twoCopiesFrom->resize(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) (*twoCopiesFrom)[r] = all[r].twoCopiesFrom;
  comm->mailBytes = static_cast<size_t>(mine.capacity);
  bool direct = true;
  for (const MailAgreement& a : all) {
    if (a.capacity != mine.capacity) comm->mailBytes = 0;
    direct = direct && a.direct != 0 && a.probeIno != 0;
  }
  BRAID_INFO(kLogInit, "small collectives on mailboxes: %s (%zu bytes)", comm->mailBytes > 0 ? "on" : "off",
             comm->mailBytes);
  if (comm->mailBytes > 0) BRAID_TRY(agreeOnCudaIpc(comm, all, deadline));
  if (comm->mailBytes == 0 || !direct) return okStatus();
  // Every rank tries every peer's probe, and the answers are agreed: a call either reads in place
  // on every rank or on none.
  uint64_t ok = 1;
  for (int p = 0; p < comm->nranks && ok != 0; ++p)
    if (p != comm->rank && !PeerMaps::canMap(all[p].pid, all[p].probeFd, all[p].probeIno)) {
      BRAID_INFO(kLogInit, "cannot map the memory of %s: collectives on braidMemAlloc memory take the FIFOs",
                 comm->describeRank(p).c_str());
      ok = 0;
    }
  std::vector<uint64_t> oks(comm->nranks);
  BRAID_TRY(comm->boot->allGather(&ok, sizeof(ok), oks.data(), deadline));
  if (std::find(oks.begin(), oks.end(), uint64_t{0}) != oks.end()) return okStatus();
  comm->directPids.resize(comm->nranks);
  for (int p = 0; p < comm->nranks; ++p) comm->directPids[p] = all[p].pid;
  BRAID_INFO(kLogInit, "collectives on braidMemAlloc memory read and write in place");
  return okStatus();
}

// Every rank listens for the rendezvous of communicators derived later (shrink, split); the
// addresses are gathered now, while everyone is alive. Connections are only accepted during such a
// rendezvous, and are authenticated like any other.
Status gatherListeners(braidComm* comm, Deadline deadline) {
  SockAddr local, bound;
  BRAID_TRY(defaultLocalAddress(&local));
  BRAID_TRY(listenOn(local, 128, &comm->listener, &bound));
  comm->listenAddrs.resize(comm->nranks);
  BRAID_TRY(comm->boot->allGather(&bound, sizeof(bound), comm->listenAddrs.data(), deadline));
  for (int r = 0; r < comm->nranks; ++r) {
    SockAddr& a = comm->listenAddrs[r];
    if (a.len > sizeof(a.storage) || !sockAddrFromBytes(&a.storage, a.len, &a))
      return errorf(braidRemoteError, "rank %d published a malformed listener address", r);
  }
  return okStatus();
}

}  // namespace

Status commInit(const UniqueIdData& id, int nranks, int rank, const ConfigOverrides& over, braidComm** out) {
  auto comm = std::make_unique<braidComm>();
  BRAID_TRY(readCommSettings(over, &comm->settings));
  // Asking for the device count and the current device creates no CUDA context.
  if (gpuDeviceCount() > 0) BRAID_TRY(gpuCommDevice(&comm->cudaDevice, over.cudaDevice));
  // Before the id is used: a list naming a transport this build lacks fails here, and the id is
  // still good for another try. A config's list was checked against the table's spellings only.
  Status made = makeTransports(comm->settings.transports, &comm->transports);
  if (!made.ok() && !over.transports.empty()) return made.withContext("config->transports");
  BRAID_TRY(made);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->commId = id.commId;
  setLogRank(rank);
  Deadline deadline = Deadline::afterSeconds(comm->settings.timeoutSec);
  PeerInfo me = localInfo(rank);
  BRAID_TRY(Bootstrap::init(id, rank, nranks, me, deadline, &comm->boot, &comm->peers));
  memcpy(comm->secret, id.secret, sizeof(comm->secret));
  BRAID_TRY(gatherListeners(comm.get(), deadline));
  for (const PeerInfo& p : comm->peers)
    if (strcmp(p.hostId, me.hostId) == 0 && p.rank != rank) comm->localRanks++;
  topo::TopoFile local;
  BRAID_TRY(setupTopology(comm.get(), deadline, &local));
  BRAID_TRY(connectLinks(comm.get(), deadline, id.secret));
  std::vector<uint64_t> twoCopiesFrom;
  BRAID_TRY(agreeOnMailboxes(comm.get(), deadline, &twoCopiesFrom));
  BRAID_TRY(tableAfterLinks(comm.get(), twoCopiesFrom, &local));
  comm->control = std::make_unique<ControlPlane>(comm.get());
  BRAID_TRY(comm->control->start());
  comm->engine = std::make_unique<Engine>(comm.get(), *comm->control);
  BRAID_TRY(comm->engine->start());
  BRAID_INFO(kLogInit, "comm %016llx rank %d of %d ready (%d ranks on this host, CUDA device %d)",
             static_cast<unsigned long long>(comm->commId), rank, nranks, comm->localRanks, comm->cudaDevice);
  *out = comm.release();
  return okStatus();
}

static Status envInt(const char* name, int* out, bool* present) {
  const char* v = getenv(name);
  *present = v != nullptr && v[0] != '\0';
  if (!*present) return okStatus();
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 24))
    return errorf(braidInvalidArgument, "%s=%s is not a valid count", name, v);
  *out = static_cast<int>(x);
  return okStatus();
}

// No BRAID_SECRET: the secret is derived from what every rank of this job sees alike, the
// rendezvous address, the size and the job's id. It keeps jobs apart; it does not keep out someone
// who can read the job's environment. Without a job id two jobs on one address would derive the
// same secret, and the ranks of one could join the other's communicator (returning wrong sums), so
// init refuses then. Job-wide ids only: PMI_ID, for one, is per process under MPICH-style PMI. The
// restart and step counters tell a relaunch from the attempt it replaces.
static Status deriveSecret(const std::string& addr, int size, uint8_t* secret) {
  static const char* kJobIds[] = {"BRAID_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid",
                                  "PMIX_NAMESPACE"};
  static const char* kAttempts[] = {"TORCHELASTIC_RESTART_COUNT", "SLURM_STEP_ID", "SLURM_RESTART_COUNT"};
  std::string job = addr + "/" + std::to_string(size);
  bool identified = false;
  for (const char* v : kJobIds) {
    const char* x = getenv(v);
    if (x == nullptr || x[0] == '\0') continue;
    job.append("/").append(v).append("=").append(x);
    identified = true;
  }
  if (!identified)
    return errorf(braidInvalidUsage,
                  "no job identity: BRAID_SECRET is unset and no job id is set (BRAID_JOB_ID, TORCHELASTIC_RUN_ID, "
                  "SLURM_JOB_ID, OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE), so braid cannot tell this job from another "
                  "one using the rendezvous address %s: set BRAID_SECRET to 32 hex digits (openssl rand -hex 16) or "
                  "BRAID_JOB_ID to any text unique to this run, the same on every rank (braidrun sets BRAID_SECRET)",
                  addr.c_str());
  for (const char* v : kAttempts) {
    const char* x = getenv(v);
    if (x != nullptr) job.append("/").append(v).append("=").append(x);
  }
  const uint64_t a = fnv1a(job, 1), b = fnv1a(job, 2);
  memcpy(secret, &a, 8);
  memcpy(secret + 8, &b, 8);
  return okStatus();
}

Status commInitFromEnv(braidComm** out) {
  // Rank and size, from the first launcher whose variables are all present.
  static const char* kPairs[][2] = {{"BRAID_RANK", "BRAID_WORLD_SIZE"},
                                    {"RANK", "WORLD_SIZE"},
                                    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    {"SLURM_PROCID", "SLURM_NTASKS"},
                                    {"PMI_RANK", "PMI_SIZE"}};
  int rank = -1, size = -1;
  const char* from = nullptr;
  const char* fromSize = nullptr;
  for (auto& pair : kPairs) {
    bool hasRank = false, hasSize = false;
    BRAID_TRY(envInt(pair[0], &rank, &hasRank));
    BRAID_TRY(envInt(pair[1], &size, &hasSize));
    if (hasRank && hasSize) {
      from = pair[0];
      fromSize = pair[1];
      break;
    }
  }
  if (from == nullptr)
    return errorf(braidInvalidUsage,
                  "no launcher environment: set BRAID_RANK/BRAID_WORLD_SIZE/BRAID_ROOT (braidrun does), or run under "
                  "torchrun, mpirun, srun or a PMI launcher");
  if (size < 1) return errorf(braidInvalidArgument, "%s=%d: a world has at least one rank", fromSize, size);
  if (rank >= size)
    return errorf(braidInvalidArgument, "%s=%d is out of range for a world of %d ranks (%s)", from, rank, size,
                  fromSize);
  // The rendezvous address: BRAID_ROOT, else MASTER_ADDR:MASTER_PORT+1 (torchrun's store owns the
  // port itself).
  std::string addr = paramString("BRAID_ROOT");
  if (addr.empty()) {
    const char* ma = getenv("MASTER_ADDR");
    const char* mp = getenv("MASTER_PORT");
    if (ma == nullptr || mp == nullptr)
      return errorf(braidInvalidUsage,
                    "%s is set but no rendezvous address: set BRAID_ROOT=host:port (or "
                    "MASTER_ADDR and MASTER_PORT)",
                    from);
    char* end = nullptr;
    long port = strtol(mp, &end, 10);
    if (end == mp || *end != '\0' || port < 1 || port > 65534)
      return errorf(braidInvalidArgument,
                    "MASTER_PORT=%s is not a port braid can use (1..65534: braid listens on "
                    "MASTER_PORT+1)",
                    mp);
    addr = std::string(ma) + ":" + std::to_string(port + 1);
  }
  UniqueIdData id;
  id.magic = kUniqueIdMagic;
  id.version = kProtocolVersion;
  BRAID_TRY(parseHostPort(addr, &id.root));
  if (id.root.port() == 0) return errorf(braidInvalidArgument, "rendezvous address '%s' has no port", addr.c_str());
  std::string secret = paramString("BRAID_SECRET");
  if (!secret.empty()) {
    if (secret.size() != 32 || secret.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      return errorf(braidInvalidArgument, "BRAID_SECRET must be 32 hex digits");
    for (int i = 0; i < 16; ++i) id.secret[i] = static_cast<uint8_t>(std::stoi(secret.substr(2 * i, 2), nullptr, 16));
  } else {
    BRAID_TRY(deriveSecret(addr, size, id.secret));
  }
  // Every rank initializes from the environment the same number of times, so the count tells
  // communicators created from one environment apart.
  static std::atomic<uint64_t> generation{0};
  uint64_t gen = generation.fetch_add(1);
  uint64_t s0 = 0;
  memcpy(&s0, id.secret, 8);
  id.commId = fnv1a(std::to_string(s0) + "/" + std::to_string(gen), 3);
  if (rank == 0) BRAID_TRY(listenForId(id));
  BRAID_INFO(kLogInit, "init from %s: rank %d of %d, rendezvous %s", from, rank, size, addr.c_str());
  return commInit(id, size, rank, ConfigOverrides{}, out);
}

// Teardown in dependency order: the engine (and its thread) uses links and the control plane, which
// uses the bootstrap.
static void freeComm(braidComm* comm) {
  comm->engine.reset();
  comm->staging.reset();
  comm->control.reset();
  comm->tagLinks.clear();
  comm->tagTransports.clear();
  comm->links.clear();
  comm->transports.clear();
  comm->boot.reset();
  delete comm;
}

Status commDestroy(braidComm* comm) {
  if (comm->successor != nullptr) (void)commDestroy(comm->successor);
  comm->successor = nullptr;
  comm->engine->postTagGoodbyes();
  Status drained = comm->engine->drain();
  // How far this rank got, for the others: their operations that still need it fail at once.
  const std::string record = comm->engine->leaveRecord();
  // Stop listening first: rank 0 may leave as soon as it has our goodbye, and its closing
  // connection is no failure then. Also on a failed communicator: survivors that shrink must not
  // count us among the failed. Rank 0 leaves at once too (ControlPlane::sayGoodbye says why).
  comm->engine->stop();
  comm->control->sayGoodbye(record);
  freeComm(comm);
  return drained;
}

void commAbort(braidComm* comm) {
  if (comm->successor != nullptr) commAbort(comm->successor);
  comm->successor = nullptr;
  comm->control->fail(
      errorf(braidRemoteError, "%s aborted the communicator (braidCommAbort)", comm->describeRank(comm->rank).c_str()),
      comm->rank, true);
  // Waiters in other threads see their operations fail and return; wait for them to leave.
  comm->engine->abortWaiters();
  comm->engine->stop();
  freeComm(comm);
}

}  // namespace braid
