// Collectives and point to point: each call checks what braid cannot check for it (NCCL's datatype
// and op values), then calls braid's function of the same name with the caller's stream: braid
// orders calls on device buffers on it, as NCCL does, and refuses a stream with host buffers or on a
// communicator without a CUDA device. PreMulSum ops scale a scratch copy of the input on the host,
// then sum it; on device buffers they are refused (the shim runs no kernels).
#include <cstdint>
#include <cstring>

#include "shim/nccl/shim.h"
#include "src/base/half.h"

namespace braid::nccl {

namespace {

Status prologue(ncclComm_t comm, braidComm_t* out) { return usable(comm, out); }

braidStream_t toBraid(cudaStream_t stream) { return static_cast<braidStream_t>(stream); }

Status rankAndSize(braidComm_t b, int* rank, int* n) {
  BRAID_TRY(fromBraid(braidCommUserRank(b, rank)));
  return fromBraid(braidCommCount(b, n));
}

// The braid-side arguments of a reducing call. With a PreMulSum op, `send` is a scaled copy of the
// caller's input: in the communicator's reused buffer for a call outside a group (braid's call
// blocks, so the copy is done with when it returns), else in `scratch`, kept alive until the group
// is issued.
struct Reduction {
  braidDataType_t type;
  braidRedOp_t op;
  const void* send;
  std::unique_ptr<unsigned char[]> scratch;
};

// sendCount = count * sendBlocks elements of sendbuff are read (ReduceScatter: nranks blocks).
Status prepareReduction(ncclComm_t comm, const void* sendbuff, size_t count, size_t sendBlocks, ncclDataType_t dt,
                        ncclRedOp_t op, Reduction* out) {
  BRAID_TRY(reduceType(dt, &out->type));
  PreMulSum pre;
  bool isPre = false;
  BRAID_TRY(resolveOp(comm, op, dt, &out->op, &pre, &isPre));
  out->send = sendbuff;
  // ncclAvg on fp16: NCCL scales float inputs by 1/nranks before it sums, braidAvg sums first, and
  // an fp16 sum past 65504 is inf where the average is not. On host buffers it becomes the PreMulSum
  // it is in NCCL (device buffers keep braidAvg: the shim runs no kernels; README says so).
  const bool halfAvg = out->op == braidAvg && dt == ncclFloat16;
  if ((!isPre && !halfAvg) || count == 0) return okStatus();
  const size_t es = dtypeSize(out->type);
  if (count > static_cast<size_t>(PTRDIFF_MAX) / es / sendBlocks)
    return errorf(braidInvalidArgument, "count %zu overflows the buffer size", count);
  if (sendbuff == nullptr) return errorf(braidInvalidArgument, "sendbuff is NULL");
  braidMemType_t where = braidMemHost;
  BRAID_TRY(fromBraid(braidMemGetType(sendbuff, count * sendBlocks * es, &where)));
  if (halfAvg) {
    if (where != braidMemHost) return okStatus();
    int n = 1;
    BRAID_TRY(fromBraid(braidCommCount(comm->braid, &n)));
    const uint16_t scalar = floatToHalf(1.0f / static_cast<float>(n));
    pre.dtype = ncclFloat16;
    memcpy(pre.scalar, &scalar, sizeof(scalar));
    out->op = braidSum;
  }
  if (where != braidMemHost)
    return errorf(braidInvalidUsage,
                  "a PreMulSum op (ncclRedOpCreatePreMulSum) on device buffers: the shim scales its input on the "
                  "host; scale on the device and use ncclSum, or ncclAvg for an average");
  const size_t elems = count * sendBlocks;
  unsigned char* scaled = nullptr;
  if (inGroup()) {
    out->scratch.reset(new unsigned char[elems * es]);
    scaled = out->scratch.get();
  } else {
    if (comm->preMulScratch.size() < elems * es) comm->preMulScratch.resize(elems * es);
    scaled = comm->preMulScratch.data();
  }
  scaleInto(pre, scaled, sendbuff, elems);
  out->send = scaled;
  return okStatus();
}

// After braid took the call: a scratch copy recorded in a group must outlive the call.
Status finishReduction(braidResult_t r, Reduction* red) {
  if (r == braidSuccess && red->scratch && inGroup()) keepUntilGroupEnd(std::move(red->scratch));
  return fromBraid(r);
}

}  // namespace

}  // namespace braid::nccl

using namespace braid;
using namespace braid::nccl;

namespace {

// The calls that move data without reducing it: check the communicator, map the type
// (fp8 moves as bytes), call braid.
template <class Call>
ncclResult_t movement(const char* fn, ncclComm_t comm, ncclDataType_t datatype, Call call) {
  return guard(fn, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(prologue(comm, &b));
    braidDataType_t t;
    BRAID_TRY(moveType(datatype, &t));
    return fromBraid(call(b, t));
  });
}

}  // namespace

extern "C" {

NCCL_SHIM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(prologue(comm, &b));
    Reduction red;
    BRAID_TRY(prepareReduction(comm, sendbuff, count, 1, datatype, op, &red));
    return finishReduction(braidAllReduce(red.send, recvbuff, count, red.type, red.op, b, toBraid(stream)), &red);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(prologue(comm, &b));
    Reduction red;
    BRAID_TRY(prepareReduction(comm, sendbuff, count, 1, datatype, op, &red));
    return finishReduction(braidReduce(red.send, recvbuff, count, red.type, red.op, root, b, toBraid(stream)), &red);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                cudaStream_t stream) {
  return guard(__func__, [&] {
    braidComm_t b = nullptr;
    BRAID_TRY(prologue(comm, &b));
    int rank = 0, n = 0;
    BRAID_TRY(rankAndSize(b, &rank, &n));
    Reduction red;
    BRAID_TRY(prepareReduction(comm, sendbuff, recvcount, static_cast<size_t>(n), datatype, op, &red));
    return finishReduction(braidReduceScatter(red.send, recvbuff, recvcount, red.type, red.op, b, toBraid(stream)),
                           &red);
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidAllGather(sendbuff, recvbuff, sendcount, t, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                            int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidBroadcast(sendbuff, recvbuff, count, t, root, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidBroadcast(buff, buff, count, t, root, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidAllToAll(sendbuff, recvbuff, count, t, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidGather(sendbuff, recvbuff, count, t, root, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          int root, ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidScatter(sendbuff, recvbuff, count, t, root, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                       ncclComm_t comm, cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidSend(sendbuff, count, t, peer, b, toBraid(stream));
  });
}

NCCL_SHIM_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                       cudaStream_t stream) {
  return movement(__func__, comm, datatype, [&](braidComm_t b, braidDataType_t t) {
    return braidRecv(recvbuff, count, t, peer, b, toBraid(stream));
  });
}

}  // extern "C"

NCCL_SHIM_ALIAS(ncclAllReduce)
NCCL_SHIM_ALIAS(ncclReduce)
NCCL_SHIM_ALIAS(ncclReduceScatter)
NCCL_SHIM_ALIAS(ncclAllGather)
NCCL_SHIM_ALIAS(ncclBroadcast)
NCCL_SHIM_ALIAS(ncclBcast)
NCCL_SHIM_ALIAS(ncclAlltoAll)
NCCL_SHIM_ALIAS(ncclGather)
NCCL_SHIM_ALIAS(ncclScatter)
NCCL_SHIM_ALIAS(ncclSend)
NCCL_SHIM_ALIAS(ncclRecv)
