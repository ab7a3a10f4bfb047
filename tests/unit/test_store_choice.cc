// StoreChoice and ReadCosts (src/base/store_choice.cc): the choice between plain and streaming
// stores as the costs that the reader reports dictate, the margin of the mailboxes, and when trials
// of the other kind fall. The reader's reports are what a peer process would store in shared memory;
// here the test stores them, far apart from the copies' own costs (tens to hundreds of ns per KiB),
// so that the reads decide.
#include <atomic>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "src/base/store_choice.h"

namespace {

constexpr size_t kLen = braid::StoreChoice::kMinBytes;

// What a reader reports: ns per KiB of reading plain [0] and streamed [1] copies.
void report(std::atomic<uint64_t> (&reader)[2], double plain, double streamed) {
  reader[0].store(std::bit_cast<uint64_t>(plain));
  reader[1].store(std::bit_cast<uint64_t>(streamed));
}

// The kinds `n` copies take (true: streamed), at ticks 1, 2, ... (every `step`).
std::vector<bool> copies(braid::StoreChoice* c, std::atomic<uint64_t> (&reader)[2], int n, uint64_t step = 1) {
  std::vector<unsigned char> src(kLen, 7), dst(kLen);
  std::vector<bool> kinds;
  for (int i = 1; i <= n; ++i) kinds.push_back(c->copy(dst.data(), src.data(), kLen, reader, 1, i * step));
  return kinds;
}

}  // namespace

TEST_CASE("plain and stream stores are what they say; copies under kMinBytes are plain", "[unit][store_choice]") {
  std::atomic<uint64_t> reader[2] = {};
  braid::StoreChoice plain(braid::StoreKind::kPlain), stream(braid::StoreKind::kStream);
  for (bool k : copies(&plain, reader, 40)) CHECK(!k);
  for (bool k : copies(&stream, reader, 40)) CHECK(k);
  std::vector<unsigned char> src(kLen - 1, 1), dst(kLen - 1, 0);
  CHECK(!stream.copy(dst.data(), src.data(), src.size(), reader));
  CHECK(dst == src);
  CHECK(reader[0].load() == 0);  // the writer only reads what the reader reports
}

TEST_CASE("auto takes the kind that costs less in all, comes back when it changes, and tries the other on time",
          "[unit][store_choice]") {
  std::atomic<uint64_t> reader[2] = {};
  braid::StoreChoice c(braid::StoreKind::kAuto, 1.0, 32);
  // Nothing reported: plain, with the other kind tried on the second copy and from tick 32 on.
  std::vector<bool> k = copies(&c, reader, 70);
  for (int i = 0; i < 70; ++i) CHECK(k[i] == (i + 1 == 2 || i + 1 == 32 || i + 1 == 64));
  // Streamed copies read 1000x cheaper: streaming from then on, plain tried 4x as seldom (it costs
  // more than twice as much).
  report(reader, 1e6, 1e3);
  k = copies(&c, reader, 300, 1);
  CHECK(k[5]);
  int plainTrials = 0;
  for (size_t i = 5; i < k.size(); ++i) plainTrials += !k[i];
  CHECK(plainTrials >= 1);
  CHECK(plainTrials <= 3);  // ticks 128 and 256 (4 x 32), not every 32
  // Plain copies read cheaper now: back to plain at once.
  report(reader, 1e3, 1e6);
  k = copies(&c, reader, 4);
  CHECK(!k[1]);
  CHECK(!k[2]);
}

TEST_CASE("with a margin, auto streams only when that halves the cost, and stops as soon as it does not",
          "[unit][store_choice]") {
  std::atomic<uint64_t> reader[2] = {};
  braid::StoreChoice c(braid::StoreKind::kAuto, 0.5, 128);
  // Streamed copies read 1.4x cheaper (the copies are noise beside it): not enough, plain stays.
  report(reader, 1.4e6, 1e6);
  std::vector<bool> k = copies(&c, reader, 100);
  for (int i = 2; i < 100; ++i) CHECK(!k[i]);
  // 3x cheaper: streamed.
  report(reader, 3e6, 1e6);
  k = copies(&c, reader, 10);
  CHECK(k[9]);
  // Now plain stores are 1.2x cheaper: back to plain, though they do not halve the cost.
  report(reader, 1e6, 1.2e6);
  k = copies(&c, reader, 10);
  CHECK(!k[9]);
}

TEST_CASE("trials fall on the first copy at or past each multiple of the tick, whatever the ticks skip",
          "[unit][store_choice]") {
  // Collectives pass their call's number: a link that carries data only in some calls (the root of
  // a Reduce that moves) still tries the other kind once per period, in the first call it carries.
  std::atomic<uint64_t> reader[2] = {};
  report(reader, 1e6, 1e6);  // even: the trial period stays 128
  braid::StoreChoice c(braid::StoreKind::kAuto, 0.5, 128);
  std::vector<bool> k = copies(&c, reader, 100, 5);  // ticks 5, 10, ..., 500
  std::vector<uint64_t> trials;
  for (int i = 0; i < 100; ++i)
    if (k[i]) trials.push_back(static_cast<uint64_t>(i + 1) * 5);
  CHECK(trials == std::vector<uint64_t>{10, 130, 260, 385});
}

TEST_CASE("the reader's costs reach the shared words by kind, as running averages", "[unit][store_choice]") {
  std::atomic<uint64_t> shared[2] = {};
  braid::ReadCosts r;
  r.add(true, 32 << 10, 3200, shared);  // 100 ns per KiB
  CHECK(shared[0].load() == 0);
  CHECK(std::bit_cast<double>(shared[1].load()) == Approx(100));
  r.add(true, 32 << 10, 6400, shared, 1);  // 200: the average moves an eighth of the way
  CHECK(std::bit_cast<double>(shared[1].load()) == Approx(112.5));
  r.add(false, 16 << 10, 800, shared, 3);  // 50 ns per KiB, counted 3 times
  CHECK(std::bit_cast<double>(shared[0].load()) == Approx(150));
}
