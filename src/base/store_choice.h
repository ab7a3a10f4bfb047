// Plain or streaming stores for a copy that another process reads next (an shm FIFO slot, a
// small-collective mail), chosen per link by what each kind costs.
//
// Plain stores leave the data in the writer's cache, from where the reader takes it line by line,
// after the writer took each line back from the reader, who read it last time round. That is the
// fastest way where the two cores are near; where they are far (measured only on the 2-core VM of
// perf/results/2026-12-06-slot-stores.md, whose vCPUs the hypervisor seems to place apart much of the
// time; another L3 or socket should be alike) every line crosses twice at a high price: the FIFO ran
// 3-5x slower and the mailboxes 3.4-7.2x (perf/results/2026-12-06-mailbox-slow-mode.md) than with
// streaming stores, which write the lines to memory without taking them back first. Nothing at setup
// says which case holds, and on that VM it changes from minute to minute; with more ranks than cores
// the reader often runs on the writer's core, where streaming is the slow kind. So in auto each
// writer weighs both kinds by what they cost, its own copy plus the reader's read (running averages
// per KiB; the reader reports its own through shared memory, ReadCosts), keeps the cheaper (by a
// margin where links run side by side, streamBelow), and now and then tries the other (trialEvery).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid {

// BRAID_SHM_SLOT_STORES, BRAID_SHM_MAIL_STORES.
enum class StoreKind : uint8_t { kPlain, kStream, kAuto };

// The writer's half: which kind each copy takes.
class StoreChoice {
 public:
  // Copies of at least this many bytes are chosen for (and timed in auto); smaller ones take plain
  // stores, where a clock read would cost a tenth of the copy.
  static constexpr size_t kMinBytes = 16 << 10;

  // streamBelow: in auto, plain stores give way to streaming ones once those cost less than this
  // share of theirs, and come back as soon as they cost less. 1 for a flow one way, where each
  // link's cost is the whole story. Less where the links of a call run side by side (the mailboxes):
  // a rank's time there is its own writes plus its reads of what its peers chose, so links that
  // choose apart make a call as slow as its worst mix (2 ranks, 16 KiB AllReduce, the two kinds
  // measured within 25% of each other: links flipping at even costs took 2.9-3.95 us, plain stores
  // alone 2.6-3.3, streaming ones 3.0-3.3), and where the kinds measure close the per-link costs do
  // not tell the call's time well (2 ranks, 64 KiB Reduce: 94 ns/KiB plainly and 96 streamed, but
  // 4.4 us a call against 6.0).
  //
  // trialEvery: the copies (ticks) between trials of the other kind; 4x as many where it cost twice
  // as much or more at its last trial (a trial costs what the other kind costs more: at 4x, one in
  // 32 added about 10%).
  explicit StoreChoice(StoreKind kind = StoreKind::kAuto, double streamBelow = 1.0, uint32_t trialEvery = 32)
      : kind_(kind),
        stream_(kind == StoreKind::kStream),
        streamBelow_(streamBelow),
        trialEvery_(trialEvery),
        baseTrialEvery_(trialEvery) {}
  bool timed() const { return kind_ == StoreKind::kAuto; }
  // The kind in use (true: streaming).
  bool streaming() const { return stream_; }
  // Copies `len` bytes to `dst`, which another process reads once it is published: under kMinBytes
  // with plain stores, else with the kind in use (in auto now and then the other, for a trial: a kind
  // never timed is tried at the second copy), timed in auto and weighed with what the reader reported
  // for reading each kind (`reader`: ns per KiB as a double's bits, 0 while not measured). Streamed
  // bytes are fenced before it returns: a release store that follows publishes them. True when the
  // copy took streaming stores. `weight`: see ReadCosts::add. `tick`: when trials fall due, a number
  // that grows with each copy; 0 counts the copies. Collectives pass their call's number, the same on
  // every rank, so that all the links of a call try the other kind in the same call: 4 ranks make
  // 12 links, and trials at their own counts put one in about a third of all calls (a 4-rank 16 KiB
  // AllReduce, where streamed mails cost twice as much, took 9.6 us against 8.4 plainly).
  bool copy(void* dst, const void* src, size_t len, const std::atomic<uint64_t> reader[2], unsigned weight = 1,
            uint64_t tick = 0);

 private:
  bool pick(uint64_t tick);  // the kind of the next copy of kMinBytes and up
  void wrote(bool stream, size_t len, int64_t ns, const std::atomic<uint64_t> reader[2]);

  StoreKind kind_;
  bool stream_;
  double streamBelow_;
  uint64_t copies_ = 0;      // copies timed
  uint64_t nextTrial_ = 0;   // the tick from which the next copy tries the other kind
  uint32_t trialEvery_;      // the copies between trials as it stands (baseTrialEvery_, or 4x that)
  uint32_t baseTrialEvery_;  // the constructor's trialEvery
  double copyCost_[2] = {};  // ns per KiB of a plain [0] and a streamed [1] copy (0: none yet)
};

// The reader's half: what reading each kind costs it, published for the writer.
class ReadCosts {
 public:
  // A read of `len` bytes written with `streamed` stores took `ns`; `shared[streamed]` is told. Reads
  // under StoreChoice::kMinBytes should not be timed.
  //
  // `weight`, here and in StoreChoice::copy: how many such copies (reads) the writer (reader) makes
  // one after another in the operation, while the other side's run in parallel. A rank that reads
  // n - 1 mails (the root of a Reduce) waits for all its reads but only for the slowest of its
  // writers' copies: there the reads count n - 1 times (4 ranks on 2 cores, 32 KiB Reduce: plain
  // copies cost 114 ns/KiB and reads 31, streamed ones 28 and 107; unweighted, streaming looked
  // cheaper, and the Reduce took 10.7 us with it against 4.6 plainly).
  void add(bool streamed, size_t len, int64_t ns, std::atomic<uint64_t> shared[2], unsigned weight = 1);

 private:
  double cost_[2] = {};
};

}  // namespace braid
