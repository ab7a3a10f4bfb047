// Bootstrap: the rendezvous that turns N processes holding one unique id into a communicator, and
// afterwards the control plane (a star of TCP connections to rank 0) that carries failure notices.
//
// Wire protocol (all little-endian, fixed-size, length-checked):
//   rank -> root  Hello {magic, version, commId, secret, rank, nranks, PeerInfo}
//   root -> rank  Table {magic, nranks, PeerInfo[nranks]}        once all nranks said hello
//   allGather:    rank -> root {len, bytes}; root -> rank {len, nranks*bytes}
//   control:      CtrlMsg {type, rank, len, text[len]} after init (abort notices, goodbyes)
// A connection whose hello is short, late, malformed or lacks the secret is closed and ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/socket.h"
#include "src/status.h"
#include "transports/transport.h"

namespace braid {

// The decoded braidUniqueId.
struct UniqueIdData {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t commId = 0;
  uint8_t secret[16] = {};
  SockAddr root;
};
constexpr uint32_t kUniqueIdMagic = 0x44494142;  // "BAID"
constexpr uint32_t kProtocolVersion = 1;

void encodeUniqueId(const UniqueIdData& d, braidUniqueId* out);
Status decodeUniqueId(const braidUniqueId& in, UniqueIdData* out);

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

// Control message types. kAbort and kTimeout are failure notices (the communicator fails with
// braidRemoteError or braidTimeout; `rank` is the culprit); kHeartbeat carries the sender's last
// posted operation (8 bytes); kProgress (rank 0 to the others, just before a notice) every rank's
// last reported operation, run-length encoded.
enum class CtrlType : uint32_t { kAbort = 1, kBye = 2, kTimeout = 3, kHeartbeat = 4, kProgress = 5 };
constexpr uint32_t kMaxCtrlType = 5;

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

 private:
  Bootstrap() = default;
  int rank_ = 0;
  int nranks_ = 0;
  std::vector<Fd> socks_;  // rank 0: per rank; others: [0] = root
  std::vector<std::string> inbuf_;
  std::mutex sendMu_;
};

}  // namespace braid
