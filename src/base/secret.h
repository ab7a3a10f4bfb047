// The communicator secret: 16 random bytes every member proves on every connection it opens
// (bootstrap hello, tcp handshake) and that every shared-memory segment carries.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid {

constexpr size_t kSecretBytes = 16;

// Constant time: the loop never exits early, so how long a refusal takes does not reveal how many
// leading bytes a guess got right.
inline bool sameSecret(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace braid
