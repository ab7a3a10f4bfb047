#include "src/base/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace braid {

static std::string vformat(const char* fmt, va_list ap) {
  char buf[512];
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  if (n < 0) {
    va_end(copy);
    return "(unformattable message)";
  }
  if (static_cast<size_t>(n) < sizeof(buf)) {
    va_end(copy);
    return std::string(buf, n);
  }
  std::string out(n, '\0');
  vsnprintf(out.data(), n + 1, fmt, copy);
  va_end(copy);
  return out;
}

Status errorf(braidResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  return Status(code, std::move(msg));
}

Status systemError(int errnum, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  char ebuf[128];
  const char* e = strerror_r(errnum, ebuf, sizeof(ebuf));
  msg += ": ";
  msg += e;
  return Status(braidSystemError, std::move(msg));
}

}  // namespace braid
