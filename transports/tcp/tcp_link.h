// The tcp transport's data path: BRAID_NSOCKS nonblocking stream sockets ("lanes") per pair of ranks,
// each carrying both directions. Lane 0 carries every message's 8-byte little-endian length header,
// so the receiver can check that the sender and the posted receive agree on the size, and the whole
// of every small message. A large message is cut into at most one contiguous part per lane; the cut
// is a pure function of the message length (stripeOf), which both sides know once the lengths agree,
// so the parts on lanes 1.. need no header of their own.
//
// Threading: a TcpLink is driven by one thread at a time (the executor's lock); nothing here locks.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "src/base/socket.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

// Bytes of the length header in front of every message.
inline constexpr size_t kTcpHeaderBytes = 8;
// Most sockets per pair of ranks (BRAID_NSOCKS): the lanes' done-bits live in one Xfer word.
inline constexpr int kTcpMaxLanes = 16;

// Host memory only; a receive reduces each chunk from a staging buffer as it arrives.
inline constexpr TransportCaps kTcpCaps{memTypeBit(MemType::kHost), true, false, false, 0};

// How a message of `bytes` is cut across `lanes` sockets: lane i carries [i*stride, (i+1)*stride)
// clipped to the message. Parts are whole multiples of kAlign (any element size of a reduce divides
// it, so no element straddles two lanes) and at least kMinPart, below which another socket's extra
// system calls cost more than its parallelism brings; smaller messages travel whole on lane 0.
struct TcpStripe {
  static constexpr size_t kAlign = 4096;
  static constexpr size_t kMinPart = 64 * 1024;
  size_t stride = 0;
  int parts = 1;  // lanes with a nonempty part (lane 0 always takes part: it carries the header)
};
TcpStripe stripeOf(size_t bytes, int lanes);

// Test-only shaping of the sends (BRAID_TCP_TEST_DELAY_US, BRAID_TCP_TEST_RATE): the netns test
// bed's stand-in for netem, which this kernel lacks.
struct TcpShaping {
  int64_t delayNs = 0;     // a message is not sent before it was posted this long ago
  double bytesPerSec = 0;  // 0 = no limit; else a token bucket shared by the link's lanes
};

// The send buffers of a rank that sends large messages to several peers of its host at once
// (BRAID_TCP_CROWD_SNDBUF). On loopback every byte sent is copied into socket memory that the peer
// copies out later; with 8 MiB of it per socket and three sockets filling at once (a 4-rank
// AllToAll), those send copies cost about 4x Open MPI's (perf/results/2026-12-06-standing-tcp-
// copies.md; our reading, not measured: they go to memory long out of the cache). Small send buffers
// made them cheap there and the AllToAll 1.4-1.9x faster (2026-12-06-crowded-sends.md), but slow a
// rank that streams to one peer (the 2-rank ring wants its whole half out), so they are
// used only while the rank is crowded: the links of one transport share this; a link is heavy while
// it holds at least kHeavyBytes of queued sends, and shrinks its sockets' SO_SNDBUF (on its next
// progress) once kCrowdLinks links are heavy at once; it restores the buffer once no link has been
// heavy since it shrank (not as soon as fewer than kCrowdLinks are: the last steps of a crowded
// call would flip the buffers back and forth). Peers on other hosts are left out (not measured).
struct TcpCrowd {
  static constexpr size_t kHeavyBytes = 256 * 1024;
  static constexpr int kCrowdLinks = 2;
  size_t crowded = 0;             // SO_SNDBUF while crowded
  size_t normal = 0;              // BRAID_TCP_SOCKBUF
  std::atomic<int> heavy{0};      // heavy links now
  std::atomic<uint64_t> calm{0};  // times `heavy` fell to 0
};

// What a link does besides the plain path, decided at connect.
struct TcpLinkOptions {
  size_t chunkBytes = 0;  // BRAID_TCP_CHUNK
  TcpShaping shaping;
  // BRAID_TCP_ZEROCOPY: large sends with MSG_ZEROCOPY (the sockets have SO_ZEROCOPY set); a send
  // completes only once the kernel has said it no longer reads the caller's pages.
  bool zeroCopy = false;
  // Shared with the transport's other links to the same host; null: this link keeps its buffers.
  TcpCrowd* crowd = nullptr;
};

class TcpLink final : public Link {
 public:
  // Every fd in `fds` (lane order) is connected, nonblocking, with TCP_NODELAY and the socket
  // buffers already set. `opt.chunkBytes` (BRAID_TCP_CHUNK) caps the bytes of one socket call and
  // sizes each lane's reduce staging buffer; it must be at least kMinChunk.
  TcpLink(std::vector<Fd> fds, int peerRank, std::string peerHost, const TcpLinkOptions& opt);
  ~TcpLink() override;

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
  // Socket calls (of up to one chunk) each direction of each lane may make per progress() call, so
  // that one busy link cannot keep the executor from the others (a fast peer could otherwise refill
  // the socket as fast as we drain it, forever). Four 512 KiB chunks are ~0.5 ms on loopback.
  static constexpr size_t kChunksPerProgress = 4;
  // Zero-copy: only send calls of at least this much payload use it (below, pinning the pages
  // and reading the notification cost more than the copy they save). A lane stops sending while
  // kMaxHeld parts wait for their notification; one call may still finish as many parts as it has
  // iovec entries after that check (each part it finishes has at least one: 31 empty messages are
  // 31 headers), hence the room for kHeldRoom. At most kMaxZeroCopyCalls of a
  // lane's zero-copy calls are unreported at once (the width of Lane::zcAhead), beyond which it
  // sends by copy.
  static constexpr size_t kZeroCopyMin = 64 * 1024;
  static constexpr int kMaxHeld = 8;
  static constexpr int kHeldRoom = kMaxHeld + kMaxIov;
  static constexpr uint32_t kMaxZeroCopyCalls = 64;
  // Read-ahead on lane 0: a recvmsg that fills every posted receive to the end of a message also
  // takes up to this much of what follows (later messages' headers and payloads) into ahead_, and
  // the next receives are served from there without a system call. A receiver that fell behind a
  // stream of small messages (the leaves of back-to-back Broadcasts) then takes several with one
  // call, as Open MPI's tcp transport does.
  static constexpr size_t kAheadBytes = 8192;

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  // One socket and where it stands in each queue. A lane works on the first queued transfer whose
  // done-bit (Xfer::tp[0], bit = lane) is clear; `sendDone`/`recvDone` count the payload bytes of
  // that transfer's part it has moved (reduced, for a reduce receive).
  struct Held {
    Xfer* x;
    uint32_t id;  // the last zero-copy send call of the lane when x's part was finished
  };
  struct Lane {
    Fd fd;
    size_t sendDone = 0;
    // Zero-copy send calls: the kernel numbers them per socket from 0. Every call below `zcDone`
    // was reported done; bit i of `zcAhead`, call zcDone + 1 + i (reported before an earlier one:
    // in order is the common case, not a promise, says the kernel's msg_zerocopy.rst, naming
    // retransmission). Parts on the wire wait in `held` for theirs.
    uint32_t zcIssued = 0;
    uint32_t zcDone = 0;
    uint64_t zcAhead = 0;
    int nheld = 0;
    Held held[kHeldRoom] = {};
    size_t recvDone = 0;
    size_t carry = 0;                                 // bytes in staging waiting for the rest of an element
    std::unique_ptr<uint8_t[], FreeDeleter> staging;  // chunk_ bytes, 64-byte aligned
  };

  // One sendmsg / recvmsg of at most one chunk of payload on lane `l`; *more says whether another
  // call could move more now (the call was not cut short and something is still queued for it).
  Status sendOnce(int l, bool* more);
  Status recvOnce(int l, bool* more);
  // Copies what ahead_ holds into iov[0..niov) in order; returns the bytes copied.
  size_t drainAhead(const iovec* iov, int niov);
  Status checkHeader(uint64_t header, Xfer* x);
  // Zero-copy: a part of x whose bytes the socket took is done, or held for its notification.
  void partSent(int l, Xfer* x);
  // Reads lane l's zero-copy notifications and marks the held parts they release.
  Status reapZeroCopy(int l);
  // Records that the kernel reported lane `ln`'s zero-copy calls [lo, hi] done.
  static void zeroCopyDone(Lane& ln, uint32_t lo, uint32_t hi);
  // Completes the transfers at the front of q whose parts every lane has finished, in order.
  void completeDone(XferQueue& q, size_t* striped);
  // The part of lane l in a message of `bytes`: [*off, *off + return value).
  size_t partOf(size_t bytes, int l, size_t* off) const;
  // Marks, at post time, the lanes with nothing to do for x as done.
  uint64_t initialMask(size_t bytes) const;
  // How many bytes the shaping knobs let lane sends move now (SIZE_MAX without shaping); 0 = wait.
  size_t shapedAllowance(const Xfer* first);
  // Sets the sockets' send buffers to what the crowd says (TcpCrowd); on every progress.
  void followCrowd();
  // Counts this link in crowd_->heavy or not (by its queued sends, as they change).
  void setHeavy(bool heavy);
  // Stops counting in and following the crowd: a failed or closing link.
  void leaveCrowd();
  // Records a fatal error; every later call returns it.
  Status fail(Status s);
  Status closedError();
  Status socketError(int err, const char* op);

  std::vector<Lane> lanes_;
  int nlanes_;
  uint64_t allDone_;  // the done-mask of a transfer every lane has finished
  int peer_;
  std::string peerHost_;  // for error messages, built once at connect
  size_t chunk_;
  TcpShaping shaping_;
  bool zeroCopy_;
  uint64_t zcCalls_ = 0;   // zero-copy send calls, and those the kernel copied anyway (loopback
  uint64_t zcCopied_ = 0;  // always does): logged at INFO when the link closes
  double tokens_ = 0;      // rate limit: bytes the bucket allows now
  int64_t tokensAtNs_ = 0;
  Status error_;  // sticky: set once the link is broken
  TcpCrowd* crowd_;
  size_t sendQueued_ = 0;  // payload bytes of the queued sends
  bool heavy_ = false;     // counted in crowd_->heavy
  bool shrunk_ = false;    // the sockets' SO_SNDBUF is crowd_->crowded, since crowd_->calm was shrunkCalm_
  uint64_t shrunkCalm_ = 0;

  // Send queue. sendHdrDone_ is how much of lane 0's current header the socket has taken; the
  // header bytes themselves are the transfer's Xfer::bytes (little-endian size_t, see the
  // static_assert in tcp_link.cc), so a send needs no header buffer. Xfer::tp[1] is the time the
  // message may be sent (with a test delay); Xfer::progressed, while a send is queued, the mask of
  // lanes whose part is on the wire but held for a zero-copy notification. sendStriped_ counts queued sends cut across
  // lanes: while it is 0, lanes 1.. are not even looked at, so small messages cost what one socket costs.
  XferQueue sends_;
  size_t sendHdrDone_ = 0;
  size_t sendStriped_ = 0;

  // Receive queue. recvHdr_ holds lane 0's current (possibly partial) header; the headers of
  // messages read in the same batch land in batchHdr_ first.
  XferQueue recvs_;
  uint64_t recvHdr_ = 0;
  size_t recvHdrDone_ = 0;
  size_t recvStriped_ = 0;
  uint64_t batchHdr_[kMaxBatch] = {};
  // Lane 0's read-ahead: bytes [aheadAt_, aheadEnd_) of ahead_ came off the socket and belong in
  // front of whatever it still holds.
  std::unique_ptr<uint8_t[]> ahead_;
  size_t aheadAt_ = 0;
  size_t aheadEnd_ = 0;
};

}  // namespace braid
