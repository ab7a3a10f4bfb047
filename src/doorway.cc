#include "src/doorway.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "src/base/clock.h"
#include "src/base/log.h"

namespace braid {

Doorway::Doorway(const char* message, size_t bytes, Prefix prefix, uint32_t subsys, std::string who)
    : message_(message),
      bytes_(std::min(bytes, kMaxMessage)),
      prefix_(prefix),
      subsys_(subsys),
      who_(who),
      refusals_(subsys, std::move(who)) {}

std::string Doorway::progress(const Conn& c) const {
  return std::to_string(c.got) + " of " + std::to_string(bytes_) + " " + message_ + " bytes";
}

void Doorway::expire(int64_t now) {
  // Deadlines grow along the deque, so only the front can have expired.
  while (!waiting_.empty() && waiting_.front().deadlineNs <= now) {
    refuse(waiting_.front(), "no complete " + std::string(message_) + " within " + std::to_string(kWaitMs) + " ms (" +
                                 progress(waiting_.front()) + ")");
    waiting_.pop_front();
  }
}

int64_t Doorway::wakeNs(int64_t atNs) const {
  if (!waiting_.empty()) atNs = std::min(atNs, waiting_.front().deadlineNs);
  if (pausedUntilNs_ > nowNs()) atNs = std::min(atNs, pausedUntilNs_);
  return atNs;
}

void Doorway::addPollFds(std::vector<pollfd>* pfds) const {
  for (const Conn& c : waiting_) pfds->push_back({c.fd.get(), POLLIN, 0});
}

Status Doorway::serve(const pollfd* first, const Arrived& arrived) {
  Status fatal;
  for (size_t i = 0; i < waiting_.size() && fatal.ok(); ++i)
    if (first[i].revents != 0 && read(waiting_[i], arrived, &fatal)) waiting_[i].fd.reset();
  // Removing finished entries from anywhere keeps the deque ordered by deadline.
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [](const Conn& c) { return !c.fd.valid(); }),
                 waiting_.end());
  return fatal;
}

Status Doorway::acceptSome(int listenFd, int64_t now, int64_t deadlineNs, const Arrived& arrived) {
  for (int i = 0; i < kAcceptsPerRound; ++i) {
    SockAddr from;
    from.len = sizeof(from.storage);
    int s = accept4(listenFd, reinterpret_cast<sockaddr*>(&from.storage), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s < 0) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return okStatus();
      if ((err == EMFILE || err == ENFILE) && !waiting_.empty()) {
        // Out of descriptors: make room by dropping the oldest stranger, then accept again.
        refuse(waiting_.front(), std::string("dropped to free a descriptor (accept: ") + strerror(err) + ")");
        waiting_.pop_front();
        continue;
      }
      // Nothing of ours to free (or another accept failure): the connection stays queued in the
      // kernel; try again shortly instead of spinning on a listener that stays readable.
      if (acceptFailures_++ == 0)
        BRAID_WARN(subsys_, "%s: accept: %s; retrying every %lld ms", who_.c_str(), strerror(err),
                   static_cast<long long>(kAcceptBackoffMs));
      acceptErrno_ = err;
      pausedUntilNs_ = now + kAcceptBackoffMs * 1000000;
      return okStatus();
    }
    // Both ends of every braid stream run without Nagle (see connectTo); a stranger's connection
    // costs nothing more for it.
    (void)setNoDelay(s);
    if (waiting_.size() >= kMaxPending) {
      refuse(waiting_.front(),
             "dropped: " + std::to_string(waiting_.size()) + " connections waiting for a " + message_);
      waiting_.pop_front();
    }
    Conn& c = waiting_.emplace_back();
    c.fd.reset(s);
    c.from = from;
    c.deadlineNs = std::min(nowNs() + kWaitMs * 1000000, deadlineNs);
    Status fatal;
    if (read(c, arrived, &fatal)) waiting_.pop_back();
    if (!fatal.ok()) return fatal;
  }
  return okStatus();
}

bool Doorway::read(Conn& c, const Arrived& arrived, Status* fatal) {
  ssize_t n = recv(c.fd.get(), c.buf + c.got, bytes_ + 1 - c.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {
    refuse(c, std::string(n == 0 ? "closed" : strerror(errno)) + " after " + progress(c));
    return true;
  }
  c.got += static_cast<size_t>(n);
  // Junk is refused as soon as its first bytes are in, without waiting for the rest.
  Status s = prefix_(c.buf, c.got);
  if (!s.ok()) {
    refuse(c, s.message());
    return true;
  }
  if (c.got < bytes_) return false;
  *fatal = arrived(c);
  return true;
}

std::string Doorway::acceptTrouble() const {
  if (acceptFailures_ == 0) return "";
  return "; accepting connections failed " + std::to_string(acceptFailures_) + " times here: " + strerror(acceptErrno_);
}

void Doorway::close() {
  for (const Conn& c : waiting_) refuse(c, "setup finished with " + progress(c));
  waiting_.clear();
  refusals_.summarize();
}

}  // namespace braid
