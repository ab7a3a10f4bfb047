// Logging in the shape of NCCL_DEBUG: BRAID_DEBUG=WARN|INFO|TRACE selects the level,
// BRAID_DEBUG_SUBSYS=INIT,NET,... the subsystems (ALL by default, ^NET excludes), BRAID_DEBUG_FILE a
// file name where %h is the host and %p the pid. A disabled INFO costs one relaxed load and a branch.
#pragma once

#include <atomic>
#include <cstdint>

#include "src/base/status.h"

namespace braid {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogColl = 1u << 1,
  kLogNet = 1u << 2,
  kLogShm = 1u << 3,
  kLogP2p = 1u << 4,
  kLogTopo = 1u << 5,
  kLogTune = 1u << 6,
  kLogPlan = 1u << 7,
  kLogBoot = 1u << 8,
  kLogAll = 0xffffffffu,
};

namespace log_detail {
extern std::atomic<int> gLevel;        // LogLevel, -1 until initialized from the environment
extern std::atomic<uint32_t> gSubsys;  // LogSubsys mask
void init();
void write(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
inline bool enabled(LogLevel level, uint32_t subsys) {
  int l = gLevel.load(std::memory_order_relaxed);
  if (__builtin_expect(l < 0, 0)) {
    init();
    l = gLevel.load(std::memory_order_relaxed);
  }
  return l >= static_cast<int>(level) && (gSubsys.load(std::memory_order_relaxed) & subsys) != 0;
}
}  // namespace log_detail

// The rank printed in log lines of this thread ("[3]"); -1 prints nothing.
void setLogRank(int rank);

// Whether BRAID_DEBUG_FILE names something the logger can write to without blocking: a regular
// file (created when missing), a character device (/dev/null, a terminal) or a pipe that has a
// reader (/dev/stderr when stderr is a pipe). A FIFO without a reader, a directory or a socket is
// an error naming the path. Opens and closes the file (creating it, as the logger would).
Status checkLogFile();

}  // namespace braid

#define BRAID_LOG(level, subsys, ...)                                             \
  do {                                                                            \
    if (::braid::log_detail::enabled(level, subsys))                              \
      ::braid::log_detail::write(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define BRAID_WARN(subsys, ...) BRAID_LOG(::braid::LogLevel::kWarn, subsys, __VA_ARGS__)
#define BRAID_INFO(subsys, ...) BRAID_LOG(::braid::LogLevel::kInfo, subsys, __VA_ARGS__)
#define BRAID_TRACE(subsys, ...) BRAID_LOG(::braid::LogLevel::kTrace, subsys, __VA_ARGS__)
