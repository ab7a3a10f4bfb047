// The RDMA device the ibverbs transport runs on: which device and port (BRAID_IB_HCA), which GID
// (BRAID_IB_GID_INDEX, else a RoCE v2 one), which MTU (the port's active one, capped by
// BRAID_IB_MTU), and the record that tells the other ranks about it. Opened once per transport, at
// construction; without a usable device the probe's answer (why libibverbs did not load,
// ibv_get_device_list's, or why the named device or port does not do) is kept and published, so
// canConnect can refuse and say why.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "src/base/status.h"
#include "transports/transport.h"

namespace braid::ib {

// What a rank publishes about its device (TransportRecord, 128 bytes).
struct IbRecord {
  static constexpr uint32_t kMagic = 0x31564249;  // "IBV1"
  uint32_t magic = 0;
  uint8_t usable = 0;     // 1: a device and an active port; 0: `why` says what is missing
  uint8_t linkLayer = 0;  // IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET (RoCE)
  uint8_t port = 0;
  uint8_t mtu = 0;  // enum ibv_mtu, already capped by BRAID_IB_MTU
  uint16_t lid = 0;
  uint16_t gidIndex = 0;
  uint8_t gid[16] = {};      // its first 8 bytes are the subnet prefix on InfiniBand
  uint8_t gidType = 0;       // RoCE: IBV_GID_TYPE_ROCE_V1 or _V2, plus 1; 0 when unknown (or InfiniBand)
  uint8_t reserved[3] = {};  // keeps nodeGuid aligned, explicitly
  uint64_t nodeGuid = 0;
  char device[20] = {};  // the device's name (truncated), for messages
  char why[68] = {};     // when not usable: "no RDMA device (ibv_get_device_list: ...)", truncated
};
static_assert(sizeof(IbRecord) == TransportRecord::kBytes, "the ibverbs record fills a transport record");

// The verbs objects every link of one transport shares. Links keep a shared_ptr, so that the
// protection domain outlives every memory region and queue pair made in it.
class IbDevice {
 public:
  ~IbDevice();
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_device_attr attr{};
  ibv_port_attr portAttr{};
  uint8_t port = 0;
  int gidIndex = 0;
  ibv_gid gid{};
  int gidType = -1;  // RoCE: the chosen GID's IBV_GID_TYPE_ROCE_V1 or _V2; -1 when unknown
  ibv_mtu mtu = IBV_MTU_1024;
  std::string name;
};

// Loads libibverbs (BRAID_IB_LIBRARY, once per process: ib_api.h), then opens the device and port
// the settings ask for. On failure *dev stays null and the status says why in words a user can act
// on (its message starts with "no RDMA device" when there is none, "cannot load" when the library
// is missing).
Status openDevice(std::shared_ptr<IbDevice>* dev);

// The record of an opened device, or of a failed probe (`why` from its status).
void fillRecord(const IbDevice* dev, const Status& probe, IbRecord* out);

// "mlx5_0:1" -> {"mlx5_0", 1}; "mlx5_0" -> {"mlx5_0", 0 (first active)}; false when malformed.
bool parseHca(const std::string& text, std::string* name, int* port);

// 256..4096 -> IBV_MTU_256..IBV_MTU_4096 and back.
ibv_mtu mtuFromBytes(int bytes);
int mtuBytes(ibv_mtu mtu);

// The GID table index to use among `n` valid entries (ibv_query_gid_table's): the first RoCE v2
// GID that maps an IPv4 address, else the first RoCE v2 GID, else the first non-zero one; -1 when
// none. RoCE v2 is routable (UDP/IP), and the IPv4-mapped one matches the address the hosts
// reach each other by in most clusters.
int chooseGid(const ibv_gid_entry* entries, int n);

// The type of GID `index` of `dev`'s `port` as sysfs says it
// (<root>/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>: "RoCE v2", "IB/RoCE v1"):
// IBV_GID_TYPE_ROCE_V2 or IBV_GID_TYPE_ROCE_V1; -1 where the file is missing or says neither. The
// GID table's types where libibverbs lacks _ibv_query_gid_table (rdma-core before v32).
int gidTypeFromSysfs(const std::string& root, const std::string& dev, int port, int index);

// Whether two ranks' records let them connect, and if not why (for the init error): both usable,
// the same link layer and, on InfiniBand, the same subnet prefix (no routing between subnets); on
// RoCE, GIDs of one type where both sides know theirs (v1 frames and v2 UDP packets do not meet).
bool recordsConnect(const IbRecord& a, const IbRecord& b, std::string* why);

}  // namespace braid::ib
