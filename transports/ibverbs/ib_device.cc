#include "transports/ibverbs/ib_device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "src/base/log.h"
#include "transports/ibverbs/ib_api.h"

namespace braid::ib {

namespace {

// A GID table is at most this long on the devices we know (mlx5: 255 on RoCE, 128 on IB).
constexpr int kMaxGids = 1024;

void copyText(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

std::string textOf(const char* s, size_t cap) { return std::string(s, strnlen(s, cap)); }

// ::ffff:a.b.c.d
bool ipv4Mapped(const ibv_gid& g) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g.raw, kPrefix, sizeof(kPrefix)) == 0;
}

bool zeroGid(const ibv_gid& g) {
  static const uint8_t kZero[16] = {};
  return memcmp(g.raw, kZero, sizeof(kZero)) == 0;
}

// Memory registered before a fork() must not be shared copy-on-write with the child (the device
// would keep writing the parent's pages): rdma-core either knows the kernel handles it, or marks
// registered memory MADV_DONTFORK after this call. Must come before any other verbs call.
void forkInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    int rc = ibv().fork_init();
    if (rc != 0) BRAID_INFO(kLogNet, "ibverbs: ibv_fork_init: %s (fork after init is unsafe)", strerror(rc));
  });
}

struct DeviceList {
  ibv_device** list = nullptr;
  int n = 0;
  ~DeviceList() {
    if (list != nullptr) ibv().free_device_list(list);
  }
};

// The GID this rank uses on `port`: BRAID_IB_GID_INDEX when set, else chooseGid over the table.
Status pickGid(IbDevice* d) {
  int64_t forced = -1;
  if (paramIsSet("BRAID_IB_GID_INDEX")) BRAID_TRY(paramInt("BRAID_IB_GID_INDEX", &forced));
  if (forced >= 0) {
    if (forced >= d->portAttr.gid_tbl_len)
      return errorf(braidInvalidArgument, "BRAID_IB_GID_INDEX=%lld: %s port %u has %d GIDs",
                    static_cast<long long>(forced), d->name.c_str(), d->port, d->portAttr.gid_tbl_len);
    if (ibv().query_gid(d->ctx, d->port, static_cast<int>(forced), &d->gid) != 0)
      return systemError(errno, "ibverbs: ibv_query_gid(%s port %u index %lld)", d->name.c_str(), d->port,
                         static_cast<long long>(forced));
    d->gidIndex = static_cast<int>(forced);
    if (d->portAttr.link_layer == IBV_LINK_LAYER_ETHERNET)
      d->gidType = gidTypeFromSysfs("/sys", d->name, d->port, d->gidIndex);
    return okStatus();
  }
  // InfiniBand routes by LID inside a subnet; GID 0 (the port GID) names the port.
  if (d->portAttr.link_layer != IBV_LINK_LAYER_ETHERNET) {
    d->gidIndex = 0;
    if (ibv().query_gid(d->ctx, d->port, 0, &d->gid) != 0)
      return systemError(errno, "ibverbs: ibv_query_gid(%s port %u index 0)", d->name.c_str(), d->port);
    return okStatus();
  }
  // RoCE: the table lists RoCE v1 and v2 GIDs for every address of the netdev.
  const size_t cap = static_cast<size_t>(std::clamp(d->attr.phys_port_cnt * d->portAttr.gid_tbl_len, 1, kMaxGids));
  std::vector<ibv_gid_entry> entries(cap);
  ssize_t n = queryGidTable(d->ctx, entries.data(), entries.size(), 0);
  if (n == -ENOSYS) {
    // An rdma-core without the table call: this port's GIDs one by one, their types from sysfs
    // (unused slots have no type file, or a zero GID that chooseGid skips).
    n = 0;
    for (int i = 0; i < d->portAttr.gid_tbl_len && static_cast<size_t>(n) < entries.size(); ++i) {
      ibv_gid gid{};
      if (ibv().query_gid(d->ctx, d->port, i, &gid) != 0) continue;
      const int type = gidTypeFromSysfs("/sys", d->name, d->port, i);
      if (type < 0) continue;
      ibv_gid_entry& e = entries[static_cast<size_t>(n++)];
      e = ibv_gid_entry{};
      e.gid = gid;
      e.gid_index = static_cast<uint32_t>(i);
      e.port_num = d->port;
      e.gid_type = static_cast<uint32_t>(type);
    }
  }
  if (n < 0) return systemError(static_cast<int>(-n), "ibverbs: ibv_query_gid_table(%s)", d->name.c_str());
  // The table covers every port: keep ours.
  std::vector<ibv_gid_entry> mine;
  for (ssize_t i = 0; i < n; ++i)
    if (entries[i].port_num == d->port) mine.push_back(entries[i]);
  int index = chooseGid(mine.data(), static_cast<int>(mine.size()));
  if (index < 0)
    return errorf(braidSystemError, "ibverbs: %s port %u (RoCE) has no GID: is an IP address configured on its netdev?",
                  d->name.c_str(), d->port);
  d->gidIndex = index;
  for (const ibv_gid_entry& e : mine)
    if (static_cast<int>(e.gid_index) == index) {
      d->gid = e.gid;
      d->gidType = static_cast<int>(e.gid_type);
    }
  return okStatus();
}

// The first active port of `d` (or `wantPort`), its attributes in d->portAttr.
Status pickPort(IbDevice* d, int wantPort) {
  for (int p = 1; p <= d->attr.phys_port_cnt; ++p) {
    if (wantPort != 0 && p != wantPort) continue;
    ibv_port_attr pa{};
    if (queryPort(d->ctx, static_cast<uint8_t>(p), &pa) != 0)
      return systemError(errno, "ibverbs: ibv_query_port(%s port %d)", d->name.c_str(), p);
    if (pa.state != IBV_PORT_ACTIVE) {
      if (wantPort != 0)
        return errorf(braidSystemError, "ibverbs: %s port %d is %s, not active", d->name.c_str(), p,
                      ibv().port_state_str(pa.state));
      continue;
    }
    d->port = static_cast<uint8_t>(p);
    d->portAttr = pa;
    return okStatus();
  }
  if (wantPort != 0)
    return errorf(braidInvalidArgument, "BRAID_IB_HCA: %s has no port %d (it has %u)", d->name.c_str(), wantPort,
                  d->attr.phys_port_cnt);
  return errorf(braidSystemError, "ibverbs: %s has no active port", d->name.c_str());
}

// Opens `dev` and fills everything but the protection domain.
Status openOne(ibv_device* dev, int wantPort, IbDevice* d) {
  d->name = ibv().get_device_name(dev);
  d->ctx = ibv().open_device(dev);
  if (d->ctx == nullptr) return systemError(errno, "ibverbs: ibv_open_device(%s)", d->name.c_str());
  if (ibv().query_device(d->ctx, &d->attr) != 0)
    return systemError(errno, "ibverbs: ibv_query_device(%s)", d->name.c_str());
  BRAID_TRY(pickPort(d, wantPort));
  BRAID_TRY(pickGid(d));
  d->mtu = d->portAttr.active_mtu;
  std::string cap;
  BRAID_TRY(paramEnum("BRAID_IB_MTU", &cap));
  if (!cap.empty()) d->mtu = std::min(d->mtu, mtuFromBytes(std::stoi(cap)));
  return okStatus();
}

}  // namespace

IbDevice::~IbDevice() {
  if (pd != nullptr) ibv().dealloc_pd(pd);
  if (ctx != nullptr) ibv().close_device(ctx);
}

bool parseHca(const std::string& text, std::string* name, int* port) {
  const size_t colon = text.find(':');
  *name = text.substr(0, colon);
  *port = 0;
  if (name->empty()) return false;
  if (colon == std::string::npos) return true;
  const std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 3 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  *port = std::stoi(p);
  return *port >= 1 && *port <= 255;
}

ibv_mtu mtuFromBytes(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

int mtuBytes(ibv_mtu mtu) { return 128 << static_cast<int>(mtu); }

int gidTypeFromSysfs(const std::string& root, const std::string& dev, int port, int index) {
  const std::string path = root + "/class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/gid_attrs/types/" +
                           std::to_string(index);
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) return -1;
  // The kernel writes "RoCE v2" or "IB/RoCE v1", one line.
  if (text == "RoCE v2") return IBV_GID_TYPE_ROCE_V2;
  if (text == "IB/RoCE v1") return IBV_GID_TYPE_ROCE_V1;
  return -1;
}

int chooseGid(const ibv_gid_entry* entries, int n) {
  int v2 = -1, any = -1;
  for (int i = 0; i < n; ++i) {
    const ibv_gid_entry& e = entries[i];
    if (zeroGid(e.gid)) continue;
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && ipv4Mapped(e.gid)) return static_cast<int>(e.gid_index);
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && v2 < 0) v2 = static_cast<int>(e.gid_index);
    if (any < 0) any = static_cast<int>(e.gid_index);
  }
  return v2 >= 0 ? v2 : any;
}

Status openDevice(std::shared_ptr<IbDevice>* out) {
  // libibverbs itself first (ib_api.h): without it there is no device to find, and the probe's
  // answer says so as "no RDMA device" would.
  BRAID_TRY(loadIbverbs(paramString("BRAID_IB_LIBRARY")));
  forkInitOnce();
  std::string wantName;
  int wantPort = 0;
  const std::string hca = paramString("BRAID_IB_HCA");
  // The syntax was checked with the other settings (ibverbs.cc).
  if (!hca.empty()) (void)parseHca(hca, &wantName, &wantPort);
  DeviceList devs;
  errno = 0;
  devs.list = ibv().get_device_list(&devs.n);
  if (devs.list == nullptr)
    return errorf(braidSystemError, "no RDMA device (ibv_get_device_list: %s)",
                  errno != 0 ? strerror(errno) : "no devices");
  if (devs.n == 0) return errorf(braidSystemError, "no RDMA device (ibv_get_device_list: 0 devices)");
  std::string names;
  Status last;
  for (int i = 0; i < devs.n; ++i) {
    const char* name = ibv().get_device_name(devs.list[i]);
    names.append(names.empty() ? "" : ", ").append(name);
    if (!wantName.empty() && wantName != name) continue;
    auto d = std::make_shared<IbDevice>();
    last = openOne(devs.list[i], wantPort, d.get());
    if (last.ok()) {
      d->pd = ibv().alloc_pd(d->ctx);
      if (d->pd == nullptr) return systemError(errno, "ibverbs: ibv_alloc_pd(%s)", d->name.c_str());
      *out = std::move(d);
      return okStatus();
    }
    // A named device must work; otherwise try the next one.
    if (!wantName.empty()) return last;
    BRAID_INFO(kLogNet, "ibverbs: skipping %s: %s", name, last.message().c_str());
  }
  if (!wantName.empty())
    return errorf(braidInvalidArgument, "BRAID_IB_HCA=%s: no RDMA device of that name (found: %s)", hca.c_str(),
                  names.c_str());
  return errorf(braidSystemError, "no usable RDMA device among %s (%s)", names.c_str(), last.message().c_str());
}

void fillRecord(const IbDevice* dev, const Status& probe, IbRecord* out) {
  *out = IbRecord{};
  out->magic = IbRecord::kMagic;
  if (dev == nullptr) {
    copyText(out->why, sizeof(out->why), probe.ok() ? "not probed" : probe.message());
    return;
  }
  out->usable = 1;
  out->linkLayer = dev->portAttr.link_layer;
  out->port = dev->port;
  out->mtu = static_cast<uint8_t>(dev->mtu);
  out->lid = dev->portAttr.lid;
  out->gidIndex = static_cast<uint16_t>(dev->gidIndex);
  memcpy(out->gid, dev->gid.raw, sizeof(out->gid));
  out->gidType = dev->gidType >= 0 && dev->gidType < 255 ? static_cast<uint8_t>(dev->gidType + 1) : 0;
  out->nodeGuid = dev->attr.node_guid;
  copyText(out->device, sizeof(out->device), dev->name);
}

bool recordsConnect(const IbRecord& a, const IbRecord& b, std::string* why) {
  for (const IbRecord* r : {&a, &b}) {
    if (r->magic != IbRecord::kMagic) {
      *why = "a malformed ibverbs record";
      return false;
    }
    if (r->usable == 0) {
      *why = textOf(r->why, sizeof(r->why));
      return false;
    }
  }
  if (a.linkLayer != b.linkLayer) {
    *why = "one side is on InfiniBand, the other on Ethernet (RoCE)";
    return false;
  }
  // On InfiniBand, queue pairs address each other by LID within one subnet.
  if (a.linkLayer != IBV_LINK_LAYER_ETHERNET && memcmp(a.gid, b.gid, 8) != 0) {
    *why = "different InfiniBand subnets";
    return false;
  }
  if (a.linkLayer == IBV_LINK_LAYER_ETHERNET && a.gidType != 0 && b.gidType != 0 && a.gidType != b.gidType) {
    auto name = [](const IbRecord& r) {
      return std::string(r.gidType - 1 == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "RoCE v1") + " (GID index " +
             std::to_string(r.gidIndex) + ")";
    };
    *why = "one side uses a " + name(a) + " GID, the other a " + name(b) +
           " one (BRAID_IB_GID_INDEX can pick GIDs of one type)";
    return false;
  }
  return true;
}

}  // namespace braid::ib
