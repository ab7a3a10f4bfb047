// braid's own streams (rendezvous, all-gather, control plane, tcp setup) run without Nagle on both
// ends: with it, every small reply of the bootstrap waited for a delayed ACK (~44 ms per
// all-gather step, 0.6 s per init of 2-4 local ranks).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

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

}  // namespace

TEST_CASE("connectTo and the doorway's accept both turn Nagle off", "[unit][socket]") {
  SockAddr loopback, bound;
  REQUIRE(parseHostPort("127.0.0.1:0", &loopback).ok());
  Fd listener;
  REQUIRE(listenOn(loopback, 4, &listener, &bound).ok());
  REQUIRE(setNonBlocking(listener.get(), true).ok());

  Fd client;
  REQUIRE(connectTo(bound, Deadline::afterSeconds(10), &client).ok());
  CHECK(noDelay(client.get()));
  const uint8_t hello[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  REQUIRE(sendAll(client.get(), hello, sizeof(hello), Deadline::afterSeconds(10)).ok());

  // The accepted end, as the rendezvous and the tcp setup get it: through a Doorway.
  Doorway door("test message", sizeof(hello), anyPrefix, kLogNet, "test");
  int arrivedNoDelay = -1;
  const Doorway::Arrived arrived = [&](Doorway::Conn& c) {
    arrivedNoDelay = noDelay(c.fd.get()) ? 1 : 0;
    c.fd.reset();
    return okStatus();
  };
  const Deadline deadline = Deadline::afterSeconds(10);
  pollfd lp{listener.get(), POLLIN, 0};
  REQUIRE(poll(&lp, 1, 10000) == 1);
  REQUIRE(door.acceptSome(listener.get(), nowNs(), deadline.atNs, arrived).ok());
  while (arrivedNoDelay < 0 && !deadline.expired()) {
    std::vector<pollfd> pfds;
    door.addPollFds(&pfds);
    if (pfds.empty()) break;
    poll(pfds.data(), pfds.size(), 100);
    REQUIRE(door.serve(pfds.data(), arrived).ok());
  }
  CHECK(arrivedNoDelay == 1);
  door.close();
}
