// sendrecv_perf: a ring of braidSend/braidRecv. Each rank sends count elements to rank+1 and
// receives as many from rank-1, both posted together (one group, or nonblocking). size = count
// elements; busbw = algbw. In place, sendbuff and recvbuff are the same buffer.
#include "common.h"

namespace braid::perf {
namespace {

double busFactor(int /*n*/) { return 1.0; }

Sizes sizes(const Ctx& ctx, size_t bytes) {
  size_t count = bytes / ctx.eltSize;
  return Sizes{count, count, count, count * ctx.eltSize};
}

void post(const Ctx& c, const void* send, void* recv, Requests* reqs) {
  const int next = (c.rank + 1) % c.nranks;
  const int prev = (c.rank - 1 + c.nranks) % c.nranks;
  // With one rank the ring is a self-exchange, which braid accepts only as a group: use the group
  // for it in nonblocking mode too.
  if (reqs == nullptr || c.nranks == 1) {
    PERF_CHECK(braidGroupStart());
    PERF_CHECK(braidSend(send, c.count, c.type, next, c.comm, c.stream));
    PERF_CHECK(braidRecv(recv, c.count, c.type, prev, c.comm, c.stream));
    PERF_CHECK(braidGroupEnd());
  } else {
    PERF_CHECK(braidISend(send, c.count, c.type, next, c.comm, c.stream, reqs->add()));
    PERF_CHECK(braidIRecv(recv, c.count, c.type, prev, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& /*ctx*/, int rank, size_t index) { return copyValue(static_cast<uint64_t>(rank), index); }

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  return Expect::Value(copyValue(static_cast<uint64_t>((ctx.rank - 1 + ctx.nranks) % ctx.nranks), index));
}

constexpr CollDesc kDesc{"sendrecv", /*reduces=*/false, /*rooted=*/false, 2, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
