// Mailboxes: the memory of one host's small collectives (src/small_coll.h). A transport whose two
// ranks map each other's memory (shm) may offer, beside a link's FIFOs, a ring of kMailDepth slots
// in each direction: ours, which we write and the peer reads, and the peer's, which it writes and we
// read. A slot is one header line, with the first kMailInline bytes of its data in it, and
// `capacity` bytes of payload after the ring for the rest. A collective of up to `capacity` bytes per
// peer then costs one cache-line handoff per peer: no FIFO, no message matching, no plan.
//
// Which call a slot carries: the k-th small collective of the communicator (k counts from 1 on
// every rank; all ranks call the same collectives in the same order) uses slot k % kMailDepth, and
// its writer stores seq = k last, with release. A slot is rewritten for call k + kMailDepth only
// once the peer has started call k + 1 (stored that seq in its own slot toward us), so it is done
// reading call k: that is the ring's whole flow control. Nothing here may hold a pointer (each
// process maps the memory at its own address).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace braid {

// How many calls a rank may run ahead of a peer that reads its mail. Deep enough that a root of
// Broadcast or Reduce with more ranks than cores posts a run of calls while the others wait for a
// core (4 ranks on 2 cores, 16 B: depth 4 took 1.4-2.0 us a Broadcast, 16 took 0.43, 64 the same
// for Broadcast but twice as long for Reduce, likely the larger footprint of the payload).
constexpr uint32_t kMailDepth = 16;
constexpr size_t kMailInline = 40;
// The largest `capacity` a transport may offer (BRAID_SHM_SMALL_BYTES is held to it).
constexpr size_t kMaxMailBytes = 64 << 10;

struct alignas(64) MailSlot {
  // The call number k this slot carries (0: none yet). Stored last with release; the reader's
  // acquire load of k makes `check`, the inline bytes and the payload visible.
  std::atomic<uint64_t> seq;
  // The call as its writer posted it (src/small_coll.cc: collective, datatype, op, root, bytes): the
  // reader refuses a slot whose call is not its own.
  uint64_t check;
  unsigned char inlineData[kMailInline];
  // A call that writes into its peers' buffers in place (src/direct_coll.cc) stores its number here,
  // with release, once it wrote all it writes and read all it reads.
  std::atomic<uint64_t> done;
};
static_assert(sizeof(MailSlot) == 64, "a mail slot is one cache line");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "mail slots are shared between processes");

// One link's two rings as this process sees them.
struct Mailboxes {
  MailSlot* out = nullptr;           // kMailDepth slots we write
  unsigned char* outData = nullptr;  // kMailDepth x capacity payload bytes we write
  const MailSlot* in = nullptr;      // the peer's slots toward us
  const unsigned char* inData = nullptr;
  size_t capacity = 0;  // payload bytes per slot (both directions alike), 0: no mailboxes

  unsigned char* outPayload(uint64_t k) const { return outData + (k % kMailDepth) * capacity; }
  const unsigned char* inPayload(uint64_t k) const { return inData + (k % kMailDepth) * capacity; }
};

// Bytes of one direction's ring with `capacity` payload bytes per slot.
constexpr size_t mailRingBytes(size_t capacity) { return kMailDepth * (sizeof(MailSlot) + capacity); }

}  // namespace braid
