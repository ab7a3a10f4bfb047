/* Driver of the NCCL shim tests: `nccl_shim_test NRANKS PHASE...`. For each phase the parent
 * creates the unique ids (so the rank-0 child inherits their listeners, as braid requires), forks
 * the ranks (or one process for the local phases), and waits for them with a deadline that turns a
 * hang into a failure. Exit status: 0 when every phase passed, 77 when none failed but one could
 * not run (meson's skip), 1 otherwise. */
#define _GNU_SOURCE
#include "shim_test.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int g_rank = -1;
int* g_shared = NULL;

/* A deadline per phase: far above a normal run (seconds), below meson's timeout. */
enum { kPhaseDeadlineSec = 90 };

int fail_at(int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "rank %d, line %d: %s\n", g_rank, line, msg);
  return 1;
}

const char* type_name(ncclDataType_t dt) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                                      "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return (unsigned)dt < sizeof(names) / sizeof(names[0]) ? names[dt] : "invalid";
}

unsigned short to_half_bits(float f) {
  _Float16 h = (_Float16)f; /* the compiler's conversion: independent of braid's */
  unsigned short bits;
  memcpy(&bits, &h, sizeof(bits));
  return bits;
}

unsigned short to_bf16_bits(float f) {
  unsigned int bits;
  memcpy(&bits, &f, sizeof(bits));
  return (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

static float from_half_bits(unsigned short bits) {
  _Float16 h;
  memcpy(&h, &bits, sizeof(h));
  return (float)h;
}

static float from_bf16_bits(unsigned short b) {
  unsigned int bits = (unsigned int)b << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

void store(ncclDataType_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case ncclInt8:
      ((signed char*)buf)[i] = (signed char)v;
      break;
    case ncclUint8:
      ((unsigned char*)buf)[i] = (unsigned char)v;
      break;
    case ncclInt32:
      ((int*)buf)[i] = (int)v;
      break;
    case ncclUint32:
      ((unsigned*)buf)[i] = (unsigned)v;
      break;
    case ncclInt64:
      ((long long*)buf)[i] = (long long)v;
      break;
    case ncclUint64:
      ((unsigned long long*)buf)[i] = (unsigned long long)v;
      break;
    case ncclFloat16:
      ((unsigned short*)buf)[i] = to_half_bits((float)v);
      break;
    case ncclBfloat16:
      ((unsigned short*)buf)[i] = to_bf16_bits((float)v);
      break;
    case ncclFloat32:
      ((float*)buf)[i] = (float)v;
      break;
    case ncclFloat64:
      ((double*)buf)[i] = v;
      break;
    default:
      break;
  }
}

double load(ncclDataType_t dt, const void* buf, size_t i) {
  switch (dt) {
    case ncclInt8:
      return ((const signed char*)buf)[i];
    case ncclUint8:
      return ((const unsigned char*)buf)[i];
    case ncclInt32:
      return ((const int*)buf)[i];
    case ncclUint32:
      return ((const unsigned*)buf)[i];
    case ncclInt64:
      return (double)((const long long*)buf)[i];
    case ncclUint64:
      return (double)((const unsigned long long*)buf)[i];
    case ncclFloat16:
      return from_half_bits(((const unsigned short*)buf)[i]);
    case ncclBfloat16:
      return from_bf16_bits(((const unsigned short*)buf)[i]);
    case ncclFloat32:
      return ((const float*)buf)[i];
    case ncclFloat64:
      return ((const double*)buf)[i];
    default:
      return -1e300;
  }
}

struct phase {
  const char* name;
  rank_body body;
  int local; /* 1: one process runs the body for all ranks */
};

static const struct phase kPhases[] = {
    {"coll", coll_phase, 0},   {"errors", error_phase, 0},
    {"split", split_phase, 0}, {"abort", abort_phase, 0},
    {"exit", exit_phase, 0},   {"device", device_phase, 0},
    {"local", local_phase, 1}, {"local-split", local_split_phase, 1},
};

/* Runs one phase; returns 0, SKIP_STATUS or 1. */
static int run_phase(const struct phase* p, int n) {
  ncclUniqueId ids[TEST_IDS];
  if (!p->local)
    for (int i = 0; i < TEST_IDS; ++i)
      if (ncclGetUniqueId(&ids[i]) != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
        return 1;
      }
  __atomic_store_n(g_shared, 0, __ATOMIC_SEQ_CST);
  const int procs = p->local ? 1 : n;
  pid_t pids[64];
  int status[64];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < procs; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      g_rank = p->local ? -1 : r;
      int rc = p->body(r, n, ids);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
    status[r] = -1;
  }
  int left = procs;
  time_t deadline = time(NULL) + kPhaseDeadlineSec;
  while (left > 0) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < procs; ++r)
        if (pids[r] == pid) {
          status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          pids[r] = -1;
          --left;
        }
      continue;
    }
    if (time(NULL) > deadline) {
      for (int r = 0; r < procs; ++r)
        if (pids[r] > 0) {
          fprintf(stderr, "phase %s: rank %d still running after %d s: killed\n", p->name, r, kPhaseDeadlineSec);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          status[r] = 128 + SIGKILL;
          --left;
        }
      break;
    }
    usleep(2000);
  }
  int failed = 0, skipped = 0;
  for (int r = 0; r < procs; ++r) {
    if (status[r] == SKIP_STATUS)
      ++skipped;
    else if (status[r] != 0) {
      ++failed;
      fprintf(stderr, "phase %s: rank %d exited with status %d\n", p->name, r, status[r]);
    }
  }
  if (failed == 0 && skipped > 0 && skipped < procs) {
    fprintf(stderr, "phase %s: only %d of %d ranks skipped\n", p->name, skipped, procs);
    failed = 1;
  }
  printf("phase %s, %d ranks: %s\n", p->name, n, failed ? "FAILED" : skipped ? "skipped" : "ok");
  return failed ? 1 : skipped ? SKIP_STATUS : 0;
}

/* The test must exercise braid's library, not an NCCL the loader found first. */
static int check_loaded_library(void) {
  Dl_info info;
  if (dladdr((void*)ncclGetVersion, &info) == 0 || info.dli_fname == NULL) {
    fprintf(stderr, "cannot tell which library provides ncclGetVersion\n");
    return 1;
  }
  char resolved[4096];
  const char* path = realpath(info.dli_fname, resolved) != NULL ? resolved : info.dli_fname;
  if (strstr(path, "libbraid_nccl.so") == NULL) {
    fprintf(stderr, "ncclGetVersion comes from %s, not libbraid_nccl.so\n", path);
    return 1;
  }
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version < NCCL_VERSION(2, 19, 0)) {
    fprintf(stderr, "ncclGetVersion: %d\n", version);
    return 1;
  }
  printf("library %s, NCCL API %d (this test was compiled against NCCL %d)\n", path, version, NCCL_VERSION_CODE);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NRANKS PHASE...\n", argv[0]);
    return 2;
  }
  const int n = atoi(argv[1]);
  if (n < 2 || n > 64) {
    fprintf(stderr, "NRANKS must be in [2, 64]\n");
    return 2;
  }
  /* Loopback only, and a short deadline so that a hang becomes a failure (both overridable). */
  setenv("BRAID_SOCKET_IFNAME", "lo", 0);
  setenv("BRAID_TIMEOUT", "20", 0);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (check_loaded_library() != 0) return 1;
  g_shared = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shared == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  int failed = 0, skipped = 0;
  for (int a = 2; a < argc; ++a) {
    const struct phase* p = NULL;
    for (size_t i = 0; i < sizeof(kPhases) / sizeof(kPhases[0]); ++i)
      if (strcmp(kPhases[i].name, argv[a]) == 0) p = &kPhases[i];
    if (p == NULL) {
      fprintf(stderr, "unknown phase %s\n", argv[a]);
      return 2;
    }
    int rc = run_phase(p, n);
    failed += rc == 1;
    skipped += rc == SKIP_STATUS;
  }
  return failed ? 1 : skipped ? SKIP_STATUS : 0;
}
