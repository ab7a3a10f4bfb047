// The wire decoders refuse what they must and accept what real ranks send (the fuzz targets in fuzz/
// check that nothing crashes them; this checks the answers).
#include <netinet/in.h>

#include <catch2/catch.hpp>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "src/bootstrap.h"
#include "src/wire.h"
#include "transports/shm/shm_layout.h"
#include "transports/tcp/tcp_link.h"
#include "transports/tcp/tcp_wire.h"

using namespace braid;

namespace {

template <typename T>
const uint8_t* raw(const T& v) {
  return reinterpret_cast<const uint8_t*>(&v);
}

UniqueIdData testId() {
  UniqueIdData id;
  id.magic = kUniqueIdMagic;
  id.version = kProtocolVersion;
  id.commId = 42;
  for (size_t i = 0; i < kSecretBytes; ++i) id.secret[i] = static_cast<uint8_t>(i * 7 + 1);
  REQUIRE(parseHostPort("127.0.0.1:1234", &id.root).ok());
  return id;
}

}  // namespace

TEST_CASE("unique id: round trip; a truncated address or another version is refused", "[unit][wire]") {
  UniqueIdData id = testId();
  braidUniqueId u;
  encodeUniqueId(id, &u);
  UniqueIdData d;
  REQUIRE(decodeUniqueId(u, &d).ok());
  CHECK(d.root.toString() == "127.0.0.1:1234");
  CHECK(d.commId == 42);
  CHECK(!decodeUniqueId(raw(u), sizeof(u) - 1, &d).ok());
  id.root.len = 8;  // an AF_INET address cut short
  encodeUniqueId(id, &u);
  CHECK(!decodeUniqueId(u, &d).ok());
  id = testId();
  id.version = kProtocolVersion + 1;
  encodeUniqueId(id, &u);
  CHECK(decodeUniqueId(u, &d).message().find("protocol version") != std::string::npos);
}

TEST_CASE("hello: only a whole hello with the secret, the rank count and a rank in [1, n) passes", "[unit][wire]") {
  const UniqueIdData id = testId();
  PeerInfo me;
  memset(me.hostname, 'h', sizeof(me.hostname));  // unterminated: comes back terminated
  Hello h = makeHello(id, 2, 4, me);
  Hello out;
  REQUIRE(decodeHello(raw(h), sizeof(h), id, 4, &out).ok());
  CHECK(out.rank == 2);
  CHECK(out.info.rank == 2);
  CHECK(out.info.hostname[sizeof(out.info.hostname) - 1] == '\0');
  CHECK(decodeHello(raw(h), sizeof(h), id, 3, &out).message().find("for 4 ranks") != std::string::npos);
  CHECK(!decodeHello(raw(h), sizeof(h) - 1, id, 4, &out).ok());
  for (int bad : {0, -1, 4, INT_MAX}) {
    Hello r = makeHello(id, bad, 4, me);
    CHECK(decodeHello(raw(r), sizeof(r), id, 4, &out).message().find("out of range") != std::string::npos);
  }
  Hello w = h;
  w.secret[15] ^= 1;
  w.rank = 9;  // the secret is what gets reported, not the rank
  CHECK(decodeHello(raw(w), sizeof(w), id, 4, &out).message() == "wrong secret");
  // Prefixes: junk is refused at its first word, a valid prefix waits, one byte too many is refused.
  const char junk[] = "GET / HTTP/1.0\r\n";
  CHECK(!checkHelloPrefix(reinterpret_cast<const uint8_t*>(junk), 4).ok());
  CHECK(checkHelloPrefix(raw(h), 3).ok());
  CHECK(checkHelloPrefix(raw(h), sizeof(h)).ok());
  std::vector<uint8_t> big(raw(h), raw(h) + sizeof(h));
  big.push_back(0);
  CHECK(!checkHelloPrefix(big.data(), big.size()).ok());
}

TEST_CASE("rank 0's replies to a joining rank: welcome, table, refusal", "[unit][wire]") {
  RootFrame kind;
  size_t body = 99;
  TableHeader w = makeRootHeader(RootFrame::kWelcome, 3);
  REQUIRE(decodeRootHeader(raw(w), sizeof(w), 3, &kind, &body).ok());
  CHECK((kind == RootFrame::kWelcome && body == 0));
  CHECK(!decodeRootHeader(raw(w), sizeof(w), 4, &kind, &body).ok());  // a welcome to another size
  TableHeader t = makeRootHeader(RootFrame::kTable, 3);
  REQUIRE(decodeRootHeader(raw(t), sizeof(t), 3, &kind, &body).ok());
  CHECK((kind == RootFrame::kTable && body == 3 * sizeof(PeerInfo)));
  TableHeader r = makeRootHeader(RootFrame::kRefusal, 17);
  REQUIRE(decodeRootHeader(raw(r), sizeof(r), 3, &kind, &body).ok());
  CHECK((kind == RootFrame::kRefusal && body == 17));
  r = makeRootHeader(RootFrame::kRefusal, kMaxCtrlText + 1);
  CHECK(!decodeRootHeader(raw(r), sizeof(r), 3, &kind, &body).ok());
  TableHeader junk{kHelloMagic, 3};
  CHECK(!decodeRootHeader(raw(junk), sizeof(junk), 3, &kind, &body).ok());
  CHECK(!decodeRootHeader(raw(w), sizeof(w) - 1, 3, &kind, &body).ok());
}

TEST_CASE("rank table and allGather length", "[unit][wire]") {
  TableHeader th{kTableMagic, 3};
  size_t body = 0;
  REQUIRE(decodeTableHeader(raw(th), sizeof(th), 3, &body).ok());
  CHECK(body == 3 * sizeof(PeerInfo));
  CHECK(!decodeTableHeader(raw(th), sizeof(th), 4, &body).ok());
  std::vector<PeerInfo> in(3), out;
  memset(in[1].hostId, 'x', sizeof(in[1].hostId));
  REQUIRE(decodeTableBody(raw(in[0]), 3 * sizeof(PeerInfo), 3, &out).ok());
  CHECK(out[1].rank == 1);
  CHECK(strlen(out[1].hostId) == sizeof(out[1].hostId) - 1);
  CHECK(!decodeTableBody(raw(in[0]), 2 * sizeof(PeerInfo), 3, &out).ok());
  uint64_t len = 24;
  CHECK(decodeGatherLength(raw(len), sizeof(len), 24).ok());
  CHECK(!decodeGatherLength(raw(len), sizeof(len), 23).ok());
  CHECK(!decodeGatherLength(raw(len), 4, 24).ok());
}

TEST_CASE("control frames: partial waits, malformed fails, frames come one at a time", "[unit][wire]") {
  auto frame = [](uint32_t type, int32_t rank, const std::string& text, uint32_t len) {
    CtrlHeader h{type, rank, len};
    const std::string s = std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + text;
    return std::vector<uint8_t>(s.begin(), s.end());
  };
  const auto abort = static_cast<uint32_t>(CtrlType::kAbort);
  std::vector<uint8_t> two = frame(abort, 2, "boom", 4);
  const std::vector<uint8_t> bye = frame(static_cast<uint32_t>(CtrlType::kBye), -1, "", 0);
  two.insert(two.end(), bye.begin(), bye.end());
  CtrlFrame f;
  size_t used = 0;
  REQUIRE(decodeCtrlFrame(two.data(), two.size(), kCtrlTypes, 4, &f, &used).ok());
  CHECK(used == sizeof(CtrlHeader) + 4);
  CHECK(f.text == "boom");
  CHECK(f.rank == 2);
  REQUIRE(decodeCtrlFrame(two.data() + used, two.size() - used, kCtrlTypes, 4, &f, &used).ok());
  CHECK(used == sizeof(CtrlHeader));
  CHECK(f.rank == -1);
  size_t need = 0;
  CHECK(decodeCtrlFrame(two.data(), sizeof(CtrlHeader) + 2, kCtrlTypes, 4, &f, &used, &need).ok());
  CHECK(used == 0);
  CHECK(need == sizeof(CtrlHeader) + 4);
  CHECK(decodeCtrlFrame(two.data(), sizeof(CtrlHeader) - 1, kCtrlTypes, 4, &f, &used, &need).ok());
  CHECK(need == sizeof(CtrlHeader));
  for (const auto& bad : {frame(9, 0, "", 0), frame(31, 0, "", 0), frame(abort, 4, "", 0), frame(abort, -2, "", 0),
                          frame(abort, 0, "", kMaxCtrlText + 1)})
    CHECK(!decodeCtrlFrame(bad.data(), bad.size(), kCtrlTypes, 4, &f, &used).ok());
}

TEST_CASE("tcp handshake and address record", "[unit][wire]") {
  const UniqueIdData id = testId();
  tcp::Handshake hs{};
  hs.magic = tcp::kMagic;
  hs.version = tcp::kVersion;
  hs.size = sizeof(hs);
  hs.commId = id.commId;
  hs.from = 3;
  hs.to = 1;
  hs.lane = 1;
  hs.lanes = 2;
  memcpy(hs.secret, id.secret, sizeof(hs.secret));
  tcp::HandshakeExpect want;
  want.commId = id.commId;
  want.secret = id.secret;
  want.rank = 1;
  want.nranks = 4;
  want.lanes = 2;
  tcp::Handshake out;
  REQUIRE(tcp::decodeHandshake(raw(hs), sizeof(hs), want, &out).ok());
  for (auto change : {+[](tcp::Handshake& h) { h.from = 1; }, +[](tcp::Handshake& h) { h.from = 4; },
                      +[](tcp::Handshake& h) { h.to = 2; }, +[](tcp::Handshake& h) { h.commId++; },
                      +[](tcp::Handshake& h) { h.size++; }, +[](tcp::Handshake& h) { h.secret[0]++; },
                      +[](tcp::Handshake& h) { h.lane = 2; }, +[](tcp::Handshake& h) { h.lanes = 3; }}) {
    tcp::Handshake bad = hs;
    change(bad);
    CHECK(!tcp::decodeHandshake(raw(bad), sizeof(bad), want, &out).ok());
  }
  CHECK(!tcp::checkHandshakePrefix(reinterpret_cast<const uint8_t*>("notbraid"), 8).ok());

  tcp::AddrRecord rec{};
  rec.state = tcp::kListening;
  rec.len = id.root.len;
  memcpy(rec.addr, &id.root.storage, id.root.len);
  SockAddr a;
  REQUIRE(tcp::decodeAddrRecord(raw(rec), sizeof(rec), &a).ok());
  CHECK(a.toString() == "127.0.0.1:1234");
  tcp::AddrRecord bad = rec;
  bad.len = sizeof(rec.addr) + 1;
  CHECK(!tcp::decodeAddrRecord(raw(bad), sizeof(bad), &a).ok());
  bad = rec;
  bad.state = tcp::kFailed;
  CHECK(tcp::decodeAddrRecord(raw(bad), sizeof(bad), &a).code() == braidRemoteError);
  bad.state = tcp::kNoListener;
  CHECK(tcp::decodeAddrRecord(raw(bad), sizeof(bad), &a).code() == braidInternalError);
}

TEST_CASE("shm segment header: ours passes; a hostile one is refused before anything is mapped", "[unit][wire]") {
  const UniqueIdData id = testId();
  const size_t page = 4096;
  const uint64_t fifo = shm::fifoBytes(1024, 2, page, 0), header = shm::headerBytes(2, page);
  struct Head {
    shm::SegmentHeader h;
    shm::FifoEntry dir[2];
  } seg{};
  seg.h.magic = shm::kSegmentMagic;
  seg.h.version = shm::kSegmentVersion;
  seg.h.creatorRank = 0;
  seg.h.commId = id.commId;
  memcpy(seg.h.secret, id.secret, kSecretBytes);
  seg.h.segmentBytes = header + 2 * fifo;
  seg.h.fifoBytes = fifo;
  seg.h.slotSize = 1024;
  seg.h.nslots = 2;
  seg.h.nfifos = 2;
  seg.dir[0] = {2, 0, header};
  seg.dir[1] = {1, 0, header + fifo};
  shm::SegmentExpect want;
  want.commId = id.commId;
  want.secret = id.secret;
  want.creatorRank = 0;
  want.receiverRank = 1;
  want.nranks = 3;
  want.fileBytes = seg.h.segmentBytes;
  want.page = page;
  shm::FifoPlace place;
  REQUIRE(shm::checkSegmentHeader(raw(seg), sizeof(seg), want, &place).ok());
  CHECK(place.offset == header + fifo);
  CHECK(place.bytes == fifo);
  auto refused = [&](const Head& s, const shm::SegmentExpect& w) {
    shm::FifoPlace p;
    return !shm::checkSegmentHeader(raw(s), sizeof(s), w, &p).ok();
  };
  Head bad = seg;
  bad.h.secret[0] ^= 1;
  CHECK(refused(bad, want));
  bad = seg;
  bad.dir[0].receiverRank = 1;  // two FIFOs for us
  CHECK(refused(bad, want));
  bad = seg;
  bad.dir[1].offset = header + 2 * fifo;  // past the end
  CHECK(refused(bad, want));
  bad = seg;
  bad.dir[1].offset = 0;  // over the header
  CHECK(refused(bad, want));
  bad = seg;
  bad.h.nslots = 0;
  CHECK(refused(bad, want));
  bad = seg;
  bad.h.mailBytes = 4096;  // mailboxes the FIFO's size has no room for
  CHECK(refused(bad, want));
  shm::SegmentExpect smaller = want;
  smaller.fileBytes -= page;  // the file is not as big as the header says
  CHECK(refused(seg, smaller));
  CHECK(!shm::checkSegmentHeader(raw(seg), sizeof(shm::SegmentHeader) + 8, want, &place).ok());
  // With mailboxes: a FIFO sized for them passes and says where they are; a capacity beyond the
  // limit or off the cache line is refused even when the size adds up.
  for (uint32_t mail : {64u, 4096u, static_cast<uint32_t>(kMaxMailBytes), static_cast<uint32_t>(kMaxMailBytes) + 64u,
                        100u}) {
    Head m = seg;
    const uint64_t f = shm::fifoBytes(1024, 2, page, mail);
    m.h.mailBytes = mail;
    m.h.fifoBytes = f;
    m.h.segmentBytes = header + 2 * f;
    m.dir[1].offset = header + f;
    shm::SegmentExpect w = want;
    w.fileBytes = m.h.segmentBytes;
    const bool good = mail <= kMaxMailBytes && mail % 64 == 0;
    CHECK(shm::checkSegmentHeader(raw(m), sizeof(m), w, &place).ok() == good);
    if (good) CHECK(place.mailBytes == mail);
  }
}

TEST_CASE("tcp stripes: parts tile the message, aligned, on at most the sockets there are", "[unit][wire]") {
  for (int lanes : {1, 2, 3, 4, 16}) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{131071}, size_t{131072}, size_t{135168}, size_t{200003},
                         size_t{1} << 20, (size_t{1} << 20) + 7, size_t{64} << 20}) {
      INFO(lanes << " sockets, " << bytes << " bytes");
      const TcpStripe st = stripeOf(bytes, lanes);
      CHECK(st.parts >= 1);
      CHECK(st.parts <= lanes);
      // Below two minimum parts, or with one socket, the message travels whole on socket 0.
      if (lanes == 1 || bytes < 2 * TcpStripe::kMinPart) {
        CHECK(st.parts == 1);
        CHECK(st.stride == bytes);
        continue;
      }
      CHECK(st.stride % TcpStripe::kAlign == 0);
      CHECK(st.stride >= TcpStripe::kMinPart);
      // The nonempty parts cover the message exactly: the last one ends at its end.
      CHECK(static_cast<size_t>(st.parts - 1) * st.stride < bytes);
      CHECK(static_cast<size_t>(st.parts) * st.stride >= bytes);
    }
  }
}
