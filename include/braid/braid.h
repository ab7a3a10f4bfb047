/*
 * braid: collective communication for distributed training.
 *
 * The public C API. Names and argument order follow NCCL (ncclAllReduce -> braidAllReduce,
 * ncclResult_t -> braidResult_t), so NCCL code ports by renaming.
 *
 * Conventions that hold for every function below:
 * - Every function returns a braidResult_t. On failure, output parameters are left untouched,
 *   nothing is written to the caller's buffers, and braidGetLastError() describes the failure.
 * - Buffers are host memory, or, in a CUDA build on a machine with a GPU, device (or managed)
 *   memory of the communicator's device (BRAID_CUDA_DEVICE, else the device current at init). A
 *   call on device buffers is ordered on `stream` (a cudaStream_t; NULL = the legacy default
 *   stream), as in NCCL: see "Device buffers" below. A non-NULL stream with host buffers, or on a
 *   communicator without a CUDA device, is braidInvalidUsage.
 * - A communicator may be used by several threads, but collectives on one communicator must be
 *   issued in the same order on every rank (as in NCCL and MPI). Issuing calls on one communicator
 *   from two threads at once is allowed; their relative order is then whatever the lock decides,
 *   so the caller must make it match across ranks.
 * - Every blocking call and every wait has a deadline (BRAID_TIMEOUT seconds, default 300). A peer
 *   that dies or stops answering becomes braidRemoteError or braidTimeout naming the rank, never
 *   a hang.
 * - No function throws or calls exit(); out-of-memory is braidSystemError.
 * - Handles (braidComm_t, braidGraph_t, braidRequest_t, and the regions of braidCommRegister) are
 *   opaque values, not pointers: each names a slot of a process-wide table plus the slot's
 *   generation, which advances when the object ends (destroyed, aborted, released, deregistered). A
 *   handle that outlived its object is refused (communicators, graphs and regions:
 *   braidInvalidArgument; requests: braidInvalidUsage), as is a value braid never handed
 *   out (braidInvalidArgument); braid reads nothing it points to, and a stale handle never names a
 *   newer object that took its place. Checking a handle is a few loads, without a lock.
 */
#ifndef BRAID_BRAID_H_
#define BRAID_BRAID_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_MAJOR 0
#define BRAID_MINOR 1
#define BRAID_PATCH 0
/* BRAID_VERSION(0, 1, 0) == 100; comparable with braidGetVersion(). */
#define BRAID_VERSION(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define BRAID_VERSION_CODE BRAID_VERSION(BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH)

/* Seen from C++, the enums below have int as their fixed underlying type. A C caller may pass any
 * int (an invalid datatype, say); without a fixed type that value would be outside the C++ enum's
 * range, and merely reading the parameter undefined behaviour, before braid could reject it. Same
 * size and calling convention as the plain C enums. */
#ifdef __cplusplus
#define BRAID_ENUM_BASE : int
#else
#define BRAID_ENUM_BASE
#endif

typedef enum BRAID_ENUM_BASE {
  braidSuccess = 0,
  braidInternalError = 1,   /* a bug in braid; please report it with the log */
  braidSystemError = 2,     /* a system call or allocation failed (the message carries errno) */
  braidInvalidArgument = 3, /* a NULL pointer, bad datatype/op, root out of range, overflow... */
  braidInvalidUsage = 4,    /* a valid call at the wrong time (e.g. unmatched GroupEnd) */
  braidRemoteError = 5,     /* a peer died, aborted or broke the protocol; the message names it */
  braidInProgress = 6,      /* not an error: the operation is still running */
  braidTimeout = 7,         /* a deadline (BRAID_TIMEOUT) passed; the message names the peer */
  braidNumResults = 8
} braidResult_t;

typedef enum BRAID_ENUM_BASE {
  braidInt8 = 0,
  braidUint8 = 1,
  braidInt32 = 2,
  braidUint32 = 3,
  braidInt64 = 4,
  braidUint64 = 5,
  braidFloat16 = 6,  /* IEEE binary16; reduced in fp32, rounded to nearest even */
  braidBfloat16 = 7, /* bfloat16; reduced in fp32, rounded to nearest even */
  braidFloat32 = 8,
  braidFloat64 = 9,
  braidNumTypes = 10
} braidDataType_t;

typedef enum BRAID_ENUM_BASE {
  braidSum = 0,
  braidProd = 1,
  braidMin = 2,
  braidMax = 3,
  braidAvg = 4, /* sum divided by the rank count; integers truncate toward zero. The sum comes
                   first, in the datatype: a float16 sum past 65504 is inf, and so is its average
                   (NCCL scales float inputs first); pre-divide, or reduce in bfloat16 or float32 */
  braidNumOps = 5
} braidRedOp_t;

typedef struct braidComm* braidComm_t;
typedef struct braidRequest* braidRequest_t;
typedef void* braidStream_t; /* a cudaStream_t once device buffers are supported; NULL = host */

#define BRAID_UNIQUE_ID_BYTES 128
/* Opaque: the root's address and port and a random secret. Copy it to every rank by any means
 * (MPI_Bcast, a file, a TCP store). Treat it as a credential: whoever holds it can join. */
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braidUniqueId;

/* ---- Version and errors ------------------------------------------------------------------ */

/* Writes BRAID_VERSION_CODE of the loaded library. Thread-safe, never blocks. */
braidResult_t braidGetVersion(int* version);

/* A static string for a result code (never NULL). Thread-safe. */
const char* braidGetErrorString(braidResult_t result);

/* This thread's last failure in words: what failed, on which rank and peer, and why. Valid until
 * the next braid call on this thread; "" when nothing failed yet. Thread-safe (thread-local). */
const char* braidGetLastError(void);

/* ---- Communicators -------------------------------------------------------------------------- */

/* Creates a unique id and starts listening for the rendezvous on this process: the process that
 * calls this must be the one that initializes rank 0 with the id. The address is the one of
 * BRAID_SOCKET_IFNAME when set, else the first non-loopback IPv4 interface, else 127.0.0.1.
 * Never blocks. Thread-safe. */
braidResult_t braidGetUniqueId(braidUniqueId* uniqueId);

/* Creates a communicator of `nranks` ranks; this process is `rank` (0..nranks-1). Collective: blocks
 * until all nranks ranks called it with the same id, or until BRAID_TIMEOUT. A connection that does
 * not prove the id's secret is refused and does not disturb the others. On success *comm is set;
 * release it with braidCommDestroy. Thread-safe. */
braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank);

/* Memory types of buffers (braidMemGetType). Each call finds its buffers' type itself. */
typedef enum BRAID_ENUM_BASE {
  braidMemHost = 0, /* pageable or pinned host memory */
  braidMemCuda = 1, /* CUDA device or managed memory */
  braidNumMemTypes = 2
} braidMemType_t;

/* Per-communicator settings for braidCommInitRankConfig, in the shape of NCCL's ncclConfig_t.
 * Always start from BRAID_CONFIG_INITIALIZER and then set the fields you want: it fills size,
 * magic and version, which tell braid the struct is initialized and which layout the caller was
 * built with, and marks every other field unset. An unset field takes the environment's value (the
 * BRAID_* variable named below), else its default. A set field overrides the environment for this
 * communicator only. Fields are added at the end only, so a program built against an older braid.h
 * keeps working. braid reads the struct during the call and keeps no pointer into it. */
#define BRAID_CONFIG_MAGIC 0xb7a1dc0fu
#define BRAID_CONFIG_UNDEF_INT (-2147483647 - 1) /* INT_MIN: "unset" for int fields */
typedef struct {
  size_t size;          /* sizeof(braidConfig_t) of the caller's header */
  unsigned int magic;   /* BRAID_CONFIG_MAGIC */
  unsigned int version; /* BRAID_VERSION_CODE of the caller's header */
  /* Transports in order of preference, a comma list as BRAID_TRANSPORTS ("tcp", "shm,tcp"); NULL =
   * BRAID_TRANSPORTS. Every rank must pass the same list (init fails otherwise, naming the rank). */
  const char* transports;
  /* braidMemType_t of the buffers this communicator is given; BRAID_CONFIG_UNDEF_INT = host. */
  int memType;
  /* Seconds any wait may last (as BRAID_TIMEOUT, 1..315360000); 0 or BRAID_CONFIG_UNDEF_INT =
   * BRAID_TIMEOUT. */
  int timeoutSec;
  /* 1: connect the second set of links that tagged point-to-point needs (braidSendTagged,
   * braidRecvTagged, BRAID_ANY_SOURCE); 0: leave them out, and tagged calls are braidInvalidUsage;
   * BRAID_CONFIG_UNDEF_INT = BRAID_P2P_TAGS (default 0). Every rank must agree. */
  int p2pTags;
  /* The communicator's CUDA device (as BRAID_CUDA_DEVICE, 0..1023): its device buffers must be of
   * this device. BRAID_CONFIG_UNDEF_INT = BRAID_CUDA_DEVICE, else the device current at init. A
   * device this process does not see is braidInvalidArgument; where it sees none (no CUDA, no GPU)
   * the communicator has no device, whatever is set. */
  int cudaDevice;
} braidConfig_t;

#define BRAID_CONFIG_INITIALIZER                                                                 \
  {                                                                                              \
    sizeof(braidConfig_t), BRAID_CONFIG_MAGIC, BRAID_VERSION_CODE, NULL, BRAID_CONFIG_UNDEF_INT, \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT                   \
  }

/* As braidCommInitRank, with per-communicator settings. config NULL is braidCommInitRank. A config
 * that was not made with BRAID_CONFIG_INITIALIZER (wrong magic), whose size or version this library
 * does not know, or with a field out of range is braidInvalidArgument naming the field, before any
 * rank is contacted; *comm is then untouched. Collective and blocking as braidCommInitRank (the
 * timeout is config->timeoutSec when set). Thread-safe. */
braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId, int rank,
                                      braidConfig_t* config);

/* As braidCommInitRank, with rank, size and rendezvous address from the launcher's environment,
 * in this order of preference:
 *   BRAID_RANK, BRAID_WORLD_SIZE, BRAID_ROOT=host:port (braidrun sets these; BRAID_SECRET too)
 *   RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun; braid listens on MASTER_PORT+1 since
 *       torchrun's store owns MASTER_PORT)
 *   OMPI_COMM_WORLD_RANK/_SIZE (mpirun), SLURM_PROCID/SLURM_NTASKS (srun), PMI_RANK/PMI_SIZE,
 *       with the address from BRAID_ROOT or MASTER_ADDR/MASTER_PORT.
 * Rank 0 listens on the address; the others connect to it, retrying until BRAID_TIMEOUT.
 * The secret is BRAID_SECRET (hex) when set, else derived from the job's identity, which keeps
 * jobs apart but is not a credential: set BRAID_SECRET where strangers can reach the port. */
braidResult_t braidCommInitFromEnv(braidComm_t* comm);

/* Waits for this rank's pending operations (up to BRAID_TIMEOUT), leaves the communicator and frees
 * it. Not collective, and it does not wait for the others, rank 0 included: its goodbye says how far
 * it got, and every other rank fails at once, with braidRemoteError naming it, the operations that
 * still need it (later collectives, point-to-point calls with it past what it sent or received).
 * Operations posted and never waited for are dropped: when any of them failed, the result is the
 * earliest one's code (braidTimeout, braidRemoteError, ...) and braidGetLastError() says how many
 * were pending, how many failed and the first failure; the communicator is freed all the same.
 * Afterwards `comm` is refused by every call (braidInvalidArgument), and so are its requests not yet
 * waited for (braidInvalidUsage). NULL or a destroyed communicator is braidInvalidArgument. */
braidResult_t braidCommDestroy(braidComm_t comm);

/* Fails every pending operation of `comm` with braidRemoteError on every rank, without waiting, and
 * frees the communicator. May be called from any thread, also while others block in braidWait or
 * are inside braidTest on its requests: they return promptly, and the requests are gone once
 * braidCommAbort returned (a later braidTest or braidWait on them is braidInvalidUsage). */
braidResult_t braidCommAbort(braidComm_t comm);

/* Number of ranks and this rank's index. Thread-safe, never block. */
braidResult_t braidCommCount(braidComm_t comm, int* count);
braidResult_t braidCommUserRank(braidComm_t comm, int* rank);

/* The CUDA device of comm's device buffers (BRAID_CUDA_DEVICE, else the device current at init).
 * A communicator without one (no CUDA compiled in, no device) is braidInvalidUsage saying why, and
 * *device is untouched. Thread-safe, never blocks. */
braidResult_t braidCommCuDevice(braidComm_t comm, int* device);

/* The error that failed the communicator (braidSuccess while healthy), without blocking. The
 * message is in braidGetLastError(). */
braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError);

/* The ranks this rank knows to have failed (died, stopped answering heartbeats, or aborted), in
 * increasing order: up to `max` of them into ranks[], their number into *n. Works on a failed
 * communicator; never blocks. Feed the list to braidCommShrink. */
braidResult_t braidCommGetFailedRanks(braidComm_t comm, int* ranks, int max, int* n);

/* Builds a new communicator of every rank of `comm` except excludeRanks[0..nExclude-1], without the
 * launcher: collective over the survivors, who must pass the same set (in any order); the excluded
 * ranks do not call it. Ranks keep their relative order (new rank = old rank minus the excluded
 * ranks below it). Works on a failed communicator (that is its purpose); `comm` stays valid and must
 * still be destroyed (or aborted). *newcomm is set on success only. */
braidResult_t braidCommShrink(braidComm_t comm, const int* excludeRanks, int nExclude, braidComm_t* newcomm);

/* Splits `comm` into one communicator per color: ranks with the same color form one, ordered by
 * key, ties by old rank. Collective over every rank of `comm`, which must be healthy. A rank passing
 * BRAID_SPLIT_NOCOLOR joins none and gets *newcomm = NULL. */
#define BRAID_SPLIT_NOCOLOR (-1)
braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm);

/* ---- Memory ------------------------------------------------------------------------------------
 * Registration tells braid that a buffer will be used again, so that transports which need it (RDMA,
 * device memory) can register it once instead of per call. Today braid records the region and does
 * nothing more with it (host buffers over shm and tcp need no registration); using a buffer that was
 * never registered is always allowed. */

/* Registers buff[0..size) on comm and sets *handle. Registering the same range again (same buff
 * and size) returns the same handle and counts one more registration; overlapping ranges are
 * registered separately. Not collective, never blocks. NULL comm, buff or handle, or size 0, is
 * braidInvalidArgument (*handle untouched). Thread-safe. */
braidResult_t braidCommRegister(braidComm_t comm, void* buff, size_t size, void** handle);

/* Undoes one braidCommRegister of handle on comm; the handle ends with its last registration. A
 * handle that ended already, that belongs to another communicator or that braid never handed out
 * is braidInvalidArgument and changes nothing. braidCommDestroy and braidCommAbort release the
 * registrations left. Not collective, never blocks. Thread-safe. */
braidResult_t braidCommDeregister(braidComm_t comm, void* handle);

/* Allocates size bytes of zeroed host memory, aligned to the page size, into *ptr (device memory:
 * braidMemAllocDevice). size 0 or ptr NULL is braidInvalidArgument; out of memory is
 * braidSystemError. Free it with braidMemFree. Thread-safe.
 * The memory is a memory file mapped shared (shared with a child after fork, not copied): on one
 * host, collectives whose buffers the peers use are all such memory, on every rank, read and write
 * them in place, without the shared-memory FIFOs (BRAID_SHM_DIRECT; see the README). */
braidResult_t braidMemAlloc(void** ptr, size_t size);

/* Frees memory from braidMemAlloc. NULL is a no-op; a pointer braidMemAlloc did not return, or one
 * already freed, is braidInvalidArgument and frees nothing; memory an operation in flight reads or
 * writes in place (above) is braidInvalidUsage and frees nothing. Thread-safe. */
braidResult_t braidMemFree(void* ptr);

/* Allocates size bytes of CUDA device memory on the calling thread's current device (cudaMalloc:
 * contents undefined, 256-byte aligned; peers on the host can map it with CUDA IPC) into *ptr. Free
 * it with braidMemFree, which waits for the device, as cudaFree does. size 0 or ptr NULL is
 * braidInvalidArgument; no CUDA device is braidInvalidUsage saying why; out of device memory is
 * braidSystemError. *ptr is set on success only. Thread-safe. (ncclMemAlloc of the NCCL shim.) */
braidResult_t braidMemAllocDevice(void** ptr, size_t size);

/* Where [ptr, ptr + size) lies: braidMemCuda for device or managed memory, braidMemHost for any
 * other (pageable, pinned, or memory CUDA does not know). size 0 counts as 1. ptr or type NULL is
 * braidInvalidArgument. Answers are cached, as for the buffers of collectives (a memory range freed
 * outside braid and reused as another kind may be answered from the cache). Thread-safe. */
braidResult_t braidMemGetType(const void* ptr, size_t size, braidMemType_t* type);

/* ---- Collectives -------------------------------------------------------------------------------
 * Blocking forms return when the result is in recvbuff. Nonblocking forms (braidI...) return at
 * once with *request set; the buffers belong to braid until braidTest reports done or braidWait
 * returns. Several operations may be in flight on one communicator; they complete in issue order.
 * In-place: pass sendbuff == recvbuff (for AllGather: sendbuff == recvbuff + rank*sendcount elems;
 * ReduceScatter: recvbuff == sendbuff + rank*recvcount elems), exactly as NCCL; for Gather on the
 * root: sendbuff == recvbuff + root*count elems; Scatter on the root: recvbuff == sendbuff + root*count
 * elems (MPI_IN_PLACE's layout).
 * Between braidGroupStart and braidGroupEnd, calls are recorded and issued together at GroupEnd.
 *
 * Device buffers (CUDA builds; never run on a GPU yet, compile-checked only). A collective, or
 * braidSend/braidRecv, whose buffers are device memory runs after the work enqueued on `stream`
 * before the call, and work enqueued on it after the call sees the result. Both forms return
 * without waiting for the data: the blocking form returns once the work is enqueued (its failure
 * is reported by braidCommGetAsyncError and the next call); a nonblocking form's request completes
 * once the result is in recvbuff on the device. The data is staged through pinned host memory the
 * communicator owns. In a group, a communicator's device calls are enqueued together at
 * braidGroupEnd, which returns without waiting for them: every call's input copy first, then each
 * call's wait and copy back, so the calls run one after the other as their inputs arrive; they must
 * all use one stream per communicator, and the group's sends and receives on a communicator must
 * all be device buffers or all host buffers (calls without bytes go either way), else braidGroupEnd
 * is braidInvalidUsage and posts none of that communicator's calls; a send to self pairs with a
 * receive from self of the same group, as on host buffers. Refused, with nothing enqueued: host
 * and device buffers mixed in one call (braidInvalidArgument), buffers or a stream of another
 * device (braidInvalidArgument), device buffers in tagged calls, a send to self outside a group,
 * and a stream being captured into a CUDA graph (braidInvalidUsage). On a failure after the call
 * returned, recvbuff's content is unspecified. */

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidRedOp_t op, braidComm_t comm, braidStream_t stream);
braidResult_t braidIAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                              braidRedOp_t op, braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* recvbuff gets root's sendbuff (sendbuff is read on root only). */
braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                             braidComm_t comm, braidStream_t stream);
braidResult_t braidIBroadcast(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                              braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* recvbuff on root gets the reduction; recvbuff is not touched (and may be NULL) elsewhere. */
braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, braidRedOp_t op,
                          int root, braidComm_t comm, braidStream_t stream);
braidResult_t braidIReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                           braidRedOp_t op, int root, braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* recvbuff (nranks*sendcount elements) gets every rank's sendbuff in rank order. */
braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream);
braidResult_t braidIAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, braidDataType_t datatype,
                              braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* sendbuff has nranks*recvcount elements; rank r gets the reduction of block r. */
braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                 braidRedOp_t op, braidComm_t comm, braidStream_t stream);
braidResult_t braidIReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, braidDataType_t datatype,
                                  braidRedOp_t op, braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* Block j of sendbuff (count elements) goes to rank j; block i of recvbuff comes from rank i.
 * In-place (sendbuff == recvbuff) is supported. */
braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                            braidComm_t comm, braidStream_t stream);
braidResult_t braidIAllToAll(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                             braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* Gather: root's recvbuff (nranks*count elements) gets rank i's sendbuff (count elements) as block i.
 * recvbuff is neither read nor written (and may be NULL) on the other ranks. A bad root, count, NULL
 * sendbuff (count > 0), or NULL recvbuff on the root is braidInvalidArgument and touches nothing. */
braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                          braidComm_t comm, braidStream_t stream);
braidResult_t braidIGather(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* Scatter: rank i's recvbuff (count elements) gets block i of root's sendbuff (nranks*count elements).
 * sendbuff is read on the root only (and may be NULL elsewhere). A bad root, count, NULL recvbuff
 * (count > 0), or NULL sendbuff on the root is braidInvalidArgument and touches nothing. */
braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                           braidComm_t comm, braidStream_t stream);
braidResult_t braidIScatter(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype, int root,
                            braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* Point to point. Messages between two ranks match in issue order. A Send and a Recv to the same
 * peer on both sides must be posted together (group or nonblocking) to be safe for large sizes.
 * peer may be this rank: a send to self and a receive from self must then be in the same group
 * (they become a copy); alone, or as nonblocking calls, they are braidInvalidUsage. */
braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream);
braidResult_t braidISend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                         braidStream_t stream, braidRequest_t* request);
braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                        braidStream_t stream);
braidResult_t braidIRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer, braidComm_t comm,
                         braidStream_t stream, braidRequest_t* request);

/* Tagged point to point, matched as gloo matches: a tagged receive takes the first message from
 * its peer with its tag; messages of one (peer, tag) pair arrive in the order they were sent, and
 * different tags (or peers) in whatever order they come, so a receive of tag 1 posted before one of
 * tag 2 completes even when the peer sent tag 2 first. Tagged calls match only tagged calls: a
 * braidSend is never received by braidRecvTagged, nor the other way round (the untagged calls keep
 * their in-order path, and tag 0 is a tag like any other here). tag >= 0; the lengths of a message
 * and of the receive that matches it must be equal (a receive that differs fails with
 * braidInvalidUsage, and the message is consumed). peer must not be this rank.
 * A receive may name BRAID_ANY_SOURCE as peer: it takes the first matching message to arrive from
 * any rank, and *source (when source is not NULL) gets the sender's rank once it completed
 * successfully: before the blocking call returns, or before braidTest reports done or braidWait
 * returns for the nonblocking one (source must stay valid until then).
 * Tagged operations complete when their message does, in no particular order among themselves or
 * with the collectives. A send returns once its message was handed to the transport: a small one
 * at once, a large one as the receiver reads it. Inside a group the calls are posted at once and
 * waited for at the outermost braidGroupEnd. They need BRAID_P2P_TAGS=1 (the default: a second link
 * per peer); with 0 they fail with braidInvalidUsage. Thread safety as for the other calls. */
#define BRAID_ANY_SOURCE (-1)
braidResult_t braidSendTagged(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                              braidComm_t comm, braidStream_t stream);
braidResult_t braidISendTagged(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                               braidComm_t comm, braidStream_t stream, braidRequest_t* request);
braidResult_t braidRecvTagged(void* recvbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                              braidComm_t comm, braidStream_t stream, int* source);
braidResult_t braidIRecvTagged(void* recvbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                               braidComm_t comm, braidStream_t stream, int* source, braidRequest_t* request);

/* Returns when every rank has entered the barrier. */
braidResult_t braidBarrier(braidComm_t comm, braidStream_t stream);
braidResult_t braidIBarrier(braidComm_t comm, braidStream_t stream, braidRequest_t* request);

/* Groups: calls between Start and End (per thread, nestable) are recorded with their arguments
 * checked, then issued as one operation at the outermost End, which blocks until all of them
 * completed. Inside a group the nonblocking forms are refused (braidInvalidUsage). A communicator
 * destroyed between its call and the outermost End fails End with braidInvalidArgument, and nothing
 * of the group is issued. */
braidResult_t braidGroupStart(void);
braidResult_t braidGroupEnd(void);

/* ---- Requests ----------------------------------------------------------------------------------
 * A request is released when braidTest reports *done = 1 or when braidWait returns (success or
 * not); after that, and after its communicator was destroyed or aborted, braidTest and braidWait
 * refuse it with braidInvalidUsage (the message says which), even when a newer request took its
 * place in the communicator's pool. A request may be tested or waited from another thread than the
 * one that posted it, but only by one thread at a time. Every wait ends by BRAID_TIMEOUT. */

/* *done = 1 when finished (the result code is the operation's), 0 while running (braidSuccess).
 * Never blocks beyond one step of progress. */
braidResult_t braidTest(braidRequest_t request, int* done);
/* Blocks until the operation finished or failed; returns its result. */
braidResult_t braidWait(braidRequest_t request);
/* Waits for all n requests (NULL entries are skipped); returns the first failure, if any. Every
 * request is released. The requests are checked first: one that is not live, or one given twice
 * (braidInvalidArgument, naming both entries), fails the call before anything is waited for, and the
 * live requests stay the caller's. */
braidResult_t braidWaitAll(int n, braidRequest_t* requests);

/* ---- Gossip (decentralized averaging) ------------------------------------------------------------
 * A graph tells each rank which ranks it receives from (its in-neighbours) and with which weights.
 * braidNeighborAllReduce replaces every rank's vector by the weighted sum of its own and its
 * in-neighbours' vectors: one step of decentralized averaging, as in D-PSGD and gossip SGD. A rank
 * exchanges data with its neighbours only, so the cost of a step does not grow with the rank count.
 * Repeated steps converge to the global average when the graph is connected and its weights form a
 * doubly stochastic matrix (the named graphs below do). A graph belongs to the communicator it was
 * created with. */

typedef struct braidGraph* braidGraph_t;

/* Creates a graph from this rank's in-neighbours: this rank receives from neighbors[i] with weight
 * weights[i], i < nNeighbors, and weighs its own vector with selfWeight. Neighbours must be ranks of
 * comm other than this one, without duplicates. Weights must be finite and
 * selfWeight + sum(weights) must be 1 within 1e-9; negative weights are allowed (some accelerated
 * mixing matrices use them). nNeighbors may be 0 (neighbors and weights may then be NULL). Graphs
 * may be asymmetric: a rank sends to every rank that lists it, which this call finds out.
 * Collective and blocking: every rank of comm calls it with its own list, in the same order as its
 * other collectives on comm; the lists are exchanged (one AllGather of n bits per rank). When any
 * rank's input is invalid, every rank returns braidInvalidArgument and no graph is created: the
 * rank at fault says why, the others name it. A NULL or dead comm fails at once without taking part
 * (the other ranks then wait until BRAID_TIMEOUT). On success *graph is set; release it with
 * braidGraphDestroy. Not part of groups: between braidGroupStart and braidGroupEnd it runs at once.
 * Thread-safe as the collectives are. */
braidResult_t braidGraphCreate(braidComm_t comm, int nNeighbors, const int* neighbors, const double* weights,
                               double selfWeight, braidGraph_t* graph);

/* Creates a named graph on comm's n ranks (r = this rank, L = ceil(log2 n)):
 *   "ring"          receive from r-1 and r+1, weights 1/3, self 1/3 (n == 2: the other rank, 1/2)
 *   "exp2"          static exponential graph: receive from r - 2^k, send to r + 2^k (mod n), k < L;
 *                   uniform weights 1/(L+1), self included
 *   "hypercube"     exchange with r XOR 2^k, k < log2 n, uniform weights 1/(log2 n + 1); n must be a
 *                   power of two
 *   "onepeer_exp2"  one-peer exponential graph (dynamic): at this graph's t-th call (t from 0),
 *                   receive from r - 2^(t mod L) and send to r + 2^(t mod L), weights 1/2 and 1/2. The
 *                   rotation advances by one per braidNeighborAllReduce / braidINeighborAllReduce.
 *                   For n a power of two, any L consecutive calls give every rank the exact average.
 * n == 1 gives the graph with no neighbours (self weight 1). An unknown name, or hypercube on a rank
 * count that is not a power of two, is braidInvalidArgument. Not collective and never blocks: each
 * rank derives its own side; but every rank must create the same name (different graphs on
 * different ranks wait for messages that never come, until BRAID_TIMEOUT). On success *graph is
 * set; release it with braidGraphDestroy. Thread-safe. */
braidResult_t braidGraphCreateNamed(braidComm_t comm, const char* name, braidGraph_t* graph);

/* Frees a graph and its cached plans. Nonblocking operations posted with it may still be running:
 * they keep what they need. May be called before or after its communicator is destroyed. NULL or an already
 * destroyed graph is braidInvalidArgument. Not collective, never blocks. */
braidResult_t braidGraphDestroy(braidGraph_t graph);

/* recvbuff[i] = selfWeight * sendbuff[i] + sum over in-neighbours j of w_j * (rank j's sendbuff[i]),
 * for i < count, with the graph's weights at this call (see braidGraphCreateNamed for onepeer_exp2).
 * Floating types only (braidFloat16, braidBfloat16, braidFloat32, braidFloat64); other types are
 * braidInvalidArgument. float64 is computed in double, float32 in float; fp16 and bf16 in fp32,
 * rounded to the type once per weighted term. In place (sendbuff == recvbuff) is allowed. Every rank
 * passes the same count. The graph must belong to comm (braidInvalidArgument otherwise). Calls with
 * one graph must be issued in the same order on every rank and not from two threads at once.
 * Blocking and nonblocking forms as for the other collectives; not part of groups: between
 * braidGroupStart and braidGroupEnd it is issued at once, not at braidGroupEnd. When ranks fail, the
 * failure is returned once on every rank (by the call in flight, else by the next call, which then
 * does not run) and later calls run on the survivors (README, "When ranks fail"). */
braidResult_t braidNeighborAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                                     braidGraph_t graph, braidComm_t comm, braidStream_t stream);
braidResult_t braidINeighborAllReduce(const void* sendbuff, void* recvbuff, size_t count, braidDataType_t datatype,
                                      braidGraph_t graph, braidComm_t comm, braidStream_t stream,
                                      braidRequest_t* request);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_BRAID_H_ */
