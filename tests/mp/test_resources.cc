// What a communicator holds of its process's resources, where a framework makes many of them over the
// same ranks (process groups, splits).
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// The pidfds this process holds open.
int openPidfds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    char target[PATH_MAX];
    const ssize_t len = readlink(e.path().c_str(), target, sizeof(target) - 1);
    if (len > 0 && std::string(target, static_cast<size_t>(len)) == "anon_inode:[pidfd]") ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("communicators over the same local peers share one pidfd per peer", "[mp][shm]") {
  // Each shm link opened a pidfd of its own to watch its peer die: 14 descriptors a communicator on
  // 8 local ranks, half of them pidfds, so 70 process groups took half of a 1024-descriptor limit.
  constexpr int kSplits = 6;
#ifdef SYS_pidfd_open
  const int probe = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
#else
  const int probe = -1;
  errno = ENOSYS;
#endif
  if (probe < 0) {
    WARN("pidfd_open: " << strerror(errno) << ": the shm links watch their peers by pid here: SKIPPING");
    return;
  }
  close(probe);
  auto res = runComm(3, {{"BRAID_TRANSPORTS", "shm"}}, [](braidComm_t comm, int rank, int size) {
    const int before = openPidfds();
    if (before != size - 1) return fail(rank, "%d pidfds with one communicator of %d ranks", before, size);
    std::vector<braidComm_t> subs(kSplits);
    for (braidComm_t& s : subs) {
      CHECK_BRAID(rank, braidCommSplit(comm, 0, rank, &s));
      float x = 1, y = 0;
      CHECK_BRAID(rank, braidAllReduce(&x, &y, 1, braidFloat32, braidSum, s, nullptr));
      if (y != size) return fail(rank, "AllReduce on a split gave %g", y);
    }
    const int with = openPidfds();
    for (braidComm_t s : subs) CHECK_BRAID(rank, braidCommDestroy(s));
    if (with != size - 1) return fail(rank, "%d pidfds with %d communicators over the same peers", with, kSplits + 1);
    if (openPidfds() != size - 1) return fail(rank, "%d pidfds after destroying the splits", openPidfds());
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
