#include "transports/shm/shm_layout.h"

#include <cstring>

namespace braid {
namespace shm {

Status checkSegmentHeader(const uint8_t* data, size_t len, const SegmentExpect& want, FifoPlace* out) {
  if (want.page == 0 || want.secret == nullptr) return errorf(braidInternalError, "segment check without page/secret");
  if (len < sizeof(SegmentHeader))
    return errorf(braidRemoteError, "segment of %zu bytes has no room for a header", len);
  SegmentHeader h;
  memcpy(&h, data, sizeof(h));
  const char* mismatch = nullptr;
  if (h.magic != kSegmentMagic) {
    mismatch = "magic";
  } else if (h.version != kSegmentVersion) {
    mismatch = "version";
  } else if (!sameSecret(h.secret, want.secret)) {
    mismatch = "secret";
  } else if (h.commId != want.commId) {
    mismatch = "communicator id";
  } else if (h.creatorRank != want.creatorRank) {
    mismatch = "creator rank";
  }
  if (mismatch != nullptr)
    return errorf(braidRemoteError, "segment does not belong to this communicator (%s differs)", mismatch);
  const size_t page = want.page;
  if (h.segmentBytes != want.fileBytes || h.slotSize < kCacheLine || h.slotSize % kCacheLine != 0 ||
      h.slotSize > kMaxSlotSize || h.nslots < 1 || h.nslots > kMaxSlots ||
      h.mailBytes > kMaxMailBytes || h.mailBytes % kCacheLine != 0 ||
      h.fifoBytes != fifoBytes(h.slotSize, h.nslots, page, h.mailBytes) || want.nranks < 1 ||
      h.nfifos > static_cast<uint32_t>(want.nranks) || headerBytes(h.nfifos, page) > want.fileBytes)
    return errorf(braidRemoteError, "segment has an inconsistent header");
  if (len - sizeof(h) < h.nfifos * sizeof(FifoEntry))
    return errorf(braidRemoteError, "segment directory of %u entries is truncated", h.nfifos);
  bool found = false;
  uint64_t offset = 0;
  for (uint32_t i = 0; i < h.nfifos; ++i) {
    FifoEntry e;
    memcpy(&e, data + sizeof(h) + i * sizeof(FifoEntry), sizeof(e));
    if (e.receiverRank != want.receiverRank) continue;
    if (found) return errorf(braidRemoteError, "segment has two FIFOs for rank %d", want.receiverRank);
    found = true;
    offset = e.offset;
  }
  if (!found) return errorf(braidRemoteError, "segment has no FIFO for rank %d", want.receiverRank);
  if (offset % page != 0 || offset < headerBytes(h.nfifos, page) || offset > want.fileBytes ||
      want.fileBytes - offset < h.fifoBytes)
    return errorf(braidRemoteError, "segment's FIFO for rank %d lies outside it", want.receiverRank);
  out->offset = offset;
  out->bytes = h.fifoBytes;
  out->slotSize = h.slotSize;
  out->nslots = h.nslots;
  out->mailBytes = h.mailBytes;
  return okStatus();
}

}  // namespace shm
}  // namespace braid
