// TCP socket helpers shared by the bootstrap (src/bootstrap.cc) and the tcp transport. Every call
// that waits takes a Deadline; every failure names the address and carries errno's text.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "src/base/clock.h"
#include "src/base/status.h"

namespace braid {

// An owned file descriptor (closed on destruction). Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Hands the descriptor out (no longer closed here, nor in a forked child).
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// fork(): closes `fd` in every child forked while it is open (a pthread_atfork handler), for the
// sockets whose end tells the peers that this process died: its control connections and tcp links.
// A child that kept them (a data loader's workers, alive for seconds after their parent) would keep
// the connections open, and the peers would learn of the death only from the heartbeats, or up to
// BRAID_TIMEOUT when none had come yet. Not for a unique id's listener: ranks forked after
// braidGetUniqueId use it. The mark ends when the Fd closes or releases the descriptor.
void closeInForkedChild(const Fd& fd);

// An IPv4 or IPv6 socket address; plain data, safe to copy into wire messages (fixed 28 bytes max).
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
  std::string toString() const;  // "10.0.0.1:4242", "[::1]:4242"
};

// `len` bytes of a socket address that came from another process: true, with *out set, when they
// hold a whole IPv4 or IPv6 address (the family and the length agree); false changes nothing.
bool sockAddrFromBytes(const void* bytes, size_t len, SockAddr* out);

// "host:port", "[v6]:port" or "host" (port 0). Resolves names with getaddrinfo (IPv4 first).
Status parseHostPort(const std::string& text, SockAddr* out);
// Whether braid's sockets prefer IPv6: BRAID_SOCKET_FAMILY=ipv6, or auto with an IPv6 BRAID_ROOT.
bool preferIpv6();
// The first address of interface `ifname` (IPv4 preferred, IPv6 when preferIpv6(); a global IPv6
// address before a link-local one). A name that does not exist, or has no
// address, is braidInvalidArgument listing the interfaces that do exist.
Status interfaceAddress(const std::string& ifname, SockAddr* out);
// BRAID_SOCKET_IFNAME's address when set; else the first up, non-loopback address of the preferred
// family (preferIpv6), else of the other family; else 127.0.0.1 (::1 when IPv6 is preferred). Port 0.
Status defaultLocalAddress(SockAddr* out);

// Binds and listens (SO_REUSEADDR). Port 0 in `addr` picks a free port; `bound` gets the real one.
Status listenOn(const SockAddr& addr, int backlog, Fd* fd, SockAddr* bound);
// Connects, retrying refused/unreachable attempts until the deadline (the peer may not listen yet).
Status connectTo(const SockAddr& addr, Deadline deadline, Fd* fd);

// Blocking-style full send/receive on a socket of either mode, bounded by the deadline. recvAll
// fails with braidRemoteError on orderly close ("peer closed the connection").
Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline);
Status recvAll(int fd, void* data, size_t bytes, Deadline deadline);

Status setNonBlocking(int fd, bool on);
Status setNoDelay(int fd);

// Logs the connections a listener refuses (strangers, junk, floods) without flooding the log: the
// first kDetailed individually at WARN with the peer address and reason, later ones only counted,
// with one summary line at most every kSummaryMs while they keep coming and one from summarize().
// One per listening loop; not thread-safe.
class RefusalLog {
 public:
  // `who` prefixes every line ("rendezvous", "tcp: rank 3").
  RefusalLog(uint32_t subsys, std::string who) : subsys_(subsys), who_(std::move(who)) {}
  void refuse(const SockAddr& from, const std::string& why);
  // Logs what refuse() counted without logging since the last summary.
  void summarize();
  uint64_t total() const { return total_; }

  static constexpr int kDetailed = 8;
  static constexpr int64_t kSummaryMs = 5000;

 private:
  uint32_t subsys_;
  std::string who_;
  uint64_t total_ = 0;
  uint64_t unlogged_ = 0;
  int64_t lastSummaryNs_ = 0;
  std::string lastFrom_, lastWhy_;
};

}  // namespace braid
