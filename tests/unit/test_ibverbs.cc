// The ibverbs transport's decisions that need no device: the BRAID_IB_HCA syntax, the GID choice
// over a GID table, MTU arithmetic, which records may connect; libibverbs opened at run time
// (libbraid.so does not link it; a missing library is said in words naming it); and, on this
// machine, what the transport says about the device it finds (none here: "no RDMA device").
#include "braid_build_config.h"

#if BRAID_HAVE_IBVERBS

#include <elf.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "src/base/config.h"
#include "tests/scratch_dir.h"
#include "transports/ibverbs/ib_api.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/transport.h"

using namespace braid;
using namespace braid::ib;

namespace {

ibv_gid_entry entry(uint32_t index, uint32_t type, std::initializer_list<uint8_t> tail) {
  ibv_gid_entry e{};
  e.gid_index = index;
  e.gid_type = type;
  e.port_num = 1;
  size_t i = 16 - tail.size();
  for (uint8_t b : tail) e.gid.raw[i++] = b;
  return e;
}

// A link-local IPv6 GID fe80::1.
ibv_gid_entry linkLocal(uint32_t index, uint32_t type) {
  ibv_gid_entry e = entry(index, type, {1});
  e.gid.raw[0] = 0xfe;
  e.gid.raw[1] = 0x80;
  return e;
}

// What a shared object's dynamic section asks of the loader: its DT_NEEDED libraries and the
// symbols it imports (undefined in .dynsym). Read from the section headers of an ELF64 file.
struct DynamicInfo {
  std::vector<std::string> needed;
  std::vector<std::string> imports;
};

// `what` read from `bytes` at `off`, false when it does not fit (a truncated or foreign file).
template <typename T>
bool readAt(const std::vector<char>& bytes, uint64_t off, T* what) {
  if (off > bytes.size() || bytes.size() - off < sizeof(T)) return false;
  memcpy(what, bytes.data() + off, sizeof(T));
  return true;
}

std::string stringAt(const std::vector<char>& bytes, const Elf64_Shdr& strtab, uint64_t index) {
  if (strtab.sh_offset > bytes.size() || index >= std::min<uint64_t>(strtab.sh_size, bytes.size() - strtab.sh_offset))
    return "";
  const char* s = bytes.data() + strtab.sh_offset + index;
  return std::string(s, strnlen(s, strtab.sh_size - index));
}

// "" on success, else what is wrong with the file.
std::string readDynamic(const std::string& path, DynamicInfo* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr eh;
  if (!readAt(bytes, 0, &eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return path + " is not an ELF64 file";
  if (eh.e_shnum == 0 || eh.e_shentsize != sizeof(Elf64_Shdr)) return path + " has no section headers";
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i)
    if (!readAt(bytes, eh.e_shoff + i * sizeof(Elf64_Shdr), &sections[i])) return path + ": truncated section headers";
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNAMIC && sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_link >= sections.size()) return path + ": a section links to no string table";
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (sh.sh_type == SHT_DYNAMIC) {
      for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= sh.sh_size; off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        if (!readAt(bytes, sh.sh_offset + off, &d)) return path + ": truncated .dynamic";
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag == DT_NEEDED) out->needed.push_back(stringAt(bytes, strtab, d.d_un.d_val));
      }
    } else {
      for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        if (!readAt(bytes, sh.sh_offset + off, &sym)) return path + ": truncated .dynsym";
        if (sym.st_shndx == SHN_UNDEF && sym.st_name != 0) out->imports.push_back(stringAt(bytes, strtab, sym.st_name));
      }
    }
  }
  return "";
}

IbRecord usableRecord(uint8_t linkLayer, uint8_t prefixByte) {
  IbRecord r;
  r.magic = IbRecord::kMagic;
  r.usable = 1;
  r.linkLayer = linkLayer;
  r.gid[0] = prefixByte;
  r.gid[15] = 7;
  return r;
}

}  // namespace

TEST_CASE("BRAID_IB_HCA: a device name with an optional port", "[unit][ibverbs]") {
  std::string name;
  int port = -1;
  CHECK(parseHca("mlx5_0", &name, &port));
  CHECK(name == "mlx5_0");
  CHECK(port == 0);
  CHECK(parseHca("mlx5_1:2", &name, &port));
  CHECK(name == "mlx5_1");
  CHECK(port == 2);
  CHECK_FALSE(parseHca("", &name, &port));
  CHECK_FALSE(parseHca(":1", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:0", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:x", &name, &port));
  CHECK_FALSE(parseHca("mlx5_0:1000", &name, &port));
}

TEST_CASE("GID choice: RoCE v2 IPv4-mapped first, then any v2, then any non-zero", "[unit][ibverbs]") {
  // A typical RoCE table: v1 and v2 of a link-local address, then v1 and v2 of ::ffff:10.0.0.5.
  const ibv_gid_entry roce[] = {linkLocal(0, IBV_GID_TYPE_ROCE_V1), linkLocal(1, IBV_GID_TYPE_ROCE_V2),
                                entry(2, IBV_GID_TYPE_ROCE_V1, {0xff, 0xff, 10, 0, 0, 5}),
                                entry(3, IBV_GID_TYPE_ROCE_V2, {0xff, 0xff, 10, 0, 0, 5})};
  CHECK(chooseGid(roce, 4) == 3);
  // Without an IPv4 address: the v2 link-local one.
  CHECK(chooseGid(roce, 2) == 1);
  // Only v1: the first non-zero.
  CHECK(chooseGid(roce, 1) == 0);
  // Zero GIDs (unused entries) are never chosen.
  const ibv_gid_entry zeros[] = {entry(0, IBV_GID_TYPE_ROCE_V2, {}), entry(5, IBV_GID_TYPE_ROCE_V1, {9})};
  CHECK(chooseGid(zeros, 1) == -1);
  CHECK(chooseGid(zeros, 2) == 5);
  CHECK(chooseGid(nullptr, 0) == -1);
}

// Where libibverbs lacks _ibv_query_gid_table (rdma-core before v32), the GIDs' types come from
// sysfs: a tree laid out as the kernel's, with both words it writes, a word it does not, and none.
TEST_CASE("GID types from sysfs where libibverbs has no GID table call", "[unit][ibverbs]") {
  braidtest::ScratchDir root("gid-types");
  const std::string dir = root.path() + "/class/infiniband/mlx5_0/ports/1/gid_attrs/types";
  std::filesystem::create_directories(dir);
  const std::pair<int, const char*> files[] = {{0, "IB/RoCE v1\n"}, {1, "RoCE v2\n"}, {2, "RoCE v3\n"}};
  for (const auto& [index, text] : files) std::ofstream(dir + "/" + std::to_string(index)) << text;
  CHECK(gidTypeFromSysfs(root.path(), "mlx5_0", 1, 0) == IBV_GID_TYPE_ROCE_V1);
  CHECK(gidTypeFromSysfs(root.path(), "mlx5_0", 1, 1) == IBV_GID_TYPE_ROCE_V2);
  CHECK(gidTypeFromSysfs(root.path(), "mlx5_0", 1, 2) == -1);
  CHECK(gidTypeFromSysfs(root.path(), "mlx5_0", 1, 3) == -1);  // no file: an unused entry
  CHECK(gidTypeFromSysfs(root.path(), "mlx5_0", 2, 0) == -1);  // another port
}

TEST_CASE("MTU: bytes to the verbs enum and back, rounding down", "[unit][ibverbs]") {
  CHECK(mtuFromBytes(4096) == IBV_MTU_4096);
  CHECK(mtuFromBytes(2048) == IBV_MTU_2048);
  CHECK(mtuFromBytes(3000) == IBV_MTU_2048);
  CHECK(mtuFromBytes(256) == IBV_MTU_256);
  CHECK(mtuBytes(IBV_MTU_1024) == 1024);
  CHECK(mtuBytes(IBV_MTU_4096) == 4096);
}

TEST_CASE("records: both usable, one link layer, one InfiniBand subnet", "[unit][ibverbs]") {
  std::string why;
  CHECK(recordsConnect(usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe), usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe),
                       &why));
  CHECK_FALSE(recordsConnect(usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfe),
                             usableRecord(IBV_LINK_LAYER_INFINIBAND, 0xfd), &why));
  CHECK_THAT(why, Catch::Contains("subnets"));
  // RoCE routes over IP: GIDs of different prefixes still connect.
  CHECK(recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), usableRecord(IBV_LINK_LAYER_ETHERNET, 2), &why));
  CHECK_FALSE(
      recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), usableRecord(IBV_LINK_LAYER_INFINIBAND, 1), &why));
  CHECK_THAT(why, Catch::Contains("InfiniBand"));
  // RoCE v1 and v2 GIDs do not meet; a side that does not know its type is taken at its word.
  IbRecord v1 = usableRecord(IBV_LINK_LAYER_ETHERNET, 1), v2 = usableRecord(IBV_LINK_LAYER_ETHERNET, 1);
  v1.gidType = IBV_GID_TYPE_ROCE_V1 + 1;
  v1.gidIndex = 0;
  v2.gidType = IBV_GID_TYPE_ROCE_V2 + 1;
  v2.gidIndex = 3;
  CHECK(recordsConnect(v2, v2, &why));
  CHECK_FALSE(recordsConnect(v1, v2, &why));
  CHECK_THAT(why, Catch::Contains("RoCE v1 (GID index 0)") && Catch::Contains("RoCE v2 (GID index 3)") &&
                      Catch::Contains("BRAID_IB_GID_INDEX"));
  CHECK(recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), v2, &why));
  IbRecord none;
  fillRecord(nullptr, errorf(braidSystemError, "no RDMA device (ibv_get_device_list: Function not implemented)"),
             &none);
  CHECK(none.usable == 0);
  CHECK_FALSE(recordsConnect(usableRecord(IBV_LINK_LAYER_ETHERNET, 1), none, &why));
  CHECK(why == "no RDMA device (ibv_get_device_list: Function not implemented)");
  IbRecord junk;
  CHECK_FALSE(recordsConnect(junk, junk, &why));
  CHECK_THAT(why, Catch::Contains("malformed"));
}

TEST_CASE("libbraid.so does not link libibverbs: it opens it when a transport list names ibverbs", "[unit][ibverbs]") {
  // Linked, libbraid could not be loaded where rdma-core is missing (ib_api.h).
  DynamicInfo info;
  const std::string error = readDynamic(BRAID_LIBBRAID_PATH, &info);
  INFO(BRAID_LIBBRAID_PATH);
  REQUIRE(error == "");
  // The parse found what every libbraid needs, so the absences below mean something.
  CHECK(std::find(info.needed.begin(), info.needed.end(), "libc.so.6") != info.needed.end());
  CHECK(std::find(info.imports.begin(), info.imports.end(), "dlopen") != info.imports.end());
  for (const std::string& lib : info.needed) {
    INFO("NEEDED " << lib);
    CHECK(lib.find("libibverbs") == std::string::npos);
  }
  for (const std::string& sym : info.imports) {
    INFO("imports " << sym);
    CHECK(sym.rfind("ibv_", 0) == std::string::npos);
    CHECK(sym.rfind("_ibv_", 0) == std::string::npos);
  }
}

TEST_CASE("libibverbs opened at run time: every function, or words naming what is missing", "[unit][ibverbs]") {
  CHECK(std::string(paramDefault("BRAID_IB_LIBRARY")) == kIbverbsLibrary);
  IbvApi api;
  // No such file: the loader's reason, after the name we gave.
  Status s = openIbverbs("libbraid-no-such-verbs.so.1", &api);
  CHECK(s.code() == braidSystemError);
  CHECK_THAT(s.message(), Catch::StartsWith("cannot load libbraid-no-such-verbs.so.1: "));
  CHECK_THAT(s.message(), Catch::Contains("No such file"));
  CHECK(api.get_device_list == nullptr);
  // A library that loads but is not libibverbs: the first function it lacks.
  s = openIbverbs("libc.so.6", &api);
  CHECK(s.message() == "cannot use libc.so.6: it has no ibv_ack_cq_events (rdma-core too old?)");
  CHECK(api.ack_cq_events == nullptr);
  s = openIbverbs(kIbverbsLibrary, &api);
  if (!s.ok()) {
    WARN(s.message() << ": checked the failures only");
    return;
  }
#define BRAID_IBV_CHECK(member, symbol) CHECK(api.member != nullptr);
  BRAID_IBV_FUNCTIONS(BRAID_IBV_CHECK)
#undef BRAID_IBV_CHECK
  // The transport's table is the same library's (both resolve through one dlopen handle).
  REQUIRE(loadIbverbs(kIbverbsLibrary).ok());
  CHECK(ibv().get_device_list == api.get_device_list);
  // Once per process: another library later is refused, not quietly ignored.
  s = loadIbverbs("libbraid-no-such-verbs.so.1");
  CHECK(s.code() == braidInvalidUsage);
  CHECK_THAT(s.message(), Catch::Contains("libibverbs.so.1"));
}

TEST_CASE("the ibverbs transport's record says what this machine has", "[unit][ibverbs]") {
  // The transport's own probe, through the library it opens (BRAID_IB_LIBRARY).
  const Status loaded = loadIbverbs(paramString("BRAID_IB_LIBRARY"));
  int n = 0;
  errno = 0;
  ibv_device** list = loaded.ok() ? ibv().get_device_list(&n) : nullptr;
  const bool haveDevice = list != nullptr && n > 0;
  const std::string answer = !loaded.ok()      ? loaded.message()
                             : list == nullptr ? strerror(errno)
                                               : std::to_string(n) + " devices";
  if (list != nullptr) ibv().free_device_list(list);

  auto t = makeIbverbsTransport();
  REQUIRE(std::string(t->name()) == "ibverbs");
  PeerInfo a, b;
  a.rank = 0;
  b.rank = 1;
  TransportRecord ra, rb;
  t->localRecord(a, &ra);
  t->localRecord(b, &rb);
  IbRecord r;
  memcpy(&r, ra.bytes, sizeof(r));
  CHECK(r.magic == IbRecord::kMagic);
  const Endpoint ea{&a, &ra}, eb{&b, &rb};
  if (!loaded.ok()) {
    // No libibverbs: as no device, in the loader's words (cut to the record's room).
    CHECK(r.usable == 0);
    CHECK(std::string(r.why) == loaded.message().substr(0, sizeof(r.why) - 1));
    CHECK_FALSE(t->canConnect(ea, eb));
    WARN(answer << ": checked the transport's refusal only");
    return;
  }
  if (!haveDevice) {
    // No device: the record says so in ibv_get_device_list's words, and nothing connects.
    CHECK(r.usable == 0);
    CHECK_THAT(std::string(r.why), Catch::StartsWith("no RDMA device (ibv_get_device_list: "));
    CHECK_FALSE(t->canConnect(ea, eb));
    CHECK_THAT(t->whyNot(ea, eb), Catch::Contains("no RDMA device"));
    WARN("no RDMA device (ibv_get_device_list: " << answer << "): checked the transport's refusal only");
    return;
  }
  // A device (if its port is active): the record names it and two ranks on it may connect.
  if (r.usable == 0) {
    WARN("an RDMA device but none usable: " << r.why);
    CHECK_FALSE(t->canConnect(ea, eb));
    return;
  }
  CHECK(std::string(r.device).size() > 0);
  CHECK(t->canConnect(ea, eb));
  CHECK_FALSE(t->canConnect(ea, ea));
  CHECK(t->whyNot(ea, eb).empty());
}

#endif  // BRAID_HAVE_IBVERBS
