// Monotonic time and deadlines. Every wait in braid has one (BRAID_TIMEOUT).
#pragma once

#include <time.h>

#include <cstdint>

namespace braid {

inline int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Deadline {
  int64_t atNs = INT64_MAX;  // INT64_MAX = never

  static Deadline afterSeconds(double s) { return Deadline{nowNs() + static_cast<int64_t>(s * 1e9)}; }
  static Deadline afterMs(int64_t ms) { return Deadline{nowNs() + ms * 1000000}; }
  bool expired() const { return nowNs() >= atNs; }
  // Milliseconds left, clamped to [0, capMs]; for poll() timeouts.
  int remainingMs(int capMs = 1 << 30) const {
    if (atNs == INT64_MAX) return capMs;
    int64_t left = (atNs - nowNs() + 999999) / 1000000;
    if (left < 0) return 0;
    return left > capMs ? capMs : static_cast<int>(left);
  }
};

// One spin-wait pause (x86 PAUSE: lets a hyperthread sibling run, saves power); nothing elsewhere.
inline void cpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace braid
