// The topology file: a versioned, line-oriented text format (topology/FORMAT.md). The writer emits
// only what the parser accepts and the parser is strict, so parse(format(x)) formats to the same
// bytes. The parser takes hostile input: sizes and counts are bounded before anything grows, every
// number is range-checked, nothing recurses, and every error names the file and line.
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "topology/text_util.h"
#include "topology/topology.h"

namespace braid::topo {

// ---- the model's small helpers ----

const char* nodeKindName(NodeKind k) {
  switch (k) {
    case NodeKind::kMachine:
      return "machine";
    case NodeKind::kPackage:
      return "package";
    case NodeKind::kNuma:
      return "numa";
    case NodeKind::kCache:
      return "cache";
    case NodeKind::kCore:
      return "core";
    case NodeKind::kPciBridge:
      return "bridge";
    case NodeKind::kPciDevice:
      return "pci";
    case NodeKind::kGpu:
      return "gpu";
    case NodeKind::kNic:
      return "nic";
  }
  return "?";
}

int Machine::count(NodeKind k) const {
  int n = 0;
  for (const Node& node : nodes) n += node.kind == k;
  return n;
}

double Machine::nicGbpsTotal() const {
  double sum = 0;
  for (const Node& node : nodes) {
    if (node.kind == NodeKind::kNic && node.gbps > 0) sum += node.gbps;
  }
  return sum;
}

namespace {

constexpr int kFormatVersion = 1;
constexpr char kMagic[] = "braid-topology";
constexpr int kMaxLinks = 65536;
constexpr int kMaxMissing = 4096;
constexpr int kMaxComments = 256;
constexpr size_t kMaxString = 1024;
constexpr int kMaxRanks = 1 << 20;
constexpr int64_t kMaxIndex = 1 << 24;  // OS indices, ordinals, core counts
constexpr int64_t kMaxNuma = 65535;
constexpr int64_t kMaxPciId = 0xffff;    // class, vendor, device: 16 bits as hwloc reports them
constexpr int64_t kMaxLinkCount = 1024;  // NVLinks between two GPUs (18 on H100)
constexpr double kMaxGbps = 1e7;         // 10 Pbit/s: above any link
constexpr double kMaxCostValue = 1e18;   // cost fields: microseconds, GB/s and bytes

constexpr NodeKind kAllKinds[] = {NodeKind::kMachine,   NodeKind::kPackage, NodeKind::kNuma,
                                  NodeKind::kCache,     NodeKind::kCore,    NodeKind::kPciBridge,
                                  NodeKind::kPciDevice, NodeKind::kGpu,     NodeKind::kNic};

const char* linkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::kNvlink:
      return "nvlink";
    case LinkKind::kPcie:
      return "pcie";
    case LinkKind::kNet:
      return "net";
  }
  return "?";
}

std::string hex16(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "0x%04x", v);
  return buf;
}

// ---- writer ----

void formatNode(const Node& n, int id, std::string* out) {
  using text::fileValue;
  *out += "node id=" + std::to_string(id) + " kind=" + nodeKindName(n.kind);
  if (n.parent != -1) *out += " parent=" + std::to_string(n.parent);
  if (n.index != -1) *out += " index=" + std::to_string(n.index);
  if (!n.name.empty()) *out += " name=" + fileValue(n.name);
  if (!n.busId.empty()) *out += " busid=" + fileValue(n.busId);
  if (n.pciClass != 0) *out += " class=" + hex16(n.pciClass);
  if (n.vendor != 0) *out += " vendor=" + hex16(n.vendor);
  if (n.device != 0) *out += " device=" + hex16(n.device);
  if (n.bytes != 0) *out += " bytes=" + std::to_string(n.bytes);
  if (n.gbps != 0) *out += " gbps=" + text::formatDouble(n.gbps);
  if (n.numa != -1) *out += " numa=" + std::to_string(n.numa);
  if (!n.cpus.empty()) *out += " cpus=" + fileValue(n.cpus);
  *out += '\n';
}

void formatCluster(const ClusterShape& c, std::string* out) {
  // Written from hostOf and hostCores alone (nhosts and hostSize follow from them on load); a shape
  // whose vectors are short is padded with host 0 / 0 cores rather than writing an unreadable line.
  const int nranks = std::max(1, c.nranks);
  int nhosts = 1;
  std::string hosts, cores;
  for (int r = 0; r < nranks; ++r) {
    const int h = r < static_cast<int>(c.hostOf.size()) ? c.hostOf[r] : 0;
    nhosts = std::max(nhosts, h + 1);
    if (r) hosts += ',';
    hosts += std::to_string(h);
  }
  for (int h = 0; h < nhosts; ++h) {
    if (h) cores += ',';
    cores += std::to_string(h < static_cast<int>(c.hostCores.size()) ? c.hostCores[h] : 0);
  }
  *out += "cluster ranks=" + std::to_string(nranks) + " hosts=" + hosts + " cores=" + cores;
  // fifo_from= only where some host has a value, so that a shape that says nothing writes what it
  // always did.
  const std::string fifo = c.twoCopiesList(nhosts);
  if (!fifo.empty()) *out += " fifo_from=" + fifo;
  *out += "\n";
}

}  // namespace

std::string formatTopoFile(const TopoFile& f) {
  std::string out = std::string(kMagic) + " " + std::to_string(kFormatVersion) + "\n";
  for (const std::string& c : f.comments) {
    out += '#';
    for (char ch : c) out += (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ? ' ' : ch;
    out += '\n';
  }
  const Machine& m = f.machine;
  out += "machine hostname=" + text::fileValue(m.hostname, m.hostname.empty()) + " cores=" + std::to_string(m.cores) +
         " pus=" + std::to_string(m.pus) + "\n";
  for (size_t i = 0; i < m.nodes.size(); ++i) formatNode(m.nodes[i], static_cast<int>(i), &out);
  for (const Link& l : m.links) {
    out += "link a=" + std::to_string(l.a) + " b=" + std::to_string(l.b) + " kind=" + linkKindName(l.kind) +
           " count=" + std::to_string(l.count) + " gbps=" + text::formatDouble(l.gbps) + "\n";
  }
  for (const std::string& s : m.missing) out += "missing " + text::fileValue(s, true) + "\n";
  if (f.hasCost) {
    out += "cost";
    for (const CostField& fld : costFields()) {
      out += std::string(" ") + fld.name + "=" + text::formatDouble(f.cost.*(fld.member));
    }
    out += '\n';
  }
  if (f.hasCluster) formatCluster(f.cluster, &out);
  return out;
}

// ---- parser ----

namespace {

// One key=value (or, for `missing`, a lone quoted string: empty key) of a line.
struct Token {
  std::string_view key;
  std::string value;
};

class Parser {
 public:
  Parser(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  Status run(TopoFile* out);

 private:
  Status fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  Status nextToken(Token* t, bool* got);
  Status expectEnd();
  Status line(std::string_view keyword);
  Status machineLine();
  Status nodeLine();
  Status linkLine();
  Status missingLine();
  Status costLine();
  Status clusterLine();
  // Shared by the *Line functions: per-key number and string checks naming the key.
  Status integer(const Token& t, int64_t lo, int64_t hi, int64_t* v);
  Status hex(const Token& t, uint32_t* v);
  Status unsignedBig(const Token& t, uint64_t* v);
  Status real(const Token& t, double hi, double* v);
  Status intList(const Token& t, int64_t lo, int64_t hi, size_t maxItems, std::vector<int>* v);
  // Comma-separated unsigned 64-bit byte counts, `-` for ClusterShape::kNever.
  Status bytesList(const Token& t, size_t maxItems, std::vector<uint64_t>* v);
  Status unknownKey(const Token& t, const char* what);
  Status seen(const Token& t, uint32_t bit, uint32_t* mask);

  std::string_view text_;
  const std::string& origin_;
  int lineNo_ = 0;
  std::string_view cur_;  // the current line
  size_t pos_ = 0;        // cursor in cur_
  TopoFile f_;
  bool haveMachine_ = false, inHeaderComments_ = true;
};

Status Parser::fail(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return errorf(braidInvalidArgument, "%s:%d: %s", origin_.c_str(), lineNo_, buf);
}

Status Parser::nextToken(Token* t, bool* got) {
  while (pos_ < cur_.size() && (cur_[pos_] == ' ' || cur_[pos_] == '\t')) ++pos_;
  *got = false;
  if (pos_ >= cur_.size()) return okStatus();
  t->key = {};
  t->value.clear();
  if (cur_[pos_] != '"') {
    const size_t start = pos_;
    while (pos_ < cur_.size() && cur_[pos_] != '=' && cur_[pos_] != ' ' && cur_[pos_] != '\t') {
      const char c = cur_[pos_];
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
        return fail("bad character '%s' in key '%s'", text::shown(cur_.substr(pos_, 1)).c_str(),
                    text::shown(cur_.substr(start, pos_ + 1 - start)).c_str());
      }
      ++pos_;
    }
    if (pos_ >= cur_.size() || cur_[pos_] != '=' || pos_ == start) {
      return fail("expected key=value, got '%s'", text::shown(cur_.substr(start, pos_ + 1 - start)).c_str());
    }
    t->key = cur_.substr(start, pos_ - start);
    ++pos_;  // '='
  }
  if (pos_ < cur_.size() && cur_[pos_] == '"') {
    ++pos_;
    for (;;) {
      if (pos_ >= cur_.size()) return fail("unterminated quoted string");
      const unsigned char c = static_cast<unsigned char>(cur_[pos_++]);
      if (c == '"') break;
      if (t->value.size() >= kMaxString) return fail("string longer than %zu bytes", kMaxString);
      if (c < 0x20 || c >= 0x7f) return fail("raw byte 0x%02x in a quoted string (use \\xHH)", c);
      if (c != '\\') {
        t->value += static_cast<char>(c);
        continue;
      }
      if (pos_ >= cur_.size()) return fail("unterminated quoted string");
      const char e = cur_[pos_++];
      switch (e) {
        case '\\':
          t->value += '\\';
          break;
        case '"':
          t->value += '"';
          break;
        case 'n':
          t->value += '\n';
          break;
        case 't':
          t->value += '\t';
          break;
        case 'x': {
          unsigned v = 0;
          if (pos_ + 2 > cur_.size() ||
              std::from_chars(cur_.data() + pos_, cur_.data() + pos_ + 2, v, 16).ptr != cur_.data() + pos_ + 2) {
            return fail("bad \\x escape (want two hex digits)");
          }
          pos_ += 2;
          t->value += static_cast<char>(v);
          break;
        }
        default:
          return fail("unknown escape '\\%s'", text::shown(std::string_view(&e, 1)).c_str());
      }
    }
    if (pos_ < cur_.size() && cur_[pos_] != ' ' && cur_[pos_] != '\t') return fail("no space after a quoted string");
  } else {
    if (t->key.empty()) return fail("expected key=value");
    const size_t start = pos_;
    while (pos_ < cur_.size() && cur_[pos_] != ' ' && cur_[pos_] != '\t') {
      const unsigned char c = static_cast<unsigned char>(cur_[pos_]);
      if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') {
        return fail("bad byte 0x%02x in the value of '%s' (quote it)", c, std::string(t->key).c_str());
      }
      ++pos_;
    }
    if (pos_ - start > kMaxString) return fail("value longer than %zu bytes", kMaxString);
    t->value.assign(cur_.substr(start, pos_ - start));
  }
  *got = true;
  return okStatus();
}

Status Parser::expectEnd() {
  Token t;
  bool got = false;
  BRAID_TRY(nextToken(&t, &got));
  if (got) return fail("unexpected '%s' at the end of the line", text::shown(t.key.empty() ? t.value : t.key).c_str());
  return okStatus();
}

Status Parser::unknownKey(const Token& t, const char* what) {
  if (t.key.empty()) return fail("unexpected quoted string in a %s line (want key=value)", what);
  return fail("unknown key '%s' in a %s line", text::shown(t.key).c_str(), what);
}

Status Parser::seen(const Token& t, uint32_t bit, uint32_t* mask) {
  if (*mask & bit) return fail("key '%s' given twice", std::string(t.key).c_str());
  *mask |= bit;
  return okStatus();
}

Status Parser::integer(const Token& t, int64_t lo, int64_t hi, int64_t* v) {
  const std::string& s = t.value;
  int64_t x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc::result_out_of_range)
    return fail("%s=%s is out of range", std::string(t.key).c_str(), text::shown(s).c_str());
  if (ec != std::errc() || p != s.data() + s.size()) {
    return fail("%s=%s is not an integer", std::string(t.key).c_str(), text::shown(s).c_str());
  }
  if (x < lo || x > hi) {
    return fail("%s=%lld is out of range [%lld, %lld]", std::string(t.key).c_str(), static_cast<long long>(x),
                static_cast<long long>(lo), static_cast<long long>(hi));
  }
  *v = x;
  return okStatus();
}

Status Parser::hex(const Token& t, uint32_t* v) {
  const std::string& s = t.value;
  unsigned x = 0;
  if (s.size() < 3 || s.size() > 6 || s[0] != '0' || s[1] != 'x' ||
      std::from_chars(s.data() + 2, s.data() + s.size(), x, 16).ptr != s.data() + s.size() || x > kMaxPciId) {
    return fail("%s=%s is not a hex number 0x0..0xffff", std::string(t.key).c_str(), text::shown(s).c_str());
  }
  *v = x;
  return okStatus();
}

Status Parser::unsignedBig(const Token& t, uint64_t* v) {
  const std::string& s = t.value;
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc::result_out_of_range) {
    return fail("%s=%s is out of range (64 bits)", std::string(t.key).c_str(), text::shown(s).c_str());
  }
  if (ec != std::errc() || p != s.data() + s.size()) {
    return fail("%s=%s is not an unsigned 64-bit integer", std::string(t.key).c_str(), text::shown(s).c_str());
  }
  *v = x;
  return okStatus();
}

Status Parser::real(const Token& t, double hi, double* v) {
  const std::string& s = t.value;
  double x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(x) || x < 0 || x > hi) {
    return fail("%s=%s is not a number in [0, %g]", std::string(t.key).c_str(), text::shown(s).c_str(), hi);
  }
  *v = x;
  return okStatus();
}

Status Parser::intList(const Token& t, int64_t lo, int64_t hi, size_t maxItems, std::vector<int>* v) {
  v->clear();
  std::string_view s = t.value;
  size_t pos = 0;
  for (;;) {
    if (v->size() >= maxItems) return fail("%s= has more than %zu items", std::string(t.key).c_str(), maxItems);
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    int64_t x = 0;
    auto [p, ec] = std::from_chars(s.data() + pos, s.data() + end, x);
    if (end == pos || ec != std::errc() || p != s.data() + end || x < lo || x > hi) {
      return fail("%s= item %zu ('%s') is not an integer in [%lld, %lld]", std::string(t.key).c_str(), v->size(),
                  text::shown(s.substr(pos, end - pos)).c_str(), static_cast<long long>(lo),
                  static_cast<long long>(hi));
    }
    v->push_back(static_cast<int>(x));
    if (end == s.size()) return okStatus();
    pos = end + 1;
  }
}

Status Parser::bytesList(const Token& t, size_t maxItems, std::vector<uint64_t>* v) {
  v->clear();
  std::string_view s = t.value;
  for (size_t pos = 0;;) {
    if (v->size() >= maxItems) return fail("%s= has more than %zu items", std::string(t.key).c_str(), maxItems);
    size_t end = std::min(s.find(',', pos), s.size());
    const std::string_view item = s.substr(pos, end - pos);
    uint64_t x = 0;
    if (!ClusterShape::parseTwoCopiesFrom(item, &x))
      return fail("%s= item %zu ('%s') is neither '-' nor a byte count below 2^64 - 1", std::string(t.key).c_str(),
                  v->size(), text::shown(item).c_str());
    v->push_back(x);
    if (end == s.size()) return okStatus();
    pos = end + 1;
  }
}

Status Parser::machineLine() {
  if (haveMachine_) return fail("a second machine line");
  haveMachine_ = true;
  Machine& m = f_.machine;
  uint32_t mask = 0;
  Token t;
  bool got = false;
  for (;;) {
    BRAID_TRY(nextToken(&t, &got));
    if (!got) return okStatus();
    int64_t v = 0;
    if (t.key == "hostname") {
      BRAID_TRY(seen(t, 1, &mask));
      m.hostname = t.value;
    } else if (t.key == "cores") {
      BRAID_TRY(seen(t, 2, &mask));
      BRAID_TRY(integer(t, 0, kMaxIndex, &v));
      m.cores = static_cast<int>(v);
    } else if (t.key == "pus") {
      BRAID_TRY(seen(t, 4, &mask));
      BRAID_TRY(integer(t, 0, kMaxIndex, &v));
      m.pus = static_cast<int>(v);
    } else {
      return unknownKey(t, "machine");
    }
  }
}

Status Parser::nodeLine() {
  std::vector<Node>& nodes = f_.machine.nodes;
  if (static_cast<int>(nodes.size()) >= kMaxTopoNodes) return fail("more than %d nodes", kMaxTopoNodes);
  Node n;
  uint32_t mask = 0;
  Token t;
  bool got = false;
  int64_t id = -1, parent = -1;
  for (;;) {
    BRAID_TRY(nextToken(&t, &got));
    if (!got) break;
    int64_t v = 0;
    std::string why;
    text::CpuRanges cpus;
    if (t.key == "id") {
      BRAID_TRY(seen(t, 1 << 0, &mask));
      BRAID_TRY(integer(t, 0, kMaxTopoNodes - 1, &id));
    } else if (t.key == "kind") {
      BRAID_TRY(seen(t, 1 << 1, &mask));
      bool known = false;
      for (NodeKind k : kAllKinds) {
        if (t.value == nodeKindName(k)) n.kind = k, known = true;
      }
      if (!known) return fail("unknown node kind '%s'", text::shown(t.value).c_str());
    } else if (t.key == "parent") {
      BRAID_TRY(seen(t, 1 << 2, &mask));
      BRAID_TRY(integer(t, 0, kMaxTopoNodes - 1, &parent));
    } else if (t.key == "index") {
      BRAID_TRY(seen(t, 1 << 3, &mask));
      BRAID_TRY(integer(t, -1, kMaxIndex, &v));
      n.index = static_cast<int>(v);
    } else if (t.key == "name") {
      BRAID_TRY(seen(t, 1 << 4, &mask));
      n.name = t.value;
    } else if (t.key == "busid") {
      BRAID_TRY(seen(t, 1 << 5, &mask));
      n.busId = t.value;
    } else if (t.key == "class") {
      BRAID_TRY(seen(t, 1 << 6, &mask));
      BRAID_TRY(hex(t, &n.pciClass));
    } else if (t.key == "vendor") {
      BRAID_TRY(seen(t, 1 << 7, &mask));
      BRAID_TRY(hex(t, &n.vendor));
    } else if (t.key == "device") {
      BRAID_TRY(seen(t, 1 << 8, &mask));
      BRAID_TRY(hex(t, &n.device));
    } else if (t.key == "bytes") {
      BRAID_TRY(seen(t, 1 << 9, &mask));
      BRAID_TRY(unsignedBig(t, &n.bytes));
    } else if (t.key == "gbps") {
      BRAID_TRY(seen(t, 1 << 10, &mask));
      BRAID_TRY(real(t, kMaxGbps, &n.gbps));
    } else if (t.key == "numa") {
      BRAID_TRY(seen(t, 1 << 11, &mask));
      BRAID_TRY(integer(t, -1, kMaxNuma, &v));
      n.numa = static_cast<int>(v);
    } else if (t.key == "cpus") {
      BRAID_TRY(seen(t, 1 << 12, &mask));
      if (!text::parseCpuList(t.value, &cpus, &why)) return fail("cpus: %s", why.c_str());
      n.cpus = t.value;
    } else {
      return unknownKey(t, "node");
    }
  }
  const int expect = static_cast<int>(nodes.size());
  if (!(mask & 1)) return fail("node line without id");
  if (!(mask & 2)) return fail("node line without kind");
  if (id != expect)
    return fail("node id %lld out of order (want %d: ids are 0, 1, 2, ... in order)", static_cast<long long>(id),
                expect);
  if (id == 0) {
    if (n.kind != NodeKind::kMachine) return fail("node 0 must be the machine");
    if (mask & (1 << 2)) return fail("the machine node has no parent");
  } else {
    if (n.kind == NodeKind::kMachine) return fail("only node 0 may be the machine");
    if (!(mask & (1 << 2))) return fail("node %d has no parent", expect);
    if (parent >= id)
      return fail("node %d: parent %lld is not an earlier node", expect, static_cast<long long>(parent));
  }
  n.id = expect;
  n.parent = static_cast<int>(parent);
  nodes.push_back(std::move(n));
  return okStatus();
}

Status Parser::linkLine() {
  Machine& m = f_.machine;
  if (static_cast<int>(m.links.size()) >= kMaxLinks) return fail("more than %d links", kMaxLinks);
  Link l;
  uint32_t mask = 0;
  Token t;
  bool got = false;
  const int64_t nodes = static_cast<int64_t>(m.nodes.size());
  for (;;) {
    BRAID_TRY(nextToken(&t, &got));
    if (!got) break;
    int64_t v = 0;
    if (t.key == "a" || t.key == "b") {
      BRAID_TRY(seen(t, t.key == "a" ? 1 : 2, &mask));
      if (nodes == 0) return fail("link before any node");
      BRAID_TRY(integer(t, 0, nodes - 1, &v));
      (t.key == "a" ? l.a : l.b) = static_cast<int>(v);
    } else if (t.key == "kind") {
      BRAID_TRY(seen(t, 4, &mask));
      if (t.value == "nvlink") {
        l.kind = LinkKind::kNvlink;
      } else if (t.value == "pcie") {
        l.kind = LinkKind::kPcie;
      } else if (t.value == "net") {
        l.kind = LinkKind::kNet;
      } else {
        return fail("unknown link kind '%s' (nvlink, pcie, net)", text::shown(t.value).c_str());
      }
    } else if (t.key == "count") {
      BRAID_TRY(seen(t, 8, &mask));
      BRAID_TRY(integer(t, 1, kMaxLinkCount, &v));
      l.count = static_cast<int>(v);
    } else if (t.key == "gbps") {
      BRAID_TRY(seen(t, 16, &mask));
      BRAID_TRY(real(t, kMaxGbps, &l.gbps));
    } else {
      return unknownKey(t, "link");
    }
  }
  if ((mask & 7) != 7) return fail("a link line needs a=, b= and kind=");
  if (l.a == l.b) return fail("link from node %d to itself", l.a);
  m.links.push_back(l);
  return okStatus();
}

Status Parser::missingLine() {
  if (static_cast<int>(f_.machine.missing.size()) >= kMaxMissing)
    return fail("more than %d missing lines", kMaxMissing);
  Token t;
  bool got = false;
  BRAID_TRY(nextToken(&t, &got));
  if (!got || !t.key.empty()) return fail("missing wants one quoted string");
  BRAID_TRY(expectEnd());
  f_.machine.missing.push_back(std::move(t.value));
  return okStatus();
}

Status Parser::costLine() {
  if (f_.hasCost) return fail("a second cost line");
  const std::vector<CostField>& fields = costFields();
  CostParams p = CostParams::defaults();  // fields a file leaves out keep their defaults
  std::vector<bool> have(fields.size(), false);
  Token t;
  bool got = false;
  for (;;) {
    BRAID_TRY(nextToken(&t, &got));
    if (!got) break;
    size_t i = 0;
    while (i < fields.size() && t.key != fields[i].name) ++i;
    if (i == fields.size()) return unknownKey(t, "cost");
    if (have[i]) return fail("key '%s' given twice", fields[i].name);
    have[i] = true;
    double& v = p.*(fields[i].member);
    BRAID_TRY(real(t, kMaxCostValue, &v));
    // Rates divide: zero would make every prediction infinite (CostParams::applyEnv refuses it too).
    if (v == 0 && std::string_view(fields[i].name).find("gbps") != std::string_view::npos) {
      return fail("%s must be positive", fields[i].name);
    }
  }
  f_.hasCost = true;
  f_.cost = p;
  return okStatus();
}

Status Parser::clusterLine() {
  if (f_.hasCluster) return fail("a second cluster line");
  uint32_t mask = 0;
  Token t;
  bool got = false;
  int64_t ranks = 0;
  std::vector<int> hosts, cores;
  std::vector<uint64_t> fifo;
  for (;;) {
    BRAID_TRY(nextToken(&t, &got));
    if (!got) break;
    if (t.key == "fifo_from") {
      BRAID_TRY(seen(t, 8, &mask));
      BRAID_TRY(bytesList(t, kMaxRanks, &fifo));
    } else if (t.key == "ranks") {
      BRAID_TRY(seen(t, 1, &mask));
      BRAID_TRY(integer(t, 1, kMaxRanks, &ranks));
    } else if (t.key == "hosts") {
      BRAID_TRY(seen(t, 2, &mask));
      BRAID_TRY(intList(t, 0, kMaxRanks - 1, kMaxRanks, &hosts));
    } else if (t.key == "cores") {
      BRAID_TRY(seen(t, 4, &mask));
      BRAID_TRY(intList(t, 0, kMaxIndex, kMaxRanks, &cores));
    } else {
      return unknownKey(t, "cluster");
    }
  }
  if ((mask & 7) != 7) return fail("a cluster line needs ranks=, hosts= and cores=");
  if (static_cast<int64_t>(hosts.size()) != ranks) {
    return fail("hosts= lists %zu ranks, ranks=%lld", hosts.size(), static_cast<long long>(ranks));
  }
  ClusterShape c;
  c.nranks = static_cast<int>(ranks);
  c.hostOf = std::move(hosts);
  c.nhosts = 0;
  for (int h : c.hostOf) c.nhosts = std::max(c.nhosts, h + 1);
  c.hostSize.assign(c.nhosts, 0);
  for (int h : c.hostOf) ++c.hostSize[h];
  for (int h = 0; h < c.nhosts; ++h) {
    if (c.hostSize[h] == 0) return fail("host %d has no rank (host indices must be dense)", h);
  }
  if (static_cast<int>(cores.size()) != c.nhosts)
    return fail("cores= lists %zu hosts, hosts= has %d", cores.size(), c.nhosts);
  c.hostCores = std::move(cores);
  if ((mask & 8) != 0) {
    if (static_cast<int>(fifo.size()) != c.nhosts)
      return fail("fifo_from= lists %zu hosts, hosts= has %d", fifo.size(), c.nhosts);
    c.hostTwoCopiesFrom = std::move(fifo);
  }
  f_.hasCluster = true;
  f_.cluster = std::move(c);
  return okStatus();
}

Status Parser::line(std::string_view keyword) {
  if (keyword == "machine") return machineLine();
  if (keyword == "node") return nodeLine();
  if (keyword == "link") return linkLine();
  if (keyword == "missing") return missingLine();
  if (keyword == "cost") return costLine();
  if (keyword == "cluster") return clusterLine();
  return fail("unknown line '%s' (machine, node, link, missing, cost, cluster)", text::shown(keyword).c_str());
}

Status Parser::run(TopoFile* out) {
  if (text_.size() > kMaxTopoFileBytes) {
    // Name the line where the limit falls, so the message has a line number like every other.
    lineNo_ = 1;
    for (size_t i = 0; i < kMaxTopoFileBytes; ++i) lineNo_ += text_[i] == '\n';
    return fail("file larger than %zu bytes", kMaxTopoFileBytes);
  }
  size_t at = 0;
  while (at < text_.size()) {
    size_t end = text_.find('\n', at);
    if (end == std::string_view::npos) end = text_.size();
    cur_ = text_.substr(at, end - at);
    at = end + 1;
    ++lineNo_;
    pos_ = 0;
    if (!cur_.empty() && cur_.back() == '\r') cur_.remove_suffix(1);
    if (lineNo_ == 1) {
      const std::string magic = std::string(kMagic) + " ";
      if (cur_.substr(0, magic.size()) != magic)
        return fail("not a braid topology file (want '%s %d')", kMagic, kFormatVersion);
      if (cur_.substr(magic.size()) != std::to_string(kFormatVersion)) {
        return fail("unsupported version '%s' (this braid reads %d)", text::shown(cur_.substr(magic.size())).c_str(),
                    kFormatVersion);
      }
      continue;
    }
    size_t first = cur_.find_first_not_of(" \t");
    if (first == std::string_view::npos) {
      inHeaderComments_ = false;
      continue;
    }
    if (cur_[first] == '#') {
      if (inHeaderComments_ && first == 0) {
        if (static_cast<int>(f_.comments.size()) >= kMaxComments)
          return fail("more than %d header comment lines", kMaxComments);
        std::string_view c = cur_.substr(1);
        for (char ch : c) {
          if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t') return fail("control byte in a comment");
        }
        if (c.size() > kMaxString) return fail("comment longer than %zu bytes", kMaxString);
        f_.comments.emplace_back(c);
      }
      continue;
    }
    inHeaderComments_ = false;
    size_t kwEnd = cur_.find_first_of(" \t", first);
    if (kwEnd == std::string_view::npos) kwEnd = cur_.size();
    pos_ = kwEnd;
    BRAID_TRY(line(cur_.substr(first, kwEnd - first)));
  }
  if (lineNo_ == 0) {
    lineNo_ = 1;
    return fail("empty file (want '%s %d')", kMagic, kFormatVersion);
  }
  if (!haveMachine_) return fail("no machine line");
  if (f_.machine.nodes.empty()) return fail("no nodes (node 0 must be the machine)");
  f_.version = kFormatVersion;
  *out = std::move(f_);
  return okStatus();
}

}  // namespace

Status parseTopoFile(std::string_view text, const std::string& origin, TopoFile* out) {
  Parser p(text, origin);
  return p.run(out);
}

}  // namespace braid::topo
