// The tcp transport's setup messages and their decoders: pure functions (no I/O, no logging) that
// tcp.cc and the fuzz targets in fuzz/ share. A failure's message says what was wrong; the caller
// adds who sent it.
//
//   AddrRecord   every rank's listening address, published in the one setup allGather
//   Handshake    connector -> acceptor, first bytes on a new connection; answered by one kAck byte
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>

#include "src/base/secret.h"
#include "src/base/socket.h"
#include "src/base/status.h"

namespace braid {
namespace tcp {

constexpr uint64_t kMagic = 0x7063746469617262ull;  // "braidtcp" in little-endian byte order
// 2: several sockets per pair (the handshake names its lane, the address record the lane count).
constexpr uint32_t kVersion = 2;
// Most sockets per pair of ranks (BRAID_NSOCKS); the same as kTcpMaxLanes in tcp_link.h.
constexpr uint32_t kMaxLanes = 16;
constexpr uint8_t kAck = 0xa5;

struct Handshake {
  uint64_t magic;
  uint32_t version;
  uint32_t size;  // sizeof(Handshake): a later version with more fields is refused, not misread
  uint64_t commId;
  int32_t from;
  int32_t to;
  uint8_t secret[kSecretBytes];
  uint32_t lane;   // which of the pair's sockets this connection is, < lanes
  uint32_t lanes;  // the sender's BRAID_NSOCKS: both ends must agree
};
static_assert(sizeof(Handshake) == 56, "the handshake layout is part of the wire protocol");

enum AddrState : uint32_t { kNoListener = 0, kListening = 1, kFailed = 2 };

// Published by every rank in the one allGather. sockaddr_in6 is the largest address we listen on.
// `lanes` is the rank's BRAID_NSOCKS, filled whatever the state, so that every pair can check
// that both ends cut messages across the same number of sockets before connecting.
struct AddrRecord {
  uint32_t state;
  uint32_t len;
  uint8_t addr[sizeof(sockaddr_in6)];
  uint32_t lanes;
};

// What the acceptor knows about the connections it expects.
struct HandshakeExpect {
  uint64_t commId = 0;
  const uint8_t* secret = nullptr;  // kSecretBytes
  int rank = 0;                     // the acceptor's own rank
  int nranks = 0;
  uint32_t lanes = 1;  // our BRAID_NSOCKS
};

// What a partial handshake already shows: the magic once 8 bytes are in, and no more bytes than a
// handshake has. Lets the acceptor drop junk without waiting for the rest.
Status checkHandshakePrefix(const uint8_t* data, size_t len);
// A complete handshake: version and size, then the secret (constant time) before anything else,
// then the communicator, that it is addressed to us and comes from a rank in (rank, nranks), and
// names a lane below our lane count (which it must share).
// Whether that rank is one of our tcp peers, and not already connected, is the caller's business.
Status decodeHandshake(const uint8_t* data, size_t len, const HandshakeExpect& want, Handshake* out);
// The handshake rank `from` sends to rank `to` of communicator `commId` (secret: kSecretBytes) on
// socket `lane` of `lanes`.
Handshake makeHandshake(uint64_t commId, const uint8_t* secret, int from, int to, uint32_t lane = 0,
                        uint32_t lanes = 1);
// The record of a listening address; false (nothing written) when it does not fit.
bool encodeAddrRecord(const SockAddr& addr, AddrRecord* rec, uint32_t lanes = 1);

// The address of a peer we must connect to, from its AddrRecord (len must be sizeof(AddrRecord)):
// a whole IPv4 or IPv6 address with a nonzero port. kFailed (the peer could not listen) is
// braidRemoteError, kNoListener braidInternalError (the ranks disagree on which pairs use tcp).
Status decodeAddrRecord(const uint8_t* data, size_t len, SockAddr* addr);

}  // namespace tcp
}  // namespace braid
