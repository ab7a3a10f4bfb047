// One collective call of the sweeps, run and checked against exact values (tests/mp/test_collectives.cc):
// shared with the [gpu] tests, which run the same cases on device copies of the buffers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace braidtest {

inline constexpr braidDataType_t kTypes[] = {braidInt8,   braidUint8,   braidInt32,    braidUint32,  braidInt64,
                                             braidUint64, braidFloat16, braidBfloat16, braidFloat32, braidFloat64};
inline constexpr braidRedOp_t kOps[] = {braidSum, braidProd, braidMin, braidMax, braidAvg};

enum class C { kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };
const char* cname(C c);

// A case's buffers on the host: inputs are written into them, the result is checked there.
struct Buffers {
  std::vector<char> send, recv;
};

// Device copies of a case's buffers (tests/gpu): upload copies both host buffers to the device and
// says where they are and which stream the call goes on; download waits for the stream and copies
// the receive buffer back. Both return false on a CUDA failure (after printing it).
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  virtual bool upload(const Buffers& b, const char** send, char** recv, braidStream_t* stream) = 0;
  virtual bool download(Buffers* b) = 0;
};

// One call's shape; root matters for Reduce and Broadcast only.
struct Case {
  C c;
  braidDataType_t dt;
  braidRedOp_t op;
  size_t count;
  bool inPlace;
  int root;
};
// The elements the call reads from its send buffer and writes into its receive buffer on n ranks
// (in place, the receive allocation must hold the larger of the two).
void caseSizes(const Case& k, int n, size_t* sendElems, size_t* recvElems);
// Writes sentinels over the recvAlloc elements of recv, then this rank's inputs where the call
// reads them (recv itself in place).
void fillCase(const Case& k, int rank, int n, char* send, char* recv, size_t recvAlloc);
// Posts the call: blocking, or nonblocking when req is given.
braidResult_t postCase(const Case& k, int rank, braidComm_t comm, const char* send, char* recv, braidStream_t stream,
                       braidRequest_t* req);
// Checks every element of the receive allocation after the call; 0, or 1 after printing what differed.
int checkCase(const Case& k, int rank, int n, const char* recv, size_t recvAlloc);
std::string describeCase(const Case& k);

// Runs one call (on the host buffers, or on their device copies when dev is given) and checks the
// whole receive buffer; returns 0, or 1 after printing what differed.
int runCase(braidComm_t comm, int rank, int n, C c, braidDataType_t dt, braidRedOp_t op, size_t count, bool inPlace,
            int root, Buffers& b, DeviceCopies* dev = nullptr);

}  // namespace braidtest
