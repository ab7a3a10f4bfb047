// all_reduce_perf: braidAllReduce. size = count elements; busbw = algbw * 2(n-1)/n, the bytes each
// rank must send and receive in a bandwidth-optimal (ring) allreduce.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int n) { return 2.0 * (n - 1) / n; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  size_t count = bytes / ctx.eltSize;
  return Sizes{count, count, count, count * ctx.eltSize};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidAllReduce(send, recv, c.count, c.type, c.op, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIAllReduce(send, recv, c.count, c.type, c.op, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& ctx, int rank, size_t index) { return reduceInput(ctx, rank, index); }

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) { return Expect::Value(reduceExpected(ctx, index)); }

constexpr CollDesc kDesc{"all_reduce", /*reduces=*/true, /*rooted=*/false, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
