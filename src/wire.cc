#include "src/wire.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace braid {

namespace {

struct WireId {
  uint32_t magic;
  uint32_t version;
  uint64_t commId;
  uint8_t secret[kSecretBytes];
  uint16_t addrLen;
  uint8_t addr[32];  // a sockaddr_in or sockaddr_in6
};
static_assert(sizeof(WireId) <= BRAID_UNIQUE_ID_BYTES, "unique id overflow");

template <typename T>
T load(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof(v));
  return v;
}

void terminate(PeerInfo* p) {
  p->hostname[sizeof(p->hostname) - 1] = '\0';
  p->hostId[sizeof(p->hostId) - 1] = '\0';
}

}  // namespace

void encodeUniqueId(const UniqueIdData& d, braidUniqueId* out) {
  WireId w{};
  w.magic = d.magic;
  w.version = d.version;
  w.commId = d.commId;
  memcpy(w.secret, d.secret, kSecretBytes);
  w.addrLen = static_cast<uint16_t>(std::min<size_t>(d.root.len, sizeof(w.addr)));
  memcpy(w.addr, &d.root.storage, w.addrLen);
  memset(out, 0, sizeof(*out));
  memcpy(out->internal, &w, sizeof(w));
}

Status decodeUniqueId(const uint8_t* data, size_t len, UniqueIdData* out) {
  if (len != BRAID_UNIQUE_ID_BYTES)
    return errorf(braidInvalidArgument, "unique id of %zu bytes (want %d)", len, BRAID_UNIQUE_ID_BYTES);
  WireId w;
  memcpy(&w, data, sizeof(w));
  if (w.magic != kUniqueIdMagic) return errorf(braidInvalidArgument, "not a braid unique id (bad magic)");
  if (w.version != kProtocolVersion)
    return errorf(braidInvalidArgument, "unique id of protocol version %u, this library speaks %u", w.version,
                  kProtocolVersion);
  UniqueIdData d;
  if (!sockAddrFromBytes(w.addr, std::min<size_t>(w.addrLen, sizeof(w.addr)), &d.root))
    return errorf(braidInvalidArgument, "unique id has no whole IPv4 or IPv6 address");
  d.magic = w.magic;
  d.version = w.version;
  d.commId = w.commId;
  memcpy(d.secret, w.secret, kSecretBytes);
  *out = d;
  return okStatus();
}

Hello makeHello(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me) {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  h.commId = id.commId;
  memcpy(h.secret, id.secret, kSecretBytes);
  h.rank = rank;
  h.nranks = nranks;
  h.info = me;
  return h;
}

Status checkHelloPrefix(const uint8_t* data, size_t len) {
  if (len > sizeof(Hello)) return errorf(braidRemoteError, "more than a hello (%zu bytes)", sizeof(Hello));
  if (len >= offsetof(Hello, magic) + sizeof(uint32_t) && load<uint32_t>(data + offsetof(Hello, magic)) != kHelloMagic)
    return errorf(braidRemoteError, "not a braid hello");
  if (len >= offsetof(Hello, version) + sizeof(uint32_t)) {
    uint32_t v = load<uint32_t>(data + offsetof(Hello, version));
    if (v != kProtocolVersion)
      return errorf(braidRemoteError, "protocol version %u (we speak %u)", v, kProtocolVersion);
  }
  return okStatus();
}

Status decodeHello(const uint8_t* data, size_t len, const UniqueIdData& id, int nranks, Hello* out) {
  BRAID_TRY(checkHelloPrefix(data, len));
  if (len < sizeof(Hello)) return errorf(braidRemoteError, "hello of %zu bytes (want %zu)", len, sizeof(Hello));
  Hello h;
  memcpy(&h, data, sizeof(h));
  if (!sameSecret(h.secret, id.secret)) return errorf(braidRemoteError, "wrong secret");
  if (h.commId != id.commId) return errorf(braidRemoteError, "hello for another communicator");
  if (h.nranks != nranks)
    return errorf(braidRemoteError, "hello for %d ranks (this communicator has %d)", h.nranks, nranks);
  if (h.rank <= 0 || h.rank >= nranks) return errorf(braidRemoteError, "rank %d out of range", h.rank);
  terminate(&h.info);
  h.info.rank = h.rank;
  *out = h;
  return okStatus();
}

Status decodeTableHeader(const uint8_t* data, size_t len, int nranks, size_t* bodyBytes) {
  if (len != sizeof(TableHeader))
    return errorf(braidRemoteError, "rank table header of %zu bytes (want %zu)", len, sizeof(TableHeader));
  TableHeader th;
  memcpy(&th, data, sizeof(th));
  if (th.magic != kTableMagic) return errorf(braidRemoteError, "not a rank table");
  if (nranks <= 0 || th.nranks != nranks)
    return errorf(braidRemoteError, "rank table of %d ranks (want %d)", th.nranks, nranks);
  *bodyBytes = sizeof(PeerInfo) * static_cast<size_t>(nranks);
  return okStatus();
}

TableHeader makeRootHeader(RootFrame kind, uint32_t value) {
  const uint32_t magic = kind == RootFrame::kWelcome ? kWelcomeMagic
                         : kind == RootFrame::kTable ? kTableMagic
                                                     : kRefusalMagic;
  return TableHeader{magic, static_cast<int32_t>(value)};
}

Status decodeRootHeader(const uint8_t* data, size_t len, int nranks, RootFrame* kind, size_t* bodyBytes) {
  if (len != sizeof(TableHeader))
    return errorf(braidRemoteError, "rendezvous header of %zu bytes (want %zu)", len, sizeof(TableHeader));
  TableHeader h;
  memcpy(&h, data, sizeof(h));
  switch (h.magic) {
    case kTableMagic:
      BRAID_TRY(decodeTableHeader(data, len, nranks, bodyBytes));
      *kind = RootFrame::kTable;
      return okStatus();
    case kWelcomeMagic:
      if (nranks <= 0 || h.nranks != nranks)
        return errorf(braidRemoteError, "welcome to a rendezvous of %d ranks (want %d)", h.nranks, nranks);
      *kind = RootFrame::kWelcome;
      *bodyBytes = 0;
      return okStatus();
    case kRefusalMagic:
      if (h.nranks < 0 || static_cast<uint32_t>(h.nranks) > kMaxCtrlText)
        return errorf(braidRemoteError, "refusal of %d bytes (at most %u)", h.nranks, kMaxCtrlText);
      *kind = RootFrame::kRefusal;
      *bodyBytes = static_cast<size_t>(h.nranks);
      return okStatus();
    default:
      return errorf(braidRemoteError, "not a braid rendezvous reply");
  }
}

Status decodeTableBody(const uint8_t* data, size_t len, int nranks, std::vector<PeerInfo>* out) {
  if (nranks <= 0 || len != sizeof(PeerInfo) * static_cast<size_t>(nranks))
    return errorf(braidRemoteError, "rank table of %zu bytes for %d ranks", len, nranks);
  std::vector<PeerInfo> table(static_cast<size_t>(nranks));
  memcpy(table.data(), data, len);
  for (int r = 0; r < nranks; ++r) {
    terminate(&table[r]);
    table[r].rank = r;
  }
  *out = std::move(table);
  return okStatus();
}

Status decodeGatherLength(const uint8_t* data, size_t len, uint64_t expected) {
  if (len != sizeof(uint64_t)) return errorf(braidRemoteError, "length word of %zu bytes", len);
  uint64_t got = load<uint64_t>(data);
  if (got != expected)
    return errorf(braidRemoteError, "announced %llu bytes, expected %llu", static_cast<unsigned long long>(got),
                  static_cast<unsigned long long>(expected));
  return okStatus();
}

Status decodeCtrlFrame(const uint8_t* data, size_t len, uint32_t knownTypes, int nranks, CtrlFrame* out, size_t* used,
                       size_t* need) {
  *used = 0;
  if (need != nullptr) *need = sizeof(CtrlHeader);
  if (len < sizeof(CtrlHeader)) return okStatus();
  CtrlHeader h;
  memcpy(&h, data, sizeof(h));
  if (h.type >= 32 || (knownTypes & (1u << h.type)) == 0 || h.len > kMaxCtrlText || h.rank < -1 || h.rank >= nranks)
    return errorf(braidRemoteError, "malformed control message (type %u, rank %d, %u bytes)", h.type, h.rank, h.len);
  if (need != nullptr) *need = sizeof(h) + h.len;
  if (len - sizeof(h) < h.len) return okStatus();
  out->type = h.type;
  out->rank = h.rank;
  out->text.assign(reinterpret_cast<const char*>(data) + sizeof(h), h.len);
  *used = sizeof(h) + h.len;
  return okStatus();
}

namespace {
constexpr size_t kRunBytes = 12;
}

std::string encodeProgress(const std::vector<uint64_t>& seqs) {
  std::string out;
  for (size_t i = 0; i < seqs.size() && out.size() + kRunBytes <= kMaxCtrlText;) {
    size_t j = i + 1;
    while (j < seqs.size() && seqs[j] == seqs[i]) ++j;
    const uint32_t count = static_cast<uint32_t>(j - i);
    out.append(reinterpret_cast<const char*>(&seqs[i]), 8);
    out.append(reinterpret_cast<const char*>(&count), 4);
    i = j;
  }
  return out;
}

void decodeProgress(const uint8_t* data, size_t len, std::vector<uint64_t>* seqs) {
  std::fill(seqs->begin(), seqs->end(), kProgressUnknown);
  size_t at = 0;
  for (size_t off = 0; off + kRunBytes <= len && at < seqs->size(); off += kRunBytes) {
    uint64_t seq;
    uint32_t count;
    memcpy(&seq, data + off, 8);
    memcpy(&count, data + off + 8, 4);
    const size_t n = std::min<size_t>(count, seqs->size() - at);
    std::fill_n(seqs->begin() + static_cast<long>(at), n, seq);
    at += n;
  }
}

}  // namespace braid
