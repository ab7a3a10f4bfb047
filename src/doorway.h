// The door of a listener: accepted connections that have not yet delivered their first message (a
// rendezvous hello, a tcp handshake), which is where strangers are kept out. Shared by the
// rendezvous (src/rendezvous.cc) and the tcp transport's setup (transports/tcp/tcp.cc), each of
// which runs it from its own poll() loop.
//
// A connection gets kWaitMs (or less, up to the owner's deadline) to deliver its message, which is
// read as soon as it is accepted (a real peer sends it right after connecting) and checked as its
// bytes arrive: junk is refused at its first bytes. At most kMaxPending wait at once (a flood
// recycles the oldest); at most kAcceptsPerRound are accepted per loop round; when accept runs out
// of descriptors the oldest stranger is dropped, or accepting pauses for kAcceptBackoffMs. So a
// stranger costs one descriptor for a bounded time and never delays a real peer. Nothing is ever
// sent before the owner accepted the message; refusals go through a RefusalLog.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "src/base/socket.h"
#include "src/base/status.h"

namespace braid {

class Doorway {
 public:
  static constexpr size_t kMaxMessage = 256;
  static constexpr int64_t kWaitMs = 5000;
  static constexpr size_t kMaxPending = 256;
  static constexpr int kAcceptsPerRound = 64;
  static constexpr int64_t kAcceptBackoffMs = 10;

  // An accepted connection that has not yet proven who it is.
  struct Conn {
    Fd fd;
    SockAddr from;
    int64_t deadlineNs = 0;
    size_t got = 0;
    uint8_t buf[kMaxMessage + 1];  // one spare byte past the message detects an oversized one
  };

  // Checks the first `len` bytes of a message: an error refuses the connection at once.
  using Prefix = Status (*)(const uint8_t* data, size_t len);
  // A whole message arrived on `c`: the owner keeps the connection (moves c.fd out) or refuses it
  // (refusals().refuse). A non-ok Status is fatal to the owner's setup (a proven peer failed).
  using Arrived = std::function<Status(Conn& c)>;

  // `message` names the message in refusals ("hello"), `bytes` is its size (<= kMaxMessage);
  // `subsys` and `who` ("rendezvous", "tcp: rank 3") prefix the log lines.
  Doorway(const char* message, size_t bytes, Prefix prefix, uint32_t subsys, std::string who);

  RefusalLog& refusals() { return refusals_; }
  const RefusalLog& refusals() const { return refusals_; }
  // Refuses the connections whose time is up.
  void expire(int64_t now);
  // Whether to poll the listener (not while accepting is paused).
  bool listening(int64_t now) const { return now >= pausedUntilNs_; }
  // The earliest of `atNs`, the next connection's deadline and the end of an accept pause.
  int64_t wakeNs(int64_t atNs) const;
  // One pollfd per waiting connection, appended in order.
  void addPollFds(std::vector<pollfd>* pfds) const;
  // Reads the waiting connections that are readable (`first` is the first pollfd addPollFds added)
  // and drops those finished with. Call before acceptSome: it appends.
  Status serve(const pollfd* first, const Arrived& arrived);
  // Accepts what the listener has, up to kAcceptsPerRound; `deadlineNs` caps each one's wait.
  Status acceptSome(int listenFd, int64_t now, int64_t deadlineNs, const Arrived& arrived);
  // Setup is over: refuses the connections still waiting and logs the refusal summary.
  void close();
  // "" when every accept worked; else why accepting failed, for the owner's timeout error (a
  // process out of descriptors cannot take its peers' connections, and they then wait for it):
  // "; accepting connections failed 12 times here: Too many open files".
  std::string acceptTrouble() const;

 private:
  // Reads what arrived on c; true when c is finished with.
  bool read(Conn& c, const Arrived& arrived, Status* fatal);
  void refuse(const Conn& c, const std::string& why) { refusals_.refuse(c.from, why); }
  std::string progress(const Conn& c) const;  // "12 of 48 hello bytes"

  const char* message_;
  size_t bytes_;
  Prefix prefix_;
  uint32_t subsys_;
  std::string who_;
  std::deque<Conn> waiting_;  // ordered by deadline (each is min(accept time + kWaitMs, cap))
  int64_t pausedUntilNs_ = 0;
  uint64_t acceptFailures_ = 0;  // accept() calls that failed for want of resources
  int acceptErrno_ = 0;          // the last one's errno
  RefusalLog refusals_;
};

}  // namespace braid
