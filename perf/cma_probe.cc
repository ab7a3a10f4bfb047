/* What one process_vm_readv costs against a memcpy on this machine: the facts behind braid's choice
 * of single copy (CMA) for exchanges only (README, BRAID_SHM_CMA). A forked owner holds a 256 MiB
 * buffer; the reader copies it in chunks of 64 KiB to 4 MiB, by process_vm_readv from the owner and
 * by memcpy from a shared mapping, once streaming through memory (DRAM to DRAM) and once the same
 * chunk again and again (cache-hot), with 4 KiB pages and with transparent huge pages.
 *
 *   build/perf/cma_probe        (prints GB/s of payload per chunk size; best of 2 passes each)
 */
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu % sysconf(_SC_NPROCESSORS_ONLN), &s);
  sched_setaffinity(0, sizeof s, &s);
}

static int cmaRead(pid_t pid, char* dst, unsigned long src, size_t bytes) {
  struct iovec l = {dst, bytes}, r = {reinterpret_cast<void*>(src), bytes};
  return process_vm_readv(pid, &l, 1, &r, 1, 0) == (ssize_t)bytes ? 0 : -1;
}

static double best(double a, double b) { return a > b ? a : b; }

int main(void) {
  const size_t total = (size_t)256 << 20, hotBytes = (size_t)64 << 20;
  printf("%5s %9s %12s %12s %12s %12s\n", "thp", "chunk", "cma DRAM", "memcpy DRAM", "cma hot", "memcpy hot");
  for (int huge = 0; huge < 2; huge++) {
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char* dst = static_cast<char*>(aligned_alloc(2 << 20, total));
    if (m == MAP_FAILED || dst == nullptr) return perror("memory"), 1;
    char* shared = static_cast<char*>(m);
    if (huge) madvise(dst, total, MADV_HUGEPAGE);
    memset(shared, 1, total);
    memset(dst, 0, total);
    int fds[2];
    if (pipe(fds) != 0) return perror("pipe"), 1;
    pid_t owner = fork();
    if (owner == 0) {
      pin(1);
      char* p = static_cast<char*>(aligned_alloc(2 << 20, total));
      if (p == nullptr) _exit(1);
      if (huge) madvise(p, total, MADV_HUGEPAGE);
      memset(p, 2, total);
      unsigned long at = reinterpret_cast<unsigned long>(p);
      if (write(fds[1], &at, sizeof at) != sizeof at) _exit(1);
      pause();
      _exit(0);
    }
    unsigned long remote = 0;
    if (read(fds[0], &remote, sizeof remote) != sizeof remote) return fprintf(stderr, "owner failed\n"), 1;
    pin(0);
    const size_t chunks[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
    for (int ci = 0; ci < 4; ci++) {
      const size_t c = chunks[ci];
      double r[4] = {0, 0, 0, 0};
      for (int rep = 0; rep < 2; rep++) {
        double t0 = now();
        for (size_t o = 0; o < total; o += c)
          if (cmaRead(owner, dst + o, remote + o, c) != 0) return perror("process_vm_readv"), 1;
        double t1 = now();
        for (size_t o = 0; o < total; o += c) memcpy(dst + o, shared + o, c);
        double t2 = now();
        const size_t k = hotBytes / c;
        for (size_t i = 0; i < k; i++)
          if (cmaRead(owner, dst, remote, c) != 0) return perror("process_vm_readv"), 1;
        double t3 = now();
        for (size_t i = 0; i < k; i++) memcpy(dst, shared, c);
        double t4 = now();
        r[0] = best(r[0], total / (t1 - t0) / 1e9);
        r[1] = best(r[1], total / (t2 - t1) / 1e9);
        r[2] = best(r[2], hotBytes / (t3 - t2) / 1e9);
        r[3] = best(r[3], hotBytes / (t4 - t3) / 1e9);
      }
      printf("%5s %9zu %12.2f %12.2f %12.2f %12.2f\n", huge ? "on" : "off", c, r[0], r[1], r[2], r[3]);
    }
    kill(owner, SIGKILL);
    waitpid(owner, nullptr, 0);
    munmap(shared, total);
    free(dst);
    close(fds[0]);
    close(fds[1]);
  }
  return 0;
}
