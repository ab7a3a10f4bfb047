#include "src/base/store_choice.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "src/base/clock.h"
#include "src/base/nt_store.h"

namespace braid {

namespace {

// A running average (weight 1/8) of a copy's cost in ns per KiB; a copy this thread was descheduled
// in counts as at most 4x the average, so that one preemption cannot flip a choice made from it.
void addCost(double* avg, size_t len, int64_t ns) {
  double cost = static_cast<double>(std::max<int64_t>(ns, 1)) * 1024.0 / static_cast<double>(len);
  if (*avg != 0) cost = std::min(cost, 4 * *avg);
  *avg = *avg == 0 ? cost : *avg + (cost - *avg) / 8;
}

}  // namespace

bool StoreChoice::copy(void* dst, const void* src, size_t len, const std::atomic<uint64_t> reader[2], unsigned weight,
                       uint64_t tick) {
  if (len < kMinBytes) {
    std::memcpy(dst, src, len);
    return false;
  }
  const bool stream = pick(tick);
  const int64_t start = timed() ? nowNs() : 0;
  if (stream) {
    copyStreaming(static_cast<char*>(dst), static_cast<const char*>(src), len);
    storeFence();
  } else {
    std::memcpy(dst, src, len);
  }
  if (timed()) wrote(stream, len, (nowNs() - start) * weight, reader);
  return stream;
}

bool StoreChoice::pick(uint64_t tick) {
  if (!timed()) return stream_;
  ++copies_;
  if (tick == 0) tick = copies_;
  // A kind never timed is tried at once (the second copy); then one copy from each multiple of
  // trialEvery_ on.
  const bool trial = copyCost_[!stream_] == 0 ? copies_ > 1 : tick >= nextTrial_;
  if (trial || copies_ == 1) nextTrial_ = (tick / trialEvery_ + 1) * trialEvery_;
  return stream_ != trial;
}

void StoreChoice::wrote(bool stream, size_t len, int64_t ns, const std::atomic<uint64_t> reader[2]) {
  addCost(&copyCost_[stream], len, ns);
  double read[2];
  // Relaxed: an estimate.
  for (int k = 0; k < 2; ++k) read[k] = std::bit_cast<double>(reader[k].load(std::memory_order_relaxed));
  if (copyCost_[0] == 0 || copyCost_[1] == 0 || read[0] == 0 || read[1] == 0) return;
  const double plain = copyCost_[0] + read[0], streamed = copyCost_[1] + read[1];
  stream_ = stream_ ? !(plain < streamed) : streamed < streamBelow_ * plain;
  trialEvery_ = std::max(plain, streamed) >= 2 * std::min(plain, streamed) ? 4 * baseTrialEvery_ : baseTrialEvery_;
}

void ReadCosts::add(bool streamed, size_t len, int64_t ns, std::atomic<uint64_t> shared[2], unsigned weight) {
  addCost(&cost_[streamed], len, ns * weight);
  shared[streamed].store(std::bit_cast<uint64_t>(cost_[streamed]), std::memory_order_relaxed);
}

}  // namespace braid
