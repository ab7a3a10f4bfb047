// Small text helpers shared by the topology file (file.cc) and the renderings (render*.cc):
// CPU lists, shortest round-trip doubles, quoting and JSON escapes. Internal to topology/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace braid::topo {
struct Machine;
}

namespace braid::topo::text {

// Largest CPU number a list may name: far above any machine, small enough that a hostile list
// cannot make a caller allocate much.
constexpr uint32_t kMaxCpu = 1u << 20;

// A CPU list "0-15,32-47": ascending, non-overlapping inclusive ranges.
using CpuRanges = std::vector<std::pair<uint32_t, uint32_t>>;
// Strict: "a" or "a-b" items joined by ',', a <= b, each item after the previous one, numbers
// <= kMaxCpu. Empty text is an empty list. On failure `why` says what is wrong.
bool parseCpuList(std::string_view s, CpuRanges* out, std::string* why);
std::string formatCpuList(const CpuRanges& r);
// The union of two lists (both valid); adjacent ranges merge.
CpuRanges mergeCpuRanges(const CpuRanges& a, const CpuRanges& b);
uint64_t cpuCount(const CpuRanges& r);

// Shortest text that reads back to the same double ("2", "0.1", "1e+20").
std::string formatDouble(double v);
// "8.0 GiB", "512 KiB", "100 B".
std::string humanBytes(uint64_t bytes);
// A value as the topology file writes it: bare when it is printable ASCII without spaces, quotes,
// backslashes, '#' or '='; otherwise quoted with \\ \" \n \t and \xHH escapes.
std::string fileValue(std::string_view s, bool forceQuotes = false);
// A JSON string literal, quotes included.
std::string jsonString(std::string_view s);
// At most `max` bytes of untrusted text for an error message, non-printable bytes as \xHH.
std::string shown(std::string_view s, size_t max = 40);

// Shared by the renderings (render.cc). A valid parent is an earlier node; a host bridge is a bridge
// whose parent is not on the PCI side (a package or the machine).
std::string nodeLabel(const Machine& m, int id);
bool validParent(const Machine& m, int id);
bool isHostBridge(const Machine& m, int id);

}  // namespace braid::topo::text
