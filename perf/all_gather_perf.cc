// all_gather_perf: braidAllGather. size = the whole receive buffer (nranks * count elements, count
// per rank); busbw = algbw * (n-1)/n, the share of it that comes from other ranks.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int n) { return static_cast<double>(n - 1) / n; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  const auto n = static_cast<size_t>(ctx.nranks);
  size_t count = bytes / (n * ctx.eltSize);
  // In place, sendbuff is this rank's block of recvbuff.
  return Sizes{count, count, n * count, n * count * ctx.eltSize, static_cast<size_t>(ctx.rank) * count, 0};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidAllGather(send, recv, c.count, c.type, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIAllGather(send, recv, c.count, c.type, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& /*ctx*/, int rank, size_t index) { return copyValue(static_cast<uint64_t>(rank), index); }

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  return Expect::Value(copyValue(index / ctx.count, index % ctx.count));  // block r is rank r's input
}

constexpr CollDesc kDesc{"all_gather", /*reduces=*/false, /*rooted=*/false, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
