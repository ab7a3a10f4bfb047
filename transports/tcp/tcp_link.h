// The tcp transport's data path: one nonblocking stream socket per pair of ranks carries both
// directions. Each message on the wire is an 8-byte little-endian length followed by the payload, so
// the receiver can check that the sender and the posted receive agree on the size.
//
// Threading: a TcpLink is driven by one thread at a time (the executor's lock); nothing here locks.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "src/base/socket.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

// Bytes of the length header in front of every message.
inline constexpr size_t kTcpHeaderBytes = 8;

// Host memory only; a receive reduces each chunk from a staging buffer as it arrives.
inline constexpr TransportCaps kTcpCaps{memTypeBit(MemType::kHost), true, false, false, 0};

class TcpLink final : public Link {
 public:
  // `fd` is connected, nonblocking, with TCP_NODELAY and the socket buffers already set.
  // `chunkBytes` (BRAID_TCP_CHUNK) caps the bytes of one socket call and sizes the reduce staging
  // buffer; it must be at least kMinChunk.
  TcpLink(Fd fd, int peerRank, std::string peerHost, size_t chunkBytes);

  Status postSend(Xfer* x) override;
  Status postRecv(Xfer* x) override;
  Status progress() override;
  bool busy() const override { return !sends_.empty() || !recvs_.empty(); }

  // The smallest BRAID_TCP_CHUNK accepted: larger than any element size, and small enough that
  // tests can force many pieces per message.
  static constexpr size_t kMinChunk = 4096;

 private:
  // Most iovec entries one sendmsg/recvmsg carries: a header and a payload for each of up to 16
  // queued messages, so a burst of small messages costs one system call instead of one each.
  static constexpr int kMaxIov = 32;
  static constexpr int kMaxBatch = kMaxIov / 2;
  // Socket calls (of up to one chunk) each direction may make per progress() call, so that one
  // busy link cannot keep the executor from the others (a fast peer could otherwise refill the
  // socket as fast as we drain it, forever). Four 512 KiB chunks are ~0.5 ms on loopback.
  static constexpr size_t kChunksPerProgress = 4;

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  // One sendmsg / recvmsg of at most one chunk of payload; *more says whether another call could
  // move more now (the call was not cut short and something is still queued).
  Status sendOnce(bool* more);
  Status recvOnce(bool* more);
  Status checkHeader(uint64_t announced, Xfer* x);
  // Records a fatal error; every later call returns it.
  Status fail(Status s);
  Status closedError();
  Status socketError(int err, const char* op);

  Fd fd_;
  int peer_;
  std::string peerHost_;  // for error messages, built once at connect
  size_t chunk_;
  Status error_;  // sticky: set once the link is broken

  // Send queue. sendHdrDone_ is how much of the head's header the
  // socket has taken; the header bytes themselves are the head's Xfer::bytes (little-endian
  // size_t, see the static_assert in tcp_link.cc), so a send needs no header buffer.
  XferQueue sends_;
  size_t sendHdrDone_ = 0;

  // Receive queue. recvHdr_ holds the head's (possibly partial) header; the headers of messages
  // read in the same batch land in batchHdr_ first. Xfer::progressed counts payload bytes placed
  // (plain) or reduced (reduce); carry_ counts bytes waiting in staging_ for the rest of an element.
  XferQueue recvs_;
  uint64_t recvHdr_ = 0;
  size_t recvHdrDone_ = 0;
  size_t carry_ = 0;
  std::unique_ptr<uint8_t[], FreeDeleter> staging_;  // chunk_ bytes, 64-byte aligned
  uint64_t batchHdr_[kMaxBatch] = {};
};

}  // namespace braid
