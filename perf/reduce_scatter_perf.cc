// reduce_scatter_perf: braidReduceScatter. size = the whole send buffer (nranks * count elements,
// count per rank); busbw = algbw * (n-1)/n, the share of it reduced from other ranks.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int n) { return static_cast<double>(n - 1) / n; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  const auto n = static_cast<size_t>(ctx.nranks);
  size_t count = bytes / (n * ctx.eltSize);
  // In place, recvbuff is this rank's block of sendbuff.
  return Sizes{count, n * count, count, n * count * ctx.eltSize, 0, static_cast<size_t>(ctx.rank) * count};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidReduceScatter(send, recv, c.count, c.type, c.op, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIReduceScatter(send, recv, c.count, c.type, c.op, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& ctx, int rank, size_t index) { return reduceInput(ctx, rank, index); }

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  return Expect::Value(reduceExpected(ctx, static_cast<size_t>(ctx.rank) * ctx.count + index));
}

constexpr CollDesc kDesc{
    "reduce_scatter", /*reduces=*/true, /*rooted=*/false, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
