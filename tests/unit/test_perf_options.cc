// The *_perf benchmarks' -B: the iterations a row gets from a byte budget follow the Open MPI
// programs' rule (../shared/peers/mpi_coll_perf.c), so that compare_colls.sh averages as many calls
// on both sides at every size.
#include <getopt.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <string>
#include <vector>

#include "perf/options.h"

using braid::perf::budgetIters;

TEST_CASE("a byte budget gives min(1000, max(5, budget / size)) iterations and a tenth of that to warm up", "[perf]") {
  int iters = 0, warmup = 0;
  budgetIters(size_t{1} << 30, 1 << 20, &iters, &warmup);  // 1 MiB: 1024, capped
  CHECK(iters == 1000);
  CHECK(warmup == 100);
  budgetIters(size_t{1} << 30, 16 << 20, &iters, &warmup);  // 16 MiB: 64
  CHECK(iters == 64);
  CHECK(warmup == 6);
  budgetIters(size_t{1} << 30, size_t{256} << 20, &iters, &warmup);  // 256 MiB: 4, raised to 5
  CHECK(iters == 5);
  CHECK(warmup == 5);
  budgetIters(size_t{1} << 30, 0, &iters, &warmup);  // a 0-byte row counts as 1 byte
  CHECK(iters == 1000);
}

TEST_CASE("-B and --budget set the budget; without them it is off", "[perf]") {
  auto parse = [](std::vector<std::string> args) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    optind = 1;  // getopt's state is global: every parse starts over
    return braid::perf::parseOptions(static_cast<int>(argv.size()), argv.data());
  };
  CHECK(parse({"x_perf", "-n", "7"}).budget == 0);
  CHECK(parse({"x_perf", "-B", "1G"}).budget == size_t{1} << 30);
  CHECK(parse({"x_perf", "--budget", "64M", "-n", "3"}).budget == size_t{64} << 20);
}
