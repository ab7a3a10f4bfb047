/*
 * braid's NCCL-compatible API: the declarations of libbraid_nccl.so (soname libnccl.so.2).
 *
 * Programs built against NCCL 2.x's nccl.h run on braid by loading this library in place of NCCL
 * (LD_PRELOAD=libbraid_nccl.so, or a directory holding libnccl.so.2 -> libbraid_nccl.so first in
 * LD_LIBRARY_PATH); programs may also compile against this header (`#include <nccl.h>` with
 * `pkg-config --cflags braid-nccl`). Types, enum values, struct layouts and signatures match
 * NCCL 2.28; the text and the behaviour described here are braid's.
 *
 * What holds for every function:
 * - Buffers are device memory of the communicator's CUDA device (ncclCommCuDevice), ordered on
 *   `stream` as in NCCL: after the work enqueued on it before the call, before the work enqueued
 *   after; the call returns once its work is enqueued (braid's device buffers, braid.h). Or they are
 *   host memory with a NULL stream, a braid extension (NCCL requires device memory): such calls
 *   return when their work is done. A non-NULL stream with host buffers, or on a communicator
 *   without a CUDA device (a build without CUDA, a machine without a GPU), is ncclInvalidUsage.
 *   ncclInProgress is never returned.
 * - What braid cannot do is an error with a message, never a silent success: ncclInvalidArgument
 *   for bad arguments, ncclInvalidUsage for things braid does not support. Nothing is written to
 *   the caller's buffers or outputs on failure, and ncclGetLastError() says why.
 * - A peer that dies, aborts or stops answering fails the calls of every other rank with
 *   ncclRemoteError (braid's timeouts, BRAID_TIMEOUT seconds, are reported as ncclRemoteError
 *   too); no call waits forever.
 * - No function throws or exits the process; out of memory is ncclSystemError.
 * - braid's environment variables (BRAID_*, see README.md) apply; NCCL_* variables are ignored.
 */
/* NCCL's include guard: whichever of this header and NVIDIA's nccl.h comes first wins, and the
 * other is then a no-op. */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions -------------------------------------------------------------------------------
 * The NCCL API level this library implements (the layout of ncclConfig_t is this level's). */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX "braid"
/* Releases up to 2.8 encoded versions as X*1000 + Y*100 + Z, later ones as X*10000 + Y*100 + Z. */
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)
/* Defined by braid's header only: lets code tell the shim from NVIDIA's NCCL at compile time. */
#define BRAID_NCCL_SHIM 1

/* ---- Types ------------------------------------------------------------------------------------ */

/* A CUDA stream. Declared here so that this header needs no CUDA; cuda_runtime.h declares the
 * same type (include it first when both are needed, or compile as C11/C++). */
#if !defined(__DRIVER_TYPES_H__) && !defined(__CUDA_RUNTIME_H__)
typedef struct CUstream_st* cudaStream_t;
#endif

/* Seen from C++ (the shim itself), the enums have int as their fixed underlying type: a C caller may
 * pass any int (an invalid datatype, say), and reading it into an enum without a fixed type whose
 * range does not hold it is undefined behaviour before the shim can refuse it. The C view, size and
 * calling convention are unchanged. */
#ifdef __cplusplus
#define NCCL_SHIM_ENUM_BASE : int
#else
#define NCCL_SHIM_ENUM_BASE
#endif

typedef enum NCCL_SHIM_ENUM_BASE {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* never returned by this CPU-only build */
  ncclSystemError = 2,        /* a system call or an allocation failed */
  ncclInternalError = 3,      /* a bug in braid (or a braid feature that is not implemented yet) */
  ncclInvalidArgument = 4,    /* a bad pointer, datatype, op, rank, count or config value */
  ncclInvalidUsage = 5,       /* a valid request that braid does not support, or a call out of order */
  ncclRemoteError = 6,        /* a peer died, aborted, broke the protocol or stopped answering */
  ncclInProgress = 7,         /* only from ncclCommGetAsyncError, for a comm pending in a group */
  ncclNumResults = 8
} ncclResult_t;

/* Opaque handles. A communicator wraps one braid communicator. */
typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL
typedef struct ncclWindow_vidmem* ncclWindow_t; /* no window can be created in this build */

#define NCCL_UNIQUE_ID_BYTES 128
/* The rendezvous: braid's unique id (address, port and a random secret of the root). Created by
 * ncclGetUniqueId in the process that will initialize rank 0; copy its bytes to the other ranks. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum NCCL_SHIM_ENUM_BASE {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, /* moved as bytes (broadcast, gathers, send/recv); reductions are refused */
  ncclFloat8e5m2 = 11, /* likewise */
  ncclNumTypes = 12
} ncclDataType_t;

/* Reduction ops. Values from ncclNumOps up are ops created by ncclRedOpCreatePreMulSum. The
 * largest value is the largest positive value of an enum of this compiler's enum size (the
 * helper enum below measures it), so that the type's size never changes. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum NCCL_SHIM_ENUM_BASE {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4, /* the sum divided by the rank count; integers truncate toward zero */
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  ncclScalarDevice = 0,       /* device memory read during the collective: needs CUDA (refused) */
  ncclScalarHostImmediate = 1 /* host memory, read once by ncclRedOpCreatePreMulSum */
} ncclScalarResidence_t;

/* ---- Communicator configuration ----------------------------------------------------------------
 * Always start from NCCL_CONFIG_INITIALIZER, then set fields. `size`, `magic` and `version` belong
 * to the initializer: braid reads only the fields that fit in `size`, so configs built with older
 * (smaller) NCCL headers work, and fields a newer header added past this layout are ignored.
 * What braid does with each field:
 *   blocking            0 or 1 (unset = 1). Either way init completes before the call returns;
 *                       with 0, ncclCommGetAsyncError then reports ncclSuccess.
 *   netName             NULL or "Socket" (braid's network transport is TCP; shared memory is used
 *                       within a host). Any other name is ncclInvalidUsage.
 *   splitShare, shrinkShare, collnetEnable
 *                       0 or 1 (unset allowed); hints without effect in braid.
 *   cgaClusterSize, minCTAs, maxCTAs, CTAPolicy, nvlsCTAs, nChannelsPerNetPeer,
 *   nvlinkCentricSched, trafficClass, commName
 *                       accepted and ignored: GPU kernel tuning and labels that a CPU build has
 *                       no use for. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_SPLIT_NOCOLOR -1

#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

typedef struct ncclConfig_v22800 {
  size_t size;          /* sizeof the struct the caller compiled against */
  unsigned int magic;   /* 0xcafebeef: proves the initializer was used */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                        \
  {                                                                                                    \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,    \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,    \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT     \
  }

/* For ncclGroupSimulateEnd (which this build refuses). */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic; /* 0x74685283 */
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

/* Flags of ncclCommShrink, ncclCommRevoke and ncclCommWindowRegister. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ---- Versions and errors ------------------------------------------------------------------------ */

/* Writes NCCL_VERSION_CODE of this header (the API level, not braid's own version). */
ncclResult_t ncclGetVersion(int* version);

/* A static description of a result code (never NULL). */
const char* ncclGetErrorString(ncclResult_t result);

/* The last failure of any nccl* call on this thread, in words ("" before the first one). `comm`
 * is ignored (it may be NULL). Errors found by ncclCommGetAsyncError are stored here too. The
 * string stays valid until this thread's next failing call. */
const char* ncclGetLastError(ncclComm_t comm);

/* ---- Communicators ----------------------------------------------------------------------------- */

/* Creates an id and starts listening for the rendezvous in this process: this process must be the
 * one that initializes rank 0 with it. Never blocks. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);

/* Joins communicator `commId` as `rank` of `nranks`: blocks until all ranks joined (or
 * BRAID_TIMEOUT passed). Inside ncclGroupStart/ncclGroupEnd it returns at once with *comm set; the
 * communicators of a group are then initialized together, each on its own thread, at the outermost
 * ncclGroupEnd (so one thread may initialize several ranks), and ncclCommGetAsyncError reports
 * ncclInProgress for them until then. `config` may be NULL (the defaults). Release the communicator
 * with ncclCommDestroy or ncclCommAbort. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);

/* As ncclCommInitRankConfig with several ids: braid rendezvous through commIds[0] only, which must
 * then come from the process of rank 0. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config);

/* Creates all `ndev` ranks of one communicator in this process (comm[i] is rank i), initializing
 * them on ndev threads. devlist names CUDA devices: it may be NULL; when given, its entries must be
 * distinct and non-negative, and are otherwise unused: every rank takes the device its init thread
 * finds current (device 0, or BRAID_CUDA_DEVICE), so on a machine with several GPUs buffers of
 * another device are refused by the calls (ncclInvalidArgument naming both devices), never moved
 * wrongly. Blocks until all are ready. On failure no communicator is left behind. */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/* Splits `comm` by color (ranks of one color form one communicator, ordered by key, then by old
 * rank); NCCL_SPLIT_NOCOLOR gives *newcomm = NULL. Collective over all ranks of comm (braid's
 * braidCommSplit). Inside a group it is deferred to ncclGroupEnd like init. config NULL: the new
 * communicator inherits comm's blocking flag. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);

/* Builds a communicator of the ranks of `comm` not listed in excludeRanksList (braidCommShrink):
 * collective over the survivors, usable on a failed communicator. shrinkFlags is
 * NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT (the same here: calls on comm already returned). */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags);

/* Nothing is ever outstanding (calls complete before returning), so this only marks comm as
 * finalized: later collectives on it are ncclInvalidUsage. Destroy it afterwards. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);

/* Leaves and frees the communicator (braidCommDestroy; not collective). When several ranks of one
 * communicator live in this process (ncclCommInitAll, grouped inits or splits), the release of
 * rank 0, which must outlive the others' goodbyes in braid, is postponed until the last of them
 * is destroyed, so any destruction order works from one thread. NULL is a no-op (ncclSuccess). */
ncclResult_t ncclCommDestroy(ncclComm_t comm);

/* Frees the communicator at once and fails the pending and later calls of every other rank with
 * ncclRemoteError (braidCommAbort). NULL is a no-op. */
ncclResult_t ncclCommAbort(ncclComm_t comm);

/* Refused (ncclInvalidUsage): braid has no revoked state; a failed communicator already fails its
 * calls. Use ncclCommShrink or ncclCommAbort. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* *asyncError: ncclSuccess while healthy; ncclInProgress while a group has not initialized it yet;
 * otherwise the error that failed it (ncclRemoteError for a dead, aborted or silent peer), whose
 * message goes to ncclGetLastError. Never blocks. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

/* Rank count and this rank. Never block. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

/* The communicator's CUDA device (the device current at init, or BRAID_CUDA_DEVICE);
 * ncclInvalidUsage for a communicator without one (no CUDA, no GPU), *device untouched. */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);

/* ---- Memory -------------------------------------------------------------------------------------
 * ncclMemAlloc returns device memory of the current device (braidMemAllocDevice: cudaMalloc, which
 * peers can map with CUDA IPC). Callers hand it to CUDA kernels, so host memory in its place would
 * fail later and far away: without a CUDA device ncclMemAlloc is ncclInvalidUsage (use malloc and a
 * NULL stream). ncclMemFree(NULL) is a no-op; a pointer ncclMemAlloc did not return (or returned and
 * was freed) is ncclInvalidArgument and frees nothing. */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);

/* Registration is an optimization hint. braid records the range (braidCommRegister, where the
 * transports that need registration will find it) and returns a real handle; host buffers over shm
 * and tcp need nothing more. A handle belongs to its
 * communicator: deregister it there (an unknown handle is ncclInvalidArgument), or let
 * ncclCommDestroy free it. buff may be NULL only when size is 0. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);

/* Symmetric-memory windows are device memory: ncclInvalidUsage (register) and
 * ncclInvalidArgument (deregister: no window exists). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- Reduction ops ------------------------------------------------------------------------------
 * A PreMulSum op computes sum over ranks of (scalar * x): each rank scales its input once, in the
 * datatype (fp16/bf16 through fp32 with one rounding to nearest even; integers wrap around), then
 * the scaled values are summed. The op works only on `comm` and with `datatype` (anything else is
 * ncclInvalidArgument). The scalar, a value of `datatype`, must be host memory
 * (ncclScalarHostImmediate) and is read before the call returns; ncclScalarDevice is
 * ncclInvalidUsage. fp8 datatypes are ncclInvalidArgument. Each call using the op scales into a
 * host scratch copy (the caller's sendbuff is never written), so a call with the op on device
 * buffers is ncclInvalidUsage (ncclAvg, or ncclSum of input scaled on the device, work). */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
/* Frees an op of ncclRedOpCreatePreMulSum; built-in ops and unknown values are ncclInvalidArgument. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives and point to point -------------------------------------------------------------
 * Each call is a braid call of the same name with the same arguments and in-place rules (see
 * braid.h), with ops sum, prod, max, min, avg and PreMulSum ops. Calls on one communicator must be
 * issued in the same order on every rank. Outside a group each call blocks until done; inside one,
 * calls are issued together at the outermost ncclGroupEnd, which blocks until all are done (so one
 * thread may drive several communicators, or post matching sends and receives). */

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
/* recvbuff (nranks * sendcount elements) gets every rank's sendbuff in rank order. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank r receives the reduction of block r. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
/* The reduction lands in root's recvbuff; other ranks' recvbuff is unused (may be NULL). */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
/* recvbuff gets root's sendbuff. ncclBcast is the in-place form (one buffer). */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
/* Block j of sendbuff (count elements) goes to rank j; block i of recvbuff comes from rank i. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream);
/* Root's recvbuff gets block i from rank i (count elements each); in place when
 * sendbuff == recvbuff + root * count elements. braidGather. */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
/* Rank i gets block i of root's sendbuff; in place on root when recvbuff == sendbuff + root * count
 * elements. braidScatter. */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);
/* Point to point; messages between two ranks match in issue order. A send and a receive between
 * the same two ranks must be in one group to be safe for large messages (as in NCCL). */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

/* Groups nest per thread; see above. ncclGroupEnd without ncclGroupStart is ncclInvalidUsage. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
/* ncclInvalidUsage: braid does not simulate through this API (braid-topo --plan does); the group
 * stays open, end it with ncclGroupEnd. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

/* ---- Profiling entry points ----------------------------------------------------------------------
 * Each function above also exists as p<name>, with the same signature and behaviour, so that a
 * profiler may interpose the nccl* names and forward to the pnccl* ones. */
ncclResult_t pncclGetVersion(int* version);
const char* pncclGetErrorString(ncclResult_t result);
const char* pncclGetLastError(ncclComm_t comm);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemFree(void* ptr);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
