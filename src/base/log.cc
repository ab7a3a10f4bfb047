#include "src/base/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "src/base/config.h"

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
    {"INIT", kLogInit}, {"COLL", kLogColl}, {"NET", kLogNet},   {"SHM", kLogShm},   {"P2P", kLogP2p},
    {"TOPO", kLogTopo}, {"TUNE", kLogTune}, {"PLAN", kLogPlan}, {"BOOT", kLogBoot}, {"ALL", kLogAll},
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

// Opens the log file for appending. O_NONBLOCK makes the open of a FIFO without a reader fail
// (ENXIO) instead of waiting for one forever; writes then block as they would on stderr.
Status openLogFile(const std::string& path, int* out) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENXIO)
    return errorf(braidInvalidArgument, "log file %s is a FIFO that nobody reads, or a socket", path.c_str());
  // A setting the user can fix, so braidInvalidArgument like the other settings.
  if (fd < 0) return errorf(braidInvalidArgument, "cannot open log file %s: %s", path.c_str(), strerror(errno));
  struct stat st;
  int flags = fcntl(fd, F_GETFL);
  if (fstat(fd, &st) != 0 || flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return systemError(e, "log file %s", path.c_str());
  }
  if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    close(fd);
    return errorf(braidInvalidArgument, "log file %s is not a regular file, a character device or a pipe",
                  path.c_str());
  }
  *out = fd;
  return okStatus();
}

// One line on stderr, in the logger's format, for a setting the logger cannot follow: it may run
// before any communicator, so it cannot fail anything; the communicator's init fails on the same
// setting (checkParams).
void warnFallback(const Status& why, const char* fallback) {
  fprintf(stderr, "%s:%d braid WARN %s; %s\n", gHost, getpid(), why.message().c_str(), fallback);
}

void doInit() {
  gethostname(gHost, sizeof(gHost) - 1);
  char* dot = strchr(gHost, '.');
  if (dot != nullptr) *dot = '\0';
  std::string level;
  Status levelOk = paramEnum("BRAID_DEBUG", &level);
  if (!levelOk.ok()) warnFallback(levelOk, "logging at WARN");
  int l = static_cast<int>(LogLevel::kWarn);
  if (level == "NONE" || level == "0") l = static_cast<int>(LogLevel::kNone);
  if (level == "INFO") l = static_cast<int>(LogLevel::kInfo);
  if (level == "TRACE") l = static_cast<int>(LogLevel::kTrace);
  // Naming subsystems without a level means "show me those": INFO for them.
  if (!paramIsSet("BRAID_DEBUG") && paramIsSet("BRAID_DEBUG_SUBSYS")) l = static_cast<int>(LogLevel::kInfo);
  Status subsysOk = checkParam("BRAID_DEBUG_SUBSYS");
  if (!subsysOk.ok()) warnFallback(subsysOk, "ignoring the unknown names");
  gSubsys.store(parseSubsys(paramString("BRAID_DEBUG_SUBSYS")), std::memory_order_relaxed);
  std::string file = paramString("BRAID_DEBUG_FILE");
  if (!file.empty()) {
    int fd = -1;
    Status opened = openLogFile(expandFileName(file), &fd);
    FILE* f = opened.ok() ? fdopen(fd, "a") : nullptr;
    if (opened.ok() && f == nullptr) {
      opened = systemError(errno, "log file %s", file.c_str());
      close(fd);
    }
    if (f != nullptr) {
      setvbuf(f, nullptr, _IOLBF, 0);
      gOut = f;
    } else {
      warnFallback(opened.withContext("BRAID_DEBUG_FILE"), "logging to stderr");
    }
  }
  gLevel.store(l, std::memory_order_release);
}

}  // namespace

void init() { std::call_once(gOnce, doInit); }

void write(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  static const char* kLevelNames[] = {"NONE", "WARN", "INFO", "TRACE"};
  init();
  // Most messages fit the stack; a longer one (an algorithm table, a plan) is formatted again into
  // the heap rather than cut at the buffer's end.
  char small[1024];
  std::string large;
  const char* msg = small;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int len = vsnprintf(small, sizeof(small), fmt, ap);
  va_end(ap);
  if (len >= static_cast<int>(sizeof(small))) {
    large.resize(static_cast<size_t>(len) + 1);
    vsnprintf(large.data(), large.size(), fmt, again);
    msg = large.c_str();
  }
  va_end(again);
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

Status checkLogFile() {
  const std::string file = paramString("BRAID_DEBUG_FILE");
  if (file.empty()) return okStatus();
  // The logger opens its file first: closing the check's descriptor then is not the last writer
  // of a pipe going away, which would give its reader an end of file.
  log_detail::init();
  int fd = -1;
  BRAID_TRY(log_detail::openLogFile(log_detail::expandFileName(file), &fd));
  close(fd);
  return okStatus();
}

}  // namespace braid
