// Collectives in place on one host (the direct calls of src/small_coll.h): when every rank's buffers
// are braidMemAlloc memory (src/regions.h), each rank maps its peers' (src/peer_maps.h) and does its
// share of the work on them where they lie, as threads of one process would: no FIFO, no copy into
// shared memory and out again.
//
//   AllReduce      the buffer is cut into n parts (cache-line aligned); rank p folds part p of all n
//                  inputs in rank order and writes the result into part p of all n outputs. One
//                  writer per part: every rank ends with the very same bits.
//   Reduce         the same parts, each written into the root's output only
//   ReduceScatter  rank p folds block p of all n inputs into its output
//   AllGather      rank p copies every rank's input into its output
//   AllToAll       rank p copies block p of every rank's input into its output
//   Broadcast      rank p copies the root's input into its output
//   Gather         the root copies every rank's input into its output
//   Scatter        rank p copies block p of the root's input into its output
// In place needs nothing more: every part a rank writes is one only it reads. AllToAll in place is
// the exception (rank p would write what rank q reads): it runs on its plan.
//
// Only the buffers that peers read or write must be braidMemAlloc memory: every rank's input, and
// the outputs of AllReduce and of Reduce's root. A rank's own output of the pulling collectives may
// be any memory.
//
// A call takes a slot of the mailboxes like any small call, in the same numbering, and runs in
// three handoffs per peer: its mail (the files and offsets of its buffers: "I am in the call, read
// and write my buffers"), its work, and its `done` (transports/mailbox.h: "I wrote all I write into
// yours and read all I read of yours"). A rank returns once every peer is done; until then its
// buffers are pinned (braidMemFree refuses them).
//
// Whether a call runs here is known only once every rank's mail is read: a rank whose buffers are
// not braidMemAlloc memory says so in its mail, and then every rank runs the call on its plan
// instead (SmallColls::step returns 2). Such a rank need not read the others' mail: it knows.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "src/base/clock.h"
#include "src/base/log.h"
#include "src/base/nt_store.h"
#include "src/small_coll.h"

namespace braid {

namespace {

// What a direct call's mail says (in the slot's payload, which holds at least 64 bytes).
struct DirectMail {
  uint64_t bytes;
  uint64_t sendIno, sendOff;  // ino 0: a buffer its peers do not use
  uint64_t recvIno, recvOff;
  int32_t sendFd, recvFd;
  uint32_t runsHere;  // 0: a buffer its peers use is not braidMemAlloc memory (or AllToAll in place)
  uint32_t frees;     // its hostFrees(): when it moved, the reader forgets what the writer freed
};
static_assert(sizeof(DirectMail) <= 64, "a direct call's mail fits the smallest payload");

// A pass of progress does kPassBytes of the share (in blocks of kBlockBytes), so that other
// operations (and deadlines) are looked at meanwhile.
constexpr size_t kPassBytes = 1 << 20;

// A streamed fold goes in one pass of foldStreamKernel (src/reduce.h): each line of the result is
// folded from every input in registers (and divided there, for braidAvg) and streamed from there to
// every output. Measured against 1 KiB blocks folded and then streamed out, 2 ranks on braidMemAlloc
// memory, AllReduce out of place, interleaved with the limit program
// (../shared/peers/limits/ideal_allreduce.c, which does the same work from two threads of one
// process): the blocks made 6.1-7.6 GB/s at 16-256 MiB, 0.58-0.64 of the limit by the medians; the
// one pass 9.6-17.5, 0.95-1.2 of it (perf/results/2026-12-06-fold-stream.md). An earlier
// two-thread test had put 0.5-2 KiB blocks ahead of a fused loop (24-28 GB/s against 16-20): the
// blocks' cost is the calls and copies around each one, which that test did not pay.
// A streamed copy goes 4 KiB at a time, for the same reason (medians of 5 alternations against
// 32 KiB, out of place: AllGather 2 ranks 16 / 64 MiB 1.26x / 1.55x faster, 4 ranks 1.26x / 1.18x;
// AllToAll 2 ranks 1.17x / 1.21x; Broadcast 2 ranks 1.11x / 1.41x, 4 ranks 1.31x / 1.14x).
constexpr size_t kStreamCopyBytes = 4 << 10;

// The bytes of a call's send and receive buffers on `rank`, and whether its peers use them.
struct Extents {
  size_t send = 0, recv = 0;
  bool peersRead = false, peersWrite = false;
};

Extents extentsOf(const SmallCall& c, int rank, int n) {
  const size_t b = c.bytes, all = b * static_cast<size_t>(n);
  const bool root = rank == c.root;
  switch (c.coll) {
    case Coll::kAllReduce:
      return {b, b, true, true};
    case Coll::kReduce:
      return {b, b, true, root};
    case Coll::kReduceScatter:
      return {all, b, true, false};
    case Coll::kAllGather:
      return {b, all, true, false};
    case Coll::kAllToAll:
      return {all, all, true, false};
    case Coll::kBroadcast:
      return {b, b, root, false};
    case Coll::kGather:
      return {b, root ? all : b, !root, false};
    case Coll::kScatter:
      return {root ? all : b, b, root, false};
    default:
      return {};
  }
}

// What a direct call's mail says on device memory: the IPC handles of its buffers.
struct DeviceMail {
  uint64_t bytes;
  IpcHandle h[2];  // send, recv; bytes 0 where the call has no such buffer here
};

// Every collective with data has a direct form (extentsOf says what each touches).
bool hasDirectForm(Coll coll, size_t bytes) { return bytes > 0 && coll != Coll::kBarrier && coll != Coll::kSendRecv; }

}  // namespace

void SmallColls::enableDevice(int device, uint64_t minBytes, std::unique_ptr<IpcColl> coll) {
  device_ = coll != nullptr ? device : -1;
  deviceMin_ = minBytes;
  ipc_ = std::move(coll);
  ins_.resize(nranks_);
  outs_.resize(nranks_);
}

bool SmallColls::takesDevice(Coll coll, size_t bytes) const {
  return device_ >= 0 && capacity_ >= sizeof(DeviceMail) && bytes >= deviceMin_ && hasDirectForm(coll, bytes);
}

void SmallColls::postDevice(const SmallCall& c) {
  DeviceMail m{};
  m.bytes = c.bytes;
  m.h[0] = c.ipc[0];
  m.h[1] = c.ipc[1];
  sendMail(c, &m, sizeof(m));
}

int SmallColls::readDevice(SmallCall* c, Status* err) {
  for (; c->next < nranks_; ++c->next) {
    const unsigned char* mail = nullptr;
    const int got = c->next == rank_ ? 1 : mailOf(c, c->next, &mail, err);
    if (got <= 0) return got;
  }
  for (int p = 0; p < nranks_; ++p) {
    ins_[p] = nullptr;
    outs_[p] = nullptr;
    if (p == rank_) continue;
    const Extents e = extentsOf(*c, p, nranks_);
    DeviceMail m;
    memcpy(&m, mail_[p].inPayload(c->k, kMaxMailBytes), sizeof(m));
    // A buffer of the peer's that this call uses, `need` bytes of it.
    auto open = [&](const IpcHandle& h, size_t need, const char* what, void** ptr) {
      if (h.bytes < need)
        return errorf(braidInternalError, "its %s's handle covers %llu of %zu bytes", what,
                      static_cast<unsigned long long>(h.bytes), need);
      return ipc_->open(h, ptr);
    };
    Status st;
    void* in = nullptr;
    void* out = nullptr;
    if (e.peersRead) st = open(m.h[0], e.send, "input", &in);
    if (st.ok() && e.peersWrite) st = open(m.h[1], e.recv, "output", &out);
    if (!st.ok()) {
      // The peer is in the call until we are done, unless it failed: likely it did, and said why.
      *err = st.withContext("opening the device buffers of " + names_[p]);
      c->waitingOn = p;
      return -2;
    }
    ins_[p] = static_cast<const char*>(in);
    outs_[p] = static_cast<char*>(out);
  }
  ins_[rank_] = c->send;
  outs_[rank_] = c->recv;
  return 1;
}

Status SmallColls::launchDevice(const SmallCall& c) {
  DeviceShare s;
  s.coll = c.coll;
  s.dtype = c.dtype;
  s.op = c.op;
  s.root = c.root;
  s.rank = rank_;
  s.nranks = nranks_;
  s.bytes = c.bytes;
  workRange(c, &s.lo, &s.hi);
  s.ins = ins_.data();
  s.outs = outs_.data();
  return ipc_->launch(s);
}

bool SmallColls::takesDirect(Coll coll, size_t bytes) const { return !pids_.empty() && hasDirectForm(coll, bytes); }

void SmallColls::unpin(SmallCall* c) {
  if (!c->pinned) return;
  unpinShared(c->mine[0]);  // a range never pinned (base 0) is no allocation: a no-op
  unpinShared(c->mine[1]);
  c->mine[0] = c->mine[1] = SharedRange{};
  c->pinned = false;
}

void SmallColls::pin(SmallCall* c) const {
  const Extents e = extentsOf(*c, rank_, nranks_);
  c->mine[0] = c->mine[1] = SharedRange{};
  if (c->device) {  // device memory: its staging slot holds it until the call is over
    c->pinned = true;
    return;
  }
  if (c->coll == Coll::kAllToAll && c->inPlace) return;
  if (e.peersRead && !pinShared(c->send, e.send, &c->mine[0])) return;
  if (e.peersWrite && !pinShared(c->recv, e.recv, &c->mine[1])) {
    unpinShared(c->mine[0]);
    c->mine[0] = SharedRange{};
    return;
  }
  c->pinned = true;
}

void SmallColls::postDirect(SmallCall* c) {
  DirectMail m{};
  m.bytes = c->bytes;
  m.sendFd = m.recvFd = -1;
  m.runsHere = c->pinned ? 1 : 0;
  m.frees = hostFrees();
  if (c->mine[0].ino != 0) {
    m.sendIno = c->mine[0].ino;
    m.sendOff = c->mine[0].offset;
    m.sendFd = c->mine[0].fd;
  }
  if (c->mine[1].ino != 0) {
    m.recvIno = c->mine[1].ino;
    m.recvOff = c->mine[1].offset;
    m.recvFd = c->mine[1].fd;
  }
  sendMail(*c, &m, sizeof(m));
}

void SmallColls::sendMail(const SmallCall& c, const void* mail, size_t bytes) {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    MailSlot& s = mail_[p].out[c.k % kMailDepth];
    s.check = c.check;
    memcpy(mail_[p].outPayload(c.k, kMaxMailBytes), mail, bytes);
    // Publishes check and the mail: pairs with the peer's acquire load in mailOf (or roomAt).
    s.seq.store(c.k, std::memory_order_release);
  }
}

int SmallColls::mailOf(SmallCall* c, int p, const unsigned char** mail, Status* err) {
  const MailSlot& s = mail_[p].in[c->k % kMailDepth];
  // Pairs with the peer's release store in sendMail.
  if (s.seq.load(std::memory_order_acquire) != c->k) {
    c->waitingOn = p;
    return 0;
  }
  started_[p] = std::max(started_[p], c->k);
  uint64_t bytes = 0;  // every direct mail starts with the call's bytes
  memcpy(&bytes, mail_[p].inPayload(c->k, kMaxMailBytes), sizeof(bytes));
  if (s.check != c->check || bytes != c->bytes) {
    *err = mismatch(*c, p, s);
    return -1;
  }
  *mail = mail_[p].inPayload(c->k, kMaxMailBytes);
  return 1;
}

int SmallColls::readDirect(SmallCall* c, Status* err) {
  // Every peer's mail before any mapping: a call that differs is named as such, even where a peer
  // that saw it first already left the call (and its memory with it).
  for (; c->next < nranks_; ++c->next) {
    if (c->next == rank_) continue;
    const unsigned char* mail = nullptr;
    const int got = mailOf(c, c->next, &mail, err);
    if (got <= 0) return got;
    DirectMail m;
    memcpy(&m, mail, sizeof(m));
    if (m.runsHere == 0) return 2;  // not braidMemAlloc memory there: the plan
  }
  for (int p = 0; p < nranks_; ++p) {
    ins_[p] = nullptr;
    outs_[p] = nullptr;
    if (p == rank_) continue;
    const Extents e = extentsOf(*c, p, nranks_);
    DirectMail m;
    memcpy(&m, mail_[p].inPayload(c->k, kMaxMailBytes), sizeof(m));
    if (m.frees != frees_[p]) {
      maps_.forget(p, pids_[p]);
      frees_[p] = m.frees;
    }
    Status st;
    char* in = nullptr;
    if (e.peersRead) st = maps_.map(p, pids_[p], m.sendFd, m.sendIno, m.sendOff, e.send, c->k, &in);
    ins_[p] = in;
    if (st.ok() && e.peersWrite) st = maps_.map(p, pids_[p], m.recvFd, m.recvIno, m.recvOff, e.recv, c->k, &outs_[p]);
    if (!st.ok()) {
      // The peer is in the call until we are done, unless it failed: likely it did, and said why.
      *err = st.withContext("mapping the buffers of " + names_[p]);
      c->waitingOn = p;
      return -2;
    }
  }
  ins_[rank_] = c->send;
  outs_[rank_] = c->recv;
  return 1;
}

// This rank's work, as a range of offsets: into its part of the buffer (AllReduce, Reduce), or
// into its output (the others).
void SmallColls::workRange(const SmallCall& c, size_t* lo, size_t* hi) const {
  const size_t n = static_cast<size_t>(nranks_), r = static_cast<size_t>(rank_);
  *lo = 0;
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kReduce: {
      const size_t es = dtypeSize(c.dtype), count = c.bytes / es;
      // Part p: elements [p x part, (p + 1) x part), part a multiple of a cache line's elements.
      const size_t line = 64 / es;
      const size_t part = ((count + n - 1) / n + line - 1) / line * line;
      *lo = std::min(count, r * part) * es;
      *hi = std::min(count, (r + 1) * part) * es;
      return;
    }
    case Coll::kAllGather:
    case Coll::kAllToAll:
      *hi = n * c.bytes;
      return;
    case Coll::kGather:
      *hi = rank_ == c.root ? n * c.bytes : 0;
      return;
    default:  // ReduceScatter, Broadcast, Scatter
      *hi = c.bytes;
      return;
  }
}

// Folds [off, off + len) of the n inputs, each starting at ins_[p] + base, in rank order into acc.
void SmallColls::foldBlock(const SmallCall& c, char* acc, size_t base, size_t off, size_t len) const {
  const size_t count = len / dtypeSize(c.dtype);
  c.kernel(acc, ins_[0] + base + off, ins_[1] + base + off, count);
  for (int p = 2; p < nranks_; ++p) c.kernel(acc, acc, ins_[p] + base + off, count);
  if (c.op == braidAvg) scaleDivide(c.dtype, acc, count, nranks_);
}

void SmallColls::workDirect(SmallCall* c) {
  size_t lo = 0, hi = 0;
  workRange(*c, &lo, &hi);
  if (c->at < lo) c->at = lo;
  const size_t b = c->bytes, r = static_cast<size_t>(rank_);
  // Out of place past the cache (BRAID_NT_STORES_MIN): a plain store would first read the line it
  // overwrites. In place, every output line was just read as an input, and a plain store is cheaper.
  // (AllReduce, 2 ranks, 32 MiB L3, out of place, two alternations: plain 20.7 / 6.6 / 6.6 and
  // 16.0 / 6.3 / 7.8 GB/s at 4 / 64 / 256 MiB, non-temporal 12.4 / 9.5 / 9.4 and 8.6 / 7.6 / 8.9.)
  const bool stream = c->streamOut;
  auto put = [&](char* dst, const char* src, size_t len) {
    if (dst == src) return;
    if (stream) {
      copyStreaming(dst, src, len);
    } else {
      memcpy(dst, src, len);
    }
  };
  // A fold whose output is streamed goes in one pass (below); one whose output is one of its inputs
  // (in place past rank 1: the fold of ranks 0 and 1 would overwrite it before its turn), or another
  // rank's, goes through a block of its own first.
  const bool folds = collReduces(c->coll);
  const bool aside = folds && ((c->inPlace && rank_ >= 2) || c->coll == Coll::kReduce);
  const size_t step = stream ? kStreamCopyBytes : kBlockBytes;
  const size_t end = std::min(hi, c->at + kPassBytes);
  if (stream && folds && c->at < end) {
    // The fold in one pass (see "A streamed fold" above): AllReduce into every rank's output, Reduce
    // into the root's, ReduceScatter (its inputs at this rank's block) into this rank's.
    const size_t off = c->at;
    const size_t base = c->coll == Coll::kReduceScatter ? r * b : 0;
    for (int p = 0; p < nranks_; ++p) foldIns_[p] = ins_[p] + base + off;
    int outs = 0;
    if (c->coll == Coll::kAllReduce) {
      for (int p = 0; p < nranks_; ++p) foldOuts_[outs++] = outs_[p] + off;
    } else {
      foldOuts_[outs++] = (c->coll == Coll::kReduce ? outs_[c->root] : outs_[rank_]) + off;
    }
    foldStreamKernel(c->dtype, c->op)(foldOuts_.data(), outs, foldIns_.data(), nranks_,
                                      (end - off) / dtypeSize(c->dtype), nranks_);
    c->at = end;
  }
  while (c->at < end) {
    const size_t off = c->at;
    size_t len = std::min(step, end - off);
    if (!folds) len = std::min(len, b - off % b);  // within one rank's block
    const size_t q = off / b, in = off % b;        // the block, and where in it
    char* out = outs_[rank_] + off;
    switch (c->coll) {
      case Coll::kAllReduce: {
        char* acc = aside ? fold_.data() : out;
        foldBlock(*c, acc, 0, off, len);
        for (int p = 0; p < nranks_; ++p) put(outs_[p] + off, acc, len);
        break;
      }
      case Coll::kReduce:
        foldBlock(*c, fold_.data(), 0, off, len);
        put(outs_[c->root] + off, fold_.data(), len);
        break;
      case Coll::kReduceScatter: {
        char* acc = aside ? fold_.data() : out;
        foldBlock(*c, acc, r * b, off, len);
        put(out, acc, len);
        break;
      }
      case Coll::kAllGather:
      case Coll::kGather:
        put(out, ins_[q] + in, len);
        break;
      case Coll::kAllToAll:
        put(out, ins_[q] + r * b + in, len);
        break;
      case Coll::kBroadcast:
        put(out, ins_[c->root] + off, len);
        break;
      case Coll::kScatter:
        put(out, ins_[c->root] + r * b + off, len);
        break;
      default:
        break;
    }
    c->at += len;
  }
  if (c->at < hi) return;
  if (stream) storeFence();  // before the done below publishes the stores
  c->at = SIZE_MAX;          // the share is done
  publishDone(*c);
}

void SmallColls::publishDone(const SmallCall& c) {
  // Publishes every write into the peers' outputs, and ends our reads of their inputs: pairs with
  // their acquire load in peersDone.
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) mail_[p].out[c.k % kMailDepth].done.store(c.k, std::memory_order_release);
}

int SmallColls::abandonedBy(const SmallCall& c) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the one in abandon()
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && mail_[p].in[c.k % kMailDepth].done.load(std::memory_order_acquire) == (c.k | kMailAbandoned))
      return p;
  return -1;
}

bool SmallColls::givenUp(SmallCall* c, Status* err) const {
  const int p = abandonedBy(*c);
  if (p < 0) return false;
  *err = errorf(braidRemoteError, "%s gave up %s #%llu, a call in place on braidMemAlloc memory (it failed)",
                names_[p].c_str(), collName(c->coll), static_cast<unsigned long long>(c->seq));
  c->phase = 5;
  c->waitingOn = p;
  return true;
}

bool SmallColls::planRuns(const SmallCall& c) const {
  if (c.device) return false;  // device calls always run here
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || mail_[p].in[c.k % kMailDepth].seq.load(std::memory_order_acquire) != c.k) continue;
    DirectMail m;
    memcpy(&m, mail_[p].inPayload(c.k, kMaxMailBytes), sizeof(m));
    if (m.bytes == c.bytes && m.runsHere == 0) return true;
  }
  return false;
}

bool SmallColls::abandon(SmallCall* c, double graceSec) {
  if (!c->direct || c->phase == 0 || c->phase == 2) return true;  // its mail is not out, or it is over
  const int64_t deadline = nowNs() + static_cast<int64_t>(graceSec * 1e9);
  if (c->phase == 6) {  // our kernels write into the peers' outputs: they end first
    Status e;
    while (ipc_->poll(&e) == 0) {
      if (nowNs() > deadline) {
        BRAID_WARN(kLogColl,
                   "%s #%llu failed while its kernels still run on this rank's device after %.0f s: its peers "
                   "may see their buffers written after their own calls failed",
                   collName(c->coll), static_cast<unsigned long long>(c->seq), graceSec);
        return false;
      }
      sched_yield();
    }
  }
  c->phase = 5;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) mail_[p].out[c->k % kMailDepth].done.store(c->k | kMailAbandoned, std::memory_order_release);
  // Pairs with abandonedBy's: a peer that posts c after this sees our mark before it touches ours.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!c->pinned && !c->device) return true;  // our mail said our buffers are not theirs to touch
  std::vector<int> inCall;
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_ && mail_[p].in[c->k % kMailDepth].seq.load(std::memory_order_acquire) == c->k) inCall.push_back(p);
  for (uint32_t pass = 0; !inCall.empty(); ++pass) {
    std::erase_if(inCall, [&](int p) {
      const uint64_t d = mail_[p].in[c->k % kMailDepth].done.load(std::memory_order_acquire);
      // A peer whose process is gone (its link's check, as a mailbox wait makes it) touches nothing.
      return d == c->k || d == (c->k | kMailAbandoned) || !links_[p]->peerCheck().ok();
    });
    if (inCall.empty() || ((pass & 63) == 0 && planRuns(*c))) return true;
    if (nowNs() > deadline) {
      BRAID_WARN(
          kLogColl,
          "%s #%llu failed, but %s entered it and has not let go of this rank's buffers after %.0f s (stopped?): "
          "they stay pinned (braidMemFree refuses them) and may still change",
          collName(c->coll), static_cast<unsigned long long>(c->seq), names_[inCall[0]].c_str(), graceSec);
      c->mine[0] = c->mine[1] = SharedRange{};  // the pins are kept: unpin() finds nothing to release
      c->pinned = false;
      return false;
    }
    sched_yield();
  }
  return true;
}

bool SmallColls::peersDone(SmallCall* c) {
  for (; c->next < nranks_; ++c->next) {
    const int p = c->next;
    if (p == rank_) continue;
    if (mail_[p].in[c->k % kMailDepth].done.load(std::memory_order_acquire) != c->k) {
      c->waitingOn = p;
      return false;
    }
  }
  return true;
}

int SmallColls::stepDirect(SmallCall* c, Status* err) {
  switch (c->phase) {
    case 0:
      if (!mayStart(c)) return 0;
      if (c->device)
        postDevice(*c);
      else
        postDirect(c);
      if (!c->pinned) {  // ours are not braidMemAlloc memory: every rank runs the plan
        c->phase = 2;
        ++finished_;
        return 2;
      }
      c->phase = 1;
      c->next = 0;
      [[fallthrough]];
    case 1: {
      if (givenUp(c, err)) return -2;
      const int r = c->device ? readDevice(c, err) : readDirect(c, err);
      if (r == 0) return 0;
      if (r == 2) {  // the plan runs it
        unpin(c);
        c->phase = 2;
        ++finished_;
        return 2;
      }
      // A peer's buffers that cannot be mapped: the engine holds the blame for a grace (the peer
      // likely failed, or freed them after failing for the same cause, and a notice says why).
      if (r == -2) return -2;
      if (r < 0) {  // another call: it never completes here (the engine fails it and the communicator)
        unpin(c);
        return holdMismatch(c, err);
      }
      c->phase = 3;
      c->at = 0;
      c->waitingOn = -1;
      [[fallthrough]];
    }
    case 3:
      // Before each pass of work (a peer that gave up is done with ours, and wants ours untouched).
      if (givenUp(c, err)) return -2;
      if (c->device) {
        const Status launched = launchDevice(*c);
        if (!launched.ok()) {
          *err = launched.withContext("a direct call on device memory");
          c->phase = 5;
          return -1;
        }
        c->phase = 6;
        return 0;
      }
      workDirect(c);
      if (c->at != SIZE_MAX) return 0;
      c->phase = 4;
      c->next = 0;
      [[fallthrough]];
    case 4:
      if (givenUp(c, err)) return -2;
      if (!peersDone(c)) return 0;
      unpin(c);
      c->phase = 2;
      c->waitingOn = -1;
      ++finished_;
      return 1;
    case 2:
      return 1;
    case 6: {  // the share's kernels run on this rank's device
      const int r = ipc_->poll(err);
      if (r == 0) return 0;
      if (r < 0) {
        c->phase = 5;
        return -1;
      }
      publishDone(*c);
      c->phase = 4;
      c->next = 0;
      return stepDirect(c, err);
    }
    default:
      return 0;
  }
}

}  // namespace braid
