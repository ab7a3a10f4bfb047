#include "topology/text_util.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace braid::topo::text {

namespace {

bool parseCpu(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 7) return false;  // kMaxCpu has 7 digits
  uint32_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > kMaxCpu) return false;
  *out = v;
  return true;
}

}  // namespace

bool parseCpuList(std::string_view s, CpuRanges* out, std::string* why) {
  CpuRanges r;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(pos, end - pos);
    size_t dash = item.find('-');
    uint32_t lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos
                  ? parseCpu(item, &lo) && parseCpu(item, &hi)
                  : parseCpu(item.substr(0, dash), &lo) && parseCpu(item.substr(dash + 1), &hi);
    if (!ok) {
      *why = "bad cpu list item '" + shown(item) + "' (want N or N-M, N <= " + std::to_string(kMaxCpu) + ")";
      return false;
    }
    if (lo > hi) {
      *why = "cpu range '" + shown(item) + "' runs backwards";
      return false;
    }
    if (!r.empty() && lo <= r.back().second) {
      *why = "cpu list is not ascending at '" + shown(item) + "'";
      return false;
    }
    r.emplace_back(lo, hi);
    if (end == s.size()) break;
    pos = end + 1;
    if (pos == s.size()) {
      *why = "cpu list ends with ','";
      return false;
    }
  }
  *out = std::move(r);
  return true;
}

std::string formatCpuList(const CpuRanges& r) {
  std::string out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty()) out += ',';
    out += std::to_string(lo);
    if (hi != lo) out += '-' + std::to_string(hi);
  }
  return out;
}

CpuRanges mergeCpuRanges(const CpuRanges& a, const CpuRanges& b) {
  CpuRanges all(a);
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  CpuRanges out;
  for (const auto& r : all) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

uint64_t cpuCount(const CpuRanges& r) {
  uint64_t n = 0;
  for (const auto& [lo, hi] : r) n += uint64_t{hi} - lo + 1;
  return n;
}

std::string formatDouble(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "0";  // cannot happen: 64 bytes hold any double
  return std::string(buf, p);
}

std::string humanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v >= 100 || v == std::floor(v)) {
    snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  } else {
    snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

namespace {

bool bareByte(unsigned char c) { return c > 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '#' && c != '='; }

void appendHex(std::string* out, unsigned char c) {
  static const char kHex[] = "0123456789abcdef";
  *out += "\\x";
  *out += kHex[c >> 4];
  *out += kHex[c & 15];
}

}  // namespace

std::string fileValue(std::string_view s, bool forceQuotes) {
  if (!forceQuotes && !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return bareByte(c); })) {
    return std::string(s);
  }
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          appendHex(&out, c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          // Non-ASCII bytes as code points U+0080..U+00FF: always valid JSON, whatever the encoding.
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string shown(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      appendHex(&out, c);
    } else {
      out += s[i];
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace braid::topo::text
