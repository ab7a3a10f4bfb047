// The bootstrap's wire formats and their decoders. Every byte sequence the bootstrap reads from a
// socket goes through one of the pure functions below (no I/O, no globals, no logging), so that
// the real code and the fuzz targets in fuzz/ run the very same checks. A decoder either returns
// okStatus() with its output filled in, or a failure whose message says what was wrong (the caller
// adds who sent it) and leaves the output untouched.
//
// Formats (little-endian host structs, fixed size unless noted):
//   unique id      WireId in braidUniqueId::internal (128 bytes)
//   rank -> root   Hello {magic, version, commId, secret, rank, nranks, PeerInfo}
//   root -> rank   after the hello is accepted: a welcome {kWelcomeMagic, nranks}; then either the
//                  table, TableHeader {kTableMagic, nranks} and PeerInfo[nranks], or a refusal
//                  {kRefusalMagic, len} and len bytes of text (why this rendezvous failed)
//   allGather      a uint64 length, then that many bytes (both directions)
//   control        CtrlHeader {type, rank, len}, then len bytes of text (len <= kMaxCtrlText)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "src/base/secret.h"
#include "src/base/socket.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

constexpr uint32_t kUniqueIdMagic = 0x44494142;  // "BAID"
// Bump on any change of the formats above: ids and hellos of another version are refused.
// 2: the welcome and the refusal.
constexpr uint32_t kProtocolVersion = 2;

// The decoded braidUniqueId.
struct UniqueIdData {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t commId = 0;
  uint8_t secret[kSecretBytes] = {};
  SockAddr root;
};

void encodeUniqueId(const UniqueIdData& d, braidUniqueId* out);
// `len` must be BRAID_UNIQUE_ID_BYTES. The root address must be a whole IPv4 or IPv6 address.
Status decodeUniqueId(const uint8_t* data, size_t len, UniqueIdData* out);
inline Status decodeUniqueId(const braidUniqueId& in, UniqueIdData* out) {
  return decodeUniqueId(reinterpret_cast<const uint8_t*>(in.internal), sizeof(in.internal), out);
}

// The longest text of a control frame or a rendezvous refusal.
constexpr uint32_t kMaxCtrlText = 4096;

constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
constexpr uint32_t kTableMagic = 0x4c424154;  // "TABL"

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t commId;
  uint8_t secret[kSecretBytes];
  int32_t rank;
  int32_t nranks;
  PeerInfo info;
};
static_assert(sizeof(Hello) == 40 + sizeof(PeerInfo), "the hello layout is part of the wire protocol");

Hello makeHello(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me);
// Checks what a partial hello already shows (magic, version), so that the root can drop a stranger
// sending junk without waiting for the rest. Also refuses more bytes than a hello has.
Status checkHelloPrefix(const uint8_t* data, size_t len);
// A complete hello for communicator `id` of `nranks` ranks, from a rank in [1, nranks). The secret
// is compared (in constant time) before any other field but magic and version is looked at. Strings
// in out->info come back NUL-terminated and out->info.rank is set to out->rank.
Status decodeHello(const uint8_t* data, size_t len, const UniqueIdData& id, int nranks, Hello* out);

struct TableHeader {
  uint32_t magic;
  int32_t nranks;
};
// The table header of a communicator of `nranks` ranks; the PeerInfo[nranks] that follows is
// *bodyBytes long.
Status decodeTableHeader(const uint8_t* data, size_t len, int nranks, size_t* bodyBytes);

// What rank 0 sends a joining rank, each an 8-byte header {magic, value} and a body.
constexpr uint32_t kWelcomeMagic = 0x434c4557;  // "WELC": value = nranks, no body
constexpr uint32_t kRefusalMagic = 0x44534652;  // "RFSD": value = text bytes (<= kMaxCtrlText)
enum class RootFrame { kWelcome, kTable, kRefusal };
TableHeader makeRootHeader(RootFrame kind, uint32_t value);
// Any of the three headers (decodeTableHeader for a table); *bodyBytes is what follows it.
Status decodeRootHeader(const uint8_t* data, size_t len, int nranks, RootFrame* kind, size_t* bodyBytes);
// PeerInfo[nranks]: ranks set to their index, strings NUL-terminated.
Status decodeTableBody(const uint8_t* data, size_t len, int nranks, std::vector<PeerInfo>* out);

// An allGather length word (len must be 8) that must equal `expected`.
Status decodeGatherLength(const uint8_t* data, size_t len, uint64_t expected);

struct CtrlHeader {
  uint32_t type;
  int32_t rank;
  uint32_t len;
};
struct CtrlFrame {
  uint32_t type = 0;
  int32_t rank = -1;
  std::string text;
};
// The first control frame in data[0, len). *used is the frame's size, or 0 when more bytes are
// needed (nothing is decoded then; *need, when given, is then the frame's size once its header is
// here, else the header's). `knownTypes` has bit t set for every valid type t (< 32); the rank a
// frame is about must be -1 (nobody) or in [0, nranks).
Status decodeCtrlFrame(const uint8_t* data, size_t len, uint32_t knownTypes, int nranks, CtrlFrame* out, size_t* used,
                       size_t* need = nullptr);

// Progress tables (the text of a kProgress control frame): every rank's last reported operation
// as runs of {uint64 seq, uint32 count} covering ranks 0.. in order, at most kMaxCtrlText bytes.
// Ranks the runs do not cover (a truncated table, a malformed tail) decode as kProgressUnknown.
constexpr uint64_t kProgressUnknown = UINT64_MAX;
std::string encodeProgress(const std::vector<uint64_t>& seqs);
void decodeProgress(const uint8_t* data, size_t len, std::vector<uint64_t>* seqs);  // fills seqs->size() ranks

}  // namespace braid
