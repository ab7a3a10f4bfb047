// Reading and writing topology files (the format itself: topology/file.cc): only regular files are
// read or replaced, and a dump appears whole or not at all.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "topology/topology.h"

namespace braid::topo {

Status loadTopoFile(const std::string& path, TopoFile* out) {
  // O_NONBLOCK: opening a FIFO for reading waits for a writer, past every deadline of init. Only a
  // regular file is read; a FIFO or device opens at once and is refused.
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return systemError(errno, "open topology file %s", path.c_str());
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return systemError(e, "stat topology file %s", path.c_str());
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return errorf(braidInvalidArgument, "topology file %s is not a regular file (a FIFO, device or directory)",
                  path.c_str());
  }
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      return systemError(e, "read topology file %s", path.c_str());
    }
    if (n == 0) break;
    text.append(buf, n);
    if (text.size() > kMaxTopoFileBytes) break;  // the parser names the limit and the line
  }
  close(fd);
  return parseTopoFile(text, path, out);
}

Status dumpTopoFile(const std::string& path, const TopoFile& f) {
  // Only a regular file, or a name that does not exist yet, is replaced: the dump is renamed over
  // the target, which would replace a device node (/dev/null, as root) or a FIFO, and a symlink
  // would be replaced rather than followed. lstat, so that a symlink counts as not regular.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      return errorf(braidInvalidArgument,
                    "%s exists and is not a regular file (a symlink, directory, device or FIFO): not replacing it",
                    path.c_str());
  } else if (errno != ENOENT) {
    return systemError(errno, "stat topology file %s", path.c_str());
  }
  // Written to a new name beside the target and renamed, so that a reader (or a second rank
  // dumping the same machine) never sees half a file. O_EXCL|O_NOFOLLOW: the temporary name is
  // ours alone, never a file or link someone put there.
  const std::string text = formatTopoFile(f);
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) nonce = 0;
  char suffix[48];
  snprintf(suffix, sizeof(suffix), ".tmp.%d.%016llx", static_cast<int>(getpid()),
           static_cast<unsigned long long>(nonce));
  const std::string tmp = path + suffix;
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return systemError(errno, "create topology file %s", tmp.c_str());
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      close(fd);
      unlink(tmp.c_str());
      return systemError(e, "write topology file %s", tmp.c_str());
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return systemError(e, "close topology file %s", tmp.c_str());
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return systemError(e, "rename %s to %s", tmp.c_str(), path.c_str());
  }
  return okStatus();
}

}  // namespace braid::topo
