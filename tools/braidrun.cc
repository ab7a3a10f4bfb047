// braidrun: starts the ranks of a braid job on this machine as child processes.
//
// Each rank gets the environment braidCommInitFromEnv reads: BRAID_RANK, BRAID_WORLD_SIZE, BRAID_ROOT,
// BRAID_SECRET and, with --hosts, BRAID_HOSTID; and BRAID_LOCAL_RANK and BRAID_LOCAL_SIZE for the application
// (braid counts a host's ranks from their host ids). braidrun does not link libbraid.
//
// After starting the ranks, one event loop polls a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and, with
// --tag-output, the ranks' output pipes; it reaps children, forwards signals and enforces the deadlines. When a
// rank fails, the others get a grace period to fail on their own (braid makes them report the dead peer, which is
// worth reading), then SIGTERM, then SIGKILL. The first failure decides braidrun's exit status.
//
// When a rank exits, braidrun removes the shared-memory segments it left in /dev/shm: braid's shm transport names
// them /braid-<creator pid>-..., unlinks them itself within connect(), and leaves one behind only when both of the
// ranks sharing it are killed at that moment. Only names with the pid of one of our ranks are touched, never those
// of other jobs (nor those of processes a rank started: their pids are not ours to know).

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace braid {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitLauncherError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;        // what timeout(1) returns
constexpr int kExitNotExecutable = 126;  // the shell's codes for exec failures
constexpr int kExitNotFound = 127;
constexpr long kDefaultGraceMs = 2000;
constexpr auto kTermToKill = std::chrono::seconds(3);
constexpr long kMaxRanks = 16384;       // per braidrun; with --tag-output each rank costs two pipes
constexpr long kMaxNodes = 65536;       // kMaxRanks * kMaxNodes still fits an int
constexpr size_t kMaxLine = 64 * 1024;  // --tag-output emits a longer line without '\n' in pieces

const char kUsage[] =
    "usage: braidrun [options] [--] PROGRAM [ARGS...]\n"
    "Starts the ranks of a braid job, each with BRAID_RANK, BRAID_WORLD_SIZE, BRAID_LOCAL_RANK,\n"
    "BRAID_LOCAL_SIZE, BRAID_ROOT and BRAID_SECRET set.\n"
    "  -n N                ranks to start on this machine (default 1)\n"
    "  --hosts H           emulate H hosts here (N divisible by H); sets BRAID_HOSTID\n"
    "  --nnodes M          machines in the job, one braidrun on each (default 1)\n"
    "  --node-rank K       this machine's index 0..M-1 (default 0): ranks K*N .. K*N+N-1\n"
    "  --master ADDR:PORT  where rank 0 listens (BRAID_ROOT); needed when M > 1\n"
    "  -x VAR=VALUE        extra environment for every rank, wins over the rest (repeatable;\n"
    "                      -x VAR passes braidrun's own VAR)\n"
    "  --timeout SEC       stop the job after SEC seconds and exit 124\n"
    "  --tag-output        prefix each line the ranks print with \"[rank] \"\n"
    "  -h, --help          show this help\n"
    "BRAID_ROOT and BRAID_SECRET, when set, are kept; all braidruns of a multi-machine job need the same\n"
    "BRAID_SECRET. After a rank fails the others get BRAIDRUN_GRACE_MS (default 2000) to exit, then\n"
    "SIGTERM, then SIGKILL 3 s later.\n"
    "Exit status: 0 when all ranks exit 0; else the first failure's: a rank's status (128+N for signal N),\n"
    "128+N when braidrun got signal N, 124 on --timeout, 127 PROGRAM not found, 126 not executable,\n"
    "2 bad options, 1 braidrun's own error.\n";

struct Options {
  long ranks = 1;  // on this machine
  long hosts = 0;  // emulated hosts, 0 = off
  long nnodes = 1;
  long nodeRank = 0;
  std::string master;
  std::vector<std::string> extraEnv;  // "VAR=VALUE"
  double timeoutSec = 0;              // 0 = none
  bool tagOutput = false;
  long graceMs = kDefaultGraceMs;
  std::vector<char*> command;  // PROGRAM ARGS..., null-terminated
};

[[noreturn]] __attribute__((format(printf, 1, 2))) void usageError(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("braidrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'braidrun --help' for more information.\n", stderr);
  exit(kExitUsage);
}

// A whole number in [lo, hi], or seconds (a positive decimal) when T is double.
template <typename T>
T parseNumber(const std::string& what, const std::string& text, T lo, T hi) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(double(v))) {
    usageError("%s: '%s' is not a %s", what.c_str(), text.c_str(),
               std::is_same_v<T, double> ? "number" : "whole number");
  }
  if (v < lo || v > hi)
    usageError("%s must be between %.10g and %.10g, got %s", what.c_str(), double(lo), double(hi), text.c_str());
  return v;
}

// ADDR:PORT, where the last ':' separates the port ([v6addr]:port works too); ADDR itself is braid's to resolve.
void checkAddress(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) usageError("--master: '%s' is not ADDR:PORT", addr.c_str());
  parseNumber<long>("--master port", addr.substr(colon + 1), 1, 65535);
}

Options parseArgs(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM
    std::string name(arg);
    std::optional<std::string> attached;  // --opt=value, -nVALUE
    if (arg.starts_with("--")) {
      if (size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        attached = std::string(arg.substr(eq + 1));
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      attached = std::string(arg.substr(2));
    }
    auto value = [&]() -> std::string {
      if (attached) return *attached;
      if (i + 1 >= argc) usageError("option '%s' needs a value", name.c_str());
      return argv[++i];
    };
    if ((name == "-h" || name == "--help") && !attached) {
      fputs(kUsage, stdout);
      exit(0);
    } else if (name == "-n") {
      o.ranks = parseNumber<long>("-n", value(), 1, kMaxRanks);
    } else if (name == "--hosts") {
      o.hosts = parseNumber<long>(name, value(), 1, kMaxRanks);
    } else if (name == "--nnodes") {
      o.nnodes = parseNumber<long>(name, value(), 1, kMaxNodes);
    } else if (name == "--node-rank") {
      o.nodeRank = parseNumber<long>(name, value(), 0, kMaxNodes - 1);
    } else if (name == "--master") {
      o.master = value();
      checkAddress(o.master);
    } else if (name == "-x") {
      std::string v = value();
      size_t eq = v.find('=');
      if (eq == 0 || v.empty()) usageError("-x: '%s' is not VAR=VALUE", v.c_str());
      if (eq == std::string::npos) {
        const char* ours = getenv(v.c_str());
        if (!ours) usageError("-x %s: %s is not set in braidrun's environment", v.c_str(), v.c_str());
        v += "=" + std::string(ours);
      }
      o.extraEnv.push_back(std::move(v));
    } else if (name == "--timeout") {
      o.timeoutSec = parseNumber<double>(name, value(), 1e-3, 1e9);
    } else if (name == "--tag-output" && !attached) {
      o.tagOutput = true;
    } else {
      usageError("unknown option '%s'", argv[i]);
    }
  }
  if (i >= argc) usageError("missing PROGRAM");
  o.command.assign(argv + i, argv + argc);
  o.command.push_back(nullptr);

  if (o.nodeRank >= o.nnodes) usageError("--node-rank %ld is out of range for --nnodes %ld", o.nodeRank, o.nnodes);
  if (o.nnodes > 1 && o.master.empty() && !getenv("BRAID_ROOT")) {
    usageError("--nnodes %ld needs --master ADDR:PORT (or BRAID_ROOT in the environment)", o.nnodes);
  }
  if (o.hosts > 0) {
    if (o.nnodes > 1) usageError("--hosts emulates hosts on one machine and does not combine with --nnodes");
    if (o.ranks % o.hosts != 0) usageError("-n %ld is not divisible by --hosts %ld", o.ranks, o.hosts);
  }
  if (const char* grace = getenv("BRAIDRUN_GRACE_MS"); grace && *grace) {
    o.graceMs = parseNumber<long>("BRAIDRUN_GRACE_MS", grace, 0, 24L * 3600 * 1000);
  }
  return o;
}

// The environment of one rank: braidrun's own, with variables set or replaced.
class Environment {
 public:
  Environment() {
    for (char** e = environ; *e; ++e) vars_.emplace_back(*e);
  }
  void set(std::string_view name, std::string_view value) {
    std::string entry = std::string(name) + "=" + std::string(value);
    for (std::string& v : vars_) {
      if (v.size() > name.size() && v.starts_with(name) && v[name.size()] == '=') {
        v = std::move(entry);
        return;
      }
    }
    vars_.push_back(std::move(entry));
  }
  void set(std::string_view name, long value) { set(name, std::to_string(value)); }
  void setEntry(std::string_view entry) {
    size_t eq = entry.find('=');
    set(entry.substr(0, eq), entry.substr(eq + 1));
  }
  // For execve; valid while this object lives unchanged.
  std::vector<char*> pointers() {
    std::vector<char*> p;
    for (std::string& v : vars_) p.push_back(v.data());
    p.push_back(nullptr);
    return p;
  }

 private:
  std::vector<std::string> vars_;
};

const char* nonEmptyEnv(const char* name) {
  const char* v = getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] void fatal(const char* what) {
  fprintf(stderr, "braidrun: %s: %s\n", what, strerror(errno));
  exit(kExitLauncherError);
}

// A port on 127.0.0.1 that was free a moment ago. Race: another process may take it before braid's rank 0 binds it.
// The window is milliseconds and losing it is loud (rank 0 fails to bind and says so), so we do not retry.
int findFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fatal("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fatal("cannot find a free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// 128 bits from the kernel's CSPRNG as 32 hex digits.
std::string randomSecret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fatal("getrandom");
    got += n;
  }
  char hex[2 * sizeof bytes + 1];
  for (size_t i = 0; i < sizeof bytes; ++i) snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
  return hex;
}

// Writes all of `data`; drops it when the reader is gone (EPIPE), as there is nowhere else to put it.
void writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EAGAIN) {  // an inherited non-blocking stdout
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    data.remove_prefix(n);
  }
}

// One rank's stdout or stderr under --tag-output: copies what the rank writes to ours, each line prefixed. braidrun
// is the only writer and emits whole lines, so lines of different ranks never mix.
class TaggedStream {
 public:
  TaggedStream(int fd, int dest, long rank) : fd_(fd), dest_(dest), prefix_(std::to_string(rank)) {
    prefix_.insert(0, 1, '[').append("] ");  // not "[" + ... + "] ": gcc 12 -O3 warns falsely (-Wrestrict)
  }
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // One read, or with `drain` as many as the pipe holds (bounded: a grandchild may still be writing).
  void pump(bool drain) {
    char buf[65536];
    for (int reads = 0; fd_ >= 0 && reads < 64; ++reads) {
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {  // EOF: the rank and everything it started closed the pipe
        flush();
        close(fd_);
        fd_ = -1;
        return;
      }
      emit(std::string_view(buf, n));
      if (!drain) return;
    }
  }
  // Emits an unterminated last line, as its own line.
  void flush() {
    if (partial_.empty()) return;
    writeAll(dest_, prefix_ + partial_ + "\n");
    partial_.clear();
  }

 private:
  void emit(std::string_view data) {
    std::string out;
    while (!data.empty()) {
      size_t nl = data.find('\n');
      if (nl == std::string_view::npos) {
        partial_.append(data);
        break;
      }
      out += prefix_;
      out += partial_;
      out.append(data.substr(0, nl + 1));
      partial_.clear();
      data.remove_prefix(nl + 1);
    }
    if (partial_.size() >= kMaxLine) {
      out += prefix_ + partial_ + "\n";
      partial_.clear();
    }
    writeAll(dest_, out);
  }

  int fd_;
  int dest_;
  std::string prefix_;
  std::string partial_;
};

// Signal dispositions braidrun found at start, restored in the ranks.
struct InheritedSignals {
  sigset_t mask;
  struct sigaction pipe, child;
};

// Unlinks /dev/shm/braid-<pid>-*, the segments that process pid created and did not remove; returns how many.
int removeSegmentsOf(pid_t pid) {
  const std::string prefix = "braid-" + std::to_string(pid) + "-";
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    // unlinkat on the directory we list: a name, never a path a rank could have bent elsewhere.
    if (unlinkat(dirfd(dir), e->d_name, 0) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      fprintf(stderr, "braidrun: cannot remove /dev/shm/%s left by pid %d: %s\n", e->d_name, static_cast<int>(pid),
              strerror(errno));
    }
  }
  closedir(dir);
  return removed;
}

// The signals braidrun handles or sends.
const char* signalName(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "SIGKILL";
}

class Job {
 public:
  Job(const Options& opts, const InheritedSignals& inherited, int signalFd)
      : opts_(opts), inherited_(inherited), signalFd_(signalFd), pids_(opts.ranks) {
    if (opts_.tagOutput) streams_.reserve(2 * opts_.ranks);  // never reallocates: streams hold no resources to move
  }

  int run(Environment& base) {
    if (opts_.timeoutSec > 0) {
      timeoutAt_ =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts_.timeoutSec));
    }
    startRanks(base);
    while (live_ > 0) {
      reap();
      if (live_ == 0) break;
      enforceDeadlines();
      waitForEvents();
    }
    for (TaggedStream& s : streams_) {  // what the ranks wrote last; output of orphaned grandchildren is cut off
      s.pump(true);
      s.flush();
    }
    return exitCode_.value_or(0);
  }

 private:
  enum class Phase { kRunning, kGrace, kTerminating, kKilled };

  long globalRank(long local) const { return opts_.nodeRank * opts_.ranks + local; }

  void startRanks(Environment& base) {
    long perHost = opts_.hosts > 0 ? opts_.ranks / opts_.hosts : opts_.ranks;
    for (long i = 0; i < opts_.ranks; ++i) {
      Environment env = base;
      env.set("BRAID_RANK", globalRank(i));
      env.set("BRAID_LOCAL_RANK", i % perHost);
      env.set("BRAID_LOCAL_SIZE", perHost);
      if (opts_.hosts > 0) env.set("BRAID_HOSTID", "emuhost" + std::to_string(i / perHost));
      for (const std::string& e : opts_.extraEnv) env.setEntry(e);
      std::vector<char*> envp = env.pointers();
      if (!spawn(i, envp.data())) return;
    }
  }

  // Forks and execs rank `index`; returns whether the launch may go on.
  bool spawn(long index, char** envp) {
    int report[2];  // CLOEXEC: EOF tells the parent that exec succeeded, an errno that it failed
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(report, O_CLOEXEC) != 0) return launchError(index, "pipe");
    if (opts_.tagOutput && (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)) {
      return launchError(index, "pipe");  // fds of the failed launch leak; braidrun is about to exit anyway
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) execChild(envp, out[1], err[1], report[1], parent);
    int forkErrno = errno;
    for (int fd : {report[1], out[1], err[1]}) {
      if (fd >= 0) close(fd);
    }
    if (pid < 0) {
      errno = forkErrno;
      return launchError(index, "fork");
    }
    setpgid(pid, pid);  // the child does the same; doing it on both sides means no kill(-pid) can miss the group
    pids_[index] = pid;
    pidToIndex_[pid] = index;
    ++live_;
    if (opts_.tagOutput) {
      fcntl(out[0], F_SETFL, O_NONBLOCK);
      fcntl(err[0], F_SETFL, O_NONBLOCK);
      streams_.emplace_back(out[0], STDOUT_FILENO, globalRank(index));
      streams_.emplace_back(err[0], STDERR_FILENO, globalRank(index));
    }
    int childErrno = 0;
    ssize_t n;
    do {
      n = read(report[0], &childErrno, sizeof childErrno);
    } while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n != sizeof childErrno) return true;
    // The child exits right after reporting; reap it here so that it is not also reported as a failed rank.
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pids_[index] = 0;
    pidToIndex_.erase(pid);
    --live_;
    fprintf(stderr, "braidrun: cannot execute '%s': %s\n", opts_.command[0], strerror(childErrno));
    fail(childErrno == ENOENT || childErrno == ENOTDIR ? kExitNotFound : kExitNotExecutable);
    terminate();
    return false;
  }

  bool launchError(long index, const char* what) {
    fprintf(stderr, "braidrun: cannot start rank %ld: %s: %s\n", globalRank(index), what, strerror(errno));
    fail(kExitLauncherError);
    terminate();
    return false;
  }

  // Runs in the forked child: only async-signal-safe calls, as far as execvp's PATH search allows.
  [[noreturn]] void execChild(char** envp, int outFd, int errFd, int reportFd, pid_t parent) {
    // Each rank leads its own process group (see signalAll for why).
    setpgid(0, 0);
    // If braidrun dies unable to clean up (SIGKILL, crash), nobody would stop the rank: have the kernel do it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kExitLauncherError);  // braidrun died before prctl took effect
    if (outFd >= 0) {
      dup2(outFd, STDOUT_FILENO);
      dup2(errFd, STDERR_FILENO);
    }
    // braidrun forwards SIGINT/SIGTERM, so the ranks take them by default even if braidrun was started with them
    // ignored (as `cmd &` in a script does for SIGINT). SIGHUP stays as inherited, so nohup still works.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigaction(SIGPIPE, &inherited_.pipe, nullptr);
    sigaction(SIGCHLD, &inherited_.child, nullptr);
    sigprocmask(SIG_SETMASK, &inherited_.mask, nullptr);
    environ = envp;
    execvp(opts_.command[0], opts_.command.data());
    int e = errno;
    ssize_t ignored = write(reportFd, &e, sizeof e);
    (void)ignored;
    _exit(kExitNotFound);
  }

  // Each rank runs in its own process group, and signals go to the group:
  // - what a rank starts (a `sh -c` wrapper's children, data-loader workers) is signalled with it, so SIGTERM does
  //   not leave a `sleep` or a worker holding the GPU or the output pipe;
  // - a terminal's Ctrl-C reaches only braidrun (the foreground group), which forwards it once: a rank does not get
  //   SIGINT twice, which would break a graceful shutdown;
  // - one group per rank rather than one for the job, because a rank joining the group of a rank that already
  //   exited and was reaped would fail.
  // The price: ranks are background jobs of the terminal, so one that reads the terminal stops (SIGTTIN).
  void signalAll(int sig) {
    for (pid_t pid : pids_) {
      if (pid > 0 && kill(-pid, sig) != 0 && errno == ESRCH) kill(pid, sig);
    }
  }

  void fail(int code) {
    if (!exitCode_) exitCode_ = code;
  }

  // SIGTERM now and SIGKILL at killAt_ unless all exited by then.
  void terminate() {
    if (phase_ < Phase::kTerminating) escalate(SIGTERM, "stopping the job");
  }

  void escalate(int sig, const std::string& why) {
    if (live_ > 0) fprintf(stderr, "braidrun: %s; sending %s to %ld rank(s)\n", why.c_str(), signalName(sig), live_);
    signalAll(sig);
    quiet_ = true;
    phase_ = sig == SIGKILL ? Phase::kKilled : Phase::kTerminating;
    killAt_ = Clock::now() + kTermToKill;
  }

  void reap() {
    for (;;) {
      siginfo_t info{};
      // WNOWAIT: an exited child stays a zombie until waitpid below, so its pid, which names its segments, cannot
      // pass to another process while we remove them.
      int rc = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      auto it = pidToIndex_.find(pid);
      const int removed = it == pidToIndex_.end() ? 0 : removeSegmentsOf(pid);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (it == pidToIndex_.end()) continue;
      long index = it->second;
      pidToIndex_.erase(it);
      onExit(index, status, removed);
    }
  }

  void onExit(long index, int status, int segmentsRemoved) {
    pid_t pid = pids_[index];
    pids_[index] = 0;
    --live_;
    if (opts_.tagOutput) {  // the rank's last words go out before braidrun's verdict on it
      streams_[2 * index].pump(true);
      streams_[2 * index + 1].pump(true);
    }
    if (segmentsRemoved > 0 && !quiet_)
      fprintf(stderr, "braidrun: removed %d shared-memory segment(s) that rank %ld (pid %d) left in /dev/shm\n",
              segmentsRemoved, globalRank(index), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    char how[96];
    if (sig) snprintf(how, sizeof how, "was killed by signal %d (%s)", sig, strsignal(sig));
    if (!sig) snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    if (!quiet_) fprintf(stderr, "braidrun: rank %ld (pid %d) %s\n", globalRank(index), pid, how);
    fail(sig ? 128 + sig : WEXITSTATUS(status));
    if (phase_ == Phase::kRunning && live_ > 0) {
      phase_ = Phase::kGrace;
      graceAt_ = Clock::now() + std::chrono::milliseconds(opts_.graceMs);
    }
  }

  void onSignal(int sig) {
    if (phase_ == Phase::kKilled) return;
    if (++signalsSeen_ >= 2) {
      escalate(SIGKILL, std::string("got ") + signalName(sig) + " again");
      return;
    }
    fprintf(stderr, "braidrun: got %s; forwarding it to %ld rank(s) (send it again to kill them)\n", signalName(sig),
            live_);
    fail(128 + sig);
    quiet_ = true;
    signalAll(sig);
  }

  void enforceDeadlines() {
    auto now = Clock::now();
    if (timeoutAt_ && phase_ < Phase::kTerminating && now >= *timeoutAt_) {
      fprintf(stderr, "braidrun: job ran longer than --timeout %g s\n", opts_.timeoutSec);
      fail(kExitTimeout);
      terminate();
    }
    if (phase_ == Phase::kGrace && now >= graceAt_) terminate();
    if (phase_ == Phase::kTerminating && now >= killAt_) escalate(SIGKILL, "SIGTERM did not end the job within 3 s");
  }

  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
    if (timeoutAt_ && phase_ < Phase::kTerminating) consider(*timeoutAt_);
    if (phase_ == Phase::kGrace) consider(graceAt_);
    if (phase_ == Phase::kTerminating) consider(killAt_);
    if (!next) return -1;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms, 0, INT_MAX));
  }

  // Blocks until a signal, rank output or the next deadline. SIGCHLD only wakes us: reap() runs every round.
  void waitForEvents() {
    std::vector<pollfd> fds{{signalFd_, POLLIN, 0}};
    std::vector<TaggedStream*> owners;
    for (TaggedStream& s : streams_) {
      if (!s.open()) continue;
      fds.push_back({s.fd(), POLLIN, 0});
      owners.push_back(&s);
    }
    if (poll(fds.data(), fds.size(), pollTimeoutMs()) < 0) {
      if (errno == EINTR) return;
      fatal("poll");
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      while (read(signalFd_, &si, sizeof si) == sizeof si) {
        if (si.ssi_signo != SIGCHLD) onSignal(static_cast<int>(si.ssi_signo));
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) owners[i - 1]->pump(false);
    }
  }

  const Options& opts_;
  const InheritedSignals& inherited_;
  int signalFd_;
  std::vector<pid_t> pids_;  // by local index; 0 when not running
  std::unordered_map<pid_t, long> pidToIndex_;
  std::vector<TaggedStream> streams_;  // stdout, stderr of each local index, with --tag-output
  long live_ = 0;                      // started and not yet reaped
  Phase phase_ = Phase::kRunning;
  bool quiet_ = false;  // once braidrun signalled the ranks, their deaths are expected and not reported one by one
  int signalsSeen_ = 0;
  std::optional<int> exitCode_;  // the first failure's
  std::optional<Clock::time_point> timeoutAt_;
  Clock::time_point graceAt_, killAt_;
};

// The variables every rank shares.
Environment jobEnvironment(const Options& o) {
  Environment env;
  env.set("BRAID_WORLD_SIZE", o.nnodes * o.ranks);
  if (!o.master.empty()) {
    env.set("BRAID_ROOT", o.master);
  } else if (!nonEmptyEnv("BRAID_ROOT")) {
    env.set("BRAID_ROOT", "127.0.0.1:" + std::to_string(findFreePort()));
    // Every rank is on this machine: keep tcp links (BRAID_TRANSPORTS=tcp, --hosts) on loopback too.
    if (!nonEmptyEnv("BRAID_SOCKET_IFNAME")) env.set("BRAID_SOCKET_IFNAME", "lo");
  }
  if (!nonEmptyEnv("BRAID_SECRET")) {
    if (o.nnodes > 1) {
      // A secret made up here would differ between the machines' braidruns; braid derives one from the job instead.
      fprintf(stderr,
              "braidrun: warning: BRAID_SECRET is not set; all launchers of a multi-machine job must share the same "
              "BRAID_SECRET (or BRAID_JOB_ID, from which braid derives one that is not a credential); with neither, "
              "braid's init refuses to start\n");
    } else {
      env.set("BRAID_SECRET", randomSecret());
    }
  }
  return env;
}

// A closed stdin/stdout/stderr would let a pipe take its number and then vanish in the child at exec.
void ensureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0) fatal("/dev/null");
  }
}

int launch(const Options& opts) {
  ensureStandardFds();
  InheritedSignals inherited;
  struct sigaction ignore = {}, deflt = {};
  ignore.sa_handler = SIG_IGN;
  deflt.sa_handler = SIG_DFL;
  // A reader of our stdout that goes away must not kill braidrun and orphan the ranks; the write just fails.
  sigaction(SIGPIPE, &ignore, &inherited.pipe);
  // SIGCHLD ignored (inherited) would make the kernel reap the ranks and hide their exit status from us.
  sigaction(SIGCHLD, &deflt, &inherited.child);

  // Blocked signals are queued even when their disposition is "ignore", and signalfd reads them. So SIGINT ignored
  // by `braidrun ... &` in a script is still forwarded; SIGHUP ignored (nohup) is left out on purpose.
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&mask, sig);
  struct sigaction hup {};
  sigaction(SIGHUP, nullptr, &hup);
  if (hup.sa_handler != SIG_IGN) sigaddset(&mask, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &mask, &inherited.mask) != 0) fatal("sigprocmask");
  int signalFd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signalFd < 0) fatal("signalfd");

  Environment base = jobEnvironment(opts);
  Job job(opts, inherited, signalFd);
  return job.run(base);
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  braid::Options opts = braid::parseArgs(argc, argv);
  return braid::launch(opts);
}
