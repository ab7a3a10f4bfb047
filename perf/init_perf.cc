// init_perf: how long communicator setup takes — braidCommInitFromEnv, braidCommSplit (one color, keys reversed)
// and braidCommShrink (the last rank excluded) — as the slowest rank sees it, median of -i runs.
//
//   braidrun -n 4 build/perf/init_perf [-i ITERS]
//
// A first communicator from the environment is kept to separate the runs with barriers and to
// gather the timings; it is not timed (its ranks start at different moments). Public API only.
#include <braid/braid.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define INIT_CHECK(call)                                                                                \
  do {                                                                                                  \
    braidResult_t r_ = (call);                                                                          \
    if (r_ != braidSuccess) {                                                                           \
      fprintf(stderr, "init_perf: %s: %s (%s)\n", #call, braidGetErrorString(r_), braidGetLastError()); \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank's time of each run, then their median.
double slowestMedian(braidComm_t world, std::vector<double> times) {
  std::vector<double> slowest(times.size());
  INIT_CHECK(braidAllReduce(times.data(), slowest.data(), times.size(), braidFloat64, braidMax, world, nullptr));
  std::sort(slowest.begin(), slowest.end());
  return slowest[slowest.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 5;
  for (int opt; (opt = getopt(argc, argv, "i:")) != -1;) {
    if (opt == 'i') {
      iters = atoi(optarg);
    } else {
      fprintf(stderr, "usage: %s [-i ITERS]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1) iters = 1;
  braidComm_t world = nullptr;
  INIT_CHECK(braidCommInitFromEnv(&world));
  int rank = 0, nranks = 1;
  INIT_CHECK(braidCommUserRank(world, &rank));
  INIT_CHECK(braidCommCount(world, &nranks));

  std::vector<double> init, split, shrink;
  for (int i = 0; i < iters; ++i) {
    INIT_CHECK(braidBarrier(world, nullptr));
    double t0 = nowMs();
    braidComm_t c = nullptr;
    INIT_CHECK(braidCommInitFromEnv(&c));
    init.push_back(nowMs() - t0);
    INIT_CHECK(braidCommDestroy(c));

    INIT_CHECK(braidBarrier(world, nullptr));
    t0 = nowMs();
    INIT_CHECK(braidCommSplit(world, 0, -rank, &c));
    split.push_back(nowMs() - t0);
    INIT_CHECK(braidCommDestroy(c));

    INIT_CHECK(braidBarrier(world, nullptr));
    double took = 0;
    if (nranks > 1 && rank != nranks - 1) {
      const int last = nranks - 1;
      t0 = nowMs();
      INIT_CHECK(braidCommShrink(world, &last, 1, &c));
      took = nowMs() - t0;
      INIT_CHECK(braidCommDestroy(c));
    }
    shrink.push_back(took);
  }
  const double mInit = slowestMedian(world, init), mSplit = slowestMedian(world, split),
               mShrink = slowestMedian(world, shrink);
  if (rank == 0)
    printf(
        "# init_perf: %d ranks, median of %d runs of the slowest rank\n%-8s %10s\n%-8s %10.2f\n%-8s %10.2f\n"
        "%-8s %10.2f\n",
        nranks, iters, "what", "ms", "init", mInit, "split", mSplit, "shrink", mShrink);
  INIT_CHECK(braidCommDestroy(world));
  return 0;
}
