// gather_perf: braidGather. size = the root's whole receive buffer (nranks blocks of count elements);
// busbw = algbw * (n-1)/n, the share of it that crosses from other ranks (nccl-tests' gather).
// Off the root the receive buffer must stay untouched (in place: but for this rank's own block).
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int n) { return static_cast<double>(n - 1) / n; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  const auto n = static_cast<size_t>(ctx.nranks);
  size_t count = bytes / (n * ctx.eltSize);
  // In place, sendbuff is this rank's block of recvbuff (significant on the root only).
  return Sizes{count, count, n * count, n * count * ctx.eltSize, static_cast<size_t>(ctx.rank) * count, 0};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidGather(send, recv, c.count, c.type, c.root, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIGather(send, recv, c.count, c.type, c.root, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& /*ctx*/, int rank, size_t index) { return copyValue(static_cast<uint64_t>(rank), index); }

Expect expect(const Ctx& ctx, bool inPlace, size_t index) {
  const size_t block = index / ctx.count;
  if (ctx.rank == ctx.root) return Expect::Value(copyValue(block, index % ctx.count));
  if (inPlace && block == static_cast<size_t>(ctx.rank))
    return Expect::Value(copyValue(static_cast<uint64_t>(ctx.rank), index % ctx.count));
  return Expect::Untouched();
}

constexpr CollDesc kDesc{"gather", /*reduces=*/false, /*rooted=*/true, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
