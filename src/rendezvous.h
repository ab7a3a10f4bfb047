// The rendezvous: how the processes holding one unique id find each other (src/rendezvous.cc).
// Used by Bootstrap::init; messages and their decoders are in src/wire.h.
#pragma once

#include <vector>

#include "src/base/clock.h"
#include "src/base/socket.h"
#include "src/base/status.h"
#include "src/wire.h"
#include "transports/transport.h"

namespace braid {

// Rank 0: serves the listener registered for id.commId (takeListener) until ranks 1..nranks-1 have
// all said hello, then sends each the table. (*socks)[r] is then rank r's connection ([0] empty),
// (*table)[r] its info ((*table)[0] = me). Strangers never delay it past their own hello deadline.
Status serveRendezvous(const UniqueIdData& id, int nranks, const PeerInfo& me, Deadline deadline,
                       std::vector<Fd>* socks, std::vector<PeerInfo>* table);

// Ranks 1..nranks-1: connect to rank 0, say hello, receive the table. Joins again whenever rank 0
// closes on us (not listening yet, a stale listener on the address, or a connection it dropped).
Status joinRendezvous(const UniqueIdData& id, int rank, int nranks, const PeerInfo& me, Deadline deadline, Fd* sock,
                      std::vector<PeerInfo>* table);

}  // namespace braid
