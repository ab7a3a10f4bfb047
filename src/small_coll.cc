#include "src/small_coll.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "src/base/clock.h"
#include "src/plan.h"

namespace braid {

namespace {

std::atomic<uint64_t> gPlainMails{0};
std::atomic<uint64_t> gStreamedMails{0};

// Where a call's data sits in a slot: in its header line when it fits, else in the payload.
inline unsigned char* outSpot(const Mailboxes& m, uint64_t k, size_t bytes) {
  return bytes <= kMailInline ? m.out[k % kMailDepth].inlineData : m.outPayload(k, bytes);
}
inline const unsigned char* inSpot(const Mailboxes& m, uint64_t k, size_t bytes) {
  return bytes <= kMailInline ? m.in[k % kMailDepth].inlineData : m.inPayload(k, bytes);
}

// memcpy for a call's bytes: up to 32 inline, in two overlapping loads and stores of the widest
// size that fits (no call into libc and its size dispatch for the few bytes most small calls
// carry), past that libc's.
inline void copyMail(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  auto two = [&](auto word) {
    decltype(word) head, tail;
    std::memcpy(&head, s, sizeof head);
    std::memcpy(&tail, s + n - sizeof tail, sizeof tail);
    std::memcpy(d, &head, sizeof head);
    std::memcpy(d + n - sizeof tail, &tail, sizeof tail);
  };
  struct Line16 {
    uint64_t w[2];
  };
  if (n > 32) {
    std::memcpy(d, s, n);
  } else if (n >= 16) {
    two(Line16{});
  } else if (n >= 8) {
    two(uint64_t{});
  } else if (n >= 4) {
    two(uint32_t{});
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  }
}

// The call's shape in one word, as its mail carries it: bytes and root in 20 bits each (mailboxes
// hold at most kMaxMailBytes; ranks on one host are far fewer than 2^20), then the collective, the
// datatype and the op.
constexpr uint64_t kField = (1u << 20) - 1;
// Marks the check word of a direct call (src/direct_coll.cc), whose bytes the word holds only in
// part: its mail carries them whole.
constexpr uint64_t kDirectBit = uint64_t{1} << 46;
// Marks a direct call on device memory (src/direct_coll.cc): a rank that calls it on host
// memory where a peer calls it on device memory is told the calls differ.
constexpr uint64_t kDeviceBit = uint64_t{1} << 47;
// In auto, a mailbox streams its mails once that measures at most half as costly as plain stores
// (StoreChoice): in the VM's slow hours plain mails cost 3.4-7.2x more, in its fast ones the two
// kinds measure close. It tries the other kind once in kMailTrialEvery calls (4x that where it cost
// twice as much), in the same call on every rank (the trial's tick is the call's number): with
// every 32, 4 ranks took 5-10% longer for a 16 KiB AllReduce than with plain stores alone, the
// VM's modes last minutes.
constexpr double kMailStreamBelow = 0.5;
constexpr uint32_t kMailTrialEvery = 128;
// Marks a mail written with streaming stores (BRAID_SHM_MAIL_STORES): not a part of the call, so a
// reader compares the check word without it.
constexpr uint64_t kStreamedBit = uint64_t{1} << 45;

uint64_t packCall(Coll coll, braidDataType_t dt, braidRedOp_t op, int root, size_t bytes) {
  return (bytes & kField) | (static_cast<uint64_t>(root) & kField) << 20 | static_cast<uint64_t>(coll) << 40 |
         static_cast<uint64_t>(dt & 0xff) << 48 | static_cast<uint64_t>(op & 0xff) << 56;
}

// bytes: the call's whole bytes (the word holds 20 bits of them).
CallHeader unpackCall(uint64_t w, uint64_t seq, uint64_t bytes) {
  CallHeader h{};
  h.magic = kCallHeaderMagic;
  h.coll = static_cast<uint8_t>((w & ~(kDirectBit | kDeviceBit | kStreamedBit)) >> 40);
  h.dtype = static_cast<uint8_t>(w >> 48);
  h.redop = static_cast<uint8_t>(w >> 56);
  h.root = static_cast<int32_t>(w >> 20 & kField);
  const bool known = validDtype(h.dtype) && h.coll < kNumColls;
  const size_t es = known ? dtypeSize(static_cast<braidDataType_t>(h.dtype)) : 1;
  h.count = bytes / es;
  h.seq = seq;
  if (!known) h.magic = 0;  // describeCall: "something that is not a braid collective"
  return h;
}

}  // namespace

uint64_t plainMails() { return gPlainMails.load(std::memory_order_relaxed); }
uint64_t streamedMails() { return gStreamedMails.load(std::memory_order_relaxed); }

SmallColls::SmallColls(int rank, std::vector<Link*> links, std::vector<std::string> names, std::vector<int64_t> pids)
    : rank_(rank),
      nranks_(static_cast<int>(links.size())),
      names_(std::move(names)),
      mail_(links.size()),
      mailStores_(links.size()),
      readCosts_(links.size()),
      started_(links.size(), 0),
      pids_(std::move(pids)),
      links_(links) {
  if (!pids_.empty()) {  // direct calls: their per-call state, sized once
    ins_.resize(nranks_);
    outs_.resize(nranks_);
    frees_.resize(nranks_);
    fold_.resize(kBlockBytes);
    foldIns_.resize(nranks_);
    foldOuts_.resize(nranks_);
  }
  for (int p = 0; p < nranks_; ++p) {
    const Mailboxes* m = p != rank && links[p] != nullptr ? links[p]->mailboxes() : nullptr;
    if (m == nullptr) continue;
    mail_[p] = *m;
    mailStores_[p] = StoreChoice(m->stores, kMailStreamBelow, kMailTrialEvery);
    capacity_ = m->capacity;
  }
  for (int i = 0; i < kNumColls; ++i) largest_[i] = largestFor(static_cast<Coll>(i));
}

size_t SmallColls::largestFor(Coll coll) const {
  switch (coll) {
    case Coll::kAllReduce:
    case Coll::kBroadcast:
      // Every rank reads n - 1 buffers (AllReduce), the root writes n - 1 (Broadcast), where a ring
      // or a tree moves about two: past twice the capacity in all they go to the plans (4 ranks:
      // a 64 KiB AllReduce measured even with the ring's 22-30 us, so 42 KiB is the last taken).
      return std::min(capacity_, nranks_ > 1 ? 2 * capacity_ / static_cast<size_t>(nranks_ - 1) : capacity_);
    case Coll::kAllGather:
      // Past half the capacity a block goes faster through the plans, where a block of
      // BRAID_SHM_CMA_MIN and up is read once from the sender's buffer (2 ranks, 64 KiB blocks:
      // 7.9-10.5 us against 12.4-16.1 on the mailboxes out of place, 6.4-7.9 against 10.5-14.2 in
      // place; 32 KiB even; 4 ranks even). AllToAll stays: in place it cannot read by single copy,
      // and measured 2-3x slower.
      return capacity_ / 2;
    case Coll::kReduce:
    case Coll::kGather:
    case Coll::kScatter:
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
      return capacity_;
    case Coll::kBarrier:
      return SIZE_MAX;
    case Coll::kSendRecv:
      break;
  }
  return 0;
}

void SmallColls::number(SmallCall* c) {
  c->k = ++numbered_;
  c->check = packCall(c->coll, c->dtype, c->op, c->root, c->bytes) | (c->direct ? kDirectBit : 0) |
             (c->device ? kDeviceBit : 0);
  c->phase = 0;
  c->waitingOn = -1;
}

bool SmallColls::startedCall(int peer, uint64_t j) {
  if (started_[peer] >= j) return true;
  // The peer's slot for call j: once it shows j (or the later call that took the slot after it),
  // the peer started j, so it finished reading ours for call j - 1 and for j - kMailDepth. Pairs
  // with the release store of that number, which followed those reads.
  const uint64_t v = mail_[peer].in[j % kMailDepth].seq.load(std::memory_order_acquire);
  started_[peer] = std::max(started_[peer], v);
  return started_[peer] >= j;
}

int SmallColls::holdMismatch(SmallCall* c, Status* err) {
  // Calls that differ fail the communicator, and with it every call still running on any rank:
  // first every peer starts this call, so that it finished the one before (a slow rank would
  // otherwise see its matched call fail), for up to kMismatchHoldNs: a peer may never start it
  // (it called something that is not a small call), and the failure then names it all the same.
  constexpr int64_t kMismatchHoldNs = 2000 * 1000000LL;
  if (c->phase != 7) {
    held_ = *err;
    heldSinceNs_ = nowNs();
    c->phase = 7;
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_ || startedCall(p, c->k)) continue;
    if (nowNs() - heldSinceNs_ >= kMismatchHoldNs) break;
    c->waitingOn = p;
    return 0;
  }
  *err = held_;
  c->phase = 5;
  return -1;
}

void SmallColls::post(const SmallCall& c) {
  const size_t b = c.bytes;
  // What peer p gets: from + p * stride (stride 0: the same bytes for every peer), only the root
  // when toRoot, nothing when from is null. Every peer's slot gets the call's number all the same.
  const char* from = nullptr;
  size_t stride = 0;
  bool toRoot = false;
  switch (c.coll) {
    case Coll::kAllReduce:
    case Coll::kAllGather:
      from = c.send;
      break;
    case Coll::kBroadcast:
      from = rank_ == c.root ? c.send : nullptr;
      break;
    case Coll::kReduce:
    case Coll::kGather:
      from = rank_ != c.root ? c.send : nullptr;
      toRoot = true;
      break;
    case Coll::kScatter:
      from = rank_ == c.root ? c.send : nullptr;
      stride = b;
      break;
    case Coll::kReduceScatter:
    case Coll::kAllToAll:
      from = c.send;
      stride = b;
      break;
    default:
      break;
  }
  if (b == 0) from = nullptr;
  const uint64_t slot = c.k % kMailDepth;
  const unsigned writes = toRoot ? 1 : static_cast<unsigned>(nranks_ - 1);  // mails with data, one after another
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    const Mailboxes& m = mail_[p];
    MailSlot& s = m.out[slot];
    uint64_t check = c.check;
    if (from != nullptr && (!toRoot || p == c.root)) {
      unsigned char* to = outSpot(m, c.k, b);
      const char* part = from + static_cast<size_t>(p) * stride;
      if (b < StoreChoice::kMinBytes) {
        copyMail(to, part, b);
      } else if (mailStores_[p].copy(to, part, b, m.outReadCost, writes, c.k)) {  // fenced: before the number
        check |= kStreamedBit;
        gStreamedMails.fetch_add(1, std::memory_order_relaxed);
      } else {
        gPlainMails.fetch_add(1, std::memory_order_relaxed);
      }
    }
    s.check = check;
    // Publishes check and the data: pairs with the peer's acquire load in mailFrom() (or roomAt()).
    s.seq.store(c.k, std::memory_order_release);
  }
  // This rank's own share, where it is a copy.
  if (c.inPlace || b == 0) return;
  const size_t mine = static_cast<size_t>(rank_) * b;
  switch (c.coll) {
    case Coll::kBroadcast:
      if (rank_ == c.root) copyMail(c.recv, c.send, b);
      break;
    case Coll::kAllGather:
      copyMail(c.recv + mine, c.send, b);
      break;
    case Coll::kAllToAll:
      copyMail(c.recv + mine, c.send + mine, b);
      break;
    case Coll::kGather:
      if (rank_ == c.root) copyMail(c.recv + mine, c.send, b);
      break;
    case Coll::kScatter:
      if (rank_ == c.root) copyMail(c.recv, c.send + mine, b);
      break;
    default:
      break;
  }
}

const unsigned char* SmallColls::mailFrom(SmallCall* c, int peer, Status* err) {
  const Mailboxes& m = mail_[peer];
  const MailSlot& s = m.in[c->k % kMailDepth];
  // Pairs with the peer's release store in post(): its check and data are visible once it shows k.
  if (s.seq.load(std::memory_order_acquire) != c->k) {
    c->waitingOn = peer;
    return nullptr;
  }
  started_[peer] = std::max(started_[peer], c->k);
  if ((s.check & ~kStreamedBit) != c->check) {
    *err = mismatch(*c, peer, s);
    return nullptr;
  }
  return inSpot(m, c->k, c->bytes);
}

Status SmallColls::mismatch(const SmallCall& c, int peer, const MailSlot& s) const {
  uint64_t theirBytes = s.check & kField;
  if ((s.check & kDirectBit) != 0) memcpy(&theirBytes, mail_[peer].inPayload(c.k, kMaxMailBytes), sizeof(theirBytes));
  return errorf(braidInvalidUsage, "mismatched calls: %s called %s, but %s called %s", names_[peer].c_str(),
                describeCall(unpackCall(s.check, c.seq, theirBytes)).c_str(), names_[rank_].c_str(),
                describeCall(unpackCall(c.check, c.seq, c.bytes)).c_str());
}

void SmallColls::noteRead(const SmallCall& c, int peer, int64_t ns) {
  const Mailboxes& m = mail_[peer];
  const bool streamed = (m.in[c.k % kMailDepth].check & kStreamedBit) != 0;
  // The mails c reads one after another: the root's alone, or every peer's.
  const bool one = c.coll == Coll::kBroadcast || c.coll == Coll::kScatter;
  readCosts_[peer].add(streamed, c.bytes, ns, m.inReadCost, one ? 1 : static_cast<unsigned>(nranks_ - 1));
}

int SmallColls::gather(SmallCall* c, Status* err) {
  const size_t b = c->bytes;
  switch (c->coll) {
    case Coll::kBroadcast:
    case Coll::kScatter: {  // one mail to read, the root's: its buffer, or our block of it
      if (rank_ == c->root) return 1;
      const unsigned char* in = mailFrom(c, c->root, err);
      if (in == nullptr) return err->ok() ? 0 : -1;
      timedRead(*c, c->root, -1, [&] { copyMail(c->recv, in, b); });
      return 1;
    }
    case Coll::kReduce:
    case Coll::kGather:  // only the root reads, every peer's mail
      if (rank_ != c->root) return 1;
      break;
    default:  // every rank reads every peer's mail
      break;
  }
  // Reductions fold this rank's share first, then the peers' in rank order; AllReduce folds all
  // shares in rank order, so that every rank computes the very same sums.
  const bool allReduce = c->coll == Coll::kAllReduce;
  const bool folding = allReduce || c->coll == Coll::kReduceScatter || c->coll == Coll::kReduce;
  const size_t count = folding ? b / dtypeSize(c->dtype) : 0;
  for (; c->next < nranks_; ++c->next) {
    const int p = c->next;
    if (allReduce && p == 0) continue;  // share 0 is folded in with share 1
    if (!allReduce && p == rank_) continue;
    const unsigned char* in = p == rank_ ? nullptr : mailFrom(c, p, err);
    if (p != rank_ && in == nullptr) return err->ok() ? 0 : -1;
    if (!folding) {  // AllGather, AllToAll, Gather: peer p's block
      timedRead(*c, p, -1, [&] { copyMail(c->recv + static_cast<size_t>(p) * b, in, b); });
      continue;
    }
    if (allReduce) {
      // This rank's share in place past rank 1 was overwritten by the first fold: its copy in the
      // mail toward any peer stands in for it.
      const int any = rank_ == 0 ? 1 : 0;
      const void* own = c->inPlace && rank_ >= 2 ? static_cast<const void*>(outSpot(mail_[any], c->k, b)) : c->send;
      const void* share = p == rank_ ? own : in;
      const void* first = c->recv;
      if (p == 1) {
        first = rank_ == 0 ? own : mailFrom(c, 0, err);
        if (first == nullptr) return err->ok() ? 0 : -1;
      }
      // The mails this fold reads: peer p's (not this rank's own share), and at p = 1 rank 0's.
      timedRead(*c, p != rank_ ? p : -1, p == 1 && rank_ != 0 ? 0 : -1,
                [&] { c->kernel(c->recv, first, share, count); });
      continue;
    }
    const bool firstPeer = p == (rank_ == 0 ? 1 : 0);
    const void* own = c->coll == Coll::kReduceScatter ? c->send + static_cast<size_t>(rank_) * b : c->send;
    timedRead(*c, p, -1, [&] { c->kernel(c->recv, firstPeer ? own : c->recv, in, count); });
  }
  if (folding && c->op == braidAvg) scaleDivide(c->dtype, c->recv, count, nranks_);
  return 1;
}

bool SmallColls::mayStart(SmallCall* c) {
  // Direct calls mail their buffers' descriptors in the payload.
  const uint64_t depth = mailDepthFor(c->direct ? kMaxMailBytes : c->bytes);
  if (c->k != finished_ + 1) {  // an earlier call still runs
    c->waitingOn = -1;
    return false;
  }
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_ && !roomAt(p, c->k, depth)) {
      c->waitingOn = p;
      return false;
    }
  }
  return true;
}

int SmallColls::step(SmallCall* c, Status* err) {
  if (c->phase == 7) return holdMismatch(c, err);
  if (c->direct) return stepDirect(c, err);
  if (c->phase == 2) return 1;
  if (c->phase == 0) {
    if (!mayStart(c)) return 0;
    post(*c);
    c->phase = 1;
    c->next = 0;
  }
  const int r = gather(c, err);
  if (r < 0) return holdMismatch(c, err);
  if (r == 0) return 0;
  c->phase = 2;
  c->waitingOn = -1;
  ++finished_;
  return 1;
}

}  // namespace braid
