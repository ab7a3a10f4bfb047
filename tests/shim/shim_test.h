/* Tests of libbraid_nccl.so, compiled against NVIDIA's nccl.h (not braid's) so that they check
 * the ABI a real NCCL program sees: enum values, ncclConfig_t layout, signatures. The driver
 * (shim_test.c) forks the ranks of each phase; phases are in shim_coll.c, shim_errors.c and
 * shim_local.c. */
#ifndef BRAID_TESTS_SHIM_TEST_H_
#define BRAID_TESTS_SHIM_TEST_H_

#include <nccl.h>
#include <stddef.h>
#include <string.h>

/* Exit status of a rank or phase that cannot run here (meson's "skipped"). */
#define SKIP_STATUS 77

/* This process's rank, for messages (-1 in the driver and in single-process phases). */
extern int g_rank;
/* An int shared by the ranks of a phase (zero at its start), for out-of-band synchronization:
 * use __atomic builtins. */
extern int* g_shared;

/* Prints "rank R, line L: message" to stderr and returns 1. */
int fail_at(int line, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

/* In a phase body (returning int): fail unless the call succeeds. */
#define CHECK_NCCL(call)                                                                             \
  do {                                                                                               \
    ncclResult_t r_ = (call);                                                                        \
    if (r_ != ncclSuccess)                                                                           \
      return fail_at(__LINE__, "%s: %s: %s", #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

#define EXPECT(cond, ...)                               \
  do {                                                  \
    if (!(cond)) return fail_at(__LINE__, __VA_ARGS__); \
  } while (0)

/* The call must fail with `want`, and ncclGetLastError() must contain `why`. */
#define EXPECT_FAIL(call, want, why)                                                                                   \
  do {                                                                                                                 \
    ncclResult_t r_ = (call);                                                                                          \
    if (r_ != (want))                                                                                                  \
      return fail_at(__LINE__, "%s returned %d (%s), expected %d", #call, (int)r_, ncclGetErrorString(r_),             \
                     (int)(want));                                                                                     \
    if (strstr(ncclGetLastError(NULL), (why)) == NULL)                                                                 \
      return fail_at(__LINE__, "%s: last error \"%s\" does not mention \"%s\"", #call, ncclGetLastError(NULL), (why)); \
  } while (0)

/* Typed element access. Test values are small and exact in every type (fp16/bf16 included). */
const char* type_name(ncclDataType_t dt);
void store(ncclDataType_t dt, void* buf, size_t i, double v);
double load(ncclDataType_t dt, const void* buf, size_t i);
/* fp16/bf16 bit patterns of a float, rounded to nearest even (no NaN handling needed here). */
unsigned short to_half_bits(float f);
unsigned short to_bf16_bits(float f);

/* The ranks of a multi-process phase: ids[] were created by the parent (rank 0 inherits their
 * listeners). */
#define TEST_IDS 3
typedef int (*rank_body)(int rank, int n, const ncclUniqueId* ids);

int coll_phase(int rank, int n, const ncclUniqueId* ids);   /* collectives, PreMulSum */
int error_phase(int rank, int n, const ncclUniqueId* ids);  /* error paths, configs */
int split_phase(int rank, int n, const ncclUniqueId* ids);  /* ncclCommSplit */
int abort_phase(int rank, int n, const ncclUniqueId* ids);  /* a rank aborts mid-run */
int exit_phase(int rank, int n, const ncclUniqueId* ids);   /* a rank dies mid-run */
int device_phase(int rank, int n, const ncclUniqueId* ids); /* device buffers on a stream */
/* Single-process phases (ids unused): all n ranks in one process. */
int local_phase(int rank, int n, const ncclUniqueId* ids);       /* ncclCommInitAll, grouped init */
int local_split_phase(int rank, int n, const ncclUniqueId* ids); /* grouped splits in one thread */

#endif
