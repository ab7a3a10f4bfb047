/* Prints the ABI facts of whichever nccl.h it is compiled against: built once against braid's
 * header and once against NVIDIA's, the two outputs must be identical (check_abi.sh). The API
 * version is left out: braid's header declares 2.28.0, NVIDIA's its own patch level. */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>

#define FACT(expr) printf("%s = %lld\n", #expr, (long long)(expr))
#define FIELD(f)                                                                                         \
  printf("offsetof(ncclConfig_t, %s) = %zu, initializer %s = %lld\n", #f, offsetof(ncclConfig_t, f), #f, \
         (long long)init.f)

int main(void) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  FACT(sizeof(ncclConfig_t));
  FACT(init.size);
  FACT(init.magic);
  FACT(offsetof(ncclConfig_t, size));
  FACT(offsetof(ncclConfig_t, magic));
  FACT(offsetof(ncclConfig_t, version));
  FIELD(blocking);
  FIELD(cgaClusterSize);
  FIELD(minCTAs);
  FIELD(maxCTAs);
  printf("offsetof(ncclConfig_t, netName) = %zu, NULL: %d\n", offsetof(ncclConfig_t, netName), init.netName == NULL);
  FIELD(splitShare);
  FIELD(trafficClass);
  printf("offsetof(ncclConfig_t, commName) = %zu, NULL: %d\n", offsetof(ncclConfig_t, commName), init.commName == NULL);
  FIELD(collnetEnable);
  FIELD(CTAPolicy);
  FIELD(shrinkShare);
  FIELD(nvlsCTAs);
  FIELD(nChannelsPerNetPeer);
  FIELD(nvlinkCentricSched);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  FACT(sizeof(ncclSimInfo_t));
  FACT(sim.size);
  FACT(sim.magic);
  FACT(sim.estimatedTime);
  FACT(sizeof(ncclUniqueId));
  FACT(NCCL_UNIQUE_ID_BYTES);
  FACT(sizeof(ncclResult_t));
  FACT(sizeof(ncclDataType_t));
  FACT(sizeof(ncclRedOp_t));
  FACT(sizeof(ncclScalarResidence_t));
  FACT(ncclSuccess), FACT(ncclUnhandledCudaError), FACT(ncclSystemError), FACT(ncclInternalError);
  FACT(ncclInvalidArgument), FACT(ncclInvalidUsage), FACT(ncclRemoteError), FACT(ncclInProgress);
  FACT(ncclNumResults);
  FACT(ncclInt8), FACT(ncclChar), FACT(ncclUint8), FACT(ncclInt32), FACT(ncclInt), FACT(ncclUint32);
  FACT(ncclInt64), FACT(ncclUint64), FACT(ncclFloat16), FACT(ncclHalf), FACT(ncclFloat32), FACT(ncclFloat);
  FACT(ncclFloat64), FACT(ncclDouble), FACT(ncclBfloat16), FACT(ncclFloat8e4m3), FACT(ncclFloat8e5m2);
  FACT(ncclNumTypes);
  FACT(ncclSum), FACT(ncclProd), FACT(ncclMax), FACT(ncclMin), FACT(ncclAvg), FACT(ncclNumOps), FACT(ncclMaxRedOp);
  FACT(ncclScalarDevice), FACT(ncclScalarHostImmediate);
  FACT(NCCL_CONFIG_UNDEF_INT), FACT(NCCL_SPLIT_NOCOLOR), FACT(NCCL_MAJOR);
  FACT(NCCL_VERSION(2, 8, 4)), FACT(NCCL_VERSION(2, 9, 6)), FACT(NCCL_VERSION(2, 28, 9));
  FACT(NCCL_CTA_POLICY_DEFAULT), FACT(NCCL_CTA_POLICY_EFFICIENCY), FACT(NCCL_CTA_POLICY_ZERO);
  FACT(NCCL_SHRINK_DEFAULT), FACT(NCCL_SHRINK_ABORT), FACT(NCCL_REVOKE_DEFAULT);
  FACT(NCCL_WIN_DEFAULT), FACT(NCCL_WIN_COLL_SYMMETRIC), FACT(NCCL_WIN_REQUIRED_ALIGNMENT);
  return 0;
}
