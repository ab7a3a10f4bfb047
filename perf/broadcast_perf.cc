// broadcast_perf: braidBroadcast. size = count elements; busbw = algbw (each rank receives one
// buffer's worth). Every rank fills sendbuff with its own data, so a copy from the wrong rank shows.
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
    PERF_CHECK(braidBroadcast(send, recv, c.count, c.type, c.root, c.comm, c.stream));
  } else {
    PERF_CHECK(braidIBroadcast(send, recv, c.count, c.type, c.root, c.comm, c.stream, reqs->add()));
  }
}

double input(const Ctx& /*ctx*/, int rank, size_t index) { return copyValue(static_cast<uint64_t>(rank), index); }

Expect expect(const Ctx& ctx, bool /*inPlace*/, size_t index) {
  return Expect::Value(copyValue(static_cast<uint64_t>(ctx.root), index));
}

constexpr CollDesc kDesc{"broadcast", /*reduces=*/false, /*rooted=*/true, 1, busFactor, sizes, post, input, expect};

}  // namespace
}  // namespace braid::perf

int main(int argc, char** argv) { return braid::perf::benchMain(argc, argv, braid::perf::kDesc); }
