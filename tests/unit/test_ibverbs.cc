// The ibverbs transport's decisions that need no device: the BRAID_IB_HCA syntax, the GID choice
// over a GID table, MTU arithmetic, which records may connect; and, on this machine, what the
// transport says about the device it finds (none here: "no RDMA device").
#include "braid_build_config.h"

#if BRAID_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "transports/ibverbs/ib_device.h"
#include "transports/transport.h"

using namespace braid;
using namespace braid::ib;

namespace {

ibv_gid_entry entry(uint32_t index, uint32_t type, std::initializer_list<uint8_t> tail) {
  ibv_gid_entry e{};
  e.gid_index = index;
  e.gid_type = type;
  e.port_num = 1;
  size_t i = 16 - tail.size();
  for (uint8_t b : tail) e.gid.raw[i++] = b;
  return e;
}

// A link-local IPv6 GID fe80::1.
ibv_gid_entry linkLocal(uint32_t index, uint32_t type) {
  ibv_gid_entry e = entry(index, type, {1});
  e.gid.raw[0] = 0xfe;
  e.gid.raw[1] = 0x80;
  return e;
}

IbRecord usableRecord(uint8_t linkLayer, uint8_t prefixByte) {
  IbRecord r;
  r.magic = IbRecord::kMagic;
  r.usable = 1;
  r.linkLayer = linkLayer;
  r.gid[0] = prefixByte;
  r.gid[15] = 7;
  return r;
}

}  // namespace

TEST_CASE("BRAID_IB_HCA: a device name with an optional port", "[unit][ibverbs]") {
  std::string name;
  int port = -1;
  CHECK(parseHca("mlx5_0", &name, &port));
  CHECK(name == "mlx5_0");
  CHECK(port == 0);
  CHECK(parseHca("mlx5_1:2", &name, &port));
  CHECK(name == "mlx5_1");
  CHECK(port == 2);
  CHECK_FALSE(parseHca("", &name, &port));
  CHECK_FALSE(parseHca(":1", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:0", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:x", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:1000", &name, &port));
}

TEST_CASE("GID choice: RoCE v2 IPv4-mapped first, then any v2, then any non-zero", "[unit][ibverbs]") {
  // A typical RoCE table: v1 and v2 of a link-local address, then v1 and v2 of ::ffff:10.0.0.5.
  const ibv_gid_entry roce[] = {linkLocal(0, IBV_GID_TYPE_ROCE_V1), linkLocal(1, IBV_GID_TYPE_ROCE_V2),
                                entry(2, IBV_GID_TYPE_ROCE_V1, {0xff, 0xff, 10, 0, 0, 5}),
                                entry(3, IBV_GID_TYPE_ROCE_V2, {0xff, 0xff, 10, 0, 0, 5})};
  CHECK(chooseGid(roce, 4) == 3);
  // Without an IPv4 address: the v2 link-local one.
  CHECK(chooseGid(roce, 2) == 1);
  // Only v1: the first non-zero.
  CHECK(chooseGid(roce, 1) == 0);
  // Zero GIDs (unused entries) are never chosen.
  const ibv_gid_entry zeros[] = {entry(0, IBV_GID_TYPE_ROCE_V2, {}), entry(5, IBV_GID_TYPE_ROCE_V1, {9})};
  CHECK(chooseGid(zeros, 1) == -1);
  CHECK(chooseGid(zeros, 2) == 5);
  CHECK(chooseGid(nullptr, 0) == -1);
}

TEST_CASE("MTU: bytes to the verbs enum and back, rounding down", "[unit][ibverbs]") {
  CHECK(mtuFromBytes(4096) == IBV_MTU_4096);
  CHECK(mtuFromBytes(2048) == IBV_MTU_2048);
  CHECK(mtuFromBytes(3000) == IBV_MTU_2048);
  CHECK(mtuFromBytes(256) == IBV_MTU_256);
  CHECK(mtuBytes(IBV_MTU_1024) == 1024);
  CHECK(mtuBytes(IBV_MTU_4096) == 4096);
}

TEST_CASE("records: both usable, one link layer, one InfiniBand subnet", "[unit][ibverbs]") {
  std::string why;
  CHECK(recordsConnect(usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe), usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe),
                       &why));
  CHECK_FALSE(recordsConnect(usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe),
                             usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfd), &why));
  CHECK_THAT(why, Catch::Contains("subnets"));
  // RoCE routes over IP: GIDs of different prefixes still connect.
  CHECK(recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), usableRecord(IBV_LINK_LAYER_ETHERNET, 2), &why));
  CHECK_FALSE(
      recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), usableRecord(IBV_LINK_LAYER_INFINIBAND, 1), &why));
  CHECK_THAT(why, Catch::Contains("InfiniBand"));
  IbRecord none;
  fillRecord(nullptr, errorf(braidSystemError, "no RDMA device (ibv_get_device_list: Function not implemented)"),
             &none);
  CHECK(none.usable == 0);
  CHECK_FALSE(recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), none, &why));
  CHECK(why == "no RDMA device (ibv_get_device_list: Function not implemented)");
  IbRecord junk;
  CHECK_FALSE(recordsConnect(junk, junk, &why));
  CHECK_THAT(why, Catch::Contains("malformed"));
}

TEST_CASE("the ibverbs transport's record says what this machine has", "[unit][ibverbs]") {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const bool haveDevice = list != nullptr && n > 0;
  const std::string answer = list == nullptr ? strerror(errno) : std::to_string(n) + " devices";
  if (list != nullptr) ibv_free_device_list(list);

  auto t = makeIbverbsTransport();
  REQUIRE(std::string(t->name()) == "ibverbs");
  PeerInfo a, b;
  a.rank = 0;
  b.rank = 1;
  TransportRecord ra, rb;
  t->localRecord(a, &ra);
  t->localRecord(b, &rb);
  IbRecord r;
  memcpy(&r, ra.bytes, sizeof(r));
  CHECK(r.magic == IbRecord::kMagic);
  const Endpoint ea{&a, &ra}, eb{&b, &rb};
  if (!haveDevice) {
    // No device: the record says so in ibv_get_device_list's words, and nothing connects.
    CHECK(r.usable == 0);
    CHECK_THAT(std::string(r.why), Catch::StartsWith("no RDMA device (ibv_get_device_list: "));
    CHECK_FALSE(t->canConnect(ea, eb));
    CHECK_THAT(t->whyNot(ea, eb), Catch::Contains("no RDMA device"));
    WARN("no RDMA device (ibv_get_device_list: " << answer << "): checked the transport's refusal only");
    return;
  }
  // A device (if its port is active): the record names it and two ranks on it may connect.
  if (r.usable == 0) {
    WARN("an RDMA device but none usable: " << r.why);
    CHECK_FALSE(t->canConnect(ea, eb));
    return;
  }
  CHECK(std::string(r.device).size() > 0);
  CHECK(t->canConnect(ea, eb));
  CHECK_FALSE(t->canConnect(ea, ea));
  CHECK(t->whyNot(ea, eb).empty());
}

#endif  // BRAID_HAVE_IBVERBS
