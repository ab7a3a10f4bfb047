// Collectives in place on one host (the direct calls of src/small_coll.h): when every rank's buffers
// are braidMemAlloc memory (src/regions.h), each rank maps its peers' (src/peer_maps.h) and does its
// share of the work on them where they lie, as two threads of one process would: no FIFO, no copy
// into shared memory and out again.
//
//   AllReduce  the buffer is cut into n parts (cache-line aligned); rank p folds part p of all n
//              inputs in rank order and writes the result into part p of all n outputs. One writer
//              per part: every rank ends with the very same bits. In place works as is: part p of
//              any buffer is read and written by rank p alone.
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
#include <algorithm>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "src/small_coll.h"

namespace braid {

namespace {

// What a direct call's mail says (in the slot's payload, which holds at least 64 bytes).
struct DirectMail {
  uint64_t bytes;
  uint64_t sendIno, sendOff;  // ino 0: not braidMemAlloc memory
  uint64_t recvIno, recvOff;
  int32_t sendFd, recvFd;
};
static_assert(sizeof(DirectMail) <= 64, "a direct call's mail fits the smallest payload");

// A fold and its copies go block by block, so that the copies read what the fold just wrote
// from the cache; a pass of progress does kPassBytes of the share, so that other operations (and
// deadlines) are looked at meanwhile.
constexpr size_t kBlockBytes = 32 << 10;
constexpr size_t kPassBytes = 1 << 20;
// From this size on, the outputs are written with non-temporal stores: n outputs of this size are
// past what the caches keep for the caller, and a plain store first reads the line it overwrites.
constexpr size_t kStreamBytes = 1 << 20;

// memcpy with non-temporal stores for the aligned middle (x86-64: SSE2, which every such CPU has).
// The stores are weakly ordered: an sfence must come before anything that publishes them.
void copyStreaming(char* dst, const char* src, size_t len) {
#if defined(__x86_64__)
  const size_t head = std::min(len, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= len; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, len - i);
#else
  memcpy(dst, src, len);
#endif
}

void storeFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace

bool SmallColls::takesDirect(Coll coll, size_t bytes) const {
  return !pids_.empty() && coll == Coll::kAllReduce && bytes > 0;
}

void SmallColls::unpin(SmallCall* c) {
  if (!c->pinned) return;
  unpinShared(c->mine[0]);
  unpinShared(c->mine[1]);
  c->pinned = false;
}

void SmallColls::pin(SmallCall* c) {
  const char* send = c->inPlace ? c->recv : c->send;
  if (!pinShared(send, c->bytes, &c->mine[0])) return;
  if (!pinShared(c->recv, c->bytes, &c->mine[1])) {
    unpinShared(c->mine[0]);
    return;
  }
  c->pinned = true;
}

void SmallColls::postDirect(SmallCall* c) {
  DirectMail m{};
  m.bytes = c->bytes;
  m.sendFd = m.recvFd = -1;
  if (c->pinned) {
    m.sendIno = c->mine[0].ino;
    m.sendOff = c->mine[0].offset;
    m.sendFd = c->mine[0].fd;
    m.recvIno = c->mine[1].ino;
    m.recvOff = c->mine[1].offset;
    m.recvFd = c->mine[1].fd;
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    MailSlot& s = mail_[p].out[c->k % kMailDepth];
    s.check = c->check;
    memcpy(mail_[p].outPayload(c->k), &m, sizeof(m));
    // Publishes check and the mail: pairs with the peer's acquire load in readDirect (or roomAt).
    s.seq.store(c->k, std::memory_order_release);
  }
}

int SmallColls::readDirect(SmallCall* c, Status* err) {
  // Every peer's mail before any mapping: a call that differs is named as such, even where a peer
  // that saw it first already left the call (and its memory with it).
  for (; c->next < nranks_; ++c->next) {
    const int p = c->next;
    if (p == rank_) continue;
    const MailSlot& s = mail_[p].in[c->k % kMailDepth];
    // Pairs with the peer's release store in postDirect.
    if (s.seq.load(std::memory_order_acquire) != c->k) {
      c->waitingOn = p;
      return 0;
    }
    started_[p] = std::max(started_[p], c->k);
    DirectMail m;
    memcpy(&m, mail_[p].inPayload(c->k), sizeof(m));
    if (s.check != c->check || m.bytes != c->bytes) {
      *err = mismatch(*c, p, s.check, m.bytes);
      return -1;
    }
    if (m.sendIno == 0 || m.recvIno == 0) return 2;  // not braidMemAlloc memory there: the plan
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    DirectMail m;
    memcpy(&m, mail_[p].inPayload(c->k), sizeof(m));
    char* in = nullptr;
    char* out = nullptr;
    Status st = maps_.map(p, pids_[p], m.sendFd, m.sendIno, m.sendOff, c->bytes, c->k, &in);
    if (st.ok()) st = maps_.map(p, pids_[p], m.recvFd, m.recvIno, m.recvOff, c->bytes, c->k, &out);
    if (!st.ok()) {
      // The peer is in the call until we are done, unless it failed: likely it did, and said why.
      *err = st.withContext("mapping the buffers of " + names_[p]);
      c->waitingOn = p;
      return -2;
    }
    ins_[p] = in;
    outs_[p] = out;
  }
  ins_[rank_] = c->inPlace ? c->recv : c->send;
  outs_[rank_] = c->recv;
  return 1;
}

void SmallColls::workDirect(SmallCall* c) {
  const size_t es = dtypeSize(c->dtype);
  const size_t count = c->bytes / es;
  // Part p: elements [p x part, (p + 1) x part), part a multiple of a cache line's elements.
  const size_t line = 64 / es;
  const size_t part =
      ((count + static_cast<size_t>(nranks_) - 1) / static_cast<size_t>(nranks_) + line - 1) / line * line;
  const size_t lo = std::min(count, static_cast<size_t>(rank_) * part) * es;
  const size_t hi = std::min(count, static_cast<size_t>(rank_ + 1) * part) * es;
  if (c->at < lo) c->at = lo;
  // In place past rank 1, this rank's output is its input, which the fold of ranks 0 and 1 would
  // overwrite before its own turn: the fold goes to a block of its own then. So it does when the
  // outputs are streamed.
  static const size_t kS = getenv("XS") ? strtoull(getenv("XS"), nullptr, 10) : kStreamBytes;
  const bool stream = !c->inPlace && c->bytes >= kS;
  const bool aside = stream || (c->inPlace && rank_ >= 2);
  if (aside && fold_.size() < kBlockBytes) fold_.resize(kBlockBytes);
  const size_t end = std::min(hi, c->at + kPassBytes);
  while (c->at < end) {
    const size_t off = c->at;
    const size_t len = std::min(kBlockBytes, end - off);
    const size_t n = len / es;
    char* acc = aside ? fold_.data() : outs_[rank_] + off;
    c->kernel(acc, ins_[0] + off, ins_[1] + off, n);
    for (int p = 2; p < nranks_; ++p) c->kernel(acc, acc, ins_[p] + off, n);
    if (c->op == braidAvg) scaleDivide(c->dtype, acc, n, nranks_);
    for (int p = 0; p < nranks_; ++p) {
      if (stream) {
        copyStreaming(outs_[p] + off, acc, len);
      } else if (outs_[p] + off != acc) {
        memcpy(outs_[p] + off, acc, len);
      }
    }
    c->at += len;
  }
  if (c->at < hi) return;
  if (stream) storeFence();  // before the done below publishes the stores
  c->at = SIZE_MAX;          // the share is done
  // Publishes every write into the peers' outputs, and ends our reads of their inputs: pairs with
  // their acquire load in peersDone.
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) mail_[p].out[c->k % kMailDepth].done.store(c->k, std::memory_order_release);
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
      if (c->k != finished_ + 1) {  // an earlier call still runs
        c->waitingOn = -1;
        return 0;
      }
      for (int p = 0; p < nranks_; ++p) {
        if (p != rank_ && !roomAt(p, c->k)) {
          c->waitingOn = p;
          return 0;
        }
      }
      postDirect(c);
      if (!c->pinned) {  // ours are not braidMemAlloc memory: every rank runs the plan
        c->phase = 2;
        ++finished_;
        return 2;
      }
      if (ins_.size() != static_cast<size_t>(nranks_)) {
        ins_.resize(nranks_);
        outs_.resize(nranks_);
      }
      c->phase = 1;
      c->next = 0;
      [[fallthrough]];
    case 1: {
      const int r = readDirect(c, err);
      if (r == 0) return 0;
      if (r == 2) {  // the plan runs it
        unpin(c);
        c->phase = 2;
        ++finished_;
        return 2;
      }
      if (r < 0) {  // failed: it never completes here (the engine fails it and the communicator)
        unpin(c);
        c->phase = 5;
        return r;
      }
      c->phase = 3;
      c->at = 0;
      c->waitingOn = -1;
      [[fallthrough]];
    }
    case 3:
      workDirect(c);
      if (c->at != SIZE_MAX) return 0;
      c->phase = 4;
      c->next = 0;
      [[fallthrough]];
    case 4:
      if (!peersDone(c)) return 0;
      unpin(c);
      c->phase = 2;
      c->waitingOn = -1;
      ++finished_;
      return 1;
    case 2:
      return 1;
    default:
      return 0;
  }
}

}  // namespace braid
