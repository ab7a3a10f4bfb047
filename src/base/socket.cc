#include "src/base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "src/base/config.h"
#include "src/base/log.h"

namespace braid {

namespace {

// The descriptors marked by closeInForkedChild, one bit each (higher ones are not marked: a process
// with 65536 descriptors open is rare, and an unmarked socket only keeps the old behaviour).
constexpr int kMaxForkFds = 1 << 16;
std::atomic<uint64_t> gForkFds[kMaxForkFds / 64];
std::once_flag gForkHandler;

void closeMarkedInChild() {
  for (int w = 0; w < kMaxForkFds / 64; ++w) {
    uint64_t bits = gForkFds[w].exchange(0, std::memory_order_relaxed);
    for (; bits != 0; bits &= bits - 1) ::close(w * 64 + __builtin_ctzll(bits));
  }
}

// Unmarked before it is closed, so that a descriptor number reused meanwhile is never closed for it.
void unmark(int fd) {
  if (fd >= 0 && fd < kMaxForkFds) gForkFds[fd / 64].fetch_and(~(uint64_t{1} << (fd % 64)), std::memory_order_relaxed);
}

}  // namespace

void closeInForkedChild(const Fd& fd) {
  const int f = fd.get();
  if (f < 0 || f >= kMaxForkFds) return;
  std::call_once(gForkHandler, [] { pthread_atfork(nullptr, nullptr, closeMarkedInChild); });
  gForkFds[f / 64].fetch_or(uint64_t{1} << (f % 64), std::memory_order_relaxed);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);  // the mark, if any, goes with the number
  }
  return *this;
}

int Fd::release() {
  unmark(fd_);
  return std::exchange(fd_, -1);
}

void Fd::reset(int fd) {
  if (fd_ >= 0) {
    unmark(fd_);
    ::close(fd_);
  }
  fd_ = fd;
}

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SockAddr::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof(host));
    // Appended piece by piece: g++ 12 warns (-Wrestrict, a false positive) on a chain of +.
    std::string s = "[";
    s.append(host).append("]:").append(std::to_string(port()));
    return s;
  }
  return "(no address)";
}

bool sockAddrFromBytes(const void* bytes, size_t len, SockAddr* out) {
  sa_family_t family = 0;
  if (len < sizeof(family) || len > sizeof(out->storage)) return false;
  memcpy(&family, bytes, sizeof(family));
  const size_t want = family == AF_INET ? sizeof(sockaddr_in) : family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  if (want == 0 || len != want) return false;
  SockAddr a;
  memcpy(&a.storage, bytes, len);
  a.len = static_cast<socklen_t>(len);
  *out = a;
  return true;
}

Status parseHostPort(const std::string& text, SockAddr* out) {
  std::string host = text;
  std::string port = "0";
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) return errorf(braidInvalidArgument, "bad address '%s': missing ]", text.c_str());
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return errorf(braidInvalidArgument, "bad address '%s'", text.c_str());
      port = text.substr(close + 2);
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string::npos && text.find(':') == colon) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
  }
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535)
    return errorf(braidInvalidArgument, "bad port in address '%s'", text.c_str());
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return errorf(braidInvalidArgument, "cannot resolve '%s': %s", host.c_str(), gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  SockAddr addr;
  memcpy(&addr.storage, pick->ai_addr, pick->ai_addrlen);
  addr.len = pick->ai_addrlen;
  addr.setPort(static_cast<int>(p));
  freeaddrinfo(res);
  *out = addr;
  return okStatus();
}

namespace {

// Whether an IPv6 address is link-local (fe80::/10): usable only with the scope of one host's
// interface, so never published to peers while a wider address exists.
bool linkLocal6(const sockaddr* sa) {
  const uint8_t* b = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr.s6_addr;
  return b[0] == 0xfe && (b[1] & 0xc0) == 0x80;
}

}  // namespace

bool preferIpv6() {
  std::string fam;
  if (paramEnum("BRAID_SOCKET_FAMILY", &fam).ok() && fam != "auto") return fam == "ipv6";
  // auto: the rendezvous address decides, so that BRAID_ROOT=[::1]:port keeps every socket on IPv6.
  const std::string root = paramString("BRAID_ROOT");
  return !root.empty() && (root[0] == '[' || root.find(':') != root.rfind(':'));
}

Status interfaceAddress(const std::string& ifname, SockAddr* out) {
  const bool v6First = preferIpv6();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return systemError(errno, "getifaddrs");
  const ifaddrs* v4 = nullptr;
  const ifaddrs* v6 = nullptr;
  std::string names;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (names.find(std::string(" ") + i->ifa_name + " ") == std::string::npos)
      names += std::string(" ") + i->ifa_name + " ";
    if (ifname != i->ifa_name) continue;
    if (fam == AF_INET && v4 == nullptr) v4 = i;
    // A wider IPv6 address replaces a link-local one found first.
    if (fam == AF_INET6 && (v6 == nullptr || (linkLocal6(v6->ifa_addr) && !linkLocal6(i->ifa_addr)))) v6 = i;
  }
  const ifaddrs* pick = v6First ? (v6 != nullptr ? v6 : v4) : (v4 != nullptr ? v4 : v6);
  if (pick == nullptr) {
    freeifaddrs(list);
    return errorf(braidInvalidArgument, "network interface '%s' does not exist or has no address (interfaces:%s)",
                  ifname.c_str(), names.c_str());
  }
  SockAddr addr;
  addr.len = pick->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  memcpy(&addr.storage, pick->ifa_addr, addr.len);
  addr.setPort(0);
  freeifaddrs(list);
  *out = addr;
  return okStatus();
}

Status defaultLocalAddress(SockAddr* out) {
  std::string ifname = paramString("BRAID_SOCKET_IFNAME");
  if (!ifname.empty()) return interfaceAddress(ifname, out);
  const bool v6First = preferIpv6();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return systemError(errno, "getifaddrs");
  // The first up, non-loopback address of the preferred family (IPv6: not link-local), else of
  // the other family (a host with only IPv6 addresses still reaches its peers), else loopback.
  SockAddr addr;
  for (int pass = 0; pass < 2 && addr.len == 0; ++pass) {
    const int fam = (pass == 0) == v6First ? AF_INET6 : AF_INET;
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != fam) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      if (fam == AF_INET6 && linkLocal6(i->ifa_addr)) continue;
      addr.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      memcpy(&addr.storage, i->ifa_addr, addr.len);
      break;
    }
  }
  freeifaddrs(list);
  if (addr.len == 0) return parseHostPort(v6First ? "[::1]:0" : "127.0.0.1:0", out);
  addr.setPort(0);
  *out = addr;
  return okStatus();
}

Status setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return systemError(errno, "fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return systemError(errno, "fcntl(F_SETFL)");
  return okStatus();
}

Status setNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) return systemError(errno, "TCP_NODELAY");
  return okStatus();
}

Status listenOn(const SockAddr& addr, int backlog, Fd* fd, SockAddr* bound) {
  Fd s(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return systemError(errno, "socket");
  int one = 1;
  setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s.get(), addr.sa(), addr.len) != 0) return systemError(errno, "bind %s", addr.toString().c_str());
  if (listen(s.get(), backlog) != 0) return systemError(errno, "listen %s", addr.toString().c_str());
  SockAddr b;
  b.len = sizeof(b.storage);
  if (getsockname(s.get(), reinterpret_cast<sockaddr*>(&b.storage), &b.len) != 0)
    return systemError(errno, "getsockname");
  *bound = b;
  *fd = std::move(s);
  return okStatus();
}

static Status waitFd(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, deadline.remainingMs(1000));
    if (rc > 0) return okStatus();
    if (rc < 0 && errno != EINTR) return systemError(errno, "poll while %s", what);
    if (deadline.expired()) return errorf(braidTimeout, "timed out while %s", what);
  }
}

namespace {
bool connectedToSelf(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof(local), plen = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0)
    return false;
  return llen == plen && memcmp(&local, &peer, llen) == 0;
}
}  // namespace

Status connectTo(const SockAddr& addr, Deadline deadline, Fd* fd) {
  int delayMs = 10;
  for (;;) {
    Fd s(socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s.valid()) return systemError(errno, "socket");
    int rc = connect(s.get(), addr.sa(), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      std::string what = "connecting to " + addr.toString();
      BRAID_TRY(waitFd(s.get(), POLLOUT, deadline, what.c_str()));
      socklen_t len = sizeof(err);
      getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0 && connectedToSelf(s.get())) {
      // TCP simultaneous open: with nobody listening yet, a connect to a local port can pick that
      // very port as its ephemeral source and connect to itself. Drop it (freeing the port for the
      // listener) and try again.
      err = ECONNREFUSED;
    } else if (err == 0) {
      BRAID_TRY(setNonBlocking(s.get(), false));
      // Every braid stream carries framed request/reply traffic (hellos, all-gather steps, control
      // frames): with Nagle on, each small reply waits for the peer's delayed ACK (~40 ms here).
      BRAID_TRY(setNoDelay(s.get()));
      *fd = std::move(s);
      return okStatus();
    }
    bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
                 err == ECONNRESET || err == EAGAIN;
    if (!retry) return systemError(err, "connect to %s", addr.toString().c_str());
    if (deadline.expired())
      return errorf(braidTimeout, "could not connect to %s before the deadline: %s", addr.toString().c_str(),
                    strerror(err));
    usleep(static_cast<useconds_t>(delayMs) * 1000);
    delayMs = delayMs < 200 ? delayMs * 2 : 200;
  }
}

Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      BRAID_TRY(waitFd(fd, POLLOUT, deadline, "sending"));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) return errorf(braidRemoteError, "peer closed the connection");
    return systemError(errno, "send");
  }
  return okStatus();
}

Status recvAll(int fd, void* data, size_t bytes, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return errorf(braidRemoteError, "peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BRAID_TRY(waitFd(fd, POLLIN, deadline, "receiving"));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return errorf(braidRemoteError, "peer reset the connection");
    return systemError(errno, "recv");
  }
  return okStatus();
}

void RefusalLog::refuse(const SockAddr& from, const std::string& why) {
  ++total_;
  if (total_ <= kDetailed) {
    BRAID_WARN(subsys_, "%s: refused a connection from %s: %s%s", who_.c_str(), from.toString().c_str(), why.c_str(),
               total_ == kDetailed ? " (further refusals are counted, not listed)" : "");
    lastSummaryNs_ = nowNs();
    return;
  }
  ++unlogged_;
  lastFrom_ = from.toString();
  lastWhy_ = why;
  if (nowNs() - lastSummaryNs_ >= kSummaryMs * 1000000) summarize();
}

void RefusalLog::summarize() {
  if (unlogged_ == 0) return;
  BRAID_WARN(subsys_, "%s: refused %llu more connections (%llu in all; the last from %s: %s)", who_.c_str(),
             static_cast<unsigned long long>(unlogged_), static_cast<unsigned long long>(total_), lastFrom_.c_str(),
             lastWhy_.c_str());
  unlogged_ = 0;
  lastSummaryNs_ = nowNs();
}

}  // namespace braid
