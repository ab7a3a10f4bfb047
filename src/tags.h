// Tagged and any-source point-to-point messages (braidSendTagged, braidRecvTagged and their
// nonblocking forms), matched as gloo matches them: by (peer, tag); messages of one (peer, tag)
// pair in the order they were sent; different tags, and different peers of an any-source receive,
// in whatever order they arrive.
//
// Why a second link per peer. A Link matches the k-th send with the k-th receive, and the plans of
// collectives and of braidSend/braidRecv rely on that, message for message. A receive that may
// match any tag, or any peer, cannot know where in that sequence its message sits: reading ahead on
// the shared link would swallow a collective's bytes. So tagged traffic has links of its own
// (braidComm::tagLinks, connected at init by a second instance of the first link's transport, which
// only tagged operations drive; BRAID_P2P_TAGS=0 leaves them out), which carry nothing but framed
// messages, and the untagged path is exactly
// what it was: braidSend/braidRecv stay in issue order and do not match tagged calls.
//
// Protocol on a tag link: every message is a 16-byte TagHeader (magic, tag, length), then the
// payload as a second link message when the length is not zero. The sender posts both at once
// (eager); the link's own flow control is the back-pressure. The receiver reads headers from a peer
// only while some receive that could match that peer is pending: a header that matches a pending
// receive gets its payload straight into the user's buffer; one that matches none is unexpected,
// and its payload is read into a buffer of its own (allocated: tagged traffic is not the hot path)
// until a receive claims it. Why not a rendezvous (request-to-send, then clear-to-send) for large
// payloads: the clear-to-send would need a channel back to the sender that it reads while its
// send waits, i.e. headers in both directions for every transfer; eager delivery is one round
// trip less and cannot deadlock, since a receiver that is reading never stops until the header it
// waits for arrived. The price is memory: a large message that arrives before its receive is held
// in full (as gloo holds one in the socket buffers and its pending lists). When no receive is
// pending, nobody reads, and the sender's large send waits in the link's flow control.
//
// Leaving. A rank's braidCommDestroy sends a goodbye header (kByeTag) to each peer it sent tagged
// messages to, after them: a receive that only that rank could match then fails at once. A tag link
// that closes under a receive (a process that exited; shm notices only once the FIFO is drained, tcp
// after the last byte) is a failure only when the peer did not say goodbye on the control plane.
// That goodbye (src/executor_leave.cc) also tells each rank whether the leaver sent it any tagged
// message (if not, no goodbye header will come, and receives only it could match fail at once) and
// how many of its tagged messages the leaver received (those sends are done, whatever the closing
// link did to their completions).
//
// Threads: everything here runs with the engine lock held (src/executor.h).
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "transports/transport.h"

struct braidRequest;

namespace braid {

constexpr int kAnySource = -1;  // BRAID_ANY_SOURCE

struct TagHeader {
  uint32_t magic;
  int32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(TagHeader) == 16, "a tag header is 16 bytes");
constexpr uint32_t kTagMagic = 0x47415442;  // "BTAG"
// The last header a rank sends on each tag link, from braidCommDestroy: it will send nothing more.
// Without it the receiver could not tell a rank that left from one that died: both close the link,
// and a receive from any rank reads every link it may.
constexpr int32_t kByeTag = -1;

// A message whose header arrived before any receive matched it.
struct Unexpected {
  int peer = -1;
  int tag = 0;
  uint64_t bytes = 0;
  std::vector<char> data;
  Xfer x;                // the payload's receive (complete at once for zero bytes)
  bool claimed = false;  // a receive took it and waits for the payload
  bool discard = false;  // its receive failed on the length: dropped once the payload is in
};

// One tagged operation: the part of a braidRequest that the matcher drives.
struct TagOp {
  braidRequest* owner = nullptr;
  bool isSend = false;
  int peer = kAnySource;  // the destination, or the source asked for (kAnySource: any)
  int tag = 0;
  char* buf = nullptr;
  uint64_t bytes = 0;
  int* sourceOut = nullptr;  // receive: where the matched peer goes on success (may be null)
  int source = -1;           // receive: the peer it matched
  TagHeader header{};        // send: what goes ahead of the payload
  uint64_t index = 0;        // send: the how-manyth to its peer (1, 2, ...)
  Xfer headerX, payloadX;
  Unexpected* from = nullptr;  // receive: the unexpected message it claimed, still arriving
  Status error;                // a failure of this operation alone (a length that differs)
};

class TagMatcher {
 public:
  // `links` by rank (null for this rank).
  void init(std::vector<Link*> links);

  // Both post with the engine lock held; the op is the matcher's until it comes back from poll().
  Status postSend(TagOp* op);
  void postRecv(TagOp* op);
  // Sends the goodbye header on the tag link of every peer this rank sent tagged messages to
  // (destroy); returns how many went out. They come back from poll() with a null owner.
  Status postByes(int* posted);
  // `peer` left the communicator and its tag link closed (no goodbye on it: it sent us nothing, or
  // the goodbye was read already): as a goodbye, and what was still in flight on the link fails,
  // but for the first `delivered` sends to it, which its goodbye said it received (the transport may
  // not have reported their completion before the link closed).
  void peerLeft(int peer, uint64_t delivered = 0);
  // `peer` left and said (on the control plane) that it sent this rank no tagged message: nothing
  // will come on its tag link, so receives that only it could match fail now (as on its goodbye).
  void leftWithoutSending(int peer) {
    if (!peers_[peer].left) onGoodbye(peer);
  }
  // Whether this rank sent `peer` a tagged message (its goodbye then follows them on the tag link).
  bool sentTo(int peer) const { return peers_[peer].sentTo; }
  // Tagged messages (headers, goodbyes aside) that came from `peer`.
  uint64_t receivedFrom(int peer) const { return peers_[peer].received; }
  // Reaps the transfers the transports completed, matches arrived headers, reads more headers
  // where a pending receive needs them, and appends the finished operations to *done (op->error set
  // for a failure of its own). A malformed header fails the communicator: the error (naming the
  // peer) is returned and *failedPeer set. Drive the transports before calling it.
  Status poll(std::vector<TagOp*>* done, int* failedPeer, bool* progressed);
  // After the communicator failed: forgets every operation (their owners are failed by the engine).
  void clear();
  // What the oldest pending operation waits for, in words ("a receive of tag 3 from any rank").
  static std::string describe(const TagOp& op, const std::string& peerName);

 private:
  struct Peer {
    Link* link = nullptr;
    TagHeader header{};
    Xfer headerX;
    bool reading = false;   // headerX is posted
    int waiting = 0;        // unmatched receives naming this peer
    bool left = false;      // its goodbye arrived: nothing more will come
    bool sentTo = false;    // this rank sent it a tagged message (it gets a goodbye)
    uint64_t sent = 0;      // tagged messages posted to it
    uint64_t received = 0;  // tagged messages that came from it
  };
  bool wantsHeaders(int peer) const {
    const Peer& p = peers_[peer];
    return p.link != nullptr && !p.left && (p.waiting > 0 || anyWaiting_ > 0);
  }
  // Whether a receive can still be matched by a message yet to come.
  bool canArrive(const TagOp& op) const;
  // A goodbye arrived: fails the pending receives that nothing can match any more.
  void onGoodbye(int peer);
  Status readHeader(int peer);
  // A header arrived from `peer`: hands it to the first pending receive that matches, or keeps it
  // as unexpected.
  Status onHeader(int peer, std::vector<TagOp*>* done);
  // Copies a claimed message into its receive, or fails the receive on a length that differs.
  void deliver(TagOp* op, Unexpected* u);
  void unpost(TagOp* op);
  void dropUnexpected(Unexpected* u);

  std::vector<Peer> peers_;
  std::vector<TagOp*> posted_;     // unmatched receives, in post order
  int anyWaiting_ = 0;             // ... of which any-source
  std::list<Unexpected> arrived_;  // unexpected messages, in arrival order
  std::vector<TagOp*> inflight_;   // sends, and receives whose payload is arriving
  std::vector<TagOp*> ready_;      // finished at post (a length that differs), for the next poll
  std::vector<TagOp> byes_;        // the goodbyes' transfers (destroy)
};

}  // namespace braid
