// One ibverbs link: an RC queue pair to one peer, the two slot rings of the chunk protocol
// (transports/net/chunk_link.h) registered with the device, and the thin Wire that turns the
// protocol's writes into RDMA writes with immediate. Every work request is signaled; its
// completion comes back through the transport's one completion queue, which dispatches it here by
// the link's index in wr_id.
//
// Threading: driven by one thread at a time (the executor's lock); nothing here locks.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "transports/ibverbs/ib_device.h"
#include "transports/net/chunk_link.h"
#include "transports/transport.h"

namespace braid::ib {

// Host memory; a receive reduces from the slot as each chunk arrives.
inline constexpr TransportCaps kIbCaps{memTypeBit(MemType::kHost), true, false, false, 0};

// What a rank tells one peer about its end of their queue pair (through ctx.allGather).
struct IbConn {
  uint32_t qpn = 0;
  uint32_t psn = 0;       // 24 bits
  uint64_t ringAddr = 0;  // this rank's receive ring for that peer
  uint32_t rkey = 0;
  uint32_t slots = 0;  // the ring's shape: both ends must agree
  uint32_t slotBytes = 0;
  uint32_t valid = 0;  // 1 when this entry was filled
};

// A rank's own address (the part of its record a queue pair needs), sent beside its IbConns.
struct IbAddr {
  uint32_t ok = 0;  // 0: this rank failed to set up, its IbConns are empty
  uint16_t lid = 0;
  uint8_t mtu = 0;
  uint8_t linkLayer = 0;
  uint8_t gid[16] = {};
};

// How fast a silent peer becomes an error: the local ACK timeout exponent (4.096 us * 2^timeout)
// and the retries after it, and the queue pair's shape.
struct IbLinkConfig {
  net::ChunkLinkConfig proto;
  uint8_t timeout = 14;
  uint8_t retryCnt = 7;
  uint32_t maxInline = 64;
};

class IbLink final : public Link, public net::Wire {
 public:
  // Creates the queue pair (left in INIT) and the registered rings. `index` goes into every
  // wr_id so that the transport can dispatch completions.
  static Status create(std::shared_ptr<IbDevice> dev, ibv_cq* cq, const IbLinkConfig& cfg, int peer,
                       std::string peerName, uint32_t index, std::unique_ptr<IbLink>* out);
  ~IbLink() override;

  IbConn localConn() const;
  // INIT -> RTR -> RTS against the peer's address and its end, then posts the receives the peer's
  // writes with immediate consume.
  Status connect(const IbAddr& peerAddr, const IbConn& peerConn);

  // The Link contract.
  Status postSend(Xfer* x) override { return proto_->postSend(x); }
  Status postRecv(Xfer* x) override { return proto_->postRecv(x); }
  Status progress() override;
  // A broken wire returns no credits: only transfers make it worth a pass (they fail there).
  bool busy() const override { return wireError_.ok() ? proto_->busy() : proto_->hasTransfers(); }

  // The wire.
  Status postWrite(const void* src, const Region* srcRegion, size_t bytes, uint32_t slot, uint32_t imm,
                   uint64_t wrId) override;
  Status postCredit(uint32_t imm, uint64_t wrId) override;

  // Completions, from the transport's poll of the completion queue.
  Status onCompletion(const ibv_wc& wc);

  int peer() const { return peer_; }
  // wr_id: the link's index, and whether the request was a receive.
  static uint64_t wrIdOf(uint32_t index, bool recv) { return (static_cast<uint64_t>(index) << 1) | (recv ? 1 : 0); }
  static uint32_t indexOf(uint64_t wrId) { return static_cast<uint32_t>(wrId >> 1); }
  static bool isRecv(uint64_t wrId) { return (wrId & 1) != 0; }

 private:
  IbLink() = default;
  Status postWr(ibv_send_wr* wr, uint64_t wrId);
  Status postRecvs(uint32_t n);
  Status describeWc(const ibv_wc& wc) const;

  struct Ring {
    void* mem = nullptr;
    ibv_mr* mr = nullptr;
  };
  Status makeRing(size_t bytes, int access, Ring* r);

  std::shared_ptr<IbDevice> dev_;
  IbLinkConfig cfg_;
  int peer_ = -1;
  std::string peerName_;
  uint32_t index_ = 0;
  ibv_qp* qp_ = nullptr;
  uint32_t psn_ = 0;
  Ring recvRing_, staging_;
  uint64_t remoteRing_ = 0;
  uint32_t remoteKey_ = 0;
  std::unique_ptr<net::ChunkLink> proto_;
  // The queue pair's first failed completion (its later requests are flushed). Not the link's
  // failure by itself: a peer that finished and left destroyed its end, and our credit return to it
  // then fails too; progress() fails the link only if a transfer is left (as ucx does for a closed
  // endpoint).
  Status wireError_;

  // The protocol's wrIds of the posted sends, oldest first: an RC queue pair completes its sends in
  // posting order, so each send completion is the oldest entry.
  std::unique_ptr<uint64_t[]> wrIds_;
  uint32_t wrHead_ = 0;
  uint32_t wrCount_ = 0;
};

}  // namespace braid::ib
