#include "src/compute.h"

#include <cstring>

#include "src/base/nt_store.h"
#include "src/base/overlap.h"

namespace braid {

namespace {

class CpuCompute final : public Compute {
 public:
  Status issue(const LocalWork& w, uint64_t* ticket) override {
    const Step& s = *w.step;
    *ticket = 0;
    const size_t es = dtypeSize(w.dtype);
    // Closed: every kind is named, none is guessed. Transfers and control steps never reach a
    // Compute; the executor handles those itself.
    switch (s.kind) {
      case StepKind::kCopy:
        if (w.dst == w.src) return okStatus();
        if (w.stream && !overlaps(w.dst, s.bytes, w.src, s.bytes)) {
          copyStreaming(w.dst, w.src, s.bytes);
          storeFence();  // before a send of the same thread publishes these bytes to a peer
        } else {
          memmove(w.dst, w.src, s.bytes);
        }
        return okStatus();
      case StepKind::kScale:
        scaleDivide(w.dtype, w.dst, s.bytes / es, w.nranks);
        return okStatus();
      case StepKind::kScaleBy:
        scaleBy(w.dtype, w.dst, w.src, s.bytes / es, s.weight);
        return okStatus();
      case StepKind::kAxpy:
        axpy(w.dtype, w.dst, w.src, s.bytes / es, s.weight);
        return okStatus();
      case StepKind::kReduce:
        if (w.kernel == nullptr) return errorf(braidInternalError, "a reduce step in a plan without a reduction");
        w.kernel(w.dst, w.src, w.incoming, s.bytes / es);
        return okStatus();
      case StepKind::kJoin:
        return okStatus();
      case StepKind::kSend:
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
      case StepKind::kCheck:
        break;
    }
    return errorf(braidInternalError, "step kind %d is not a local computation", static_cast<int>(s.kind));
  }
  bool done(uint64_t) override { return true; }
  const char* name() const override { return "cpu"; }
};

}  // namespace

std::unique_ptr<Compute> makeCpuCompute() { return std::make_unique<CpuCompute>(); }

}  // namespace braid
