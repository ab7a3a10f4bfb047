// How the shm links move big messages. Forwarding (src/plan.h fedBy, ShmLink::forward): a received
// chunk that a plan sends on is folded (or copied) straight into the slot that sends it, and a big
// call's outputs take non-temporal stores (BRAID_NT_STORES_MIN). Single copy (Xfer::singleCopy):
// AllGather and AllToAll under that size, and Broadcast and Scatter under a fraction of it, are read
// by each receiver out of the sender's buffer. Each test checks the
// results and that pieces were in fact forwarded (shm::forwardedPieces): a test that ran the plain path instead would
// pass for nothing. With two-slot FIFOs a forward finds a full ring more often, and such a piece
// goes the plain way (how many do was not counted: only that some are still forwarded).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "src/comm.h"
#include "tests/mp/harness.h"
#include "transports/shm/shm_link.h"

using namespace braidtest;

namespace {

// Several 256 KiB chunks per segment and a ragged end: 3 MiB of float32, plus 7 elements.
constexpr size_t kCount = (3 << 20) / 4 + 7;

// The suite also runs with BRAID_FORCE_LOWERING=1 (mp-shm-lowered), which turns forwarding off:
// these tests say which they test.
// Single copy regardless of its speed on this machine (BRAID_SHM_CMA=auto still needs the kernel's
// permission): the tests of that path check it wherever it can run. The cut of BRAID_NT_STORES_MIN
// (which also bounds single copy) is its default unless a test sets it: a run with it set small in
// the environment would see no single copy and fail these tests. So are the chunk and the slot
// (a settings sweep's BRAID_CHUNK_SIZE=8192 failed 40 assertions here: single copy takes pieces of
// 64 KiB and up, BRAID_SHM_CMA_MIN, and the slot counts assume whole chunks).
Env shmEnv(Env more) {
  more.emplace("BRAID_CHUNK_SIZE", "256K");
  more.emplace("BRAID_SHM_SLOT_SIZE", "256K");
  more.emplace("BRAID_FORCE_LOWERING", "0");
  more.emplace("BRAID_SHM_CMA_SPEED", "0");
  more.emplace("BRAID_NT_STORES_MIN", "0");
  more["BRAID_TRANSPORTS"] = "shm";
  more["BRAID_TIMEOUT"] = "60";
  return more;
}

// AllReduce and Reduce (root: the last rank) over every op on int32 and float32, in place and
// not; then Broadcast from every root. Returns 0 or fail().
int runChecked(braidComm_t comm, int rank, int n) {
  std::vector<char> send(kCount * 8 + 64), recv(kCount * 8 + 64);
  for (braidDataType_t dt : {braidInt32, braidFloat32})
    for (braidRedOp_t op : {braidSum, braidMax, braidAvg}) {
      if (op == braidAvg && !isFloat(dt)) continue;
      for (bool inPlace : {false, true}) {
        if (allReduceChecked(comm, rank, n, send.data(), recv.data(), kCount, dt, op, inPlace) != 0 ||
            rootedOrScatteredChecked(comm, rank, n, false, send.data(), recv.data(), kCount, dt, op, inPlace) != 0)
          return 1;
      }
    }
  std::vector<int32_t> b(kCount);
  for (int root = 0; root < n; ++root) {
    for (size_t i = 0; i < kCount; ++i) b[i] = rank == root ? static_cast<int32_t>(i * 7 + root) : -1;
    CHECK_BRAID(rank, braidBroadcast(b.data(), b.data(), kCount, braidInt32, root, comm, nullptr));
    for (size_t i = 0; i < kCount; ++i)
      if (b[i] != static_cast<int32_t>(i * 7 + root))
        return fail(rank, "Broadcast from %d: [%zu] = %d, want %d", root, i, b[i], static_cast<int>(i * 7 + root));
  }
  return 0;
}

// Broadcast and Scatter of `count` int32 (per rank) from every root, in place and not, checked.
int oneToManyChecked(braidComm_t comm, int rank, int n, size_t count) {
  const size_t all = count * static_cast<size_t>(n);
  std::vector<int32_t> send(all), recv(all);
  for (int root = 0; root < n; ++root)
    for (bool inPlace : {false, true}) {
      const char* how = inPlace ? "in place" : "out of place";
      std::vector<int32_t>& b = inPlace ? recv : send;
      for (size_t i = 0; i < count; ++i) b[i] = rank == root ? static_cast<int32_t>(i * 7 + root) : -1;
      std::fill(recv.begin() + (inPlace ? count : 0), recv.end(), -2);
      CHECK_BRAID(rank, braidBroadcast(b.data(), recv.data(), count, braidInt32, root, comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        if (recv[i] != static_cast<int32_t>(i * 7 + root))
          return fail(rank, "Broadcast %s from %d: [%zu] = %d", how, root, i, recv[i]);
      // Scatter: the root's block p holds p * 1000003 + i; in place, the root keeps its block in recv.
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i)
          (inPlace ? recv : send)[p * count + i] = rank == root ? static_cast<int32_t>(p * 1000003 + i) : -1;
      const bool rootInPlace = inPlace && rank == root;
      int32_t* out = rootInPlace ? recv.data() + rank * count : recv.data();
      if (!rootInPlace) std::fill(recv.begin(), recv.begin() + count, -2);
      CHECK_BRAID(rank, braidScatter(inPlace ? recv.data() : send.data(), out, count, braidInt32, root, comm, nullptr));
      for (size_t i = 0; i < count; ++i)
        if (out[i] != static_cast<int32_t>(rank * 1000003 + i))
          return fail(rank, "Scatter %s from %d: [%zu] = %d", how, root, i, out[i]);
    }
  return 0;
}

// Whether every peer's link can read this process by process_vm_readv (else single copy is off).
bool cmaEverywhere(braidComm_t comm, int rank, int n) {
  braidComm* c = internalsOf(comm);
  for (int p = 0; p < n; ++p)
    if (p != rank) {
      auto* link = dynamic_cast<braid::shm::ShmLink*>(c->links[p].get());
      if (link == nullptr || !link->cmaRecv()) return false;
    }
  return true;
}

// A communicator for the tests of a failure in the middle of a single copy: rank `slow` waits 200 ms
// before each single-copy read and between claiming a piece of a split receive and writing it
// (BRAID_SHM_TEST_CMA_DELAY_US: that rank descheduled there). *comm stays null where
// process_vm_readv does not work here (said on stderr: not checked). Nonzero on failure.
int slowCmaComm(const braidUniqueId& uid, int rank, int size, int slow, braidComm_t* comm) {
  if (rank == slow) setenv("BRAID_SHM_TEST_CMA_DELAY_US", "200000", 1);
  braidComm_t c = nullptr;
  CHECK_BRAID(rank, braidCommInitRank(&c, size, uid, rank));
  if (!cmaEverywhere(c, rank, size)) {
    fprintf(stderr, "rank %d: process_vm_readv does not work here: not checked\n", rank);
    CHECK_BRAID(rank, braidCommDestroy(c));
    return 0;
  }
  *comm = c;
  return 0;
}

}  // namespace

TEST_CASE("shm FIFOs forward received chunks into the slots that send them on, with the right results",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3, 4);
  // Default FIFOs; non-temporal stores for every output; two-slot FIFOs, where a forward more often
  // finds no free slot and that piece takes the plain path; non-temporal stores for every output and
  // every slot, where a forwarded fold goes through the link's block to both (the ring AllReduce, in
  // which every rank forwards folds; the model takes Rabenseifner at 4 ranks).
  const int form = GENERATE(0, 1, 2, 3);
  INFO("nranks " << n << ", form " << form);
  const Env forms[] = {
      shmEnv({}), shmEnv({{"BRAID_NT_STORES_MIN", "4K"}}), shmEnv({{"BRAID_SHM_SLOTS", "2"}}),
      shmEnv({{"BRAID_NT_STORES_MIN", "4K"}, {"BRAID_SHM_SLOT_STORES", "stream"}, {"BRAID_ALGO", "allreduce:ring"}})};
  auto res = runComm(n, forms[form], [&](braidComm_t comm, int rank, int size) {
    const uint64_t before = braid::shm::forwardedPieces();
    if (runChecked(comm, rank, size) != 0) return 1;
    // With two slots a forward often finds the outgoing ring full, and under load a rank may find
    // it full every time (1 run in 8 while another build ran): there only the results count. So do
    // they with two ranks, whose ring takes every chunk through a step before the next step
    // (algorithms/patterns/ring.h ringWindow): a fold's forward waits behind the sends of the other
    // chunks, and a rank may find the ring full for all of them.
    if (form != 2 && size > 2 && braid::shm::forwardedPieces() == before) return fail(rank, "no piece was forwarded");
    // Streamed outputs also take the roots' copies into their own outputs (LocalWork::stream).
    if ((form == 1 || form == 3) && oneToManyChecked(comm, rank, size, kCount / 4) != 0) return 1;
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("slot payloads written with plain, streaming or measured stores give the same results, each kind where asked",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3);
  const std::string stores = GENERATE("plain", "stream", "auto");
  INFO("nranks " << n << ", BRAID_SHM_SLOT_STORES=" << stores);
  auto res = runComm(n, shmEnv({{"BRAID_SHM_SLOT_STORES", stores}}), [&](braidComm_t comm, int rank, int size) {
    const uint64_t plain = braid::shm::plainSlotFills(), streamed = braid::shm::streamedSlotFills();
    if (runChecked(comm, rank, size) != 0) return 1;
    const auto p = static_cast<unsigned long long>(braid::shm::plainSlotFills() - plain);
    const auto s = static_cast<unsigned long long>(braid::shm::streamedSlotFills() - streamed);
    // Every rank sends slots of 256 KiB here (AllReduce's halves and chunks, Reduce's and Broadcast's
    // chunks), on every link; auto tries the kind it does not use on its second fill of a link.
    const bool right = stores == "plain" ? p > 0 && s == 0 : stores == "stream" ? s > 0 && p == 0 : p > 0 && s > 0;
    if (!right)
      return fail(rank, "%s: %llu slots filled with plain and %llu with streaming stores", stores.c_str(), p, s);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("without forwarding (a link that cannot reduce on arrival), the same calls give the same results",
          "[mp][shm][forward]") {
  auto res = runComm(3, shmEnv({{"BRAID_FORCE_LOWERING", "1"}}), [&](braidComm_t comm, int rank, int size) {
    const uint64_t before = braid::shm::forwardedPieces();
    if (runChecked(comm, rank, size) != 0) return 1;
    if (braid::shm::forwardedPieces() != before) return fail(rank, "pieces were forwarded on lowered plans");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("AllGather and AllToAll under the cache read each peer's buffer by a single copy, with the right results",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3, 4);
  INFO("nranks " << n);
  auto res = runComm(n, shmEnv({{"BRAID_SHM_CMA", "auto"}}), [&](braidComm_t comm, int rank, int size) {
    braidComm* c = internalsOf(comm);
    bool cma = true;
    for (int p = 0; p < size; ++p)
      if (p != rank) {
        auto* link = dynamic_cast<braid::shm::ShmLink*>(c->links[p].get());
        cma = cma && link != nullptr && link->cmaRecv();
      }
    const size_t count = (256 << 10) + 7;  // per rank, int32: past the mailboxes and BRAID_SHM_CMA_MIN
    const size_t all = count * static_cast<size_t>(size);
    std::vector<int32_t> send(all), recv(all);
    const uint64_t before = braid::shm::singleCopyReceives();
    for (bool inPlace : {false, true}) {
      // AllGather: block p holds p * 1000003 + i.
      for (size_t i = 0; i < count; ++i)
        (inPlace ? recv[rank * count + i] : send[i]) = static_cast<int32_t>(rank * 1000003 + i);
      const int32_t* in = inPlace ? recv.data() + rank * count : send.data();
      CHECK_BRAID(rank, braidAllGather(in, recv.data(), count, braidInt32, comm, nullptr));
      for (size_t j = 0; j < all; ++j)
        if (recv[j] != static_cast<int32_t>((j / count) * 1000003 + j % count))
          return fail(rank, "AllGather %s: [%zu] = %d", inPlace ? "in place" : "out of place", j, recv[j]);
      // AllToAll: rank r's block p holds r * 7919 + p * 31 + i.
      std::vector<int32_t>& a = inPlace ? recv : send;
      for (int p = 0; p < size; ++p)
        for (size_t i = 0; i < count; ++i) a[p * count + i] = static_cast<int32_t>(rank * 7919 + p * 31 + i);
      CHECK_BRAID(rank, braidAllToAll(a.data(), recv.data(), count, braidInt32, comm, nullptr));
      for (int p = 0; p < size; ++p)
        for (size_t i = 0; i < count; ++i)
          if (recv[p * count + i] != static_cast<int32_t>(p * 7919 + rank * 31 + i))
            return fail(rank, "AllToAll %s: block %d [%zu] = %d", inPlace ? "in place" : "out of place", p, i,
                        recv[p * count + i]);
    }
    if (!cma) {
      fprintf(stderr, "rank %d: process_vm_readv does not work here: single copy not checked\n", rank);
      return 0;
    }
    if (braid::shm::singleCopyReceives() == before) return fail(rank, "no receive took the single copy");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("single copy is used where it measured fast enough at init, decided alike on every rank of the host",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3);
  // BRAID_SHM_CMA_SPEED=100000 asks process_vm_readv for 100x memcpy's rate, which no machine has;
  // 0 takes it whatever its rate; 300 is the default, whose outcome depends on the machine.
  const char* speed = GENERATE("0", "100000", "300");
  const char* mode = GENERATE("auto", "1");
  INFO("nranks " << n << ", BRAID_SHM_CMA=" << mode << ", BRAID_SHM_CMA_SPEED=" << speed);
  if (strcmp(mode, "1") == 0) {
    // BRAID_SHM_CMA=1 is an init error where the kernel forbids reading a peer: ask first.
    static std::map<int, bool> readable;
    if (!readable.count(n)) {
      // Each rank exits 0 when it reads every peer, 3 when it cannot (ranks are processes).
      auto probe = runComm(n, shmEnv({{"BRAID_SHM_CMA", "auto"}}), [&](braidComm_t comm, int rank, int size) {
        return cmaEverywhere(comm, rank, size) ? 0 : 3;
      });
      bool all = true;
      for (const RankResult& r : probe) {
        INFO(describe(probe));
        REQUIRE((r.status == 0 || r.status == 3));
        all = all && r.status == 0;
      }
      readable[n] = all;
    }
    if (!readable[n]) {
      WARN("process_vm_readv does not work here: BRAID_SHM_CMA=1 not checked");
      return;
    }
  }
  auto res = runComm(
      n, shmEnv({{"BRAID_SHM_CMA", mode}, {"BRAID_SHM_CMA_SPEED", speed}}), [&](braidComm_t comm, int rank, int size) {
        const bool cma = cmaEverywhere(comm, rank, size);
        if (!cma && strcmp(mode, "auto") == 0) {
          fprintf(stderr, "rank %d: process_vm_readv does not work here: nothing to check\n", rank);
          return 0;
        }
        braidComm* c = internalsOf(comm);
        int32_t sends = 0;  // links that send by single copy
        for (int p = 0; p < size; ++p)
          if (p != rank) sends += dynamic_cast<braid::shm::ShmLink*>(c->links[p].get())->cmaSend();
        const bool forced = strcmp(mode, "1") == 0 || strcmp(speed, "0") == 0;
        if (forced && sends != size - 1) return fail(rank, "%d of %d links send by single copy", sends, size - 1);
        if (!forced && strcmp(speed, "100000") == 0 && sends != 0)
          return fail(rank, "%d links send by single copy under BRAID_SHM_CMA_SPEED=100000", sends);
        // Every rank of the host takes the same decision (the median of the ranks' figures).
        std::vector<int32_t> all(size);
        CHECK_BRAID(rank, braidAllGather(&sends, all.data(), 1, braidInt32, comm, nullptr));
        for (int p = 0; p < size; ++p)
          if (all[p] != all[0])
            return fail(rank, "rank %d sends by single copy on %d links, rank 0 on %d", p, all[p], all[0]);
        // The AllGather that would read by single copy: right either way, and by single
        // copy exactly when the links send so.
        const size_t count = (256 << 10) + 7, total = count * static_cast<size_t>(size);
        std::vector<int32_t> send(count), recv(total, -1);
        for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(rank * 1000003 + i);
        const uint64_t before = braid::shm::singleCopyReceives();
        CHECK_BRAID(rank, braidAllGather(send.data(), recv.data(), count, braidInt32, comm, nullptr));
        for (size_t j = 0; j < total; ++j)
          if (recv[j] != static_cast<int32_t>((j / count) * 1000003 + j % count))
            return fail(rank, "AllGather: [%zu] = %d", j, recv[j]);
        const bool took = braid::shm::singleCopyReceives() != before;
        if (took != (sends != 0))
          return fail(rank, "single copy %s with %d links sending so", took ? "taken" : "not taken", sends);
        return 0;
      });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("Broadcast and Scatter under the cut are read by the receivers from the root's buffer, and over it are not",
          "[mp][shm][forward]") {
  const int n = GENERATE(2, 3, 4);
  // BRAID_NT_STORES_MIN sets the cut (1/8 of it out of place, 1/32 in place, per rank on the host):
  // 1 GiB puts 64 Ki int32 under it, 1 MiB puts them over it.
  const bool under = GENERATE(true, false);
  INFO("nranks " << n << (under ? ", under the cut" : ", over the cut"));
  Env env = shmEnv({{"BRAID_SHM_CMA", "auto"}, {"BRAID_NT_STORES_MIN", under ? "1G" : "1M"}});
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const bool cma = cmaEverywhere(comm, rank, size);
    const uint64_t before = braid::shm::singleCopyReceives();
    if (oneToManyChecked(comm, rank, size, (64 << 10) + 3) != 0) return 1;
    const bool took = braid::shm::singleCopyReceives() != before;
    if (!cma) {
      fprintf(stderr, "rank %d: process_vm_readv does not work here: single copy not checked\n", rank);
      return 0;
    }
    // Every rank receives something from a root that sends it by single copy (Scatter's pieces).
    if (under && !took) return fail(rank, "no receive took the single copy");
    if (!under && took) return fail(rank, "a receive over the cut took the single copy");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("an operation that reuses a pooled request does not inherit the single copy of the call before it",
          "[mp][shm][forward]") {
  auto res = runComm(2, shmEnv({{"BRAID_SHM_CMA", "auto"}}), [&](braidComm_t comm, int rank, int size) {
    const size_t count = 256 << 10;  // int32 per rank: an AllGather that takes the single copy
    std::vector<int32_t> send(count, rank), recv(count * size), p2p(count * 4, rank);
    CHECK_BRAID(rank, braidAllGather(send.data(), recv.data(), count, braidInt32, comm, nullptr));
    const uint64_t before = braid::shm::singleCopyReceives();
    // 4 MiB both ways: a plain send and receive, which never go by single copy.
    std::vector<int32_t> in(count * 4, -1);
    CHECK_BRAID(rank, braidGroupStart());
    CHECK_BRAID(rank, braidSend(p2p.data(), p2p.size(), braidInt32, 1 - rank, comm, nullptr));
    CHECK_BRAID(rank, braidRecv(in.data(), in.size(), braidInt32, 1 - rank, comm, nullptr));
    CHECK_BRAID(rank, braidGroupEnd());
    for (int32_t v : in)
      if (v != 1 - rank) return fail(rank, "received %d, want %d", v, 1 - rank);
    if (braid::shm::singleCopyReceives() != before)
      return fail(rank, "the send/receive after the AllGather went by single copy");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("AllGather blocks past half the mailbox leave the mailboxes and are read by a single copy",
          "[mp][shm][forward][small]") {
  // 64 KiB mailboxes (the default): a 32 KiB block stays on them (no single copy), a 64 KiB block
  // (BRAID_SHM_CMA_MIN) goes to the plans, whose receivers read it from the sender's buffer.
  const int n = GENERATE(2, 3);
  INFO("nranks " << n);
  auto res = runComm(n, shmEnv({{"BRAID_SHM_CMA", "auto"}}), [&](braidComm_t comm, int rank, int size) {
    const bool cma = cmaEverywhere(comm, rank, size);
    for (size_t blockBytes : {size_t{32} << 10, size_t{64} << 10}) {
      const size_t count = blockBytes / sizeof(int32_t), all = count * static_cast<size_t>(size);
      std::vector<int32_t> send(count), recv(all);
      const uint64_t before = braid::shm::singleCopyReceives();
      for (bool inPlace : {false, true}) {
        std::fill(recv.begin(), recv.end(), -1);
        int32_t* in = inPlace ? recv.data() + rank * count : send.data();
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(rank * 1000003 + i);
        CHECK_BRAID(rank, braidAllGather(in, recv.data(), count, braidInt32, comm, nullptr));
        for (size_t j = 0; j < all; ++j)
          if (recv[j] != static_cast<int32_t>((j / count) * 1000003 + j % count))
            return fail(rank, "AllGather of %zu-byte blocks %s: [%zu] = %d", blockBytes,
                        inPlace ? "in place" : "out of place", j, recv[j]);
      }
      const bool took = braid::shm::singleCopyReceives() != before;
      if (!cma) continue;
      if (blockBytes == (size_t{32} << 10) && took) return fail(rank, "a 32 KiB block left the mailboxes");
      if (blockBytes == (size_t{64} << 10) && !took) return fail(rank, "no 64 KiB block was read by single copy");
    }
    if (!cma) fprintf(stderr, "rank %d: process_vm_readv does not work here: single copy not checked\n", rank);
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE(
    "a single-copy receive from a waiting root is split: the root writes some of its pieces, the results are whole",
    "[mp][shm][forward]") {
  const int n = GENERATE(2, 3);
  const bool split = GENERATE(true, false);
  INFO("nranks " << n << (split ? "" : ", BRAID_SHM_CMA_SPLIT=0"));
  // 1 GiB of BRAID_NT_STORES_MIN keeps these under the cut, where the receivers read by single copy.
  Env env =
      shmEnv({{"BRAID_SHM_CMA", "auto"}, {"BRAID_NT_STORES_MIN", "1G"}, {"BRAID_SHM_CMA_SPLIT", split ? "1" : "0"}});
  auto res = runComm(n, env, [&](braidComm_t comm, int rank, int size) {
    const bool cma = cmaEverywhere(comm, rank, size);
    const uint64_t offered = braid::shm::splitReceives(), written = braid::shm::splitPiecesWritten();
    // Every root, in place and not, Broadcast and Scatter, with sizes that are not whole pieces.
    if (oneToManyChecked(comm, rank, size, (192 << 10) + 3) != 0) return 1;
    // The root writes pieces while it waits, which a busy host may not let it do in one call: until
    // it did (each root in turn), every result checked.
    const size_t count = (1 << 20) + 5;  // 4 MiB: 8 pieces of 512 KiB and a short one
    std::vector<int32_t> b(count);
    for (int root = 0; root < size; ++root) {
      for (int it = 0; it < 200; ++it) {
        for (size_t i = 0; i < count; ++i) b[i] = rank == root ? static_cast<int32_t>(i * 3 + it) : -1;
        CHECK_BRAID(rank, braidBroadcast(b.data(), b.data(), count, braidInt32, root, comm, nullptr));
        for (size_t i = 0; i < count; ++i)
          if (b[i] != static_cast<int32_t>(i * 3 + it))
            return fail(rank, "Broadcast from %d, call %d: [%zu] = %d", root, it, i, b[i]);
        int32_t wrote = braid::shm::splitPiecesWritten() != written ? 1 : 0;
        CHECK_BRAID(rank, braidBroadcast(&wrote, &wrote, 1, braidInt32, root, comm, nullptr));
        if (wrote != 0 || !split || !cma) break;
      }
    }
    if (!cma) {
      fprintf(stderr, "rank %d: process_vm_readv does not work here: the split not checked\n", rank);
      return 0;
    }
    const bool wasOffered = braid::shm::splitReceives() != offered;
    const bool wrote = braid::shm::splitPiecesWritten() != written;
    if (!split) return wasOffered || wrote ? fail(rank, "split with BRAID_SHM_CMA_SPLIT=0") : 0;
    if (!wasOffered) return fail(rank, "no receive was split");
    if (!wrote) return fail(rank, "as a root, wrote no piece of a receiver's");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a root killed while it writes pieces of a split receive becomes an error naming it, not a hang",
          "[mp][shm][forward]") {
  Env env = shmEnv({{"BRAID_SHM_CMA", "auto"}, {"BRAID_NT_STORES_MIN", "1G"}, {"BRAID_TIMEOUT", "60"}});
  auto res = runComm(2, env, [&](braidComm_t comm, int rank, int size) {
    std::vector<int32_t> b((4 << 20) + 1, rank);  // 16 MiB: 16 pieces of 1 MiB and a short one
    if (rank == 0) {
      // Killed mid-call, likely while it writes one of the receiver's pieces (it has nothing else to do).
      std::thread([] {
        usleep(300 * 1000);
        raise(SIGKILL);
      }).detach();
      for (;;) braidBroadcast(b.data(), b.data(), b.size(), braidInt32, 0, comm, nullptr);
    }
    braidResult_t r = braidSuccess;
    for (int i = 0; i < 100000 && r == braidSuccess; ++i)
      r = braidBroadcast(b.data(), b.data(), b.size(), braidInt32, 0, comm, nullptr);
    const std::string msg = braidGetLastError();
    if (r == braidSuccess) return fail(rank, "no failure after the root's death");
    if (msg.find("rank 0 (host") == std::string::npos)
      return fail(rank, "message does not name rank 0: %s", msg.c_str());
    (void)size;
    return 0;
  });
  INFO(describe(res));
  CHECK(res[0].status == 128 + SIGKILL);
  CHECK(res[1].status == 0);
}

TEST_CASE("a receiver whose call fails keeps the root out of its split receive before the error returns",
          "[mp][shm][forward]") {
  // The root writes pieces of rank 1's split receive into rank 1's buffer (process_vm_writev), here
  // 200 ms after it claimed each (BRAID_SHM_TEST_CMA_DELAY_US: a root descheduled there). Rank 1
  // reads the other pieces itself, so its receive waits for the root's; it then aborts its
  // communicator, and once braidCommAbort returned it owns its buffer again: a sentinel written there
  // must stay. Before Link::stopPeerAccess, the abort returned at once and the root's piece landed
  // on the sentinel.
  Env env = shmEnv({{"BRAID_SHM_CMA", "auto"}, {"BRAID_NT_STORES_MIN", "1G"}, {"BRAID_TIMEOUT", "60"}});
  braidUniqueId uid;
  REQUIRE(braidGetUniqueId(&uid) == braidSuccess);
  auto res = forkRanks(2, env, [&](int rank, int size) {
    braidComm_t comm = nullptr;
    if (slowCmaComm(uid, rank, size, 0, &comm) != 0) return 1;
    if (comm == nullptr) return 0;
    const size_t count = 4u << 20;  // 16 MiB: 16 pieces of 1 MiB
    std::vector<int32_t> b(count, rank == 0 ? 5 : -1);
    if (rank == 0) {
      // Fails once rank 1 aborted; a call that ended whole (rank 1 read every piece) goes again.
      for (int i = 0; i < 20; ++i)
        if (braidBroadcast(b.data(), b.data(), count, braidInt32, 0, comm, nullptr) != braidSuccess) break;
      braidCommAbort(comm);
      return 0;
    }
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::fill(b.begin(), b.end(), -1);
      braidRequest_t req = nullptr;
      CHECK_BRAID(rank, braidIBroadcast(b.data(), b.data(), count, braidInt32, 0, comm, nullptr, &req));
      usleep(100 * 1000);  // rank 1's own pieces take a few ms
      int done = 0;
      CHECK_BRAID(rank, braidTest(req, &done));
      if (done != 0) continue;  // the root claimed none of this one
      braidCommAbort(comm);
      std::fill(b.begin(), b.end(), 7);
      usleep(400 * 1000);
      const size_t changed = static_cast<size_t>(std::count_if(b.begin(), b.end(), [](int32_t x) { return x != 7; }));
      return changed == 0 ? 0
                          : fail(rank, "%zu ints of this rank's buffer changed after braidCommAbort returned", changed);
    }
    return fail(rank, "the root claimed no piece in 20 calls");
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}

TEST_CASE("a root whose call fails returns only once the receiver stopped reading its buffer", "[mp][shm][forward]") {
  // Rank 1 reads the root's buffer by single copy, each read 200 ms after it decided on it
  // (BRAID_SHM_TEST_CMA_DELAY_US: a receiver descheduled there). The root aborts its communicator
  // 100 ms into the call and, once braidCommAbort returned, writes a sentinel into its buffer: rank 1
  // must never read it. Before Link::stopPeerAccess, the abort returned at once and rank 1's reads
  // brought the sentinel, its Broadcast succeeding with it.
  Env env = shmEnv({{"BRAID_SHM_CMA", "auto"},
                    {"BRAID_NT_STORES_MIN", "1G"},
                    {"BRAID_SHM_CMA_SPLIT", "0"},
                    {"BRAID_TIMEOUT", "60"}});
  braidUniqueId uid;
  REQUIRE(braidGetUniqueId(&uid) == braidSuccess);
  auto res = forkRanks(2, env, [&](int rank, int size) {
    braidComm_t comm = nullptr;
    if (slowCmaComm(uid, rank, size, 1, &comm) != 0) return 1;
    if (comm == nullptr) return 0;
    const size_t count = 64u << 10;  // 256 KiB: one read (of up to 1 MiB)
    std::vector<int32_t> b(count, rank == 0 ? 5 : -1);
    CHECK_BRAID(rank, braidBarrier(comm, nullptr));
    if (rank == 0) {
      braidRequest_t req = nullptr;
      CHECK_BRAID(rank, braidIBroadcast(b.data(), b.data(), count, braidInt32, 0, comm, nullptr, &req));
      // Driven for 100 ms (rank 1 reads 200 ms after it began, so it cannot end meanwhile), then aborted.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
      for (int done = 0; std::chrono::steady_clock::now() < until;) CHECK_BRAID(rank, braidTest(req, &done));
      braidCommAbort(comm);
      std::fill(b.begin(), b.end(), 7);
      usleep(1000 * 1000);  // alive while rank 1 might still read
      return 0;
    }
    // Whole (it read everything before the root's abort returned) or failed; never the sentinel.
    const braidResult_t r = braidBroadcast(b.data(), b.data(), count, braidInt32, 0, comm, nullptr);
    braidCommAbort(comm);
    const size_t late = static_cast<size_t>(std::count(b.begin(), b.end(), 7));
    if (late != 0)
      return fail(rank, "%zu ints read from the root's buffer after its braidCommAbort returned (the call %s)", late,
                  r == braidSuccess ? "succeeded" : "failed");
    if (r == braidSuccess && std::count(b.begin(), b.end(), 5) != static_cast<ptrdiff_t>(count))
      return fail(rank, "the Broadcast succeeded with a result that is not the root's");
    return 0;
  });
  INFO(describe(res));
  REQUIRE(allOk(res));
}
