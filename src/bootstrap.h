// Bootstrap: the rendezvous that turns N processes holding one unique id into a communicator, and
// afterwards the control plane (a star of TCP connections to rank 0) that carries failure notices.
//
// Wire protocol: see src/wire.h (formats and their decoders); the rendezvous itself (rank 0's poll
// loop serving strangers and real ranks together) is in src/rendezvous.cc.
//   rank -> root  Hello, once; root -> rank  Table, once all nranks said hello
//   allGather:    rank -> root {len, bytes}; root -> rank {len, nranks*bytes}
//   control:      CtrlHeader + text after init (abort notices, goodbyes)
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/socket.h"
#include "src/base/status.h"
#include "src/wire.h"
#include "transports/transport.h"

namespace braid {

// Creates an id for a new communicator: random secret and comm id, and a listening socket on this
// process that the rank-0 init will serve the rendezvous on.
Status createUniqueId(UniqueIdData* out);
// Registers a listener for `id` bound by this process (used by the environment path, where rank 0
// binds the agreed address itself).
Status listenForId(const UniqueIdData& id);
// Registers an already listening socket for the rank-0 init of `commId` (shrink and split serve
// their rendezvous on the parent communicator's long-lived listener).
void adoptListener(uint64_t commId, Fd fd);
// Closes a listener registered for commId that no init took (an init that failed early).
void dropListener(uint64_t commId);
// Takes the listener registered for commId out of the registry (the rank-0 rendezvous serves on it;
// a process that will not serve it may drop its inherited copy this way).
Status takeListener(uint64_t commId, Fd* fd);

// Control message types. kAbort, kTimeout and kUsage are failure notices (the communicator fails
// with braidRemoteError, braidTimeout or braidInvalidUsage (mismatched calls); `rank` is the
// culprit, -1 if none); kHeartbeat carries the sender's last posted operation (8 bytes); kProgress
// (rank 0 to the others, just before a notice) every rank's last reported operation, run-length
// encoded; kCalls (to rank 0) the call a rank has waited on for a while and its last calls
// (src/call_watch.h). Add a new type to kCtrlTypes too: decodeCtrlFrame refuses the others.
enum class CtrlType : uint32_t {
  kAbort = 1,
  kBye = 2,
  kTimeout = 3,
  kHeartbeat = 4,
  kProgress = 5,
  kUsage = 6,
  kCalls = 7
};
constexpr uint32_t ctrlBit(CtrlType t) { return 1u << static_cast<uint32_t>(t); }
constexpr uint32_t kCtrlTypes = ctrlBit(CtrlType::kAbort) | ctrlBit(CtrlType::kBye) | ctrlBit(CtrlType::kTimeout) |
                                ctrlBit(CtrlType::kHeartbeat) | ctrlBit(CtrlType::kProgress) |
                                ctrlBit(CtrlType::kUsage) | ctrlBit(CtrlType::kCalls);

class Bootstrap {
 public:
  // Collective: runs the rendezvous and returns the connected control plane and every rank's info.
  static Status init(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline,
                     std::unique_ptr<Bootstrap>* out, std::vector<PeerInfo>* table);
  ~Bootstrap();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

  // Init-time collective over the star (blocking, deadline-bounded).
  Status allGather(const void* mine, size_t bytes, void* all, Deadline deadline);

  // Control plane. Sockets in the order of ctrlFds(): rank 0 has one per other rank (index = rank,
  // -1 for itself); other ranks have only the connection to rank 0 (index 0).
  std::vector<int> ctrlFds() const;
  // Sends a control message to one rank's socket (rank 0) or to rank 0 (others). Thread-safe.
  Status sendCtrl(int toRank, CtrlType type, int aboutRank, const std::string& text);
  // Reads one message if a whole one is available on fd of `fromRank`; *eof when the peer closed.
  // Non-blocking; partial messages are buffered.
  struct CtrlMsg {
    CtrlType type;
    int32_t rank;
    std::string text;
  };
  Status pollCtrl(int fromRank, bool* got, CtrlMsg* msg, bool* eof);
  void closeCtrl(int rank);
  // Whether bytes from `rank` wait unread on its control socket (rank 0; others: rank 0's). One
  // poll(); for failure paths, not the hot path. Thread-safe.
  bool ctrlPending(int rank);

 private:
  std::string describe(int r) const { return describePeer(peers_, r); }
  Bootstrap() = default;
  int rank_ = 0;
  int nranks_ = 0;
  std::vector<Fd> socks_;  // rank 0: per rank; others: [0] = root
  std::vector<std::string> inbuf_;
  std::vector<PeerInfo> peers_;  // the rank table, to name the peer in errors
  std::mutex sendMu_;
};

}  // namespace braid
