// The C API of tagged and any-source point-to-point (src/tags.h): argument checks (nothing is
// touched when one fails) and posting to the engine. Inside a group the calls are posted at once,
// as nonblocking ones, and waited for at the outermost braidGroupEnd: tagged operations match by
// tag, not by position, so posting them early changes nothing the other ranks see.
#include <cstdint>

#include "braid/braid.h"
#include "src/api.h"
#include "src/comm.h"

using namespace braid;

namespace {

struct TaggedCall {
  bool isSend;
  void* buf;
  size_t count;
  braidDataType_t dtype;
  int peer;
  int tag;
  braidComm_t handle;
  braidStream_t stream;
  int* source;  // receive: where the sender's rank goes (may be NULL)
};

Status checkTagged(const TaggedCall& c, braidComm** comm) {
  BRAID_TRY(checkCommTypeStream(c.handle, c.dtype, c.stream, comm));
  const int n = (*comm)->nranks;
  if (c.tag < 0) return errorf(braidInvalidArgument, "tag %d is negative", c.tag);
  const bool any = !c.isSend && c.peer == BRAID_ANY_SOURCE;
  if (!any && (c.peer < 0 || c.peer >= n))
    return errorf(braidInvalidArgument, "peer %d is out of range [0, %d)%s", c.peer, n,
                  c.isSend ? "" : " (BRAID_ANY_SOURCE for any)");
  if (c.peer == (*comm)->rank)
    return errorf(braidInvalidUsage, "a tagged %s %s self (rank %d) is not supported", c.isSend ? "send" : "receive",
                  c.isSend ? "to" : "from", c.peer);
  if (any && n == 1) return errorf(braidInvalidUsage, "a receive from any rank on a communicator of one rank");
  BRAID_TRY(checkP2pBuffer(c.buf, c.count, c.dtype, c.isSend));
  return requireHostBuffer(*comm, c.buf, c.count * dtypeSize(c.dtype), c.stream, c.isSend ? "sendbuff" : "recvbuff",
                           "tagged calls");
}

Status issueTagged(const TaggedCall& c, braidRequest_t* request, bool nonblocking) {
  braidComm* comm = nullptr;
  BRAID_TRY(checkTagged(c, &comm));
  if (nonblocking && request == nullptr) return errorf(braidInvalidArgument, "request is NULL");
  if (nonblocking && inGroup()) return errorf(braidInvalidUsage, "nonblocking calls cannot be part of a group");
  TagOp spec;
  spec.isSend = c.isSend;
  spec.peer = c.isSend || c.peer != BRAID_ANY_SOURCE ? c.peer : kAnySource;
  spec.tag = c.tag;
  spec.buf = static_cast<char*>(c.buf);
  spec.bytes = c.count * dtypeSize(c.dtype);
  // A blocking receive learns its source into a local, copied out on success only; a nonblocking
  // one, or one in a group, into the caller's pointer when it completes (successfully).
  const bool later = nonblocking || inGroup();
  int source = -1;
  spec.sourceOut = later ? c.source : &source;
  Op* op = nullptr;
  BRAID_TRY(comm->engine->postTagged(spec, later, &op));
  if (nonblocking) {
    *request = requestHandle(op);
    return okStatus();
  }
  if (later) {
    keepForGroupEnd(op);
    return okStatus();
  }
  BRAID_TRY(comm->engine->wait(op));
  if (c.source != nullptr) *c.source = source;
  return okStatus();
}

}  // namespace

#pragma GCC visibility push(default)

braidResult_t braidSendTagged(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                              braidComm_t comm, braidStream_t stream) {
  return guard(__func__, [&] {
    return issueTagged({true, const_cast<void*>(sendbuff), count, datatype, peer, tag, comm, stream, nullptr}, nullptr,
                       false);
  });
}
braidResult_t braidISendTagged(const void* sendbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                               braidComm_t comm, braidStream_t stream, braidRequest_t* request) {
  return guard(__func__, [&] {
    return issueTagged({true, const_cast<void*>(sendbuff), count, datatype, peer, tag, comm, stream, nullptr}, request,
                       true);
  });
}
braidResult_t braidRecvTagged(void* recvbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                              braidComm_t comm, braidStream_t stream, int* source) {
  return guard(__func__, [&] {
    return issueTagged({false, recvbuff, count, datatype, peer, tag, comm, stream, source}, nullptr, false);
  });
}
braidResult_t braidIRecvTagged(void* recvbuff, size_t count, braidDataType_t datatype, int peer, int tag,
                               braidComm_t comm, braidStream_t stream, int* source, braidRequest_t* request) {
  return guard(__func__, [&] {
    return issueTagged({false, recvbuff, count, datatype, peer, tag, comm, stream, source}, request, true);
  });
}

#pragma GCC visibility pop
