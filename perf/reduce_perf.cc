// reduce_perf: braidReduce. size = count elements; busbw = algbw (the root receives one buffer's
// worth). Ranks other than the root must leave recvbuff untouched.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int /*n*/) { return 1.0; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  size_t count = bytes / ctx.eltSize;
  return Sizes{count, count, count, count * ctx.eltSize};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  if (reqs == nullptr) {
    PERF_CHECK(braidReduce(send, recv, c.count, c.type, c.op, c.root, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIReduce(send, recv, c.count, c.type, c.op, c.root, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& ctx, int rank, size_t index) { return reduceInput(ctx, rank, index); }

Expect expect(const Ctx& ctx, bool inPlace, size_t index) {
  if (ctx.rank == ctx.root) return Expect::Value(reduceExpected(ctx, index));
  // Off the root the buffer keeps what it had: the input in place, the harness's poison otherwise.
  return inPlace ? Expect::Value(reduceInput(ctx, ctx.rank, index)) : Expect::Untouched();
}

constexpr CollDesc kDesc{"reduce", /*reduces=*/true, /*rooted=*/true, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
