#include "transports/tcp/tcp_wire.h"

#include <sys/socket.h>

#include <cstring>

namespace braid {
namespace tcp {

Status checkHandshakePrefix(const uint8_t* data, size_t len) {
  if (len > sizeof(Handshake)) return errorf(braidRemoteError, "more than a handshake (%zu bytes)", sizeof(Handshake));
  uint64_t magic = 0;
  if (len >= sizeof(magic)) memcpy(&magic, data, sizeof(magic));
  if (len >= sizeof(magic) && magic != kMagic) return errorf(braidRemoteError, "not a braid tcp handshake");
  return okStatus();
}

Status decodeHandshake(const uint8_t* data, size_t len, const HandshakeExpect& want, Handshake* out) {
  BRAID_TRY(checkHandshakePrefix(data, len));
  if (len < sizeof(Handshake))
    return errorf(braidRemoteError, "handshake of %zu bytes (want %zu)", len, sizeof(Handshake));
  Handshake hs;
  memcpy(&hs, data, sizeof(hs));
  if (hs.version != kVersion || hs.size != sizeof(Handshake))
    return errorf(braidRemoteError, "protocol version %u, %u bytes (we speak %u, %zu bytes)", hs.version, hs.size,
                  kVersion, sizeof(Handshake));
  // The secret first: a stranger learns nothing about our communicator or ranks from the answer.
  if (!sameSecret(hs.secret, want.secret)) return errorf(braidRemoteError, "wrong secret");
  if (hs.commId != want.commId) return errorf(braidRemoteError, "handshake for another communicator");
  if (hs.to != want.rank) return errorf(braidRemoteError, "handshake addressed to rank %d", hs.to);
  if (hs.from <= want.rank || hs.from >= want.nranks)
    return errorf(braidRemoteError, "handshake from unexpected rank %d", hs.from);
  if (hs.lanes != want.lanes || hs.lane >= hs.lanes)
    return errorf(braidRemoteError, "handshake for socket %u of %u (we use %u)", hs.lane, hs.lanes, want.lanes);
  *out = hs;
  return okStatus();
}

Handshake makeHandshake(uint64_t commId, const uint8_t* secret, int from, int to, uint32_t lane, uint32_t lanes) {
  Handshake hs{};
  hs.magic = kMagic;
  hs.version = kVersion;
  hs.size = sizeof(Handshake);
  hs.commId = commId;
  hs.from = from;
  hs.to = to;
  hs.lane = lane;
  hs.lanes = lanes;
  memcpy(hs.secret, secret, sizeof(hs.secret));
  return hs;
}

bool encodeAddrRecord(const SockAddr& addr, AddrRecord* rec, uint32_t lanes) {
  if (addr.len > sizeof(rec->addr)) return false;
  AddrRecord r{};
  r.state = kListening;
  r.len = addr.len;
  r.lanes = lanes;
  memcpy(r.addr, &addr.storage, addr.len);
  *rec = r;
  return true;
}

Status decodeAddrRecord(const uint8_t* data, size_t len, SockAddr* addr) {
  if (len != sizeof(AddrRecord)) return errorf(braidRemoteError, "address record of %zu bytes", len);
  AddrRecord rec;
  memcpy(&rec, data, sizeof(rec));
  if (rec.state == kFailed) return errorf(braidRemoteError, "could not set up its tcp listener (see its log)");
  if (rec.state == kNoListener)
    return errorf(braidInternalError, "published no tcp address: the ranks disagree on which pairs use tcp");
  if (rec.state != kListening) return errorf(braidRemoteError, "malformed address record (state %u)", rec.state);
  SockAddr a;
  if (rec.len > sizeof(rec.addr) || !sockAddrFromBytes(rec.addr, rec.len, &a))
    return errorf(braidRemoteError, "malformed listening address (%u bytes)", rec.len);
  if (a.port() == 0) return errorf(braidRemoteError, "listening address %s has no port", a.toString().c_str());
  *addr = a;
  return okStatus();
}

}  // namespace tcp
}  // namespace braid
