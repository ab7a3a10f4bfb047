// Glue shared by the C API files (src/api.cc, src/api_coll.cc): the exception/status guard that
// turns every internal outcome into a braidResult_t and this thread's last-error text.
#pragma once

#include <new>
#include <string>

#include "src/log.h"
#include "src/status.h"

struct braidComm;

namespace braid {

void setLastError(const std::string& message);

// braidInvalidArgument unless `comm` is a live communicator (src/api.cc).
Status checkComm(const braidComm* comm);

// Runs `body` (returning Status); converts failures and exceptions at the C boundary.
template <class F>
braidResult_t guard(const char* fn, F&& body) {
  try {
    Status s = body();
    if (s.ok()) return braidSuccess;
    setLastError(std::string(fn) + ": " + s.message());
    if (s.code() == braidInvalidArgument || s.code() == braidInvalidUsage)
      BRAID_WARN(kLogColl, "%s: %s", fn, s.message().c_str());
    return s.code();
  } catch (const std::bad_alloc&) {
    setLastError(std::string(fn) + ": out of memory");
    return braidSystemError;
  } catch (const std::exception& e) {
    setLastError(std::string(fn) + ": internal error: " + e.what());
    return braidInternalError;
  } catch (...) {
    setLastError(std::string(fn) + ": internal error: unknown exception");
    return braidInternalError;
  }
}

}  // namespace braid
