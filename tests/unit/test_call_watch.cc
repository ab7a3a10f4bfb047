// The call watch's records (src/call_watch.h): what counts as the same call, the log's last calls,
// and rank 0's table, which names the first call of one number that two ranks made differently.
#include <catch2/catch.hpp>
#include <string>

#include "src/call_watch.h"

using namespace braid;

namespace {

std::string bytesOf(const CallRecord& r) { return std::string(reinterpret_cast<const char*>(&r), sizeof(r)); }
std::string rankName(int r) { return "rank " + std::to_string(r) + " (host h)"; }

}  // namespace

TEST_CASE("call records compare what the message marks compare", "[unit][calls]") {
  const CallRecord sum = callRecord(3, Coll::kAllReduce, 1024, braidFloat32, braidSum, -1);
  CHECK(sum.sameCall(callRecord(3, Coll::kAllReduce, 1024, braidFloat32, braidSum, 7)));  // root: no part
  CHECK_FALSE(sum.sameCall(callRecord(3, Coll::kAllReduce, 1024, braidFloat32, braidMax, -1)));
  CHECK_FALSE(sum.sameCall(callRecord(3, Coll::kAllReduce, 1024, braidInt32, braidSum, -1)));
  CHECK_FALSE(sum.sameCall(callRecord(3, Coll::kAllReduce, 1023, braidFloat32, braidSum, -1)));
  CHECK_FALSE(sum.sameCall(callRecord(3, Coll::kBroadcast, 1024, braidFloat32, braidSum, 0)));
  // Moving the same bytes, a datatype that differs is no mismatch where nothing reduces.
  const CallRecord gather = callRecord(1, Coll::kAllGather, 64, braidInt32, braidSum, -1);
  CHECK(gather.sameCall(callRecord(1, Coll::kAllGather, 64, braidFloat32, braidMax, -1)));
  CHECK(gather.sameCall(callRecord(1, Coll::kAllGather, 128, braidFloat16, braidSum, -1)));
  CHECK_FALSE(gather.sameCall(callRecord(1, Coll::kAllGather, 64, braidFloat16, braidSum, -1)));
  // Roots where the collective has one.
  CHECK_FALSE(callRecord(1, Coll::kBroadcast, 8, braidUint8, braidSum, 0)
                  .sameCall(callRecord(1, Coll::kBroadcast, 8, braidUint8, braidSum, 1)));
  CHECK(callRecord(1, Coll::kBarrier, 8, braidUint8, braidSum, 0)
            .sameCall(callRecord(1, Coll::kBarrier, 0, braidFloat32, braidSum, 1)));
}

TEST_CASE("a call log keeps the last calls; the table names the first call two ranks made differently",
          "[unit][calls]") {
  CallLog log;
  for (uint64_t i = 1; i <= 40; ++i) log.note(callRecord(i, Coll::kAllReduce, i, braidFloat32, braidSum, -1));
  std::string mine;
  log.appendTo(&mine);
  REQUIRE(mine.size() == CallLog::kSlots * sizeof(CallRecord));
  CallTable table;
  CHECK(table.add(0, mine, rankName).empty());
  // Rank 1 made calls 25-40 the same way: nothing to say.
  CHECK(table.add(1, mine, rankName).empty());
  // Rank 2's 30th call names root 2 in a Reduce.
  const std::string differ =
      table.add(2, bytesOf(callRecord(30, Coll::kReduce, 30, braidFloat32, braidSum, 2)), rankName);
  CHECK(differ.find("mismatched calls: rank 0 (host h) called AllReduce #30 (count 30, float32, sum), but rank 2 "
                    "(host h) called Reduce #30 (count 30, float32, sum, root 2)") == 0);
  CHECK(differ.find("the 30th collective of each") != std::string::npos);
  // Calls older than the table keeps, or bytes that are not records, say nothing.
  CHECK(table.add(3, "abc", rankName).empty());
  CHECK(table.add(3, bytesOf(callRecord(2, Coll::kReduce, 1, braidFloat32, braidSum, 0)), rankName).empty());
  CHECK_FALSE(table.empty());
}

TEST_CASE("the call table keeps the newest numbers only", "[unit][calls]") {
  CallTable table;
  for (uint64_t i = 1; i <= CallTable::kMaxCalls + 10; ++i)
    REQUIRE(table.add(0, bytesOf(callRecord(i, Coll::kBarrier, 0, braidUint8, braidSum, -1)), rankName).empty());
  // Call 5 was dropped: another rank's different 5th call cannot be compared, and is not taken
  // for its own record of the same call either (it is simply recorded).
  CHECK(table.add(1, bytesOf(callRecord(5, Coll::kAllReduce, 1, braidUint8, braidSum, -1)), rankName).empty());
  CHECK_FALSE(table
                  .add(1, bytesOf(callRecord(CallTable::kMaxCalls + 10, Coll::kAllReduce, 1, braidUint8, braidSum, -1)),
                       rankName)
                  .empty());
}
