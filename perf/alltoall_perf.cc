// alltoall_perf: braidAllToAll. size = the whole send buffer (nranks blocks of count elements);
// busbw = algbw * (n-1)/n, the share of it that crosses to other ranks.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int n) { return static_cast<double>(n - 1) / n; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  const auto n = static_cast<size_t>(ctx.nranks);
  size_t count = bytes / (n * ctx.eltSize);
  return Sizes{count, n * count, n * count, n * count * ctx.eltSize};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidAllToAll(send, recv, c.count, c.type, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIAllToAll(send, recv, c.count, c.type, c.comm, c.stream, reqs->add()));
  }
}

// Block j of rank r's send buffer carries stream r*n + j: each (source, destination) pair differs.
uint64_t stream(const Ctx& ctx, size_t from, size_t to) { return from * static_cast<size_t>(ctx.nranks) + to; }

double input(const Ctx& ctx, int rank, size_t index) {
  return copyValue(stream(ctx, static_cast<size_t>(rank), index / ctx.count), index % ctx.count);
}

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  return Expect::Value(copyValue(stream(ctx, index / ctx.count, static_cast<size_t>(ctx.rank)), index % ctx.count));
}

constexpr CollDesc kDesc{"alltoall", /*reduces=*/false, /*rooted=*/false, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
