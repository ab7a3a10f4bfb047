// Writes the seed corpora under fuzz/corpus/<target>/: valid messages for the fixed communicator of
// fuzz_common.h, and a few invalid ones next to each check. Usage: make_corpus SOURCE_ROOT
// (rewrites SOURCE_ROOT/fuzz/corpus/*/seed-*; inputs the fuzzer found and merged are kept).
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "src/bootstrap.h"
#include "src/wire.h"
#include "transports/shm/shm_layout.h"
#include "transports/tcp/tcp_wire.h"

using namespace braid;
using Bytes = std::vector<uint8_t>;

namespace {

std::string gRoot;

template <typename T>
Bytes bytesOf(const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  return Bytes(p, p + sizeof(v));
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Bytes cut(Bytes a, size_t n) {
  a.resize(n);
  return a;
}

void put(const std::string& target, const std::string& name, const Bytes& b) {
  const std::string dir = gRoot + "/fuzz/corpus/" + target;
  mkdir((gRoot + "/fuzz/corpus").c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/seed-" + name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}

UniqueIdData rootedId() {  // fuzz::fuzzId() with a root address (unique id seeds)
  UniqueIdData id = fuzz::fuzzId();
  (void)parseHostPort("127.0.0.1:29500", &id.root);
  return id;
}

PeerInfo info(int rank) {
  PeerInfo p;
  p.rank = rank;
  p.pid = 1000 + rank;
  snprintf(p.hostname, sizeof(p.hostname), "node%d", rank);
  snprintf(p.hostId, sizeof(p.hostId), "node%d:8a1f0c2e-boot", rank);
  return p;
}

void uniqueIds() {
  braidUniqueId raw;
  UniqueIdData id = rootedId();
  encodeUniqueId(id, &raw);
  put("unique_id", "v4", bytesOf(raw));
  (void)parseHostPort("[::1]:29500", &id.root);
  encodeUniqueId(id, &raw);
  put("unique_id", "v6", bytesOf(raw));
  Bytes bad = bytesOf(raw);
  bad[0] ^= 1;
  put("unique_id", "bad-magic", bad);
  Bytes shortAddr = bytesOf(raw);
  shortAddr[32] = 3;  // WireId::addrLen
  put("unique_id", "short-address", shortAddr);
}

void hellos() {
  const UniqueIdData id = rootedId();
  Hello h = makeHello(id, 1, fuzz::kNranks, info(1));
  put("hello", "rank1", bytesOf(h));
  put("hello", "rank3", bytesOf(makeHello(id, 3, fuzz::kNranks, info(3))));
  put("hello", "rank0", bytesOf(makeHello(id, 0, fuzz::kNranks, info(0))));
  put("hello", "rank4", bytesOf(makeHello(id, 4, fuzz::kNranks, info(4))));
  put("hello", "nranks5", bytesOf(makeHello(id, 1, 5, info(1))));
  Hello w = h;
  w.secret[15] ^= 0x80;
  put("hello", "wrong-secret", bytesOf(w));
  Hello v = h;
  v.version = kProtocolVersion + 1;
  put("hello", "version", bytesOf(v));
  Hello full = h;
  memset(full.info.hostname, 'a', sizeof(full.info.hostname));
  memset(full.info.hostId, 'b', sizeof(full.info.hostId));
  put("hello", "unterminated-strings", bytesOf(full));
  put("hello", "truncated", cut(bytesOf(h), sizeof(Hello) / 2));
  put("hello", "oversized", cat(bytesOf(h), Bytes{0x00}));
  const char http[] = "GET / HTTP/1.0\r\n\r\n";
  put("hello", "http", Bytes(http, http + sizeof(http) - 1));
}

void tables() {
  std::vector<PeerInfo> t;
  for (int r = 0; r < fuzz::kNranks; ++r) t.push_back(info(r));
  Bytes body(reinterpret_cast<const uint8_t*>(t.data()), reinterpret_cast<const uint8_t*>(t.data() + t.size()));
  const Bytes pick{static_cast<uint8_t>(fuzz::kNranks - 1)};  // 1 + byte % 16 ranks
  put("table", "valid", cat(cat(pick, bytesOf(TableHeader{kTableMagic, fuzz::kNranks})), body));
  put("table", "other-count", cat(cat(pick, bytesOf(TableHeader{kTableMagic, fuzz::kNranks + 1})), body));
  put("table", "bad-magic", cat(cat(pick, bytesOf(TableHeader{kHelloMagic, fuzz::kNranks})), body));
  put("table", "truncated", cat(cat(pick, bytesOf(TableHeader{kTableMagic, fuzz::kNranks})), cut(body, 100)));
  put("table", "welcome", cat(pick, bytesOf(makeRootHeader(RootFrame::kWelcome, fuzz::kNranks))));
  const char why[] = "rank 1 claimed twice";
  put("table", "refusal",
      cat(cat(pick, bytesOf(makeRootHeader(RootFrame::kRefusal, sizeof(why) - 1))), Bytes(why, why + sizeof(why) - 1)));
  put("table", "refusal-oversized", cat(pick, bytesOf(makeRootHeader(RootFrame::kRefusal, kMaxCtrlText + 1))));
}

void gatherLengths() {
  const uint64_t want = 36 * fuzz::kNranks;
  put("gather_length", "equal", cat(bytesOf(want), bytesOf(want)));
  put("gather_length", "huge", cat(bytesOf(want), bytesOf(~uint64_t{0})));
  put("gather_length", "short", cat(bytesOf(want), Bytes{1, 2, 3}));
}

Bytes ctrl(uint32_t type, int32_t rank, const std::string& text, uint32_t len) {
  return cat(bytesOf(CtrlHeader{type, rank, len}), Bytes(text.begin(), text.end()));
}

void ctrls() {
  const std::string why = "rank 2 (host node2, pid 1002) died: its control connection closed without a goodbye";
  const auto abort = static_cast<uint32_t>(CtrlType::kAbort);
  const auto bye = static_cast<uint32_t>(CtrlType::kBye);
  put("ctrl", "abort", ctrl(abort, 2, why, why.size()));
  put("ctrl", "bye", ctrl(bye, 3, "", 0));
  put("ctrl", "abort-then-bye", cat(ctrl(abort, -1, why, why.size()), ctrl(bye, 1, "", 0)));
  put("ctrl", "partial", cut(ctrl(abort, 2, why, why.size()), 20));
  put("ctrl", "bad-type", ctrl(7, 2, "x", 1));
  put("ctrl", "too-long", ctrl(abort, 2, "x", kMaxCtrlText + 1));
  put("ctrl", "bad-rank", ctrl(abort, fuzz::kNranks, "x", 1));
}

Bytes run(uint64_t seq, uint32_t count) { return cat(bytesOf(seq), bytesOf(count)); }

void progresses() {
  const Bytes four{static_cast<uint8_t>(fuzz::kNranks - 1)};  // 1 + byte % 64 ranks
  put("progress", "valid", cat(four, cat(run(17, 2), cat(run(16, 1), run(17, 1)))));
  put("progress", "short", cat(four, run(17, 2)));
  put("progress", "huge-count", cat(four, run(5, 0xffffffffu)));
  put("progress", "ragged", cat(four, cut(cat(run(3, 1), run(4, 3)), 20)));
}

void tcpHandshakes() {
  const tcp::Handshake hs = tcp::makeHandshake(fuzz::kCommId, fuzz::kSecret, 2, fuzz::kSelf);
  put("tcp_handshake", "valid", bytesOf(hs));
  tcp::Handshake w = hs;
  w.secret[0] ^= 1;
  put("tcp_handshake", "wrong-secret", bytesOf(w));
  tcp::Handshake to = hs;
  to.to = 3;
  put("tcp_handshake", "wrong-to", bytesOf(to));
  tcp::Handshake from = hs;
  from.from = 0;
  put("tcp_handshake", "lower-from", bytesOf(from));
  tcp::Handshake size = hs;
  size.size = 0xffffffff;
  put("tcp_handshake", "size", bytesOf(size));
  put("tcp_handshake", "truncated", cut(bytesOf(hs), 20));
  put("tcp_handshake", "oversized", cat(bytesOf(hs), Bytes(16, 0x41)));
  put("tcp_handshake", "junk", Bytes(48, 0x41));
}

void tcpAddrs() {
  SockAddr a;
  (void)parseHostPort("10.1.2.3:40123", &a);
  tcp::AddrRecord r{};
  (void)tcp::encodeAddrRecord(a, &r);
  put("tcp_addr", "v4", bytesOf(r));
  (void)parseHostPort("[fe80::1]:40123", &a);
  tcp::AddrRecord r6{};
  (void)tcp::encodeAddrRecord(a, &r6);
  put("tcp_addr", "v6", bytesOf(r6));
  tcp::AddrRecord failed{};
  failed.state = tcp::kFailed;
  put("tcp_addr", "failed", bytesOf(failed));
  put("tcp_addr", "none", bytesOf(tcp::AddrRecord{}));
  tcp::AddrRecord len = r;
  len.len = 200;
  put("tcp_addr", "bad-len", bytesOf(len));
}

void shmHeaders() {
  using namespace shm;
  const uint32_t slotSize = 4096, nslots = 4, nfifos = 2;
  const uint64_t fifo = fifoBytes(slotSize, nslots, fuzz::kPage, 0);
  const uint64_t header = headerBytes(nfifos, fuzz::kPage);
  const uint64_t file = header + nfifos * fifo;
  SegmentHeader h{};
  h.magic = kSegmentMagic;
  h.version = kSegmentVersion;
  h.creatorRank = fuzz::kShmCreator;
  h.commId = fuzz::kCommId;
  memcpy(h.secret, fuzz::kSecret, sizeof(h.secret));
  h.segmentBytes = file;
  h.fifoBytes = fifo;
  h.slotSize = slotSize;
  h.nslots = nslots;
  h.nfifos = nfifos;
  auto seg = [&](const SegmentHeader& hh, FifoEntry a, FifoEntry b, uint64_t size) {
    return cat(cat(cat(bytesOf(size), bytesOf(hh)), bytesOf(a)), bytesOf(b));
  };
  const FifoEntry mine{fuzz::kSelf, 0, header}, other{3, 0, header + fifo};
  put("shm_header", "valid", seg(h, other, mine, file));
  SegmentHeader w = h;
  w.secret[3] ^= 4;
  put("shm_header", "wrong-secret", seg(w, other, mine, file));
  put("shm_header", "size-differs", seg(h, other, mine, file - fuzz::kPage));
  put("shm_header", "misaligned", seg(h, other, FifoEntry{fuzz::kSelf, 0, header + 64}, file));
  put("shm_header", "outside", seg(h, other, FifoEntry{fuzz::kSelf, 0, file}, file));
  put("shm_header", "twice", seg(h, mine, mine, file));
  SegmentHeader many = h;
  many.nfifos = 1000;
  put("shm_header", "too-many-fifos", seg(many, other, mine, file));
  put("shm_header", "header-only", cat(bytesOf(file), bytesOf(h)));
}

void topoFiles() {
  for (const char* name : {"cpu-node.topo", "pcie-4gpu.topo", "dgx-h100.topo"}) {
    std::ifstream in(gRoot + "/topology/examples/" + name, std::ios::binary);
    Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (b.empty()) fprintf(stderr, "make_corpus: %s missing\n", name);
    put("topo_file", name, b);
  }
  const std::string tiny = "braid-topology 1\nmachine hostname=h cores=1 pus=1\nnode id=0 kind=machine\n";
  put("topo_file", "tiny", Bytes(tiny.begin(), tiny.end()));
  const std::string version = "braid-topology 2\n";
  put("topo_file", "version", Bytes(version.begin(), version.end()));
  const std::string dangling = "braid-topology 1\nmachine hostname=h cores=1 pus=1\nnode id=0 kind=core parent=7\n";
  put("topo_file", "dangling", Bytes(dangling.begin(), dangling.end()));
  const std::string cluster = tiny + "cluster ranks=3 hosts=0,0,1 cores=2,2 fifo_from=0,-\n";
  put("topo_file", "cluster", Bytes(cluster.begin(), cluster.end()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOURCE_ROOT\n", argv[0]);
    return 2;
  }
  gRoot = argv[1];
  uniqueIds();
  hellos();
  tables();
  gatherLengths();
  ctrls();
  progresses();
  tcpHandshakes();
  tcpAddrs();
  shmHeaders();
  topoFiles();
  return 0;
}
