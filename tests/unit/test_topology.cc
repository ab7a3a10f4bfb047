// Machine detection, the topology file (round trips, strict rejection of malformed input) and the
// renderings (matrix cells, JSON syntax) on this machine and on the example machines in
// topology/examples/.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "braid_build_config.h"
#include "tests/scratch_dir.h"
#include "topology/topology.h"

#ifndef BRAID_SOURCE_DIR
#error "tests/meson.build defines BRAID_SOURCE_DIR for the example topology files"
#endif

namespace braid::topo {
namespace {

const char* const kExamples[] = {"dgx-h100", "pcie-4gpu", "cpu-node"};

std::string examplePath(const std::string& name) {
  return std::string(BRAID_SOURCE_DIR) + "/topology/examples/" + name + ".topo";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TopoFile loadExample(const std::string& name) {
  TopoFile f;
  Status s = loadTopoFile(examplePath(name), &f);
  INFO(s.message());
  REQUIRE(s.ok());
  return f;
}

// A JSON syntax check (RFC 8259 grammar), iterative. True when `s` is exactly one JSON value.
bool validJson(std::string_view s) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  };
  auto isDigit = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  auto string = [&] {
    if (i >= s.size() || s[i] != '"') return false;
    for (++i; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (i >= s.size()) return false;
      const char e = s[i++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++i) {
          if (i >= s.size() || !isxdigit(static_cast<unsigned char>(s[i]))) return false;
        }
      } else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
        return false;
      }
    }
    return false;
  };
  auto number = [&] {
    if (i < s.size() && s[i] == '-') ++i;
    if (!isDigit(i)) return false;
    if (s[i] == '0') {
      ++i;
    } else {
      while (isDigit(i)) ++i;
    }
    if (i < s.size() && s[i] == '.') {
      if (!isDigit(++i)) return false;
      while (isDigit(i)) ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (!isDigit(i)) return false;
      while (isDigit(i)) ++i;
    }
    return true;
  };
  auto literal = [&](std::string_view w) {
    if (s.substr(i, w.size()) != w) return false;
    i += w.size();
    return true;
  };
  std::vector<char> open;  // '{' or '['
  bool needValue = true;
  for (;;) {
    ws();
    if (needValue) {
      if (i >= s.size()) return false;
      const char c = s[i];
      if (c == '{' || c == '[') {
        open.push_back(c);
        ++i;
        ws();
        if (i < s.size() && s[i] == (c == '{' ? '}' : ']')) {
          open.pop_back();
          ++i;
          needValue = false;
          continue;
        }
        if (c == '{') {
          if (!string()) return false;
          ws();
          if (i >= s.size() || s[i++] != ':') return false;
        }
        continue;
      }
      bool ok = c == '"'   ? string()
                : c == 't' ? literal("true")
                : c == 'f' ? literal("false")
                : c == 'n' ? literal("null")
                           : number();
      if (!ok) return false;
      needValue = false;
      continue;
    }
    if (open.empty()) return i == s.size();
    if (i >= s.size()) return false;
    if (s[i] == ',') {
      ++i;
      if (open.back() == '{') {
        ws();
        if (!string()) return false;
        ws();
        if (i >= s.size() || s[i++] != ':') return false;
      }
      needValue = true;
    } else if (s[i] == (open.back() == '{' ? '}' : ']')) {
      open.pop_back();
      ++i;
    } else {
      return false;
    }
  }
}

// The cells of row `row` (e.g. "GPU0") of renderMatrix's output, without the row label.
std::vector<std::string> matrixRow(const std::string& matrix, const std::string& row) {
  std::istringstream in(matrix);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(row + " ", 0) != 0) continue;  // rows start at column 0; the header is indented
    std::istringstream words(line);
    std::string w;
    words >> w;
    std::vector<std::string> cells;
    while (words >> w) cells.push_back(w);
    return cells;
  }
  return {};
}

TEST_CASE("detectMachine sees this machine", "[unit][topo]") {
  Machine m;
  REQUIRE(detectMachine(&m).ok());
  REQUIRE(!m.nodes.empty());
  CHECK(m.nodes[0].kind == NodeKind::kMachine);
  CHECK(m.nodes[0].parent == -1);
  for (size_t i = 1; i < m.nodes.size(); ++i) {
    CHECK(m.nodes[i].id == static_cast<int>(i));
    CHECK(m.nodes[i].parent >= 0);
    CHECK(m.nodes[i].parent < static_cast<int>(i));
  }
#if BRAID_HAVE_HWLOC
  CHECK(m.count(NodeKind::kPackage) >= 1);
  CHECK(m.count(NodeKind::kCore) >= 1);
  CHECK(m.count(NodeKind::kNuma) >= 1);
  CHECK(m.cores >= 1);
  CHECK(m.pus >= m.cores);
  if (m.count(NodeKind::kGpu) == 0) {  // said, not silently left out
    CHECK(std::find(m.missing.begin(), m.missing.end(), "no GPUs found") != m.missing.end());
  }
#else
  CHECK(!m.missing.empty());
#endif
  CHECK(renderTree(m).rfind("Machine", 0) == 0);
}

TEST_CASE("the detected machine round trips exactly", "[unit][topo]") {
  TopoFile f;
  REQUIRE(detectMachine(&f.machine).ok());
  f.comments = {" a comment", ""};
  f.hasCost = true;
  f.cost = CostParams::defaults();
  f.cost.intraAlphaUs = 0.1;  // not a short decimal in binary: needs all 17 digits to survive
  f.cost.oversubShmUs = 3.5;
  f.hasCluster = true;
  f.cluster = ClusterShape::blocks(5, 2, 2);
  f.cluster.hostTwoCopiesFrom = {ClusterShape::kNever, 33554432};
  const std::string text = formatTopoFile(f);
  CHECK(text.find("cluster ranks=5 hosts=0,0,0,1,1 cores=2,2 fifo_from=-,33554432\n") != std::string::npos);
  TopoFile g;
  Status s = parseTopoFile(text, "detected", &g);
  INFO(s.message());
  REQUIRE(s.ok());
  CHECK(formatTopoFile(g) == text);
  CHECK(g.machine.nodes.size() == f.machine.nodes.size());
  CHECK(g.machine.missing == f.machine.missing);
  CHECK(g.comments == f.comments);
  CHECK(g.cost.intraAlphaUs == 0.1);
  CHECK(text.find(" oversub_shm_us=3.5 ") != std::string::npos);
  CHECK(g.cost.oversubShmUs == 3.5);
  CHECK(g.cluster.nranks == 5);
  CHECK(g.cluster.nhosts == 2);
  CHECK(g.cluster.hostOf == f.cluster.hostOf);
  CHECK(g.cluster.hostSize == f.cluster.hostSize);
  CHECK(g.cluster.hostCores == f.cluster.hostCores);
  CHECK(g.cluster.hostTwoCopiesFrom == f.cluster.hostTwoCopiesFrom);
  // A shape that says nothing of copies writes no fifo_from=, as before the key existed.
  f.cluster.hostTwoCopiesFrom.assign(2, ClusterShape::kNever);
  CHECK(formatTopoFile(f).find("fifo_from=") == std::string::npos);
}

TEST_CASE("strings with spaces, quotes and odd bytes round trip", "[unit][topo]") {
  TopoFile f;
  f.machine.hostname = "";
  Node root;
  root.kind = NodeKind::kMachine;
  f.machine.nodes.push_back(root);
  Node nic;
  nic.id = 1;
  nic.kind = NodeKind::kNic;
  nic.parent = 0;
  nic.name = std::string("a b\"c\\d\te\nf#g=h\x01\xff", 17);
  nic.gbps = 12.345678901234567;
  f.machine.nodes.push_back(nic);
  f.machine.missing = {"quoted \"missing\" line", ""};
  const std::string text = formatTopoFile(f);
  TopoFile g;
  Status s = parseTopoFile(text, "strings", &g);
  INFO(s.message() << "\n" << text);
  REQUIRE(s.ok());
  CHECK(g.machine.hostname.empty());
  CHECK(g.machine.nodes[1].name == nic.name);
  CHECK(g.machine.nodes[1].gbps == nic.gbps);
  CHECK(g.machine.missing == f.machine.missing);
  CHECK(formatTopoFile(g) == text);
  CHECK(validJson(renderJson(g)));
}

TEST_CASE("example topology files are canonical and consistent", "[unit][topo]") {
  for (const char* name : kExamples) {
    INFO(name);
    const std::string text = readFile(examplePath(name));
    const TopoFile f = loadExample(name);
    CHECK(formatTopoFile(f) == text);  // byte for byte: the examples are what a dump writes
    CHECK(f.hasCost);
    CHECK(validJson(renderJson(f)));
    const std::string dot = renderDot(f.machine);
    CHECK(dot.rfind("digraph", 0) == 0);
    CHECK(std::count(dot.begin(), dot.end(), '{') == std::count(dot.begin(), dot.end(), '}'));
  }
  const TopoFile dgx = loadExample("dgx-h100");
  CHECK(dgx.machine.count(NodeKind::kPackage) == 2);
  CHECK(dgx.machine.count(NodeKind::kNuma) == 2);
  CHECK(dgx.machine.count(NodeKind::kGpu) == 8);
  CHECK(dgx.machine.count(NodeKind::kNic) == 8);
  CHECK(dgx.machine.links.size() == 28);  // every GPU pair
  CHECK(dgx.machine.nicGbpsTotal() == 3200);
  CHECK(dgx.cost.intraGbps == 150);
  CHECK(dgx.cost.interGbps == 45);
  REQUIRE(dgx.hasCluster);
  CHECK(dgx.cluster.nhosts == 2);
  const TopoFile pcie = loadExample("pcie-4gpu");
  CHECK(pcie.machine.count(NodeKind::kGpu) == 4);
  CHECK(pcie.machine.count(NodeKind::kNic) == 1);
  CHECK(pcie.machine.links.empty());
  const TopoFile cpu = loadExample("cpu-node");
  CHECK(cpu.machine.count(NodeKind::kCore) == 64);
  CHECK(cpu.machine.count(NodeKind::kGpu) == 0);
  CHECK(cpu.machine.nicGbpsTotal() == 200);
}

TEST_CASE("the matrix names NVLinks, switches, host bridges and sockets", "[unit][topo]") {
  const std::string dgx = renderMatrix(loadExample("dgx-h100").machine);
  INFO(dgx);
  // Columns: GPU0..GPU7, NIC0..NIC7, then CPU affinity and NUMA.
  const auto gpu0 = matrixRow(dgx, "GPU0");
  REQUIRE(gpu0.size() >= 16);
  CHECK(gpu0[0] == "X");
  for (int g = 1; g < 8; ++g) CHECK(gpu0[g] == "NV18");
  CHECK(gpu0[8] == "PIX");   // NIC0 shares GPU0's PCIe switch
  CHECK(gpu0[9] == "NODE");  // NIC1: same socket, other host bridge
  CHECK(gpu0[12] == "SYS");  // NIC4: other socket
  const auto nic5 = matrixRow(dgx, "NIC5");
  REQUIRE(nic5.size() >= 16);
  CHECK(nic5[5] == "PIX");

  const std::string pcie = renderMatrix(loadExample("pcie-4gpu").machine);
  INFO(pcie);
  const auto p0 = matrixRow(pcie, "GPU0");
  REQUIRE(p0.size() >= 5);
  CHECK(p0[1] == "PIX");
  CHECK(p0[2] == "NODE");
  CHECK(p0[4] == "NODE");

  const std::string cpu = renderMatrix(loadExample("cpu-node").machine);
  CHECK(matrixRow(cpu, "NIC0").at(0) == "X");
  CHECK(cpu.find("no GPUs") != std::string::npos);
}

TEST_CASE("the tree collapses runs of identical cores", "[unit][topo]") {
  const std::string tree = renderTree(loadExample("dgx-h100").machine);
  CHECK(tree.find("+ 55 more alike: 55 cores, PUs 1-55,113-167") != std::string::npos);
  CHECK(tree.find("GPU7 0000:df:00.0") != std::string::npos);
}

const char kValid[] =
    "braid-topology 1\n"
    "machine hostname=h cores=1 pus=1\n"
    "node id=0 kind=machine\n"
    "node id=1 kind=package parent=0 index=0\n";

TEST_CASE("malformed topology files are rejected with the line", "[unit][topo]") {
  {
    TopoFile f;
    REQUIRE(parseTopoFile(kValid, "t.topo", &f).ok());
  }
  struct Bad {
    const char* what;
    std::string text;
    int line;
    const char* says;
  };
  const std::string head = "braid-topology 1\nmachine hostname=h cores=1 pus=1\nnode id=0 kind=machine\n";
  std::string huge = std::string(kValid) + "# ";
  huge.append(kMaxTopoFileBytes, 'x');
  const Bad bad[] = {
      {"bad version", "braid-topology 2\n", 1, "unsupported version"},
      {"not a topology file", "hello\n", 1, "not a braid topology file"},
      {"empty", "", 1, "empty"},
      {"unknown key", head + "node id=1 kind=package parent=0 colour=red\n", 4, "unknown key 'colour'"},
      {"unknown kind", head + "node id=1 kind=toaster parent=0\n", 4, "unknown node kind"},
      {"unknown line", head + "frobnicate x=1\n", 4, "unknown line"},
      {"dangling parent", head + "node id=1 kind=package parent=5\n", 4, "not an earlier node"},
      {"self parent", head + "node id=1 kind=package parent=1\n", 4, "not an earlier node"},
      {"no parent", head + "node id=1 kind=package\n", 4, "no parent"},
      {"non-dense ids", head + "node id=2 kind=package parent=0\n", 4, "out of order"},
      {"node 0 not the machine", "braid-topology 1\nnode id=0 kind=package\n", 2, "must be the machine"},
      {"second machine node", head + "node id=1 kind=machine parent=0\n", 4, "only node 0"},
      {"huge integer", "braid-topology 1\nmachine cores=99999999999999999999999\n", 2, "out of range"},
      {"integer above the limit", "braid-topology 1\nmachine cores=2147483648\n", 2, "out of range"},
      {"huge bytes", head + "node id=1 kind=numa parent=0 bytes=18446744073709551616\n", 4, "out of range"},
      {"negative bytes", head + "node id=1 kind=numa parent=0 bytes=-1\n", 4, "not an unsigned"},
      {"nan gbps", head + "node id=1 kind=nic parent=0 gbps=nan\n", 4, "not a number"},
      {"inf gbps", head + "node id=1 kind=nic parent=0 gbps=inf\n", 4, "not a number"},
      {"negative gbps", head + "node id=1 kind=nic parent=0 gbps=-1\n", 4, "not a number"},
      {"numa range", head + "node id=1 kind=nic parent=0 numa=70000\n", 4, "out of range"},
      {"bad hex", head + "node id=1 kind=pci parent=0 vendor=10de\n", 4, "not a hex number"},
      {"hex range", head + "node id=1 kind=pci parent=0 vendor=0x10000\n", 4, "not a hex number"},
      {"bad cpus", head + "node id=1 kind=core parent=0 cpus=3-1\n", 4, "backwards"},
      {"cpus not ascending", head + "node id=1 kind=core parent=0 cpus=4,2\n", 4, "not ascending"},
      {"cpus too big", head + "node id=1 kind=core parent=0 cpus=0-99999999\n", 4, "bad cpu list item"},
      {"truncated quote", "braid-topology 1\nmachine hostname=\"abc\n", 2, "unterminated"},
      {"quote then escape at end", "braid-topology 1\nmachine hostname=\"abc\\", 2, "unterminated"},
      {"bad escape", "braid-topology 1\nmachine hostname=\"a\\qb\"\n", 2, "unknown escape"},
      {"bad hex escape", "braid-topology 1\nmachine hostname=\"a\\xZZ\"\n", 2, "bad \\x escape"},
      {"raw control byte", std::string("braid-topology 1\nmachine hostname=a\x01") + "b\n", 2, "bad byte 0x01"},
      {"duplicate key", "braid-topology 1\nmachine cores=1 cores=2\n", 2, "given twice"},
      {"no equals", "braid-topology 1\nmachine cores\n", 2, "expected key=value"},
      {"no machine line", "braid-topology 1\nnode id=0 kind=machine\n", 2, "no machine line"},
      {"no nodes", "braid-topology 1\nmachine cores=1\n", 2, "no nodes"},
      {"two machine lines", "braid-topology 1\nmachine cores=1\nmachine cores=1\n", 3, "second machine"},
      {"link to nowhere", head + "link a=0 b=9 kind=nvlink\n", 4, "out of range"},
      {"link to itself", head + "link a=0 b=0 kind=nvlink\n", 4, "to itself"},
      {"link kind", head + "node id=1 kind=gpu parent=0\nlink a=0 b=1 kind=carrier_pigeon\n", 5, "unknown link kind"},
      {"link count", head + "node id=1 kind=gpu parent=0\nlink a=0 b=1 kind=nvlink count=0\n", 5, "out of range"},
      {"missing unquoted", head + "missing oops\n", 4, "expected key=value"},
      {"missing twice", head + "missing \"a\" \"b\"\n", 4, "unexpected"},
      {"cost unknown field", head + "cost warp_factor=9\n", 4, "unknown key 'warp_factor'"},
      {"cost zero rate", head + "cost intra_gbps=0\n", 4, "must be positive"},
      {"cluster ranks mismatch", head + "cluster ranks=3 hosts=0,1 cores=1,1\n", 4, "hosts= lists 2 ranks"},
      {"cluster hosts not dense", head + "cluster ranks=2 hosts=0,2 cores=1,1,1\n", 4, "has no rank"},
      {"cluster cores count", head + "cluster ranks=2 hosts=0,1 cores=1\n", 4, "cores= lists 1 hosts"},
      {"cluster fifo count", head + "cluster ranks=2 hosts=0,1 cores=1,1 fifo_from=0\n", 4, "fifo_from= lists 1 hosts"},
      {"cluster fifo value", head + "cluster ranks=2 hosts=0,1 cores=1,1 fifo_from=0,x\n", 4,
       "item 1 ('x') is neither '-' nor a byte count"},
      {"cluster fifo empty item", head + "cluster ranks=2 hosts=0,1 cores=1,1 fifo_from=0,\n", 4, "item 1 ('')"},
      {"cluster fifo never as a number", head + "cluster ranks=1 hosts=0 cores=1 fifo_from=18446744073709551615\n", 4,
       "below 2^64 - 1"},
      {"cluster fifo twice", head + "cluster ranks=1 hosts=0 cores=1 fifo_from=1 fifo_from=0\n", 4, "given twice"},
      {"cluster fifo alone", head + "cluster ranks=1 hosts=0 fifo_from=1\n", 4, "needs ranks=, hosts= and cores="},
      {"cluster empty item", head + "cluster ranks=2 hosts=0,,1 cores=1,1\n", 4, "item 1"},
      {"over the size limit", huge, 5, "larger than"},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    TopoFile f;
    f.machine.hostname = "untouched";
    Status s = parseTopoFile(b.text, "t.topo", &f);
    INFO(s.message());
    CHECK(s.code() == braidInvalidArgument);
    CHECK(s.message().find("t.topo:" + std::to_string(b.line) + ": ") == 0);
    CHECK(s.message().find(b.says) != std::string::npos);
    CHECK(f.machine.hostname == "untouched");  // nothing written on failure
  }
}

TEST_CASE("loadTopoFile names an unreadable file", "[unit][topo]") {
  TopoFile f;
  Status s = loadTopoFile("/nonexistent/braid.topo", &f);
  CHECK(!s.ok());
  CHECK(s.message().find("/nonexistent/braid.topo") != std::string::npos);
}

TEST_CASE("dumpTopoFile writes what loadTopoFile reads", "[unit][topo]") {
  TopoFile f = loadExample("pcie-4gpu");
  braidtest::ScratchDir dir("topo-test");
  const std::string path = dir.file("m.topo");
  REQUIRE(dumpTopoFile(path, f).ok());
  TopoFile g;
  REQUIRE(loadTopoFile(path, &g).ok());
  CHECK(formatTopoFile(g) == formatTopoFile(f));
}

// Random byte edits of a valid file: the parser must either reject with a line number or accept
// something that formats to a fixed point. A smoke test; the fuzzer comes with a later issue.
TEST_CASE("mutated topology files never crash the parser", "[unit][topo]") {
  const std::string base = readFile(examplePath("pcie-4gpu"));
  std::mt19937 rng(12345);
  const char kBytes[] = "=\" \\\n#,-0123456789xaz\x01\xff";
  int accepted = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[at] = kBytes[rng() % (sizeof(kBytes) - 1)];
          break;
        case 1:
          t.erase(at, 1 + rng() % 8);
          break;
        default:
          t.insert(at, 1, kBytes[rng() % (sizeof(kBytes) - 1)]);
          break;
      }
      if (t.empty()) t.push_back('x');
    }
    TopoFile f;
    Status s = parseTopoFile(t, "m", &f);
    if (!s.ok()) {
      CHECK(s.message().rfind("m:", 0) == 0);
      continue;
    }
    ++accepted;
    const std::string once = formatTopoFile(f);
    TopoFile g;
    REQUIRE(parseTopoFile(once, "m2", &g).ok());
    CHECK(formatTopoFile(g) == once);
    renderTree(f.machine);
    renderMatrix(f.machine);
    CHECK(validJson(renderJson(f)));
  }
  CHECK(accepted > 0);
}

}  // namespace
}  // namespace braid::topo
