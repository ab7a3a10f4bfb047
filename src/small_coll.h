// Small collectives on one host: when every rank of a communicator is on this host and every link
// has mailboxes (transports/mailbox.h: shm, BRAID_SHM_SMALL_BYTES), a collective of up to the
// mailboxes' capacity per peer skips plans, FIFOs and message matching. Each rank writes what each
// peer needs into its mailbox toward that peer, stores the call's number beside the data, and reads
// its peers' mailboxes toward it: one cache-line handoff per peer for up to kMailInline bytes.
//
//   AllReduce      every rank writes its buffer to every peer; every rank folds all n buffers in
//                  rank order (0 ⊕ 1 ⊕ ... ⊕ n-1), so every rank computes bit for bit the same result
//   Broadcast      the root writes its buffer to every peer
//   Reduce         every rank but the root writes to the root, which folds its own buffer first
//   AllGather      every rank writes its block to every peer
//   ReduceScatter  every rank writes block p to peer p; each folds its own block first
//   AllToAll       every rank writes block p to peer p
//   Gather         every rank but the root writes its block to the root
//   Scatter        the root writes block p to peer p
//   Barrier        the numbers alone
//
// Every rank stores the call's number in its slot toward every peer in every call, data or not: a
// peer's slot for call j then always tells whether it started j, which is what the ring's flow
// control asks before a slot is rewritten (transports/mailbox.h).
//
// Whether a call runs here depends only on the call and on settings every rank shares (the
// collective, its bytes, BRAID_ALGO, the mailboxes agreed at init), so every rank takes the same
// calls: the mailboxes are a channel of their own beside the links, with its own numbering. Calls
// run on it one at a time, in issue order (a rank starts call k + 1 once it finished k: that is
// what the ring's flow control counts on), while operations on the links proceed around them.
//
// Threads: the engine lock (src/executor.h) guards everything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"
#include "src/base/clock.h"
#include "src/base/status.h"
#include "src/base/store_choice.h"
#include "src/coll.h"
#include "src/cuda/ipc_coll.h"
#include "src/peer_maps.h"
#include "src/reduce.h"
#include "src/regions.h"
#include "transports/mailbox.h"
#include "transports/transport.h"

namespace braid {

// One call on the mailboxes and how far it got.
struct SmallCall {
  Coll coll = Coll::kBarrier;
  const char* send = nullptr;
  char* recv = nullptr;
  size_t bytes = 0;  // per peer: the buffer, or one rank's block (AllGather, ReduceScatter, AllToAll, Gather, Scatter)
  braidDataType_t dtype = braidUint8;
  braidRedOp_t op = braidSum;
  ReduceKernel kernel = nullptr;  // reducing calls (braidAvg as sum, divided at the end)
  int root = 0;
  bool inPlace = false;
  bool streamOut = false;  // outputs take non-temporal stores (PostArgs::streamOut)
  uint64_t seq = 0;        // its number among all of the rank's operations (for messages)
  uint64_t k = 0;          // its number among the communicator's small calls (from 1)
  uint64_t check = 0;      // the call as its mail says it (checkWord)
  // Progress: 0 not started (waiting for its turn or for the peers' room), 1 its mail is out and it
  // reads the peers' from `next` on, 2 done; a direct call also 3 (its share of the work, `at`
  // bytes of it done), 4 (waiting for the peers to be done with its buffers), 5 (failed: it
  // never completes, the engine fails it) and, on device memory, 6 (its share's kernels run). Any
  // call also 7: a peer's mail was another call, and the failure is held (holdMismatch).
  // waitingOn: the rank it waits for (-1: none).
  uint8_t phase = 0;
  int next = 0;
  int waitingOn = -1;
  // A call on braidMemAlloc memory that reads and writes its peers' buffers in place
  // (src/direct_coll.cc), and its buffers' files, pinned while `pinned`.
  bool direct = false;
  bool pinned = false;
  SharedRange mine[2];  // send, recv
  size_t at = 0;
  // A direct call on device memory (src/cuda/ipc_coll.h): its buffers' IPC handles, send and
  // recv (bytes 0: a buffer its peers do not use), owned by its staging slot.
  bool device = false;
  const IpcHandle* ipc = nullptr;
};

class SmallColls {
 public:
  // `links` by rank (null at `rank`): every one with mailboxes of one capacity (comm init checks it).
  // `names`: how errors name each rank ("rank 2 (host a, pid 7)").
  // `pids`: by rank, the processes whose memory direct calls map (comm->directPids), empty for none.
  SmallColls(int rank, std::vector<Link*> links, std::vector<std::string> names, std::vector<int64_t> pids);

  // The bytes per peer of the largest call that runs here.
  size_t capacity() const { return capacity_; }
  // Whether a call of `coll` with `bytes` per peer (see SmallCall::bytes) runs here (point-to-point
  // never does).
  bool takes(Coll coll, size_t bytes) const {
    return coll != Coll::kSendRecv && bytes <= largest_[static_cast<int>(coll)];
  }
  // Whether a call too big for the mailboxes may run in place on braidMemAlloc memory
  // (src/direct_coll.cc): `pids` were given, and it is a collective that does.
  bool takesDirect(Coll coll, size_t bytes) const;
  // Direct calls on device memory (src/direct_coll.cc): every rank agreed at init that it
  // reaches every peer's GPU (comm->cudaIpc); `device` is this rank's.
  // minBytes: BRAID_CUDA_IPC_MIN, the same on every rank; `coll` does the device work (made at init).
  void enableDevice(int device, uint64_t minBytes, std::unique_ptr<IpcColl> coll);
  // Whether a call on device buffers runs here, on every rank alike (which is why its layout is not
  // asked: a rank's in-place AllToAll is staged apart by that rank, CallBuffers::copyApart).
  bool takesDevice(Coll coll, size_t bytes) const;
  // Numbers `c` as the next call (in issue order).
  void number(SmallCall* c);
  // Moves `c` as far as it goes without waiting: 1 when done, 0 when it waits (c->waitingOn says
  // for whom, -1 for an earlier call or for its own work), -1 when a peer's mail is not this call
  // (*err says which), and for a direct call -2 when the memory of peer c->waitingOn cannot be
  // mapped (*err says why: the peer failed, likely), and 2 when some rank's
  // buffers are not braidMemAlloc memory: the call is done here and runs on its plan instead, on
  // every rank.
  int step(SmallCall* c, Status* err);
  // Pins a direct call's buffers when they are braidMemAlloc memory (at post: braidMemFree refuses
  // them from then on), and releases them (idempotent): when it ends, fails, or is released.
  void pin(SmallCall* c) const;
  size_t mappedFiles() const { return maps_.size(); }
  static void unpin(SmallCall* c);
  // A direct call that fails (the engine's failAll): its mail may have let peers into its buffers,
  // and its own work may be in theirs (its kernels, on device memory). Waits for its kernels, marks
  // the call given up toward every peer (transports/mailbox.h: kMailAbandoned), then waits until
  // every peer that entered the call is done with it or gave it up too (it sees our mark at its
  // next step, at the latest after its pass of work), or its process is gone (Link::peerCheck, the
  // check a mailbox wait makes): only then may the
  // caller see the error and reuse the buffers. Up to `graceSec`; past it (a peer stopped, not dead)
  // false, with a warning, and the buffers stay pinned for good (braidMemFree refuses them). True at
  // once for a call whose mail is not out or that is over.
  bool abandon(SmallCall* c, double graceSec);

 private:
  // Whether `peer` started call j (so it finished every call before j); refreshes what is known of
  // it when not known yet.
  bool startedCall(int peer, uint64_t j);
  // Whether `peer` has room for call k, which goes `depth` deep (mailDepthFor): it started call
  // k + 1 - depth, so it is done reading the slot and payload k takes.
  bool roomAt(int peer, uint64_t k, uint64_t depth) { return k < depth || startedCall(peer, k + 1 - depth); }
  // c's mail from some peer was another call (*err says how): 0 while the failure is held, -1
  // with *err once it falls.
  int holdMismatch(SmallCall* c, Status* err);
  // Whether c's turn came (every earlier call finished) and every peer has room for it; else
  // c->waitingOn says for whom it waits.
  bool mayStart(SmallCall* c);
  void post(const SmallCall& c);  // phase 0 -> 1: the mail out, the local copies made
  // The peer's mail for c when it is there (nullptr while not; *err set on a mismatch).
  const unsigned char* mailFrom(SmallCall* c, int peer, Status* err);
  // Runs `read`, a copy or fold of the mails of peers p and q (-1: none), and where mails are of
  // StoreChoice::kMinBytes and up times it for them (each gets half where both are read).
  template <class Read>
  void timedRead(const SmallCall& c, int p, int q, Read&& read) {
    if (c.bytes < StoreChoice::kMinBytes || (p < 0 && q < 0)) {
      read();
      return;
    }
    const int64_t start = nowNs();
    read();
    const int64_t ns = (nowNs() - start) / (p >= 0 && q >= 0 ? 2 : 1);
    if (p >= 0) noteRead(c, p, ns);
    if (q >= 0) noteRead(c, q, ns);
  }
  void noteRead(const SmallCall& c, int peer, int64_t ns);  // what reading peer's mail for c took
  int gather(SmallCall* c, Status* err);                    // phase 1
  // The error of mail `s` from `peer` of another call than c: both calls, each with its whole
  // bytes (a direct call's mail starts with them; a small call's fit its check word).
  Status mismatch(const SmallCall& c, int peer, const MailSlot& s) const;
  // Direct calls (src/direct_coll.cc).
  int stepDirect(SmallCall* c, Status* err);
  void postDirect(SmallCall* c);
  int readDirect(SmallCall* c, Status* err);  // phase 1: the peers' buffers
  void workDirect(SmallCall* c);              // phase 3: some of this rank's share
  void workRange(const SmallCall& c, size_t* lo, size_t* hi) const;
  void foldBlock(const SmallCall& c, char* acc, size_t base, size_t off, size_t len) const;
  bool peersDone(SmallCall* c);                                       // phase 4
  void publishDone(const SmallCall& c);                               // this rank is done with its peers' buffers
  void sendMail(const SmallCall& c, const void* mail, size_t bytes);  // a direct call's, to every peer
  // Peer p's mail for direct call c: 1 when there (*mail: its payload), 0 while not (waitingOn),
  // -1 when it is another call (*err says how).
  int mailOf(SmallCall* c, int p, const unsigned char** mail, Status* err);
  // A peer that gave call c up (its kMailAbandoned mark), or -1. After a full fence: a peer that
  // marks c after our mail is out either sees the mail (and waits for us) or we see its mark.
  int abandonedBy(const SmallCall& c) const;
  // When a peer gave c up: c stops here (phase 5, touching nothing more), *err names the peer.
  bool givenUp(SmallCall* c, Status* err) const;
  // Whether some mail of call c that arrived says its rank's buffers are not braidMemAlloc memory:
  // then no rank touches any other's (every one runs the plan).
  bool planRuns(const SmallCall& c) const;
  // On device memory (src/direct_coll.cc).
  void postDevice(const SmallCall& c);
  int readDevice(SmallCall* c, Status* err);  // phase 1: the peers' handles opened
  Status launchDevice(const SmallCall& c);    // phase 3: this rank's share enqueued

  size_t largestFor(Coll coll) const;  // the bytes per peer of the largest call of `coll` taken here

  int rank_, nranks_;
  std::vector<std::string> names_;
  size_t capacity_ = 0;
  size_t largest_[kNumColls] = {};  // largestFor, by collective (takes() on every call's path)
  std::vector<Mailboxes> mail_;     // by rank (empty at rank_)
  // By rank: how our mails of StoreChoice::kMinBytes and up toward it are written
  // (BRAID_SHM_MAIL_STORES), and what reading its mails costs us (src/base/store_choice.h).
  std::vector<StoreChoice> mailStores_;
  std::vector<ReadCosts> readCosts_;
  std::vector<uint64_t> started_;  // by rank: the latest call it is known to have started
  uint64_t numbered_ = 0;          // calls numbered so far
  uint64_t finished_ = 0;          // calls finished: call finished_ + 1 may run
  // Direct calls: the peers' processes, their memory mapped here, and the current call's buffers
  // by rank (this rank's own among them).
  std::vector<int64_t> pids_;
  std::vector<Link*> links_;  // by rank (null at rank_): for peerCheck while a failed call waits
  PeerMaps maps_;
  std::vector<const char*> ins_;
  std::vector<char*> outs_;
  std::vector<uint32_t> frees_;  // by rank: its hostFrees() when we last looked at what we map of it
  // A fold and its copies go block by block (src/direct_coll.cc), so that the copies read what
  // the fold just wrote from the cache.
  static constexpr size_t kBlockBytes = 32 << 10;
  std::vector<char> fold_;  // a block of this rank's share, where its output cannot hold the fold
  // A streamed fold's inputs and outputs at the current offset (foldStreamKernel), by rank.
  std::vector<const void*> foldIns_;
  std::vector<void*> foldOuts_;
  int device_ = -1;               // direct calls on device memory: this rank's device, -1 for none
  uint64_t deviceMin_ = 0;        // and the smallest call that takes them
  std::unique_ptr<IpcColl> ipc_;  // the device work of such calls
  // The mismatch of the current call while it is held (phase 7), and since when.
  Status held_;
  int64_t heldSinceNs_ = 0;
};

// Mails of StoreChoice::kMinBytes and up this process wrote with plain and with streaming stores
// (BRAID_SHM_MAIL_STORES; tests).
uint64_t plainMails();
uint64_t streamedMails();

}  // namespace braid
