// Status, braid's internal result: a success carries no message (nothing allocated on the hot path),
// a failure keeps its code and message through copies and moves, and a moved-from Status is a
// success.
#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "src/base/status.h"

using namespace braid;

TEST_CASE("Status: successes are empty, failures keep code and message through copies and moves", "[unit][status]") {
  Status ok = okStatus();
  CHECK(ok.ok());
  CHECK(ok.message().empty());
  CHECK(Status(braidSuccess, "ignored").message().empty());  // a success never carries a message

  Status bad = errorf(braidRemoteError, "peer %d is gone", 3);
  REQUIRE_FALSE(bad.ok());
  Status copy = bad;
  CHECK(copy.code() == braidRemoteError);
  CHECK(copy.message() == "peer 3 is gone");
  CHECK(bad.message() == "peer 3 is gone");  // the copy is deep

  Status moved = std::move(copy);
  CHECK(moved.message() == "peer 3 is gone");
  CHECK(copy.ok());  // NOLINT(bugprone-use-after-move): a moved-from Status is a success
  CHECK(copy.message().empty());

  Status target = errorf(braidTimeout, "old");
  target = std::move(moved);
  CHECK(target.code() == braidRemoteError);
  CHECK(target.message() == "peer 3 is gone");
  CHECK(moved.ok());  // NOLINT(bugprone-use-after-move)

  target = ok;
  CHECK(target.ok());
  CHECK(target.message().empty());
  target = bad;
  CHECK(target.message() == "peer 3 is gone");
  const Status& self = target;
  target = self;  // self-assignment keeps it
  CHECK(target.message() == "peer 3 is gone");

  CHECK(bad.withContext("sending").message() == "sending: peer 3 is gone");
  CHECK(ok.withContext("sending").ok());
}
