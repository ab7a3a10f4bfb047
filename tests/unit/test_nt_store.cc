// copyStreaming (src/base/nt_store.cc): every length and alignment gives memcpy's bytes and touches
// nothing outside [dst, dst + len): the four-page blocks, the line tail and the byte tail each
// have edges.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/base/nt_store.h"

TEST_CASE("copyStreaming copies exactly its bytes at every length and alignment", "[nt_store]") {
  constexpr size_t kBlock = 4 * 4096;
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 200; ++n) lengths.push_back(n);
  for (size_t base : {kBlock, 2 * kBlock, 3 * kBlock + 4096})
    for (size_t d = 0; d <= 130; ++d) lengths.push_back(base - 65 + d);
  const size_t maxLen = 3 * kBlock + 4096 + 65 + 64;
  std::vector<unsigned char> src(maxLen + 64), dst(maxLen + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t dOff : {0, 1, 8, 15, 16, 33})
    for (size_t sOff : {0, 3, 16})
      for (size_t len : lengths) {
        memset(dst.data(), 0xA5, dst.size());
        braid::copyStreaming(reinterpret_cast<char*>(dst.data() + dOff),
                             reinterpret_cast<const char*>(src.data() + sOff), len);
        braid::storeFence();
        INFO("dst offset " << dOff << ", src offset " << sOff << ", length " << len);
        REQUIRE(memcmp(dst.data() + dOff, src.data() + sOff, len) == 0);
        bool outsideUntouched = true;
        for (size_t i = 0; i < dst.size(); ++i)
          if ((i < dOff || i >= dOff + len) && dst[i] != 0xA5) outsideUntouched = false;
        REQUIRE(outsideUntouched);
      }
}
