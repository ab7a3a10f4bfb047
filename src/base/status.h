// A cheap [[nodiscard]] status for braid's internals: a result code plus, on failure only, a message.
// Converted to braidResult_t + braidGetLastError() at the C boundary (src/api.cc).
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "braid/braid.h"

namespace braid {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(braidResult_t code, std::string message)
      : code_(code), message_(code == braidSuccess ? nullptr : new std::string(std::move(message))) {}
  Status(const Status& o) : code_(o.code_), message_(o.message_ != nullptr ? new std::string(*o.message_) : nullptr) {}
  Status(Status&& o) noexcept : code_(o.code_), message_(o.message_) {
    o.code_ = braidSuccess;
    o.message_ = nullptr;
  }
  Status& operator=(const Status& o) {
    if (this != &o) {
      std::string* copy = o.message_ != nullptr ? new std::string(*o.message_) : nullptr;
      delete message_;
      code_ = o.code_;
      message_ = copy;
    }
    return *this;
  }
  // The source is left a success, as after a move construction.
  Status& operator=(Status&& o) noexcept {
    if (this != &o) {
      delete message_;
      code_ = std::exchange(o.code_, braidSuccess);
      message_ = std::exchange(o.message_, nullptr);
    }
    return *this;
  }
  ~Status() { delete message_; }

  bool ok() const { return code_ == braidSuccess; }
  braidResult_t code() const { return code_; }
  const std::string& message() const { return message_ != nullptr ? *message_ : emptyMessage(); }
  // Prefixes context ("while connecting to peer 3: ") to a failure; a success stays a success.
  Status withContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message());
  }

 private:
  static const std::string& emptyMessage() {
    static const std::string empty;
    return empty;
  }
  // A success is a code and a null pointer: every call on the hot path returns one, so it costs two
  // stores and a test, where a std::string member cost a construction and a destruction each time.
  braidResult_t code_ = braidSuccess;
  std::string* message_ = nullptr;
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
