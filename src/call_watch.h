// Calls that differ and wait on each other. Every rank numbers the collectives it posts (a correct
// program posts the same ones on every rank, in the same order) and keeps its last few in a
// CallLog. A rank whose oldest operation has waited longer than a heartbeat period sends rank 0
// that call and its log (src/control_plane.cc); rank 0 keeps what the ranks said in a CallTable,
// beside its own log, and when two ranks' calls of one number differ it fails the communicator at
// once (braidInvalidUsage, both calls named). Those ranks would otherwise wait for each other until
// BRAID_TIMEOUT: a Reduce whose ranks name different roots, a call that one rank runs on the
// mailboxes of small calls and another on a plan (it forced an algorithm), a count that differs
// where no message is ever exchanged to show it.
//
// What the messages carry (Xfer::call, src/executor.cc callPrint) catches most mismatches as soon
// as a message arrives; this catches the ones where nothing arrives. Point-to-point calls and the
// neighbour AllReduce are not numbered: they are not calls every rank makes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "braid/braid.h"
#include "src/coll.h"

namespace braid {

// One collective as every rank must make it.
struct CallRecord {
  uint64_t no = 0;     // the communicator's no-th collective, from 1, on every rank; 0: none
  uint64_t what = 0;   // collective | datatype << 8 | op << 16 | root << 32
  uint64_t count = 0;  // elements
  // What makes two calls one call, as the message marks (src/executor.cc callPrint) and the watch
  // compare it: the collective and its bytes, the datatype and op where it reduces, the root where
  // it has one (the rest 0). An AllGather of int32 and one of float32 that move the same bytes agree.
  struct Key {
    uint64_t coll = 0, bytes = 0, dtypeOp = 0, root = 0;
    bool operator==(const Key&) const = default;
  };
  Key key() const;
  bool sameCall(const CallRecord& o) const { return key() == o.key(); }
};

CallRecord callRecord(uint64_t no, Coll coll, uint64_t count, braidDataType_t dt, braidRedOp_t op, int root);

// A rank's last kSlots records. One writer (the engine, under its lock); read from any thread
// without a lock: each slot is a small seqlock whose sequence is the record's number (0 while it
// is written).
class CallLog {
 public:
  static constexpr size_t kSlots = 16;
  void note(const CallRecord& r);
  // Appends the records, as bytes (CallTable::add reads them).
  void appendTo(std::string* out) const;

 private:
  struct Slot {
    std::atomic<uint64_t> no{0}, what{0}, count{0};
  };
  Slot slots_[kSlots];
  uint64_t next_ = 0;  // the writer's
};

// Rank 0's record of the calls the ranks reported, by number (the newest kMaxCalls numbers).
class CallTable {
 public:
  static constexpr size_t kMaxCalls = 4096;
  // Takes `rank`'s records (bytes, as CallLog::appendTo and noteWaiting write them). Returns the text
  // that says how the first of them that differs from another rank's call of its number differs;
  // empty when none does (or the bytes are not records).
  std::string add(int rank, const std::string& records, const std::function<std::string(int)>& describeRank);
  bool empty() const { return seen_.empty(); }

 private:
  struct Seen {
    CallRecord call;
    int rank = -1;
  };
  std::map<uint64_t, Seen> seen_;
};

}  // namespace braid
