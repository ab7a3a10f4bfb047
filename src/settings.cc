#include "src/settings.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "src/base/config.h"
#include "src/base/nt_store.h"
#include "src/link_check.h"

namespace braid {

namespace {

// The first layout of braidConfig_t ends with timeoutSec. A caller built against a later braid.h
// passes a larger struct, with fields this library does not know: refused, since ignoring them
// would silently drop settings the caller asked for.
constexpr size_t kConfigMinSize = offsetof(braidConfig_t, timeoutSec) + sizeof(int);
constexpr unsigned kConfigFirstVersion = BRAID_VERSION(0, 1, 0);

}  // namespace

Status parseConfig(const braidConfig_t* c, ConfigOverrides* out) {
  if (c == nullptr) return okStatus();
  if (c->magic != BRAID_CONFIG_MAGIC)
    return errorf(braidInvalidArgument, "config->magic is 0x%x: initialize the config with BRAID_CONFIG_INITIALIZER",
                  c->magic);
  if (c->size < kConfigMinSize || c->size > sizeof(braidConfig_t))
    return errorf(braidInvalidArgument, "config->size %zu is not the size of a braidConfig_t this library knows (%zu)",
                  c->size, sizeof(braidConfig_t));
  if (c->version < kConfigFirstVersion || c->version > BRAID_VERSION_CODE)
    return errorf(braidInvalidArgument, "config->version %u is not one this library knows (%u..%u)", c->version,
                  kConfigFirstVersion, static_cast<unsigned>(BRAID_VERSION_CODE));
  if (c->transports != nullptr) {
    if (c->transports[strspn(c->transports, ", ")] == '\0')
      return errorf(braidInvalidArgument, "config->transports \"%s\" names no transport (NULL = unset)", c->transports);
    BRAID_TRY(checkParamText("BRAID_TRANSPORTS", c->transports).withContext("config->transports"));
  }
  if (c->memType != BRAID_CONFIG_UNDEF_INT) {
    if (c->memType == braidMemCuda)
      return errorf(
          braidInvalidArgument,
          "config->memType braidMemCuda: braid finds each call's memory type from its buffers; leave memType unset");
    if (c->memType != braidMemHost)
      return errorf(braidInvalidArgument, "config->memType %d is not a braidMemType_t", c->memType);
  }
  const bool timeoutSet = c->timeoutSec != BRAID_CONFIG_UNDEF_INT && c->timeoutSec != 0;
  if (timeoutSet)
    BRAID_TRY(checkParamText("BRAID_TIMEOUT", std::to_string(c->timeoutSec)).withContext("config->timeoutSec"));
  ConfigOverrides o;
  // Fields after timeoutSec exist only in a caller's struct that is large enough to hold them.
  const bool hasTags = c->size >= offsetof(braidConfig_t, p2pTags) + sizeof(int);
  if (hasTags && c->p2pTags != BRAID_CONFIG_UNDEF_INT) {
    if (c->p2pTags != 0 && c->p2pTags != 1)
      return errorf(braidInvalidArgument, "config->p2pTags %d is neither 0 nor 1", c->p2pTags);
    o.p2pTags = c->p2pTags;
  }
  const bool hasDevice = c->size >= offsetof(braidConfig_t, cudaDevice) + sizeof(int);
  if (hasDevice && c->cudaDevice != BRAID_CONFIG_UNDEF_INT) {
    BRAID_TRY(checkParamText("BRAID_CUDA_DEVICE", std::to_string(c->cudaDevice)).withContext("config->cudaDevice"));
    o.cudaDevice = c->cudaDevice;
  }
  if (c->transports != nullptr) o.transports = c->transports;
  if (timeoutSet) o.timeoutSec = c->timeoutSec;
  // memType: host, the only type admitted above, is the default.
  *out = std::move(o);
  return okStatus();
}

Status readCommSettings(const ConfigOverrides& over, CommSettings* out) {
  BRAID_TRY(checkParams());
  CommSettings s;
  int64_t timeout = 0;
  BRAID_TRY(paramInt("BRAID_TIMEOUT", &timeout));
  s.timeoutSec = static_cast<double>(timeout);
  s.transports = paramString("BRAID_TRANSPORTS");
  BRAID_TRY(paramInt("BRAID_SPIN_US", &s.spinUs));
  int64_t copyPiece = 0;
  BRAID_TRY(paramInt("BRAID_COPY_PIECE", &copyPiece));
  s.copyPiece = static_cast<uint64_t>(copyPiece);
  BRAID_TRY(paramBool("BRAID_CHECK_MISMATCH", &s.checkMismatch));
  BRAID_TRY(paramBool("BRAID_FORCE_LOWERING", &s.forceLowering));
  BRAID_TRY(paramBool("BRAID_SHM_DIRECT", &s.shmDirect));
  BRAID_TRY(paramBool("BRAID_CUDA_IPC", &s.cudaIpc));
  int64_t ipcMin = 0;
  BRAID_TRY(paramInt("BRAID_CUDA_IPC_MIN", &ipcMin));
  s.cudaIpcMin = static_cast<uint64_t>(ipcMin);
  int64_t piece = 0;
  BRAID_TRY(paramInt("BRAID_CUDA_STAGING_PIECE", &piece));
  s.stagingPiece = static_cast<uint64_t>(piece);
  int64_t nt = 0;
  BRAID_TRY(paramInt("BRAID_NT_STORES_MIN", &nt));
  s.ntStoresMin = nt > 0 ? static_cast<uint64_t>(nt) : defaultStreamBytes();
  BRAID_TRY(paramBool("BRAID_P2P_TAGS", &s.p2pTags));
  BRAID_TRY(paramInt("BRAID_LINK_CHECK_MS", &s.linkCheckMs));
  s.linkFaults = paramString("BRAID_TEST_LINK_FAULT");
  std::vector<LinkFault> faults;
  BRAID_TRY(parseLinkFaults(s.linkFaults, &faults));
  if (!over.transports.empty()) s.transports = over.transports;
  if (over.timeoutSec != 0) s.timeoutSec = over.timeoutSec;
  if (over.p2pTags >= 0) s.p2pTags = over.p2pTags != 0;
  s.overrides = over;
  *out = std::move(s);
  return okStatus();
}

}  // namespace braid
