// A cheap [[nodiscard]] status for braid's internals: a result code plus, on failure only, a message.
// Converted to braidResult_t + braidGetLastError() at the C boundary (src/api.cc).
#pragma once

#include <exception>
#include <new>
#include <string>

#include "braid/braid.h"

namespace braid {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(braidResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == braidSuccess; }
  braidResult_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prefixes context ("while connecting to peer 3: ") to a failure; a success stays a success.
  Status withContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  braidResult_t code_ = braidSuccess;
  std::string message_;
};

inline Status okStatus() { return Status(); }

// printf-style constructor for failures: errorf(braidSystemError, "connect to %s: %s", ...).
Status errorf(braidResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// A braidSystemError whose message ends with strerror(errnum).
Status systemError(int errnum, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Runs `body` (returning Status) with every exception it throws turned into a Status: out of
// memory is braidSystemError, anything else braidInternalError. Where C callers (the C API, the
// NCCL shim, a group's setup jobs) meet C++.
template <class F>
Status catching(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Status(braidSystemError, "out of memory");
  } catch (const std::exception& e) {
    return Status(braidInternalError, std::string("internal error: ") + e.what());
  } catch (...) {
    return Status(braidInternalError, "internal error: unknown exception");
  }
}

}  // namespace braid

// The one propagation macro: return the failure of `expr` to the caller.
#define BRAID_TRY(expr)                                    \
  do {                                                     \
    ::braid::Status braid_try_status_ = (expr);            \
    if (!braid_try_status_.ok()) return braid_try_status_; \
  } while (0)
