// The link self-test and the test knob that breaks links on purpose.
//
// When connectLinks (src/comm.cc) has connected a round of links, every rank sends one small
// checksummed message over each new link and receives the peer's, all links at once, through the
// transports' own postSend/postRecv/progress (the path collectives take). A link whose message
// does not arrive whole within BRAID_LINK_CHECK_MS, or whose transport reports an error, failed;
// connectLinks then moves the pair to the next transport of BRAID_TRANSPORTS that can connect it.
//
// BRAID_TEST_LINK_FAULT (off by default) wraps one transport's link between two ranks in a
// decorator that breaks it for real, so that the fallback can be tested: "shm:0-1:corrupt" flips a
// byte of every message received on the shm link between ranks 0 and 1, ":drop" swallows the sends
// (they complete without leaving), ":error" fails every post. Several, comma-separated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/status.h"
#include "transports/transport.h"

namespace braid {

enum class LinkFaultMode : uint8_t { kCorrupt, kDrop, kError };

// One entry of BRAID_TEST_LINK_FAULT: the link of `transport` between ranks a and b.
struct LinkFault {
  std::string transport;
  int a = -1;
  int b = -1;
  LinkFaultMode mode = LinkFaultMode::kCorrupt;
};

// Parses BRAID_TEST_LINK_FAULT's text ("" = none). A malformed entry is braidInvalidArgument naming
// the variable and the form it wants; transport names are checked against the registry.
Status parseLinkFaults(const std::string& text, std::vector<LinkFault>* out);

// Wraps every transport that `faults` names in the fault decorator (its links to the named peers
// break as asked; everything else passes through untouched).
void wrapFaultyTransports(const std::vector<LinkFault>& faults, std::vector<std::unique_ptr<Transport>>* transports);

// The links under test: links[i] to peers[i], carried by transports[transportOf[i]].
struct LinkCheckSet {
  int rank = 0;
  uint64_t commId = 0;
  const std::vector<std::unique_ptr<Transport>>* transports = nullptr;
  std::vector<int> peers;
  std::vector<Link*> links;
  std::vector<int> transportOf;
};

// The self-test of one round of links. Its messages live in it: destroy the links of a round
// (those that failed, and so may still have transfers posted) before its LinkCheck.
class LinkCheck {
 public:
  LinkCheck();
  ~LinkCheck();
  LinkCheck(const LinkCheck&) = delete;
  LinkCheck& operator=(const LinkCheck&) = delete;

  // Tests every link of `set` at once until each passed or failed, or `deadline`. failures[i] is
  // "" for a link that passed, else what went wrong ("byte 17 of 1000 differs (...)", "no message
  // from the peer within 5000 ms"). A failed link has been dropped from its transport's progress
  // (Transport::dropLink), so the caller may destroy it. The error return is for the test itself
  // (a transport failing a link the set does not hold), not for a failed link.
  Status run(const LinkCheckSet& set, Deadline deadline, std::vector<std::string>* failures);

  struct Probe;  // one link's two messages and transfers (src/link_check.cc)

 private:
  std::vector<Probe> probes_;
};

}  // namespace braid
