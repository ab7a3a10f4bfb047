// The chunk/credit protocol (transports/net/chunk_link.h) between two real endpoints in one
// process, over an in-process wire that this test controls: it holds writes until told, delivers
// them in order, in reverse or shuffled, reads the source only at delivery (as a NIC may), and can
// corrupt an immediate on its way.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "transports/net/chunk_link.h"

using braid::ReduceSpec;
using braid::Region;
using braid::Status;
using braid::Xfer;
using braid::net::ChunkLink;
using braid::net::ChunkLinkConfig;
using braid::net::Imm;

namespace {

enum class Order { kFifo, kReverse, kShuffle };

struct Pending {
  const void* src;
  size_t bytes;
  uint32_t slot;
  uint32_t imm;
  uint64_t wrId;
  bool credit;
};

// One direction: the writes endpoint `from` posted, waiting to land in `to`'s ring.
class TestWire final : public braid::net::Wire {
 public:
  Status postWrite(const void* src, const Region* region, size_t bytes, uint32_t slot, uint32_t imm,
                   uint64_t wrId) override {
    if (region != nullptr) ++directWrites;
    ++writes;
    pending.push_back({src, bytes, slot, imm, wrId, false});
    return braid::okStatus();
  }
  Status postCredit(uint32_t imm, uint64_t wrId) override {
    pending.push_back({nullptr, 0, 0, imm, wrId, true});
    return braid::okStatus();
  }

  // Delivers pending write i: the bytes land in the peer's slot now (read from the source now),
  // then the peer sees the immediate and the poster its completion.
  Status deliver(size_t i) {
    Pending p = pending[i];
    pending.erase(pending.begin() + static_cast<long>(i));
    if (!p.credit && p.bytes > 0) memcpy(toRing + static_cast<size_t>(p.slot) * slotBytes, p.src, p.bytes);
    if (corruptNext) {
      p.imm = corruptNext(p.imm);
      corruptNext = nullptr;
    }
    BRAID_TRY(to->onArrival(p.imm));
    return from->onWriteDone(p.wrId);
  }

  ChunkLink* from = nullptr;
  ChunkLink* to = nullptr;
  uint8_t* toRing = nullptr;
  size_t slotBytes = 0;
  std::deque<Pending> pending;
  uint32_t (*corruptNext)(uint32_t) = nullptr;
  int directWrites = 0;
  int writes = 0;
};

// Two endpoints A and B joined by two TestWires.
struct Pair {
  explicit Pair(ChunkLinkConfig cfg)
      : cfg(cfg),
        ringA(cfg.slots * cfg.slotBytes),
        ringB(cfg.slots * cfg.slotBytes),
        stageA(cfg.slots * cfg.slotBytes),
        stageB(cfg.slots * cfg.slotBytes),
        a(cfg, &ab, ringA.data(), stageA.data(), "peer rank 1 (host b)"),
        b(cfg, &ba, ringB.data(), stageB.data(), "peer rank 0 (host a)") {
    ab.from = &a;
    ab.to = &b;
    ab.toRing = ringB.data();
    ab.slotBytes = cfg.slotBytes;
    ba.from = &b;
    ba.to = &a;
    ba.toRing = ringA.data();
    ba.slotBytes = cfg.slotBytes;
  }

  // One round: both endpoints progress, then up to `budget` pending writes of each wire land in
  // `order`. Returns the first failure.
  Status round(Order order, size_t budget = SIZE_MAX) {
    BRAID_TRY(a.progress());
    BRAID_TRY(b.progress());
    for (TestWire* w : {&ab, &ba}) {
      for (size_t k = 0; k < budget && !w->pending.empty(); ++k) {
        size_t i = 0;
        if (order == Order::kReverse) i = w->pending.size() - 1;
        if (order == Order::kShuffle) i = std::uniform_int_distribution<size_t>(0, w->pending.size() - 1)(rng);
        BRAID_TRY(w->deliver(i));
      }
    }
    return braid::okStatus();
  }

  // Rounds until neither endpoint is busy and nothing is in flight; fails the test after many.
  Status run(Order order, size_t budget = SIZE_MAX) {
    for (int i = 0; i < 100000; ++i) {
      BRAID_TRY(round(order, budget));
      if (!a.busy() && !b.busy() && ab.pending.empty() && ba.pending.empty()) return braid::okStatus();
    }
    return braid::errorf(braidTimeout, "the pair did not go idle");
  }

  ChunkLinkConfig cfg;
  std::vector<uint8_t> ringA, ringB, stageA, stageB;
  TestWire ab, ba;
  ChunkLink a, b;
  std::mt19937 rng{12345};
};

ChunkLinkConfig config(uint32_t slots, size_t slotBytes, uint32_t maxWrites = 64, uint32_t batch = 0) {
  ChunkLinkConfig c;
  c.slots = slots;
  c.slotBytes = slotBytes;
  c.maxWrites = maxWrites;
  c.creditBatch = batch;
  return c;
}

std::vector<uint8_t> pattern(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed * 31 + 1);
  return v;
}

Xfer sendOf(std::vector<uint8_t>& v) {
  Xfer x;
  x.data = v.data();
  x.bytes = v.size();
  return x;
}

Xfer recvInto(std::vector<uint8_t>& v) {
  Xfer x;
  x.data = v.data();
  x.capacity = v.size();
  return x;
}

// Reduce functions of the test: uint32 sums, and a 3-byte "element" summed bytewise (an element
// larger than the test's 2-byte slots, so its bytes are carried across several chunks).
void sumU32(void* out, const void* local, const void* in, size_t count, const void*) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t l, r;
    memcpy(&l, static_cast<const uint8_t*>(local) + 4 * i, 4);
    memcpy(&r, static_cast<const uint8_t*>(in) + 4 * i, 4);
    l += r;
    memcpy(static_cast<uint8_t*>(out) + 4 * i, &l, 4);
  }
}
void sumBytes3(void* out, const void* local, const void* in, size_t count, const void*) {
  for (size_t i = 0; i < 3 * count; ++i)
    static_cast<uint8_t*>(out)[i] =
        static_cast<uint8_t>(static_cast<const uint8_t*>(local)[i] + static_cast<const uint8_t*>(in)[i]);
}

}  // namespace

TEST_CASE("chunk link: a message of many chunks, with credits running out and coming back", "[unit][net]") {
  const Order order = GENERATE(Order::kFifo, Order::kReverse, Order::kShuffle);
  Pair p(config(4, 64));
  auto out = pattern(10007, 1);  // 157 chunks, the last one partial
  std::vector<uint8_t> in(out.size(), 0xEE);
  Xfer s = sendOf(out), r = recvInto(in);
  REQUIRE(p.a.postSend(&s).ok());
  REQUIRE(p.b.postRecv(&r).ok());
  // The first progress posts exactly one ring's worth, then waits for credits.
  REQUIRE(p.a.progress().ok());
  CHECK(p.a.credits() == 0);
  CHECK(p.ab.pending.size() == 4);
  REQUIRE(p.run(order).ok());
  CHECK(s.complete);
  CHECK(r.complete);
  CHECK(r.bytes == out.size());
  CHECK(in == out);
  // Credits travel in batches (a quarter of the ring: one per slot here), never more than chunks.
  CHECK(p.b.creditMessages() <= 157);
  CHECK(p.b.creditMessages() >= 157 / 4);
}

TEST_CASE("chunk link: credits batch, and the sender resumes once the receiver frees slots", "[unit][net]") {
  Pair p(config(8, 16, 64, 4));
  auto out = pattern(16 * 20, 2);
  std::vector<uint8_t> in(out.size(), 0);
  Xfer s = sendOf(out), r = recvInto(in);
  REQUIRE(p.a.postSend(&s).ok());
  // No receive posted: the ring fills, the chunks wait in B's slots, A stops at zero credits.
  for (int i = 0; i < 5; ++i) REQUIRE(p.round(Order::kFifo).ok());
  CHECK(p.a.credits() == 0);
  CHECK(p.ab.pending.empty());
  CHECK_FALSE(s.complete);
  CHECK(p.b.creditMessages() == 0);
  REQUIRE(p.b.postRecv(&r).ok());
  REQUIRE(p.run(Order::kFifo).ok());
  CHECK(in == out);
  // 20 chunks freed in batches of at least 4 (a progress pass that frees a whole ring returns it in
  // one message), at most a ring's worth each.
  CHECK(p.b.creditMessages() <= 20 / 4);
  CHECK(p.b.creditMessages() >= 20 / 8);
}

TEST_CASE("chunk link: credits owed behind a full send queue keep the link busy until they go", "[unit][net]") {
  // One send-queue entry: B's own staged send (complete at once) still holds it when B frees a slot.
  Pair p(config(2, 8, 1, 1));
  auto fromB = pattern(8, 11), fromA = pattern(8, 12);
  std::vector<uint8_t> inA(8), inB(8);
  Xfer sb = sendOf(fromB), sa = sendOf(fromA), ra = recvInto(inA), rb = recvInto(inB);
  REQUIRE(p.b.postSend(&sb).ok());
  REQUIRE(p.b.progress().ok());
  CHECK(sb.complete);
  CHECK(p.b.writesInFlight() == 1);
  REQUIRE(p.a.postSend(&sa).ok());
  REQUIRE(p.a.progress().ok());
  REQUIRE(p.ab.deliver(0).ok());
  CHECK(p.a.credits() == 1);
  REQUIRE(p.b.postRecv(&rb).ok());
  REQUIRE(p.b.progress().ok());
  CHECK(rb.complete);
  // The credit could not be posted (the queue is full), so B must still be progressed.
  CHECK(p.b.writesInFlight() == 1);
  CHECK(p.b.busy());
  REQUIRE(p.a.postRecv(&ra).ok());
  REQUIRE(p.run(Order::kFifo).ok());
  CHECK(p.a.credits() == 2);
  CHECK_FALSE(p.b.busy());
  CHECK(inA == fromB);
  CHECK(inB == fromA);
}

TEST_CASE("chunk link: zero-byte messages among others complete in order", "[unit][net]") {
  const Order order = GENERATE(Order::kFifo, Order::kShuffle);
  Pair p(config(3, 32, 2));
  const std::vector<size_t> sizes = {0, 1, 0, 0, 31, 32, 33, 0, 100, 0};
  std::vector<std::vector<uint8_t>> outs, ins;
  for (size_t i = 0; i < sizes.size(); ++i) {
    outs.push_back(pattern(sizes[i], static_cast<int>(i)));
    ins.emplace_back(sizes[i], 0xEE);
  }
  std::vector<Xfer> sx(sizes.size()), rx(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    sx[i] = sendOf(outs[i]);
    rx[i] = recvInto(ins[i]);
    REQUIRE(p.a.postSend(&sx[i]).ok());
    REQUIRE(p.b.postRecv(&rx[i]).ok());
  }
  REQUIRE(p.run(order, 1).ok());
  for (size_t i = 0; i < sizes.size(); ++i) {
    INFO("message " << i);
    CHECK(rx[i].complete);
    CHECK(sx[i].complete);
    CHECK(ins[i] == outs[i]);
  }
}

TEST_CASE("chunk link: 64 transfers queued each way complete in posting order, whatever the wire's order",
          "[unit][net]") {
  const Order order = GENERATE(Order::kFifo, Order::kReverse, Order::kShuffle);
  Pair p(config(5, 48, 3, 2));
  constexpr size_t kN = 64;
  std::vector<std::vector<uint8_t>> outA, outB, inA, inB;
  for (size_t i = 0; i < kN; ++i) {
    const size_t n = i % 8 == 0 ? 0 : i * 37 % 301;
    outA.push_back(pattern(n, static_cast<int>(i)));
    outB.push_back(pattern(n, static_cast<int>(i + 100)));
    inA.emplace_back(n, 0xEE);
    inB.emplace_back(n, 0xEE);
  }
  std::vector<Xfer> sa(kN), sb(kN), ra(kN), rb(kN);
  for (size_t i = 0; i < kN; ++i) {
    sa[i] = sendOf(outA[i]);
    sb[i] = sendOf(outB[i]);
    ra[i] = recvInto(inA[i]);
    rb[i] = recvInto(inB[i]);
    REQUIRE(p.a.postSend(&sa[i]).ok());
    REQUIRE(p.b.postRecv(&rb[i]).ok());
    REQUIRE(p.b.postSend(&sb[i]).ok());
    REQUIRE(p.a.postRecv(&ra[i]).ok());
  }
  // After every round, the completed transfers of each queue are a prefix of it.
  auto prefix = [](const std::vector<Xfer>& v) {
    size_t i = 0;
    while (i < v.size() && v[i].complete) ++i;
    for (size_t j = i; j < v.size(); ++j)
      if (v[j].complete) return false;
    return true;
  };
  bool idle = false;
  for (int i = 0; i < 100000 && !idle; ++i) {
    REQUIRE(p.round(order, 2).ok());
    REQUIRE(prefix(sa));
    REQUIRE(prefix(sb));
    REQUIRE(prefix(ra));
    REQUIRE(prefix(rb));
    idle = !p.a.busy() && !p.b.busy() && p.ab.pending.empty() && p.ba.pending.empty();
  }
  REQUIRE(idle);
  for (size_t i = 0; i < kN; ++i) {
    INFO("message " << i);
    CHECK(inB[i] == outA[i]);
    CHECK(inA[i] == outB[i]);
  }
  // Never more writes in flight than the send queue holds.
  CHECK(p.a.writesInFlight() == 0);
}

TEST_CASE("chunk link: receive-reduce across chunk boundaries with odd element counts", "[unit][net]") {
  // 10-byte slots: 4-byte elements straddle every other boundary. 2-byte slots: a 3-byte element
  // spans two or three chunks.
  const size_t slot = GENERATE(size_t{10}, size_t{2}, size_t{64});
  const Order order = GENERATE(Order::kFifo, Order::kShuffle);
  INFO("slot " << slot);
  Pair p(config(4, slot, 4));
  for (size_t es : {size_t{4}, size_t{3}}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{37}, size_t{101}}) {
      INFO("element " << es << " count " << count);
      auto incoming = pattern(count * es, 3);
      auto local = pattern(count * es, 4);
      std::vector<uint8_t> out(count * es, 0xEE);
      std::vector<uint8_t> want(count * es);
      if (es == 4) {
        sumU32(want.data(), local.data(), incoming.data(), count, nullptr);
      } else {
        sumBytes3(want.data(), local.data(), incoming.data(), count, nullptr);
      }
      ReduceSpec spec;
      spec.fn = es == 4 ? sumU32 : sumBytes3;
      spec.elemSize = es;
      Xfer s = sendOf(incoming), r = recvInto(out);
      r.local = local.data();
      r.reduce = &spec;
      REQUIRE(p.a.postSend(&s).ok());
      REQUIRE(p.b.postRecv(&r).ok());
      REQUIRE(p.run(order, 1).ok());
      CHECK(r.complete);
      CHECK(out == want);
      // In place (local == data) too.
      std::vector<uint8_t> inplace = local;
      Xfer s2 = sendOf(incoming), r2 = recvInto(inplace);
      r2.local = inplace.data();
      r2.reduce = &spec;
      REQUIRE(p.a.postSend(&s2).ok());
      REQUIRE(p.b.postRecv(&r2).ok());
      REQUIRE(p.run(order).ok());
      CHECK(inplace == want);
    }
  }
}

TEST_CASE("chunk link: a reduce receive of a partial element or a bad spec is refused at post", "[unit][net]") {
  Pair p(config(4, 16));
  std::vector<uint8_t> buf(10), local(10);
  ReduceSpec spec;
  spec.fn = sumU32;
  spec.elemSize = 4;
  Xfer r = recvInto(buf);
  r.local = local.data();
  r.reduce = &spec;
  CHECK(p.b.postRecv(&r).code() == braidInvalidArgument);  // 10 bytes: 2.5 elements
  spec.fn = nullptr;
  buf.resize(8);
  r = recvInto(buf);
  r.local = local.data();
  r.reduce = &spec;
  CHECK(p.b.postRecv(&r).code() == braidInvalidArgument);
  CHECK_FALSE(p.b.busy());
}

TEST_CASE("chunk link: a length mismatch is braidRemoteError naming the peer and the length it sent", "[unit][net]") {
  const auto sizes =
      GENERATE(std::pair<size_t, size_t>{100, 64}, std::pair<size_t, size_t>{64, 100},
               std::pair<size_t, size_t>{501, 500}, std::pair<size_t, size_t>{0, 8}, std::pair<size_t, size_t>{8, 0});
  INFO("sent " << sizes.first << " posted " << sizes.second);
  Pair p(config(4, 32));
  auto out = pattern(sizes.first, 5);
  std::vector<uint8_t> in(sizes.second, 0xEE);
  Xfer s = sendOf(out), r = recvInto(in);
  REQUIRE(p.a.postSend(&s).ok());
  REQUIRE(p.b.postRecv(&r).ok());
  Status st = p.run(Order::kFifo);
  REQUIRE(st.code() == braidRemoteError);
  CHECK_THAT(st.message(), Catch::Contains("peer rank 0"));
  CHECK_THAT(st.message(), Catch::Contains(std::to_string(sizes.first) + " bytes"));
  CHECK_FALSE(r.complete);
  // Whole chunks that fit were placed; the overflowing rest was counted, not written (a write past
  // the vector would show under AddressSanitizer).
  if (sizes.first == 100 && sizes.second == 64) CHECK(std::equal(in.begin(), in.end(), out.begin()));
  // The link stays broken.
  CHECK(p.b.progress().code() == braidRemoteError);
  CHECK(p.b.postRecv(&r).code() == braidRemoteError);
}

TEST_CASE(
    "chunk link: a message of another call is refused before its bytes land; one call's messages announce it once",
    "[unit][net]") {
  // Calls 7, 7, 7, 9 sent; the receiver posts 7, 7, 7, then 8 (of the same length: whole chunks of
  // another call, the case lengths cannot show). Calls 0 (unchecked, point-to-point) pass either way.
  const Order order = GENERATE(Order::kFifo, Order::kShuffle);
  Pair p(config(4, 32));
  std::vector<std::vector<uint8_t>> out, in;
  for (int i = 0; i < 5; ++i) {
    out.push_back(pattern(96, i));
    in.emplace_back(96, 0xEE);
  }
  const uint32_t sent[5] = {7, 7, 0, 7, 9}, posted[5] = {7, 0, 7, 7, 8};
  std::vector<Xfer> s(5), r(5);
  // Posts the five messages from A to B, the receives naming `calls`.
  const auto postAll = [&](Pair& pair, const uint32_t* calls) {
    for (int i = 0; i < 5; ++i) {
      s[i] = sendOf(out[i]);
      s[i].callShape = sent[i];
      r[i] = recvInto(in[i]);
      r[i].callShape = calls[i];
      REQUIRE(pair.a.postSend(&s[i]).ok());
      REQUIRE(pair.b.postRecv(&r[i]).ok());
    }
  };
  postAll(p, posted);
  Status st = p.run(order);
  REQUIRE(st.code() == braidInvalidUsage);
  CHECK_THAT(st.message(), Catch::Contains("a message from peer rank 0 (host a) belongs to another call"));
  for (int i = 0; i < 4; ++i) {
    CHECK(r[i].complete);
    CHECK(in[i] == out[i]);
  }
  CHECK_FALSE(r[4].complete);
  CHECK(std::all_of(in[4].begin(), in[4].end(), [](uint8_t b) { return b == 0xEE; }));
  CHECK(p.b.progress().code() == braidInvalidUsage);  // the link stays broken

  // The same calls on both sides: one call chunk for the run of 7s, one for the 9.
  Pair q(config(4, 32));
  postAll(q, sent);
  REQUIRE(q.run(order).ok());
  for (int i = 0; i < 5; ++i) CHECK(in[i] == out[i]);
  CHECK(q.ab.writes == 5 * 3 + 2);  // three chunks a message, and two calls announced
}

TEST_CASE("chunk link: calls are numbered; a loop of one shape announces once, a message of an earlier call is refused",
          "[unit][net]") {
  // Four messages of 96 bytes (three chunks each), call shape 7, numbered as given on each side.
  struct Case {
    const char* what;
    uint64_t sent[4], posted[4];
    int refusedAt;  // the first receive refused (-1: none)
    int calls;      // call chunks written when none is refused
  };
  const Case cases[] = {
      {"a loop of one shape", {1, 2, 3, 4}, {1, 2, 3, 4}, -1, 1},
      {"two messages a call", {1, 1, 2, 2}, {1, 1, 2, 2}, -1, 1},
      {"calls that send nothing on this link between", {1, 3, 4, 7}, {1, 3, 4, 7}, -1, 3},
      // The receiver took nothing of call 1 (a mismatched call), and call 2's receive meets call 1's
      // message right after its announcement ...
      {"a leftover announced", {1, 2, 3, 4}, {2, 3, 4, 5}, 0, 0},
      // ... or later, unannounced, two numbers behind.
      {"a leftover unannounced", {1, 2, 3, 4}, {1, 3, 4, 5}, 1, 0},
  };
  const Order order = GENERATE(Order::kFifo, Order::kShuffle);
  for (const Case& c : cases) {
    INFO(c.what);
    Pair p(config(4, 32));
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<Xfer> s(4), r(4);
    for (int i = 0; i < 4; ++i) {
      out.push_back(pattern(96, i));
      in.emplace_back(96, 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
      s[i] = sendOf(out[i]);
      s[i].callShape = 7;
      s[i].callNo = c.sent[i];
      r[i] = recvInto(in[i]);
      r[i].callShape = 7;
      r[i].callNo = c.posted[i];
      REQUIRE(p.a.postSend(&s[i]).ok());
      REQUIRE(p.b.postRecv(&r[i]).ok());
    }
    Status st = p.run(order);
    if (c.refusedAt < 0) {
      REQUIRE(st.ok());
      for (int i = 0; i < 4; ++i) CHECK(in[i] == out[i]);
      CHECK(p.ab.writes == 4 * 3 + c.calls);
      continue;
    }
    REQUIRE(st.code() == braidInvalidUsage);
    CHECK_THAT(st.message(), Catch::Contains("belongs to another call"));
    for (int i = 0; i < c.refusedAt; ++i) CHECK(r[i].complete);
    CHECK_FALSE(r[c.refusedAt].complete);
    CHECK(std::all_of(in[c.refusedAt].begin(), in[c.refusedAt].end(), [](uint8_t b) { return b == 0xEE; }));
  }
}

TEST_CASE("chunk link: corrupt immediates break the link instead of writing out of bounds", "[unit][net]") {
  struct Case {
    const char* what;
    uint32_t (*corrupt)(uint32_t);
    const char* says;
  };
  const Case cases[] = {
      {"a chunk larger than a slot", [](uint32_t imm) { return Imm::data(Imm::slot(imm), 33, Imm::last(imm)); },
       "33 bytes into a slot of 32"},
      {"a slot beyond the ring", [](uint32_t imm) { return Imm::data(9, Imm::bytes(imm), Imm::last(imm)); },
       "slot 9 of 4"},
      {"credits nobody owed", [](uint32_t) { return Imm::credit(3); }, "3 credits"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Pair p(config(4, 32));
    auto out = pattern(20, 6);
    std::vector<uint8_t> in(20, 0xEE);
    Xfer s = sendOf(out), r = recvInto(in);
    REQUIRE(p.a.postSend(&s).ok());
    REQUIRE(p.b.postRecv(&r).ok());
    REQUIRE(p.a.progress().ok());
    REQUIRE(p.ab.pending.size() == 1);
    p.ab.corruptNext = c.corrupt;
    Status st = p.ab.deliver(0);
    REQUIRE(st.code() == braidRemoteError);
    CHECK_THAT(st.message(), Catch::Contains("peer rank 0"));
    CHECK_THAT(st.message(), Catch::Contains(c.says));
    CHECK(p.b.progress().code() == braidRemoteError);
  }
}

TEST_CASE("chunk link: the same slot written twice before it was freed is a protocol error", "[unit][net]") {
  Pair p(config(4, 32));
  REQUIRE(p.b.onArrival(Imm::data(2, 5, true)).ok());
  Status st = p.b.onArrival(Imm::data(2, 5, true));
  CHECK(st.code() == braidRemoteError);
  CHECK_THAT(st.message(), Catch::Contains("slot 2 again"));
}

TEST_CASE("chunk link: a send from a registered buffer completes only when its writes are done", "[unit][net]") {
  Pair p(config(4, 32));
  auto out = pattern(100, 7);  // 4 chunks: the whole ring
  std::vector<uint8_t> in(100, 0);
  Region reg;
  reg.base = out.data();
  reg.bytes = out.size();
  Xfer s = sendOf(out), r = recvInto(in);
  s.region = &reg;
  REQUIRE(p.a.postSend(&s).ok());
  REQUIRE(p.b.postRecv(&r).ok());
  REQUIRE(p.a.progress().ok());
  CHECK(p.ab.directWrites == 4);
  CHECK_FALSE(s.complete);  // the wire has not read the buffer yet
  REQUIRE(p.ab.deliver(0).ok());
  REQUIRE(p.a.progress().ok());
  CHECK_FALSE(s.complete);
  REQUIRE(p.run(Order::kReverse).ok());
  CHECK(s.complete);
  CHECK(in == out);
}

TEST_CASE("chunk link: a staged send completes once copied, and later writes never clobber a slot in flight",
          "[unit][net]") {
  // The wire reads the staging slot only at delivery; a staging slot reused too early would show as
  // wrong bytes at the receiver.
  Pair p(config(2, 8, 8, 1));
  auto m1 = pattern(16, 8), m2 = pattern(16, 9), m3 = pattern(5, 10);
  std::vector<uint8_t> i1(16), i2(16), i3(5);
  Xfer s1 = sendOf(m1), s2 = sendOf(m2), s3 = sendOf(m3);
  Xfer r1 = recvInto(i1), r2 = recvInto(i2), r3 = recvInto(i3);
  for (Xfer* x : {&s1, &s2, &s3}) REQUIRE(p.a.postSend(x).ok());
  REQUIRE(p.a.progress().ok());
  CHECK(s1.complete);  // both of its chunks are in staging
  CHECK_FALSE(s2.complete);
  CHECK(p.ab.pending.size() == 2);
  for (Xfer* x : {&r1, &r2, &r3}) REQUIRE(p.b.postRecv(x).ok());
  REQUIRE(p.run(Order::kShuffle, 1).ok());
  CHECK(i1 == m1);
  CHECK(i2 == m2);
  CHECK(i3 == m3);
}

TEST_CASE("chunk link: with sendsAwaitWrites a staged send completes only when its writes are done", "[unit][net]") {
  // The ucx wire announces a write only after a flush that needs this side's progress: a send that
  // completed at its post would let the executor stop progressing with the announcement unsent.
  ChunkLinkConfig cfg = config(4, 8, 8, 1);
  cfg.sendsAwaitWrites = true;
  Pair p(cfg);
  auto out = pattern(20, 11);  // 3 chunks, all staged
  std::vector<uint8_t> in(20, 0);
  Xfer s = sendOf(out), r = recvInto(in);
  REQUIRE(p.a.postSend(&s).ok());
  REQUIRE(p.b.postRecv(&r).ok());
  REQUIRE(p.a.progress().ok());
  CHECK(p.ab.pending.size() == 3);
  CHECK(p.ab.directWrites == 0);  // staged, not the caller's buffer
  CHECK_FALSE(s.complete);
  CHECK(p.a.busy());
  REQUIRE(p.ab.deliver(0).ok());
  REQUIRE(p.ab.deliver(0).ok());
  REQUIRE(p.a.progress().ok());
  CHECK_FALSE(s.complete);  // one write still not done
  REQUIRE(p.run(Order::kFifo).ok());
  CHECK(s.complete);
  CHECK(r.complete);
  CHECK(in == out);
}

TEST_CASE("chunk link: after the peer went, what arrived still completes receives, posting nothing", "[unit][net]") {
  Pair p(config(4, 8, 8, 1));
  auto out = pattern(20, 12);  // 3 chunks
  std::vector<uint8_t> in(20, 0), in2(5, 0);
  Xfer s = sendOf(out), r = recvInto(in), r2 = recvInto(in2);
  REQUIRE(p.a.postSend(&s).ok());
  REQUIRE(p.a.progress().ok());
  while (!p.ab.pending.empty()) REQUIRE(p.ab.deliver(0).ok());
  // The peer is gone now; the receive is posted only after its chunks arrived.
  REQUIRE(p.b.postRecv(&r).ok());
  bool left = true;
  REQUIRE(p.b.deliverArrived(&left).ok());
  CHECK(r.complete);
  CHECK(in == out);
  CHECK_FALSE(left);
  CHECK(p.ba.pending.empty());  // no credit went out to the departed peer
  // A receive nothing arrived for is left waiting: the departure fails it.
  REQUIRE(p.b.postRecv(&r2).ok());
  REQUIRE(p.b.deliverArrived(&left).ok());
  CHECK_FALSE(r2.complete);
  CHECK(left);
}

TEST_CASE("chunk link: configurations outside what the immediate carries are refused", "[unit][net]") {
  CHECK(ChunkLink::check(config(4, 64)).ok());
  CHECK_FALSE(ChunkLink::check(config(1, 64)).ok());
  CHECK_FALSE(ChunkLink::check(config(Imm::kMaxSlots + 1, 64)).ok());
  CHECK_FALSE(ChunkLink::check(config(4, 0)).ok());
  CHECK_FALSE(ChunkLink::check(config(4, size_t{Imm::kMaxChunkBytes} + 1)).ok());
  CHECK_FALSE(ChunkLink::check(config(4, 64, 0)).ok());
  CHECK_FALSE(ChunkLink::check(config(4, 64, 8, 5)).ok());
  // The immediate's fields round-trip at their limits.
  const uint32_t imm = Imm::data(Imm::kMaxSlots - 1, Imm::kMaxChunkBytes, true);
  CHECK(Imm::slot(imm) == Imm::kMaxSlots - 1);
  CHECK(Imm::bytes(imm) == Imm::kMaxChunkBytes);
  CHECK(Imm::last(imm));
  CHECK_FALSE(Imm::isCredit(imm));
  CHECK(Imm::isCredit(Imm::credit(Imm::kMaxSlots)));
  CHECK(Imm::count(Imm::credit(Imm::kMaxSlots)) == Imm::kMaxSlots);
}
