// settings_ab: several settings of one build side by side in one job, call by call. Each setting gets
// a communicator of its own (split from the launcher's after setting its variables, so its transports
// and engine read them), and the calls alternate between the communicators, the order reversed every
// round. On a VM whose speed moves 2-4x from one second to the next (this project's), settings compared
// in separate runs, even interleaved runs, differ by the moment they ran in; calls a few milliseconds
// apart share it. What it cannot show: the effect of a setting on the calls around it (a block of
// back-to-back calls per setting, -k, keeps most of that). Nor does it make the medians agree: the
// same setting given three times in one job measured up to 1.5x apart (267, 385 and 387 us; shm,
// 2-rank Reduce of 4 MiB, 15 rounds), 1.04-1.43x apart over four jobs of 20 rounds with four copies,
// over tcp within 10% (2-rank AllToAll of 16 MiB): the VM's two speeds reach the blocks unevenly (a
// copy's quartiles spanned 257-393 us), or the communicators differ; not told apart. Give "-" more
// than once to see that spread before reading a ratio, and repeat the job.
//
//   braidrun -n 2 build/perf/settings_ab -c alltoall -b 64M -r 20 -k 4 - BRAID_COPY_PIECE=0
//
// Prints per setting the median, quartiles and minimum over the rounds of the slowest rank's time per
// call (a block of k back-to-back calls, divided by k), and the first setting's median over its own
// (above 1: faster than the first).
// A setting is NAME=value, several joined by commas (A=1,B=2); "-" is the environment as it is.
#include <braid/braid.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "options.h"

namespace {

using Vars = std::vector<std::pair<std::string, std::string>>;

bool parseSetting(const char* text, Vars* out) {
  out->clear();
  if (std::strcmp(text, "-") == 0) return true;
  std::string s = text;
  for (size_t at = 0; at <= s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    const std::string kv = s.substr(at, end - at);
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    out->emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    at = end + 1;
  }
  return true;
}

void must(braidResult_t r, const char* what) {
  if (r == braidSuccess) return;
  std::fprintf(stderr, "settings_ab: %s: %s: %s\n", what, braidGetErrorString(r), braidGetLastError());
  std::exit(1);
}

// One call of `coll` on `bytes` (the whole buffer, as the *_perf programs count it), float sum.
braidResult_t call(const std::string& coll, const char* send, char* recv, size_t bytes, int n, braidComm_t comm) {
  const size_t elems = bytes / sizeof(float);
  if (coll == "allreduce") return braidAllReduce(send, recv, elems, braidFloat32, braidSum, comm, nullptr);
  if (coll == "reduce") return braidReduce(send, recv, elems, braidFloat32, braidSum, 0, comm, nullptr);
  if (coll == "broadcast") return braidBroadcast(send, recv, elems, braidFloat32, 0, comm, nullptr);
  if (coll == "allgather") return braidAllGather(send, recv, elems / n, braidFloat32, comm, nullptr);
  if (coll == "reducescatter") return braidReduceScatter(send, recv, elems / n, braidFloat32, braidSum, comm, nullptr);
  if (coll == "alltoall") return braidAllToAll(send, recv, elems / n, braidFloat32, comm, nullptr);
  return braidInvalidArgument;  // not reached: main checks the name
}

double at(const std::vector<double>& sorted, double q) { return sorted[static_cast<size_t>(q * (sorted.size() - 1))]; }

}  // namespace

int main(int argc, char** argv) {
  std::string coll = "allreduce";
  size_t bytes = 1 << 20;
  int rounds = 20, block = 1;
  bool inPlace = false;
  int opt;
  while ((opt = getopt(argc, argv, "c:b:r:k:i")) != -1) {
    switch (opt) {
      case 'c':
        coll = optarg;
        break;
      case 'b':
        if (!braid::perf::parseSize(optarg, &bytes)) bytes = 0;
        break;
      case 'r':
        if (!braid::perf::parseInt(optarg, 1, 1 << 20, &rounds)) rounds = 0;
        break;
      case 'k':
        if (!braid::perf::parseInt(optarg, 1, 1 << 20, &block)) block = 0;
        break;
      case 'i':
        inPlace = true;
        break;
      default:
        std::fprintf(stderr,
                     "usage: settings_ab [-c allreduce|reduce|broadcast|allgather|reducescatter|alltoall] [-b bytes]"
                     " [-r rounds] [-k calls per block] [-i (in place)] SETTING...\n");
        return 2;
    }
  }
  const int nsets = argc - optind;
  if (rounds < 1 || block < 1 || bytes == 0) {
    std::fprintf(stderr, "settings_ab: -b takes a byte count above 0 (K, M, G), -r and -k a count from 1 to 1048576\n");
    return 2;
  }
  const char* known[] = {"allreduce", "reduce", "broadcast", "allgather", "reducescatter", "alltoall"};
  if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return coll == k; })) {
    std::fprintf(stderr, "settings_ab: unknown collective '%s'\n", coll.c_str());
    return 2;
  }
  if (nsets < 1) {
    std::fprintf(stderr, "settings_ab: give at least one setting (\"-\" for the environment as it is)\n");
    return 2;
  }
  braidComm_t world = nullptr;
  must(braidCommInitFromEnv(&world), "braidCommInitFromEnv");
  int rank = 0, n = 1;
  must(braidCommUserRank(world, &rank), "braidCommUserRank");
  must(braidCommCount(world, &n), "braidCommCount");
  std::vector<braidComm_t> comms(nsets);
  for (int s = 0; s < nsets; ++s) {
    Vars vars;
    if (!parseSetting(argv[optind + s], &vars)) {
      std::fprintf(stderr, "settings_ab: '%s' is not NAME=value[,NAME=value...] or -\n", argv[optind + s]);
      return 2;
    }
    // Set for the split, which reads them; then the launcher's environment again for the next one.
    std::vector<std::pair<std::string, std::optional<std::string>>> before;
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      before.emplace_back(k, old != nullptr ? std::optional<std::string>(old) : std::nullopt);
      setenv(k.c_str(), v.c_str(), 1);
    }
    must(braidCommSplit(world, 0, rank, &comms[s]), "braidCommSplit");
    for (auto it = before.rbegin(); it != before.rend(); ++it) {
      if (it->second) {
        setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        unsetenv(it->first.c_str());
      }
    }
  }
  char* recv = static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  char* send = inPlace ? recv : static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (recv == nullptr || send == nullptr) return 1;
  std::memset(recv, 0, bytes);
  if (!inPlace) std::memset(send, 1, bytes);
  std::vector<std::vector<double>> us(nsets);
  constexpr int kWarmRounds = 3;
  for (int r = -kWarmRounds; r < rounds; ++r) {
    for (int j = 0; j < nsets; ++j) {
      const int s = (r & 1) != 0 ? nsets - 1 - j : j;
      must(braidBarrier(comms[s], nullptr), "braidBarrier");
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < block; ++k) must(call(coll, send, recv, bytes, n, comms[s]), coll.c_str());
      double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / block;
      must(braidAllReduce(&t, &t, 1, braidFloat64, braidMax, world, nullptr), "braidAllReduce (timing)");
      if (r >= 0) us[s].push_back(t);
    }
  }
  if (rank == 0) {
    std::printf("# %s %zu bytes, %d ranks, %s, %d rounds of %d call(s) per setting; us per call, slowest rank\n",
                coll.c_str(), bytes, n, inPlace ? "in place" : "out of place", rounds, block);
    std::printf("# %-38s %10s %10s %10s %10s %8s\n", "setting", "median", "p25", "p75", "min", "ratio");
    double first = 0;
    for (int s = 0; s < nsets; ++s) {
      std::sort(us[s].begin(), us[s].end());
      const double med = at(us[s], 0.5);
      if (s == 0) first = med;
      std::printf("  %-38s %10.1f %10.1f %10.1f %10.1f %8.2f\n", argv[optind + s], med, at(us[s], 0.25),
                  at(us[s], 0.75), us[s][0], first / med);
    }
  }
  for (braidComm_t c : comms) braidCommDestroy(c);
  braidCommDestroy(world);
  std::free(recv);
  if (!inPlace) std::free(send);
  return 0;
}
