// The tcp transport's own features: several sockets per pair (BRAID_NSOCKS) whose ends must agree,
// the test-only shaping knobs the multi-host test bed uses in place of netem, and IPv6 from the
// rendezvous to the data sockets. The Link contract and the collective sweeps also run over
// striped links (meson tests mp-links-nsocks and mp-tcp-nsocks).
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "src/base/socket.h"
#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

uint8_t pattern(int from, size_t msg, size_t off) { return static_cast<uint8_t>(from * 37 + msg * 101 + off * 13 + 5); }

// Every rank sends `sizes` in order to every other rank and receives theirs, posted together in one
// group; each received byte must be the sender's.
int exchangeChecked(braidComm_t comm, int rank, int n, const std::vector<size_t>& sizes) {
  std::vector<std::vector<uint8_t>> out, in;
  CHECK_BRAID(rank, braidGroupStart());
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m) {
      std::vector<uint8_t>& o = out.emplace_back(sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i) o[i] = pattern(rank, m, i);
      std::vector<uint8_t>& r = in.emplace_back(sizes[m], static_cast<uint8_t>(0xEE));
      CHECK_BRAID(rank, braidSend(o.data(), sizes[m], braidUint8, p, comm, nullptr));
      CHECK_BRAID(rank, braidRecv(r.data(), sizes[m], braidUint8, p, comm, nullptr));
    }
  }
  CHECK_BRAID(rank, braidGroupEnd());
  size_t k = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t m = 0; m < sizes.size(); ++m, ++k)
      for (size_t i = 0; i < sizes[m]; ++i)
        if (in[k][i] != pattern(p, m, i))
          return fail(rank, "message %zu (%zu bytes) from rank %d: byte %zu is %u, expected %u", m, sizes[m], p, i,
                      in[k][i], pattern(p, m, i));
  }
  return 0;
}

// A float AllReduce of `count` elements (large enough to be cut across the sockets) that must give
// the exact sum of every rank's values.
int allReduceChecked(braidComm_t comm, int rank, int n, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i % 1000) + rank);
  CHECK_BRAID(rank, braidAllReduce(v.data(), v.data(), count, braidFloat32, braidSum, comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    const float want = static_cast<float>(n * (i % 1000) + n * (n - 1) / 2);
    if (v[i] != want) return fail(rank, "element %zu is %g, expected %g", i, double(v[i]), double(want));
  }
  return 0;
}

// The descriptors of this process's TCP sockets (IPv4 ones also go to *v4 when given).
std::vector<int> tcpSockets(std::vector<int>* v4) {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return fds;
  for (dirent* e = readdir(d); e != nullptr; e = readdir(d)) {
    const int fd = atoi(e->d_name);
    int type = 0;
    socklen_t tlen = sizeof(type);
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    if (fd == dirfd(d) || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) continue;
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) continue;
    fds.push_back(fd);
    if (a.ss_family == AF_INET && v4 != nullptr) v4->push_back(fd);
  }
  closedir(d);
  return fds;
}

}  // namespace

TEST_CASE("tcp: messages cut across several sockets arrive byte-exact and in order, with the test shaping on",
          "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int lanes = GENERATE(2, 3, 16);
  const bool shaped = GENERATE(false, true);
  INFO("BRAID_NSOCKS " << lanes << (shaped ? " with BRAID_TCP_TEST_DELAY_US and _RATE" : ""));
  Env env = {{"BRAID_TRANSPORTS", "tcp"},
             {"BRAID_TIMEOUT", "60"},
             {"BRAID_NSOCKS", std::to_string(lanes)},
             {"BRAID_TCP_CHUNK", "4097"}};
  if (shaped) {
    env["BRAID_TCP_TEST_DELAY_US"] = "2000";
    env["BRAID_TCP_TEST_RATE"] = "64M";
  }
  // Around the striping threshold (128K) and the 4K alignment of the parts, parts that leave the
  // last sockets empty, and small messages between striped ones (which travel on socket 0 only).
  const std::vector<size_t> sizes = {0,      131071,  131072, 131073, 5,      200003, 1, 0,
                                     135168, 1048583, 262144, 64,     589825, 0,      3, 4096 * 33};
  auto res = runComm(3, env, [&](braidComm_t comm, int rank, int size) {
    if (exchangeChecked(comm, rank, size, sizes) != 0) return 1;
    return allReduceChecked(comm, rank, size, 300007);
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tcp: a message held back by BRAID_TCP_TEST_DELAY_US is not received until it is sent", "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  // Three seconds: far more than a receive posted right after init takes to be tested.
  const Env env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_TCP_TEST_DELAY_US", "3000000"}};
  auto res = runComm(2, env, [](braidComm_t comm, int rank, int) {
    uint64_t v = rank == 0 ? 0x1234567890abcdefull : 0;
    if (rank == 0) {
      CHECK_BRAID(rank, braidSend(&v, 1, braidUint64, 1, comm, nullptr));
      return 0;
    }
    braidRequest_t req = nullptr;
    CHECK_BRAID(rank, braidIRecv(&v, 1, braidUint64, 0, comm, nullptr, &req));
    int done = 0;
    CHECK_BRAID(rank, braidTest(req, &done));
    if (done != 0) return fail(rank, "the receive completed while its message was still held back");
    CHECK_BRAID(rank, braidWait(req));
    return v == 0x1234567890abcdefull ? 0 : fail(rank, "received %llx", static_cast<unsigned long long>(v));
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tcp: ranks that disagree on BRAID_NSOCKS fail init naming it, no hang", "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  braidUniqueId id;
  REQUIRE(braidGetUniqueId(&id) == braidSuccess);
  auto res = forkRanks(
      2, {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "30"}},
      [&](int rank, int size) {
        setenv("BRAID_NSOCKS", rank == 0 ? "2" : "3", 1);
        braidComm_t comm = nullptr;
        braidResult_t r = braidCommInitRank(&comm, size, id, rank);
        if (r == braidSuccess) return fail(rank, "init succeeded with BRAID_NSOCKS differing between the ranks");
        const std::string msg = braidGetLastError();
        if (msg.find("BRAID_NSOCKS") == std::string::npos ||
            msg.find("rank " + std::to_string(1 - rank)) == std::string::npos)
          return fail(rank, "the error names neither BRAID_NSOCKS nor the peer: %s", msg.c_str());
        return 0;
      },
      120);
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tcp over IPv6: BRAID_ROOT=[::1]:port puts the rendezvous, the listeners and the data sockets on IPv6",
          "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  {
    braid::SockAddr probe;
    braid::Fd fd;
    braid::SockAddr bound;
    if (!braid::parseHostPort("[::1]:0", &probe).ok() || !braid::listenOn(probe, 1, &fd, &bound).ok()) {
      WARN("SKIPPED: this host has no IPv6 loopback (::1)");
      return;
    }
  }
  const int n = 2;
  const std::string root = "[::1]:" + std::to_string(unusedPorts(30, 1, true));
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const Env env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "60"},
                     {"BRAID_NSOCKS", "2"},       {"BRAID_SOCKET_IFNAME", "lo"},
                     {"BRAID_ROOT", root},        {"BRAID_RANK", std::to_string(r)},
                     {"BRAID_WORLD_SIZE", "2"},   {"BRAID_JOB_ID", "ipv6-" + std::to_string(getpid())}};
    pids.push_back(spawnProcess(env, [r, n] {
      // Sockets the process had before init (inherited from the test runner) are not braid's.
      const std::vector<int> before = tcpSockets(nullptr);
      braidComm_t comm = nullptr;
      CHECK_BRAID(r, braidCommInitFromEnv(&comm));
      if (allReduceChecked(comm, r, n, 300007) != 0) return 1;
      // Every TCP socket braid made, listening or connected: all must be IPv6.
      std::vector<int> v4;
      int v6 = 0;
      for (int fd : tcpSockets(&v4)) v6 += std::find(before.begin(), before.end(), fd) == before.end() ? 1 : 0;
      for (int fd : v4)
        if (std::find(before.begin(), before.end(), fd) == before.end()) return fail(r, "socket %d is IPv4", fd);
      // At least the two data sockets to the peer and this rank's own listener.
      if (v6 < 3) return fail(r, "only %d IPv6 sockets", v6);
      CHECK_BRAID(r, braidCommDestroy(comm));
      return 0;
    }));
  }
  std::vector<RankResult> res;
  for (pid_t p : pids) res.push_back(waitProcess(p, 120));
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// The tcp link reads ahead (transports/tcp/tcp_link.h, kAheadBytes): a receive that finds later
// messages queued behind its own takes up to 8 KiB of them off the socket, and the next receives
// are served from there. Rank 1 sleeps while rank 0 sends a burst, so the burst is queued when rank
// 1 receives it one message at a time: headers and payloads then straddle the read-ahead's ends in
// every way the sizes allow, small messages come before striped large ones (BRAID_NSOCKS 3), and
// Reduces whose chunks are folded on arrival are served from the read-ahead too.
TEST_CASE("tcp: messages queued behind a receive are read ahead and delivered byte-exact, reduces included",
          "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int lanes = GENERATE(1, 3);
  INFO("BRAID_NSOCKS " << lanes);
  const Env env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_NSOCKS", std::to_string(lanes)}};
  std::vector<size_t> sizes = {0, 1, 7, 8184, 8185, 8192, 3, 12000, 0, 8177, 131072, 2, 300003, 16, 5000};
  for (size_t i = 0; i < 40; ++i) sizes.push_back(1 + i * 211 % 1500);  // many small ones, 8 KiB a few
  const size_t kReduces = 60;
  const size_t kCount = 333;  // floats a Reduce: 1332 bytes, so several fit in the read-ahead
  auto res = runComm(2, env, [&](braidComm_t comm, int rank, int) {
    if (rank == 0) {
      for (size_t m = 0; m < sizes.size(); ++m) {
        std::vector<uint8_t> o(sizes[m]);
        for (size_t i = 0; i < sizes[m]; ++i) o[i] = pattern(rank, m, i);
        CHECK_BRAID(rank, braidSend(o.data(), sizes[m], braidUint8, 1, comm, nullptr));
      }
    } else {
      usleep(300 * 1000);
      for (size_t m = 0; m < sizes.size(); ++m) {
        std::vector<uint8_t> in(sizes[m], 0xEE);
        CHECK_BRAID(rank, braidRecv(in.data(), sizes[m], braidUint8, 0, comm, nullptr));
        for (size_t i = 0; i < sizes[m]; ++i)
          if (in[i] != pattern(0, m, i))
            return fail(rank, "message %zu (%zu bytes): byte %zu is %u, expected %u", m, sizes[m], i, in[i],
                        pattern(0, m, i));
      }
    }
    CHECK_BRAID(rank, braidBarrier(comm, nullptr));
    if (rank == 1) usleep(300 * 1000);
    for (size_t c = 0; c < kReduces; ++c) {
      std::vector<float> v(kCount), out(kCount, -1.0f);
      for (size_t i = 0; i < kCount; ++i) v[i] = static_cast<float>((c * 7 + i) % 1000 + rank * 1000);
      CHECK_BRAID(rank, braidReduce(v.data(), out.data(), kCount, braidFloat32, braidSum, 1, comm, nullptr));
      if (rank != 1) continue;
      for (size_t i = 0; i < kCount; ++i) {
        const float want = static_cast<float>(2 * ((c * 7 + i) % 1000) + 1000);
        if (out[i] != want)
          return fail(rank, "Reduce %zu: element %zu is %g, expected %g", c, i, double(out[i]), double(want));
      }
    }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tcp: a size mismatch found in read-ahead bytes is an error naming the peer on both ranks, no hang",
          "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  auto res = runComm(2, {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "30"}}, [](braidComm_t comm, int rank, int) {
    uint8_t buf[64] = {};
    if (rank == 0) {
      for (int m = 0; m < 3; ++m) CHECK_BRAID(rank, braidSend(buf, 16, braidUint8, 1, comm, nullptr));
    } else {
      usleep(300 * 1000);  // all three are queued: the first receive reads the other two ahead
      CHECK_BRAID(rank, braidRecv(buf, 16, braidUint8, 0, comm, nullptr));
      CHECK_BRAID(rank, braidRecv(buf, 16, braidUint8, 0, comm, nullptr));
      const braidResult_t r = braidRecv(buf, 32, braidUint8, 0, comm, nullptr);
      const std::string msg = braidGetLastError();
      if (r != braidRemoteError ||
          msg.find("peer rank 0 has 16 bytes, the posted receive expects 32") == std::string::npos)
        return fail(rank, "a 16-byte message into a 32-byte receive gave %s: %s", braidGetErrorString(r), msg.c_str());
    }
    // The failure reaches rank 0 too, naming rank 1.
    const braidResult_t r = braidBarrier(comm, nullptr);
    if (rank == 0 && r == braidSuccess) return fail(rank, "the barrier after the mismatch succeeded");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// Receives posted long before their messages come: rank 0 sleeps before each send, so rank 1's
// receives find empty sockets for 50 ms each (every lane of a striped message with BRAID_NSOCKS 3,
// and the receives of Reduces folded on arrival): each must still get its message, byte-exact; and
// a peer that exits while a receive waits is an error naming it, not a hang. (Written for a
// starved-lane poll() that was measured and not kept: perf/results/2026-12-05-tcp-poll.md.)
TEST_CASE(
    "tcp: receives that wait on empty sockets get every message when it comes, and a peer that exits meanwhile "
    "is an error naming it",
    "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int lanes = GENERATE(1, 3);
  INFO("BRAID_NSOCKS " << lanes);
  const Env env = {{"BRAID_TRANSPORTS", "tcp"}, {"BRAID_TIMEOUT", "60"}, {"BRAID_NSOCKS", std::to_string(lanes)}};
  const std::vector<size_t> sizes = {300003, 5, 0, 131072, 8200};
  auto res = runComm(2, env, [&](braidComm_t comm, int rank, int) {
    for (size_t m = 0; m < sizes.size(); ++m) {
      std::vector<uint8_t> buf(sizes[m], 0xEE);
      if (rank == 0) {
        for (size_t i = 0; i < sizes[m]; ++i) buf[i] = pattern(rank, m, i);
        usleep(50 * 1000);
        CHECK_BRAID(rank, braidSend(buf.data(), sizes[m], braidUint8, 1, comm, nullptr));
        continue;
      }
      CHECK_BRAID(rank, braidRecv(buf.data(), sizes[m], braidUint8, 0, comm, nullptr));
      for (size_t i = 0; i < sizes[m]; ++i)
        if (buf[i] != pattern(0, m, i))
          return fail(rank, "message %zu (%zu bytes): byte %zu is %u, expected %u", m, sizes[m], i, buf[i],
                      pattern(0, m, i));
    }
    for (size_t count : {size_t{3}, size_t{200001}}) {
      std::vector<float> v(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 977 + rank * 1000);
      if (rank == 0) usleep(50 * 1000);
      CHECK_BRAID(rank, braidReduce(v.data(), out.data(), count, braidFloat32, braidSum, 1, comm, nullptr));
      if (rank != 1) continue;
      for (size_t i = 0; i < count; ++i)
        if (out[i] != static_cast<float>(2 * (i % 977) + 1000))
          return fail(rank, "Reduce of %zu: element %zu is %g", count, i, double(out[i]));
    }
    if (rank == 0) {
      usleep(100 * 1000);
      _exit(0);  // gone without a goodbye while rank 1 waits
    }
    uint8_t b = 0;
    const braidResult_t r = braidRecv(&b, 1, braidUint8, 0, comm, nullptr);
    const std::string msg = braidGetLastError();
    if (r == braidSuccess || msg.find("rank 0") == std::string::npos)
      return fail(rank, "a receive from a rank that exited gave %s: %s", braidGetErrorString(r), msg.c_str());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

// BRAID_TCP_ZEROCOPY: a part sent with MSG_ZEROCOPY (or behind one) is held until the kernel says it
// no longer reads its pages. One socket call finishes up to 16 queued messages (31 when they are
// empty: headers only); with 7 parts already held, that overflowed the lane's 8 places for held
// parts (and 24 places, the first fix, with empty messages): the lane forgot parts it held
// (a 3-rank Broadcast of 256 KiB pieces hung at its 93rd call) and wrote over its receive state
// (recvmsg into a bad address, heap corruption). Here: batches of messages of 64K and more with
// small ones between them, and runs of empty messages behind a zero-copy one, all in one group per
// round so they queue together, every byte checked; then Broadcasts and AllReduces, as the hang and
// the corruption were first seen.
TEST_CASE("tcp: zero-copy sends of many queued messages each arrive byte-exact; none is held forever", "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int lanes = GENERATE(1, 2);
  INFO("BRAID_NSOCKS " << lanes << ", BRAID_TCP_ZEROCOPY=1, BRAID_TCP_CHUNK=4M");
  const Env env = {{"BRAID_TRANSPORTS", "tcp"},
                   {"BRAID_TIMEOUT", "30"},
                   {"BRAID_NSOCKS", std::to_string(lanes)},
                   {"BRAID_TCP_ZEROCOPY", "1"},
                   {"BRAID_TCP_CHUNK", "4M"}};
  std::vector<size_t> sizes;
  for (int m = 0; m < 24; ++m) sizes.push_back(m % 3 == 2 ? 100 + m : 65536 + 4096 * m);
  // Twice a zero-copy send, then 31 empty messages: one call may take a header each, as many as its
  // 31 iovec entries hold.
  for (int m = 0; m < 64; ++m) sizes.push_back(m % 32 == 0 ? 65536 : 0);
  auto res = runComm(3, env, [&](braidComm_t comm, int rank, int size) {
    for (int round = 0; round < 8; ++round)
      if (exchangeChecked(comm, rank, size, sizes) != 0) return fail(rank, "in round %d", round);
    std::vector<float> b(65536);
    for (int call = 0; call < 150; ++call) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = rank == 0 ? static_cast<float>(i % 4093 + call) : -1.0f;
      CHECK_BRAID(rank, braidBroadcast(b.data(), b.data(), b.size(), braidFloat32, 0, comm, nullptr));
      for (size_t i = 0; i < b.size(); ++i)
        if (b[i] != static_cast<float>(i % 4093 + call))
          return fail(rank, "Broadcast %d: element %zu is %g", call, i, double(b[i]));
    }
    for (int call = 0; call < 20; ++call)
      if (allReduceChecked(comm, rank, size, 300007) != 0) return fail(rank, "in AllReduce %d", call);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

namespace {

// How many of this process's TCP sockets report SO_SNDBUF `bytes` (Linux reports twice the size set).
int socketsWithSndbuf(int bytes) {
  int n = 0;
  for (int fd : tcpSockets(nullptr)) {
    int got = 0;
    socklen_t len = sizeof(got);
    if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &len) == 0 && got == bytes) ++n;
  }
  return n;
}

}  // namespace

// BRAID_TCP_CROWD_SNDBUF (TcpCrowd in tcp_link.h), with one and two sockets per pair: rank 0 sends
// 16 MiB to `targets` peers of its host at once, which wait 300 ms before they receive, so the sends
// stay queued; rank 0 counts its sockets whose SO_SNDBUF is the crowded size while it tests the
// requests. Sending to two peers must shrink every socket of both links, to one peer none (a rank
// that streams to one peer keeps its buffers); once the sends are done, a few small AllGathers
// (every link busy again) must give every socket its BRAID_TCP_SOCKBUF back. Every byte received
// is checked.
TEST_CASE(
    "tcp: a rank sending large messages to two peers of its host at once shrinks their send buffers, and "
    "restores them after; to one peer it keeps them",
    "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int targets = GENERATE(1, 2);
  const int lanes = GENERATE(1, 2);
  INFO(targets << " receiver(s) of 16 MiB; BRAID_NSOCKS " << lanes
               << ", BRAID_TCP_SOCKBUF=1M, BRAID_TCP_CROWD_SNDBUF=128K");
  const Env env = {{"BRAID_TRANSPORTS", "tcp"},
                   {"BRAID_TIMEOUT", "60"},
                   {"BRAID_NSOCKS", std::to_string(lanes)},
                   {"BRAID_TCP_SOCKBUF", "1M"},
                   {"BRAID_TCP_CROWD_SNDBUF", "128K"}};
  const size_t bytes = 16u << 20;
  const int crowded = 2 * 128 * 1024, normal = 2 * 1024 * 1024;
  auto res = runComm(3, env, [&](braidComm_t comm, int rank, int) {
    std::vector<uint8_t> buf(bytes);
    if (rank == 0) {
      for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(0, 0, i);
      if (socketsWithSndbuf(normal) < 2 * lanes)
        return fail(rank, "fewer than %d sockets with SO_SNDBUF %d at the start", 2 * lanes, normal);
      braidRequest_t req[2] = {nullptr, nullptr};
      for (int t = 0; t < targets; ++t)
        CHECK_BRAID(rank, braidISend(buf.data(), bytes, braidUint8, 1 + t, comm, nullptr, &req[t]));
      int most = 0;
      for (int left = targets; left > 0;) {
        most = std::max(most, socketsWithSndbuf(crowded));
        for (int t = 0; t < targets; ++t) {
          if (req[t] == nullptr) continue;
          int done = 0;
          CHECK_BRAID(rank, braidTest(req[t], &done));
          if (done != 0) {
            req[t] = nullptr;
            --left;
          }
        }
      }
      if (targets == 2 && most != 2 * lanes)
        return fail(rank, "%d sockets had the crowded SO_SNDBUF %d at most while sending to 2 peers (%d each)", most,
                    crowded, lanes);
      if (targets == 1 && most != 0)
        return fail(rank, "%d sockets had the crowded SO_SNDBUF %d while sending to 1 peer", most, crowded);
    } else if (rank <= targets) {
      usleep(300 * 1000);
      CHECK_BRAID(rank, braidRecv(buf.data(), bytes, braidUint8, 0, comm, nullptr));
      for (size_t i = 0; i < bytes; ++i)
        if (buf[i] != pattern(0, 0, i)) return fail(rank, "byte %zu is %u, expected %u", i, buf[i], pattern(0, 0, i));
    }
    int word = rank, all[3] = {};
    for (int call = 0; call < 4; ++call) CHECK_BRAID(rank, braidAllGather(&word, all, 1, braidInt32, comm, nullptr));
    if (rank == 0 && socketsWithSndbuf(crowded) != 0)
      return fail(rank, "%d sockets kept the crowded SO_SNDBUF %d after the sends", socketsWithSndbuf(crowded),
                  crowded);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("tcp: reduces whose outputs are streamed (BRAID_NT_STORES_MIN) fold right, over one and several sockets",
          "[mp][tcpnet]") {
  if (!underTest("tcp")) return;
  const int n = GENERATE(2, 3);
  const int lanes = GENERATE(1, 3);
  INFO("nranks " << n << ", BRAID_NSOCKS " << lanes);
  // Every call here has more than 4 KiB of buffers on the host: its receives that fold into the
  // output take the fold that streams it (ReduceSpec::streamFn).
  const Env env = {{"BRAID_TRANSPORTS", "tcp"},
                   {"BRAID_TIMEOUT", "60"},
                   {"BRAID_NSOCKS", std::to_string(lanes)},
                   {"BRAID_NT_STORES_MIN", "4K"}};
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const size_t count = 300007;  // past a chunk of the sockets' reads, ending mid-line
    std::vector<char> send(count * 8 * static_cast<size_t>(size) + 64), recv(send.size());
    for (braidDataType_t dt : {braidInt32, braidFloat32, braidFloat64})
      for (braidRedOp_t op : {braidSum, braidMax, braidAvg}) {
        if (op == braidAvg && dt == braidInt32) continue;
        for (bool inPlace : {false, true})
          if (braidtest::allReduceChecked(comm, rank, size, send.data(), recv.data(), count, dt, op, inPlace) != 0 ||
              rootedOrScatteredChecked(comm, rank, size, false, send.data(), recv.data(), count, dt, op, inPlace) !=
                  0 ||
              rootedOrScatteredChecked(comm, rank, size, true, send.data(), recv.data(), count / 4, dt, op, inPlace) !=
                  0)
            return 1;
      }
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
