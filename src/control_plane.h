// The communicator's control plane: failure notices, goodbyes and heartbeats over the bootstrap
// star (rank 0 in the middle), the failure state every part of braid asks about, and the sleep of
// the engine's background thread (epoll over the control sockets, a wake eventfd and the links'
// wait descriptors). One per communicator, made before the engine and freed after it.
//
// Split with the Engine (src/executor.h). The engine owns operations and the background thread;
// this class owns everything said between ranks outside the links. The engine calls in (fail(),
// failed(), heartbeat(), serve(), wake()), never the other way: a failure sets failed() and wakes
// the background thread, and whoever drives progress next fails the operations (Engine::failAll).
//
// Threads. fail(), failed(), failure(), failedRanks(), reachedText(), left(), ctrlPending(),
// wake() and notePosted() are safe from any thread. serve() and heartbeat() run on the background
// thread only, which alone touches the silence clocks and gone_.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/bootstrap.h"
#include "src/call_watch.h"

struct braidComm;

namespace braid {

class ControlPlane {
 public:
  explicit ControlPlane(braidComm* comm);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Reads the heartbeat settings, builds the sleep sets (the wake eventfd and the control sockets)
  // and sends the first heartbeats. Once, after the rendezvous and before the engine starts.
  Status start();
  // Adds a link's wait descriptor to the set slept on while operations wait on peers, edge-triggered
  // (new data wakes the sleeper once; data nobody asked for yet cannot keep it spinning). The one
  // place where link descriptors join the sleep.
  Status watchLinkFd(int fd);
  // Ends a sleep in serve(), now or at its start (a full counter already means "awake").
  void wake();
  // Sleeps for up to timeoutUs on the control sockets and the wake eventfd (withLinks: the links'
  // descriptors too), then serves what arrived on the control sockets. Returns whether wake() fired.
  bool serve(int64_t timeoutUs, bool withLinks = false);
  // Sends our heartbeat when due and fails the communicator naming a peer silent for too long.
  // Called on every turn of the background loop: the common case is a few compares.
  void heartbeat(int64_t now);
  // The operation with sequence number seq was posted: heartbeats and failure notices report it.
  void notePosted(uint64_t seq) { postedSeq_.store(seq, std::memory_order_relaxed); }
  // A collective was posted (src/call_watch.h). The engine, under its lock.
  void noteCall(const CallRecord& r) { callLog_.note(r); }
  // The oldest operation, `call` (no 0: one no call numbers), has waited waitReportNs(): rank 0 is
  // told it and our last calls (by the background thread's next turn), to compare them with the
  // other ranks'. Any thread.
  void noteWaiting(const CallRecord& call);
  // How long an operation waits before noteWaiting: a heartbeat period (a second without
  // heartbeats), at most a quarter of BRAID_TIMEOUT.
  int64_t waitReportNs() const { return waitReportNs_; }

  // Fails the communicator: every pending and later operation completes with `s`. `culprit` is
  // the rank at fault (-1 unknown), recorded in failedRanks() even when the communicator had failed
  // already. notify: tell the other ranks through rank 0 (rank 0: everyone but `skip`, with
  // relayText instead of s's message when given: a notice passed on as it came).
  void fail(const Status& s, int culprit, bool notify, int skip = -1, const std::string& relayText = {});
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status failure() const;
  // Ranks known to have failed, sorted.
  std::vector<int> failedRanks() const;
  // " reached by ranks 0-1,3; not by rank 2 (at #16)" for the op with sequence number seq. timedOut:
  // the op timed out, so a call that every rank reached points at calls that differ.
  std::string reachedText(uint64_t seq, bool timedOut) const;

  // Whether `peer` said goodbye: a peer that left cleanly did not die, it left while an operation
  // still needed it (read where a link failure is blamed). Every rank learns it: rank 0 relays
  // each goodbye to the others.
  bool left(int peer) const { return left_[peer].load(std::memory_order_acquire) != 0; }
  // Leave notices (see sayGoodbye): how far a rank that left had got, as far as this rank is concerned.
  struct LeaveRecord {
    bool known = false;         // the goodbye said how far it got (else: only that it left)
    uint64_t colls = 0;         // collectives it posted (and finished: it left with none pending)
    uint64_t sentToMe = 0;      // point-to-point messages (plan steps) it sent to this rank
    uint64_t recvdFromMe = 0;   // ... and received from this rank
    bool taggedToMe = true;     // it sent this rank tagged messages (then its tag link carries a goodbye too)
    uint64_t taggedFromMe = 0;  // tagged messages of this rank it received (their sends are done)
  };
  // Bumped (release) whenever a leave notice arrives; the engine compares it on every pass (relaxed)
  // and reads leaves() when it changed.
  uint32_t leaveGen() const { return leaveGen_.load(std::memory_order_relaxed); }
  // Every rank's record (unknown for ranks still here).
  std::vector<LeaveRecord> leaves() const;
  // Whether bytes from `peer` wait unread on its control socket (a goodbye or a notice the
  // background thread has not read yet). One poll(); for failure paths, not the hot path.
  bool ctrlPending(int peer);
  // Destroy: rank 0 tells everyone still here, the others tell rank 0 (which tells everyone), that
  // this rank leaves, so that its closing connection is not taken for a death, and how far it got
  // (`record`, Engine::leaveRecord(): empty when unknown), so that every operation of theirs that
  // still needs it fails at once instead of at BRAID_TIMEOUT. Background thread stopped.
  void sayGoodbye(const std::string& record);
  // A goodbye's record: `colls` collectives posted; perPeer[kLeaveFields * p ...]: point-to-point
  // messages sent to rank p, received from it, whether tagged messages went to it (0 or 1), and how
  // many tagged messages came from it.
  static constexpr size_t kLeaveFields = 4;
  static std::string encodeLeave(uint64_t colls, const std::vector<uint64_t>& perPeer);

 private:
  // Reads and handles every control message already queued from `peer`; notes its goodbye or death.
  void servePeer(int peer);
  // One control message from `peer`.
  void onControl(int peer, const Bootstrap::CtrlMsg& msg);
  // A goodbye of rank `who` (from `who` itself, or relayed by rank 0): records it and tells the engine.
  void onGoodbye(int who, const std::string& record);
  Status readHeartbeatSettings();
  // Rank 0: adds `rank`'s call records to the table, after our own last calls, and fails the
  // communicator when two ranks' calls of one number differ. Background thread.
  void checkCalls(int rank, const std::string& records);
  // Sends rank r a heartbeat carrying `seq`, our last posted operation, when we beat to r: the
  // others to rank 0, rank 0 to every rank. Returns whether we do.
  bool beatTo(int r, uint64_t seq);

  // epoll tags besides control sockets (whose tag is the peer's rank).
  static constexpr uint64_t kWakeTag = UINT64_MAX;
  static constexpr uint64_t kLinkTag = UINT64_MAX - 1;

  braidComm* comm_;

  // Failure state.
  std::atomic<bool> failed_{false};
  mutable std::mutex failMu_;
  // Held by fail() from its verdict through its notices: rank 0 relays every failure to every rank
  // in one order, so no rank hears a later failure (a peer that quit because of the first) first.
  std::mutex noticeMu_;
  Status failure_;                        // failMu_
  std::vector<int> failedRanks_;          // failMu_
  std::vector<uint64_t> progressAtFail_;  // failMu_: progress_ when the communicator failed

  // Liveness (background thread). progress_[r] (failMu_): the last operation rank r reported
  // posting (rank 0 hears it in heartbeats; the others get rank 0's table before a failure notice).
  std::atomic<uint64_t> postedSeq_{0};
  std::vector<uint64_t> progress_;
  std::vector<int64_t> lastHeard_;
  std::vector<uint8_t> heard_;  // a heartbeat (any message) came from the peer since start
  int64_t initGraceNs_ = 0;     // silence allowed before a peer's first message (BRAID_TIMEOUT)
  int64_t heartbeatNs_ = 0;     // BRAID_HEARTBEAT_MS; 0 = off
  int64_t silenceNs_ = 0;       // heartbeatNs_ * BRAID_HEARTBEAT_MISSES
  int64_t nextBeatNs_ = 0;
  int64_t lastLookNs_ = 0;  // heartbeat()'s previous call, to tell our own stops from the peers
  int64_t reportNs_ = 0;    // early progress reports (non-root ranks), 0 = off
  int64_t nextReportNs_ = 0;
  uint64_t lastReported_ = 0;

  // Calls compared (src/call_watch.h).
  CallLog callLog_;
  CallTable callTable_;  // rank 0, background thread
  int64_t waitReportNs_ = 1000000000;
  std::atomic<bool> waitPending_{false};
  std::mutex waitMu_;
  std::string waitReport_;  // waitMu_: the records noteWaiting left for the background thread

  // Departures.
  std::vector<uint8_t> gone_;  // per rank: said goodbye or failed (background thread only)
  // Per rank: said goodbye (written by the background thread, read by whoever blames a link).
  std::unique_ptr<std::atomic<uint8_t>[]> left_;
  std::vector<LeaveRecord> leaves_;  // failMu_
  std::atomic<uint32_t> leaveGen_{0};

  // The background thread's sleep.
  int wakeFd_ = -1;
  int epollFd_ = -1;       // wakeFd_ and control sockets
  int epollLinksFd_ = -1;  // the same plus the links' wait descriptors (edge-triggered)
};

}  // namespace braid
