// braid's own streams (rendezvous, all-gather, control plane, tcp setup) run without Nagle on both
// ends: with it, every small reply of the bootstrap waited for a delayed ACK (~44 ms per
// all-gather step, 0.6 s per init of 2-4 local ranks).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "src/base/clock.h"
#include "src/base/log.h"
#include "src/base/socket.h"
#include "src/doorway.h"

using namespace braid;

namespace {

bool noDelay(int fd) {
  int on = 0;
  socklen_t len = sizeof(on);
  REQUIRE(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0);
  return on != 0;
}

Status anyPrefix(const uint8_t*, size_t) { return okStatus(); }

const uint8_t kHello[8] = {1, 2, 3, 4, 5, 6, 7, 8};

// A nonblocking listener on loopback and a client connected to it that sent kHello.
void helloPair(Fd* listener, Fd* client) {
  SockAddr loopback, bound;
  REQUIRE(parseHostPort("127.0.0.1:0", &loopback).ok());
  REQUIRE(listenOn(loopback, 4, listener, &bound).ok());
  REQUIRE(setNonBlocking(listener->get(), true).ok());
  REQUIRE(connectTo(bound, Deadline::afterSeconds(10), client).ok());
  REQUIRE(sendAll(client->get(), kHello, sizeof(kHello), Deadline::afterSeconds(10)).ok());
}

// Serves the doorway's waiting connections until `done` or the deadline.
void serveUntil(Doorway& door, const Doorway::Arrived& arrived, const bool& done, const Deadline& deadline) {
  while (!done && !deadline.expired()) {
    std::vector<pollfd> pfds;
    door.addPollFds(&pfds);
    if (pfds.empty()) break;
    poll(pfds.data(), pfds.size(), 100);
    REQUIRE(door.serve(pfds.data(), arrived).ok());
  }
}

}  // namespace

TEST_CASE("connectTo and the doorway's accept both turn Nagle off", "[unit][socket]") {
  Fd listener, client;
  helloPair(&listener, &client);
  CHECK(noDelay(client.get()));

  // The accepted end, as the rendezvous and the tcp setup get it: through a Doorway.
  Doorway door("test message", sizeof(kHello), anyPrefix, kLogNet, "test");
  bool got = false, gotNoDelay = false;
  const Doorway::Arrived arrived = [&](Doorway::Conn& c) {
    got = true;
    gotNoDelay = noDelay(c.fd.get());
    c.fd.reset();
    return okStatus();
  };
  const Deadline deadline = Deadline::afterSeconds(10);
  pollfd lp{listener.get(), POLLIN, 0};
  REQUIRE(poll(&lp, 1, 10000) == 1);
  REQUIRE(door.acceptSome(listener.get(), nowNs(), deadline.atNs, arrived).ok());
  serveUntil(door, arrived, got, deadline);
  CHECK(got);
  CHECK(gotNoDelay);
  door.close();
}

TEST_CASE("a doorway out of descriptors says so, for its owner's timeout error; it accepts once they are back",
          "[unit][socket]") {
  // A rank out of descriptors cannot accept its peers' connections; its setup then timed out
  // blaming a peer it never heard from ("timed out waiting for peer ranks 1"), the cause only in a
  // warning. The owners (tcp setup, rendezvous) now append acceptTrouble() to that error.
  Fd listener, client;
  helloPair(&listener, &client);

  Doorway door("test message", sizeof(kHello), anyPrefix, kLogNet, "test");
  bool got = false;
  const Doorway::Arrived arrived = [&](Doorway::Conn& c) {
    got = true;
    c.fd.reset();
    return okStatus();
  };
  CHECK(door.acceptTrouble().empty());
  pollfd lp{listener.get(), POLLIN, 0};
  REQUIRE(poll(&lp, 1, 10000) == 1);

  // The lowest free descriptor is the next one accept() would take: a limit there leaves none.
  const int next = dup(0);
  REQUIRE(next >= 0);
  close(next);
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(next);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &tight) == 0);
  const Status s = door.acceptSome(listener.get(), nowNs(), Deadline::afterSeconds(10).atNs, arrived);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(s.ok());
  CHECK_FALSE(got);
  CHECK(door.acceptTrouble() == "; accepting connections failed 1 times here: Too many open files");
  CHECK_FALSE(door.listening(nowNs()));  // paused for kAcceptBackoffMs

  const Deadline deadline = Deadline::afterSeconds(10);
  while (!door.listening(nowNs()) && !deadline.expired()) poll(nullptr, 0, 1);
  REQUIRE(door.acceptSome(listener.get(), nowNs(), deadline.atNs, arrived).ok());
  serveUntil(door, arrived, got, deadline);
  CHECK(got);
  door.close();
}
