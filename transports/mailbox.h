// Mailboxes: the memory of one host's small collectives (src/small_coll.h). A transport whose two
// ranks map each other's memory (shm) may offer, beside a link's FIFOs, a ring of kMailDepth slots
// in each direction: ours, which we write and the peer reads, and the peer's, which it writes and we
// read. A slot is one header line, with up to kMailInline bytes of its data in it. A call with more
// puts them after the ring: up to kNearBytes in the slot's near payload (kMailDepth of them), more in
// one of kPayloadDepth payloads of `capacity` bytes. A collective of up to `capacity` bytes per peer
// then costs one cache-line handoff per peer: no FIFO, no message matching, no plan.
//
// Which call a slot carries: the k-th small collective of the communicator (k counts from 1 on
// every rank; all ranks call the same collectives in the same order) uses slot k % kMailDepth (and
// its near payload, or payload k % kPayloadDepth), and its writer stores seq = k last, with release.
// A slot or near payload is rewritten for call k + kMailDepth only once the peer has started call
// k + 1 (stored that seq in its own slot toward us), so it is done reading call k; a payload for
// call k + kPayloadDepth likewise: that is the ring's whole flow control (SmallColls::roomAt).
// Nothing here may hold a pointer (each process maps the memory at its own address).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "src/base/store_choice.h"

namespace braid {

// How many calls a rank may run ahead of a peer that reads its mail: with more ranks than cores, a
// root of Broadcast or Reduce posts a run of calls while the others wait for a core, and each
// switch of a core serves that many calls. Calls of up to kNearBytes go kMailDepth deep (4 ranks on
// 2 cores, this AMD VM: a 16-byte Broadcast or Reduce took 1.0 us at depth 16 and 0.51-0.53 at 64,
// a 256-byte Broadcast 1.1 and 0.6; on an Intel VM depth 4 took 1.4-2.0 us a 16-byte Broadcast and 16
// took 0.43), larger ones kPayloadDepth: 2 ranks with 1 KiB near payloads 64 deep ran a Broadcast in
// 388-395 ns against 286-300 in the 16 payloads (512 B: even), and a ring of full payloads as deep
// would cycle through 64 x 64 KiB toward each peer (on the Intel VM that made Reduce twice as slow).
constexpr uint32_t kMailDepth = 64;
constexpr uint32_t kPayloadDepth = 16;
constexpr size_t kMailInline = 40;
constexpr size_t kNearBytes = 512;  // see above
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
  // with release, once it wrote all it writes and read all it reads; or its number | kMailAbandoned
  // once it gave the call up (it failed): it touches none of the peer's buffers any more, and the
  // peer must not touch its own.
  std::atomic<uint64_t> done;
};
static_assert(sizeof(MailSlot) == 64, "a mail slot is one cache line");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "mail slots are shared between processes");

// MailSlot::done of a direct call given up (above); call numbers never reach this bit.
constexpr uint64_t kMailAbandoned = 1ull << 63;

// One link's two rings as this process sees them: kMailDepth slots, then kMailDepth near payloads
// of kNearBytes, then kPayloadDepth payloads of `capacity` bytes (outData and inData: the first
// near payload).
struct Mailboxes {
  MailSlot* out = nullptr;  // kMailDepth slots we write
  unsigned char* outData = nullptr;
  const MailSlot* in = nullptr;  // the peer's slots toward us
  const unsigned char* inData = nullptr;
  size_t capacity = 0;  // bytes of a payload (both directions alike), 0: no mailboxes
  // How mails of StoreChoice::kMinBytes and up are written (BRAID_SHM_MAIL_STORES), and where
  // each side reports what reading them costs it, as a double's bits by kind (plain [0], streamed
  // [1]; src/base/store_choice.h): the peer about our mails (outReadCost), we about its (inReadCost).
  StoreKind stores = StoreKind::kPlain;
  std::atomic<uint64_t>* outReadCost = nullptr;
  std::atomic<uint64_t>* inReadCost = nullptr;

  // Where call k's `bytes` of data go beyond the header line: its near payload, or its payload.
  // Direct calls (src/direct_coll.cc) mail their buffers in the payload: pass kMaxMailBytes.
  static size_t payloadAt(uint64_t k, size_t bytes, size_t capacity) {
    return bytes <= kNearBytes ? (k % kMailDepth) * kNearBytes
                               : kMailDepth * kNearBytes + (k % kPayloadDepth) * capacity;
  }
  unsigned char* outPayload(uint64_t k, size_t bytes) const { return outData + payloadAt(k, bytes, capacity); }
  const unsigned char* inPayload(uint64_t k, size_t bytes) const { return inData + payloadAt(k, bytes, capacity); }
};

// Bytes of one direction's ring with payloads of `capacity` bytes.
constexpr size_t mailRingBytes(size_t capacity) {
  return kMailDepth * (sizeof(MailSlot) + kNearBytes) + kPayloadDepth * capacity;
}

// How many calls before call k the peer must have started for k to take its slot (and payload).
constexpr uint64_t mailDepthFor(size_t bytes) { return bytes <= kNearBytes ? kMailDepth : kPayloadDepth; }

}  // namespace braid
