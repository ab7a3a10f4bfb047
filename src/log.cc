#include "src/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "src/config.h"

namespace braid {
namespace log_detail {

std::atomic<int> gLevel{-1};
std::atomic<uint32_t> gSubsys{kLogAll};

namespace {

// Both set once by doInit; write() goes through init() first, whose call_once orders those writes
// before its reads on every thread (gLevel's relaxed fast path alone would not).
FILE* gOut = stderr;
char gHost[64] = "unknown";
std::once_flag gOnce;
thread_local int tRank = -1;

struct SubsysName {
  const char* name;
  uint32_t bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", kLogInit}, {"COLL", kLogColl},   {"NET", kLogNet},   {"SHM", kLogShm},
    {"P2P", kLogP2p},   {"TOPO", kLogTopo},   {"TUNE", kLogTune}, {"PLAN", kLogPlan},
    {"BOOT", kLogBoot}, {"PROXY", kLogProxy}, {"ALL", kLogAll},
};

uint32_t parseSubsys(const std::string& text) {
  if (text.empty()) return kLogAll;
  bool invert = text[0] == '^';
  uint32_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    for (const auto& s : kSubsysNames)
      if (strcasecmp(item.c_str(), s.name) == 0) mask |= s.bit;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

std::string expandFileName(const std::string& pattern) {
  std::string out;
  char host[256] = "unknown";
  gethostname(host, sizeof(host) - 1);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') {
        out += host;
      } else if (c == 'p') {
        out += std::to_string(getpid());
      } else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

void doInit() {
  std::string level = paramString("BRAID_DEBUG");
  int l = static_cast<int>(LogLevel::kWarn);
  if (strcasecmp(level.c_str(), "NONE") == 0 || level == "0") l = static_cast<int>(LogLevel::kNone);
  if (strcasecmp(level.c_str(), "INFO") == 0) l = static_cast<int>(LogLevel::kInfo);
  if (strcasecmp(level.c_str(), "TRACE") == 0) l = static_cast<int>(LogLevel::kTrace);
  // Naming subsystems without a level means "show me those": INFO for them.
  const char* lv = getenv("BRAID_DEBUG");
  const char* ss = getenv("BRAID_DEBUG_SUBSYS");
  if ((lv == nullptr || lv[0] == '\0') && ss != nullptr && ss[0] != '\0') l = static_cast<int>(LogLevel::kInfo);
  gethostname(gHost, sizeof(gHost) - 1);
  char* dot = strchr(gHost, '.');
  if (dot != nullptr) *dot = '\0';
  gSubsys.store(parseSubsys(paramString("BRAID_DEBUG_SUBSYS")), std::memory_order_relaxed);
  std::string file = paramString("BRAID_DEBUG_FILE");
  if (!file.empty()) {
    FILE* f = fopen(expandFileName(file).c_str(), "a");
    if (f != nullptr) {
      setvbuf(f, nullptr, _IOLBF, 0);
      gOut = f;
    }
  }
  gLevel.store(l, std::memory_order_release);
}

}  // namespace

void init() { std::call_once(gOnce, doInit); }

void write(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  static const char* kLevelNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  init();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  char rank[16] = "";
  if (tRank >= 0) snprintf(rank, sizeof(rank), " [%d]", tRank);
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  // One fprintf per line keeps lines whole when several threads log.
  if (level == LogLevel::kTrace) {
    fprintf(gOut, "%s:%d:%ld%s braid %s %s:%d %s\n", gHost, getpid(), static_cast<long>(syscall(SYS_gettid)), rank,
            kLevelNames[static_cast<int>(level)], base, line, msg);
  } else {
    fprintf(gOut, "%s:%d:%ld%s braid %s %s\n", gHost, getpid(), static_cast<long>(syscall(SYS_gettid)), rank,
            kLevelNames[static_cast<int>(level)], msg);
  }
}

}  // namespace log_detail

void setLogRank(int rank) { log_detail::tRank = rank; }

}  // namespace braid
