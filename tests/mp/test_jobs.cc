// Two jobs on one rendezvous address never merge. Each rank here is a process of its own,
// initialized from the environment as a launcher (or a user, by hand) would start it; a rank that
// gets a communicator checks the sum of an AllReduce over it, so a merged communicator shows as a
// wrong sum, not as a pass.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/mp/harness.h"

using namespace braidtest;

namespace {

// Exit statuses of one rank.
constexpr int kRightSum = 0;     // a communicator of its own job: the sum over the job's ranks
constexpr int kRefused = 10;     // init failed, with the expected words in the message
constexpr int kWrongSum = 20;    // a communicator with strangers in it: the failure this file is about
constexpr int kOtherError = 30;  // init failed otherwise

struct Rank {
  int rank;
  int size;
  Env env;  // BRAID_RANK, BRAID_WORLD_SIZE and BRAID_ROOT are added
};

int freePort() { return unusedPorts(20, 3); }  // the callers use the port and the two after it

// Starts one rank: init from the environment, then an AllReduce of rank + 1 that must add up to
// size * (size + 1) / 2. A failed init must name `expect` (one of '|'-separated words) to count as
// kRefused.
pid_t startRank(const Rank& r, const std::string& root, const std::string& expect) {
  Env env = r.env;
  env["BRAID_RANK"] = std::to_string(r.rank);
  env["BRAID_WORLD_SIZE"] = std::to_string(r.size);
  env["BRAID_ROOT"] = root;
  return spawnProcess(env, [r, expect] {
    braidComm_t comm = nullptr;
    braidResult_t res = braidCommInitFromEnv(&comm);
    if (res != braidSuccess) {
      const std::string msg = braidGetLastError();
      fprintf(stderr, "rank %d of %d: init: %s\n", r.rank, r.size, msg.c_str());
      for (size_t at = 0; at <= expect.size();) {
        size_t bar = expect.find('|', at);
        if (bar == std::string::npos) bar = expect.size();
        if (!expect.empty() && msg.find(expect.substr(at, bar - at)) != std::string::npos) return kRefused;
        at = bar + 1;
      }
      return kOtherError;
    }
    int64_t v = r.rank + 1, sum = 0;
    res = braidAllReduce(&v, &sum, 1, braidInt64, braidSum, comm, nullptr);
    const int64_t want = static_cast<int64_t>(r.size) * (r.size + 1) / 2;
    fprintf(stderr, "rank %d of %d: AllReduce %s, sum %lld (want %lld)\n", r.rank, r.size, braidGetErrorString(res),
            static_cast<long long>(sum), static_cast<long long>(want));
    (void)braidCommDestroy(comm);
    if (res != braidSuccess) return kOtherError;
    return sum == want ? kRightSum : kWrongSum;
  });
}

std::string statuses(const std::vector<RankResult>& rs) {
  std::string s;
  for (const RankResult& r : rs) s += std::to_string(r.status) + (r.timedOut ? "(hung) " : " ");
  return s;
}

}  // namespace

TEST_CASE("two jobs by hand on one address, no secret and no job id: init refuses on every rank, saying what to set",
          "[mp][env][jobs]") {
  // Both jobs derive the same secret from the same address and size: braid cannot tell them apart.
  // It used to let the second job's ranks into the first job (sums of 3003 instead of 6).
  const std::string root = "127.0.0.1:" + std::to_string(freePort());
  std::vector<pid_t> pids;
  for (int job = 0; job < 2; ++job)
    for (int r = 0; r < 3; ++r) pids.push_back(startRank({r, 3, {{"BRAID_TIMEOUT", "10"}}}, root, "BRAID_JOB_ID"));
  std::vector<RankResult> res;
  for (pid_t p : pids) res.push_back(waitProcess(p, 60));
  INFO("exit statuses (0 right sum, 10 refused naming BRAID_JOB_ID, 20 wrong sum, 30 other): " << statuses(res));
  for (const RankResult& r : res) CHECK(r.status == kRefused);
}

TEST_CASE("two jobs with their own BRAID_JOB_ID on one address: the first computes right, the second fails",
          "[mp][env][jobs]") {
  // The second job's ranks 1 and 2 start first, so they are the first to reach the first job's rank
  // 0, which waits for its last rank while the second job's rank 0 fails to listen on the taken
  // address.
  const std::string root = "127.0.0.1:" + std::to_string(freePort() + 1);
  const Env a{{"BRAID_TIMEOUT", "30"}, {"BRAID_JOB_ID", "job-a"}};
  const Env b{{"BRAID_TIMEOUT", "5"}, {"BRAID_JOB_ID", "job-b"}};
  std::vector<pid_t> second{startRank({1, 3, b}, root, "deadline"), startRank({2, 3, b}, root, "deadline")};
  std::vector<pid_t> first{startRank({0, 3, a}, root, ""), startRank({1, 3, a}, root, "")};
  usleep(300000);
  second.push_back(startRank({0, 3, b}, root, "cannot listen"));
  usleep(300000);
  first.push_back(startRank({2, 3, a}, root, ""));
  std::vector<RankResult> ra, rb;
  for (pid_t p : first) ra.push_back(waitProcess(p, 60));
  for (pid_t p : second) rb.push_back(waitProcess(p, 60));
  INFO("first job: " << statuses(ra) << "; second job (ranks 1, 2, 0): " << statuses(rb));
  for (const RankResult& r : ra) CHECK(r.status == kRightSum);
  for (const RankResult& r : rb) CHECK(r.status == kRefused);
}

TEST_CASE("ranks whose rank 0 died in the rendezvous fail instead of joining its relaunch", "[mp][env][jobs]") {
  // A relaunch of a crashed job with the same job id (an exported BRAID_JOB_ID or BRAID_SECRET) has
  // the same secret as the attempt it replaces. The dead attempt's ranks used to keep retrying and
  // became ranks of the new attempt; once rank 0 accepted them, they now fail when it goes away.
  const std::string root = "127.0.0.1:" + std::to_string(freePort() + 2);
  const Env env{{"BRAID_TIMEOUT", "20"}, {"BRAID_JOB_ID", "crashed-job"}};
  pid_t rank0 = startRank({0, 3, env}, root, "");
  pid_t stale = startRank({1, 3, env}, root, "accepted this rank, then closed");
  usleep(1500000);  // rank 1 has joined; rank 2 never started
  kill(rank0, SIGKILL);
  RankResult dead = waitProcess(rank0, 10);
  RankResult gone = waitProcess(stale, 10);  // before the relaunch: it must not wait for one
  std::vector<pid_t> relaunch;
  for (int r = 0; r < 3; ++r) relaunch.push_back(startRank({r, 3, env}, root, ""));
  std::vector<RankResult> res;
  for (pid_t p : relaunch) res.push_back(waitProcess(p, 60));
  INFO("killed rank 0: " << dead.status << "; stale rank 1: " << gone.status << (gone.timedOut ? " (hung)" : "")
                         << "; relaunch: " << statuses(res));
  CHECK(gone.status == kRefused);
  for (const RankResult& r : res) CHECK(r.status == kRightSum);
}
