// What the fuzz targets expect to be talking to: a fixed communicator, so that the seed corpus
// (written by make_corpus.cc from these same values) holds messages that pass every check and the
// fuzzer mutates from there. A target calls __builtin_trap() when a decoder breaks its own
// contract (output unchecked, a bound not kept); sanitizers catch the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/base/secret.h"
#include "src/wire.h"

namespace braid::fuzz {

constexpr uint8_t kSecret[kSecretBytes] = {0x5e, 0xc7, 0x37, 0x0b, 0x1d, 0x2a, 0x99, 0x40,
                                           0x31, 0xfe, 0x07, 0x6c, 0xa4, 0x58, 0xd2, 0x13};
constexpr uint64_t kCommId = 0x0123456789abcdefull;
constexpr int kNranks = 4;
// The rank that decodes (rendezvous root is 0; the tcp acceptor and shm receiver are this one).
constexpr int kSelf = 1;
// The shm segment's creator in fuzz_shm_header.
constexpr int kShmCreator = 2;
constexpr size_t kPage = 4096;

// The communicator's id without a root address (the decoders that take an id do not read it).
inline UniqueIdData fuzzId() {
  UniqueIdData id;
  id.magic = kUniqueIdMagic;
  id.version = kProtocolVersion;
  id.commId = kCommId;
  memcpy(id.secret, kSecret, sizeof(id.secret));
  return id;
}

inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace braid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
