#include "src/call_watch.h"

#include <cstring>

#include "src/base/dtype.h"
#include "src/plan.h"

namespace braid {

namespace {

Coll collOf(const CallRecord& r) { return static_cast<Coll>(r.what & 0xff); }
braidDataType_t dtypeOf(const CallRecord& r) { return static_cast<braidDataType_t>(r.what >> 8 & 0xff); }

// "AllReduce #7 (count 4, float32, sum)", as the other mismatch errors say it; #7: the collective's
// number (an operation's own sequence number counts point-to-point calls too).
std::string describe(const CallRecord& r) {
  CallHeader h{};
  h.magic = kCallHeaderMagic;
  h.coll = static_cast<uint8_t>(collOf(r));
  h.dtype = static_cast<uint8_t>(dtypeOf(r));
  h.redop = static_cast<uint8_t>(r.what >> 16 & 0xff);
  h.root = static_cast<int32_t>(r.what >> 32);
  h.count = r.count;
  h.seq = r.no;
  return describeCall(h);
}

// "1st", "2nd", "3rd", "11th", "22nd".
std::string ordinal(uint64_t n) {
  const uint64_t tens = n % 100, ones = n % 10;
  const char* suffix = tens >= 11 && tens <= 13 ? "th" : ones == 1 ? "st" : ones == 2 ? "nd" : ones == 3 ? "rd" : "th";
  return std::to_string(n) + suffix;
}

}  // namespace

CallRecord callRecord(uint64_t no, Coll coll, uint64_t count, braidDataType_t dt, braidRedOp_t op, int root) {
  CallRecord r;
  r.no = no;
  r.what = static_cast<uint64_t>(coll) | static_cast<uint64_t>(dt & 0xff) << 8 |
           static_cast<uint64_t>(op & 0xff) << 16 | static_cast<uint64_t>(static_cast<uint32_t>(root)) << 32;
  r.count = coll == Coll::kBarrier ? 0 : count;
  return r;
}

CallRecord::Key CallRecord::key() const {
  const Coll c = collOf(*this);
  Key k;
  k.coll = static_cast<uint64_t>(c);
  k.bytes = count * dtypeSize(dtypeOf(*this));
  if (collReduces(c)) k.dtypeOp = what >> 8 & 0xffff;
  if (collRooted(c)) k.root = what >> 32;
  return k;
}

void CallLog::note(const CallRecord& r) {
  Slot& s = slots_[next_++ % kSlots];
  s.no.store(0, std::memory_order_relaxed);  // being written
  std::atomic_thread_fence(std::memory_order_release);
  s.what.store(r.what, std::memory_order_relaxed);
  s.count.store(r.count, std::memory_order_relaxed);
  s.no.store(r.no, std::memory_order_release);
}

void CallLog::appendTo(std::string* out) const {
  for (const Slot& s : slots_) {
    CallRecord r;
    r.no = s.no.load(std::memory_order_acquire);
    r.what = s.what.load(std::memory_order_relaxed);
    r.count = s.count.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    // Empty, being written, or rewritten while we read: left out (a later report has it).
    if (r.no == 0 || s.no.load(std::memory_order_relaxed) != r.no) continue;
    out->append(reinterpret_cast<const char*>(&r), sizeof(r));
  }
}

std::string CallTable::add(int rank, const std::string& records, const std::function<std::string(int)>& describeRank) {
  if (records.size() % sizeof(CallRecord) != 0) return {};
  for (size_t at = 0; at < records.size(); at += sizeof(CallRecord)) {
    CallRecord r;
    memcpy(&r, records.data() + at, sizeof(r));
    if (r.no == 0 || (r.what & 0xff) >= kNumColls || !validDtype(static_cast<int>(dtypeOf(r)))) continue;
    auto [it, fresh] = seen_.try_emplace(r.no, Seen{r, rank});
    if (fresh) {
      if (seen_.size() > kMaxCalls) seen_.erase(seen_.begin());
      continue;
    }
    const Seen& s = it->second;
    if (s.call.sameCall(r)) continue;
    return "mismatched calls: " + describeRank(s.rank) + " called " + describe(s.call) + ", but " + describeRank(rank) +
           " called " + describe(r) + " (the " + ordinal(r.no) +
           " collective of each; seen while they waited for each other)";
  }
  return {};
}

}  // namespace braid
