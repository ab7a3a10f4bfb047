// The link self-test's fault knob (src/link_check.h) without a network: its parser, and that the
// decorator it wraps around a transport passes everything but the broken links through.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "src/link_check.h"
#include "transports/transport.h"

using namespace braid;

TEST_CASE("BRAID_TEST_LINK_FAULT parses entries and refuses malformed ones naming the variable", "[unit]") {
  std::vector<LinkFault> f;
  REQUIRE(parseLinkFaults("", &f).ok());
  CHECK(f.empty());
  REQUIRE(parseLinkFaults("shm:0-1:corrupt,tcp:3-2:drop,,shm:1-7:error", &f).ok());
  REQUIRE(f.size() == 3);
  CHECK(f[0].transport == "shm");
  CHECK(f[0].a == 0);
  CHECK(f[0].b == 1);
  CHECK(f[0].mode == LinkFaultMode::kCorrupt);
  CHECK(f[1].transport == "tcp");
  CHECK(f[1].a == 3);
  CHECK(f[1].b == 2);
  CHECK(f[1].mode == LinkFaultMode::kDrop);
  CHECK(f[2].mode == LinkFaultMode::kError);
  for (const char* bad : {"shm", "shm:0-1", "shm:0:corrupt", "shm:1-1:drop", "shm:-1-2:drop", "shm:a-b:drop",
                          "shm:0-1:melt", "warp:0-1:drop", "shm:0-1:corrupt,tcp"}) {
    INFO(bad);
    std::vector<LinkFault> g(1);
    Status s = parseLinkFaults(bad, &g);
    CHECK(s.code() == braidInvalidArgument);
    CHECK(s.message().find("BRAID_TEST_LINK_FAULT") != std::string::npos);
    CHECK(g.size() == 1);  // untouched on failure
  }
}

TEST_CASE("a transport wrapped for faults keeps its name, capabilities and registrations", "[unit]") {
  std::vector<LinkFault> faults;
  REQUIRE(parseLinkFaults("shm:0-1:corrupt", &faults).ok());
  std::vector<std::unique_ptr<Transport>> ts;
  ts.push_back(makeShmTransport());
  ts.push_back(makeTcpTransport());
  const Transport* tcp = ts[1].get();
  wrapFaultyTransports(faults, &ts);
  CHECK(ts[1].get() == tcp);  // not named: left alone
  Transport& shm = *ts[0];
  CHECK(std::string(shm.name()) == "shm");
  CHECK(shm.caps().memTypes == makeShmTransport()->caps().memTypes);
  CHECK(shm.waitFd() == -1);
  static char buf[4096];
  const Region* a = nullptr;
  const Region* b = nullptr;
  REQUIRE(shm.registerMemory(buf, sizeof(buf), MemType::kHost, &a).ok());
  CHECK(a->base == buf);
  CHECK(a->bytes == sizeof(buf));
  REQUIRE(shm.registerMemory(buf, sizeof(buf), MemType::kHost, &b).ok());
  CHECK(b == a);
  CHECK(shm.registerMemory(buf, sizeof(buf), MemType::kCuda, &b).code() == braidInvalidArgument);
  CHECK(shm.deregisterMemory(a).ok());
  CHECK(shm.deregisterMemory(a).code() == braidInvalidArgument);
}
