// The head of a peer's shm segment, as attachPeer checks it. Input: the segment's size (8 bytes,
// what fstat would say), then the segment's first bytes.
#include <cstring>

#include "fuzz/fuzz_common.h"
#include "transports/shm/shm_layout.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(uint64_t)) return 0;
  shm::SegmentExpect want;
  memcpy(&want.fileBytes, data, sizeof(uint64_t));
  want.commId = fuzz::kCommId;
  want.secret = fuzz::kSecret;
  want.creatorRank = fuzz::kShmCreator;
  want.receiverRank = fuzz::kSelf;
  want.nranks = fuzz::kNranks;
  want.page = fuzz::kPage;
  shm::FifoPlace place;
  if (!shm::checkSegmentHeader(data + sizeof(uint64_t), size - sizeof(uint64_t), want, &place).ok()) return 0;
  fuzz::require(place.offset % fuzz::kPage == 0 && place.offset <= want.fileBytes);
  fuzz::require(place.bytes <= want.fileBytes - place.offset);
  fuzz::require(place.nslots >= 1 && place.nslots <= shm::kMaxSlots);
  fuzz::require(place.slotSize >= shm::kCacheLine && place.slotSize <= shm::kMaxSlotSize);
  fuzz::require(place.bytes >= sizeof(shm::FifoControl) + place.nslots * shm::slotStride(place.slotSize));
  return 0;
}
