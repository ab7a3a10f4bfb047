// The *_perf harness: see common.h. Flags, table and footer follow nccl-tests' layout, so that
// numbers and scripts carry over.
#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "check.h"
#include "device.h"
#include "options.h"

namespace braid::perf {
namespace {

constexpr size_t kAlign = 4096;
constexpr size_t kHostBytes = 64;  // one fixed-size slot per rank in the hostname AllGather

braidComm_t g_comm = nullptr;  // aborted by failCall, so that peers fail at once instead of timing out
int g_rank = -1;

struct Result {
  double timeUs = 0;
  double algbw = 0;
  double busbw = 0;
  long long wrong = -1;  // -1: not checked (-c 0)
};

struct Row {
  size_t bytes;
  size_t count;
  braidDataType_t type;
  const char* redop;
  int root;
  Result res[2];  // out-of-place, in-place
};

struct Device {
  int64_t pid;
  std::string host;
};

// Frees malloc'd or (-R 1) braidMemAlloc'd memory.
struct FreeDeleter {
  bool braidMem = false;
  void operator()(void* p) const {
    if (braidMem) {
      braidMemFree(p);
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer allocBuffer(size_t bytes, bool braidMem) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  void* m = nullptr;
  if (braidMem && braidMemAlloc(&m, bytes) != braidSuccess) m = nullptr;
  if (!braidMem) m = std::aligned_alloc(kAlign, bytes);
  auto* p = static_cast<unsigned char*>(m);
  if (p == nullptr) {
    std::fprintf(stderr, "rank %d: cannot allocate %zu bytes\n", g_rank, bytes);
    if (g_comm != nullptr) braidCommAbort(g_comm);
    std::exit(1);
  }
  std::memset(p, kPoison, bytes);  // touch every page now, not while timing
  return Buffer(p, FreeDeleter{braidMem});
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Times keep 7 columns: fewer decimals as they grow, as nccl-tests prints them.
void formatTime(double us, char* buf, size_t len) {
  std::snprintf(buf, len, us < 1e4 ? "%7.2f" : us < 1e5 ? "%7.1f" : "%7.0f", us);
}

class Bench {
 public:
  Bench(const Options& opts, const CollDesc& desc) : opts_(opts), desc_(desc) {}
  int run();

 private:
  void init();
  void gatherDevices();
  void allocate();
  void printHeader() const;
  void sweep(braidDataType_t type, braidRedOp_t op, int root);
  void runRow(Ctx& ctx, const Sizes& sizes);
  Result measure(const Ctx& ctx, const Sizes& sizes, bool inPlace, size_t* oob);
  void prepare(const Ctx& ctx, const Sizes& sizes, bool inPlace, void* send);
  void iterate(const Ctx& ctx, const void* send, void* recv, int nops);
  void printRow(const Row& row) const;
  void writeJson(FILE* f, double avgBusbw) const;

  const Options& opts_;
  const CollDesc& desc_;
  braidComm_t comm_ = nullptr;
  int rank_ = 0;
  int nranks_ = 1;
  int version_ = 0;
  std::vector<Device> devices_;
  Buffer send_;
  Buffer recv_;  // also the single buffer of in-place runs
  // -m device: the calls' buffers, device copies of send_ and recv_ (which then only stage the
  // inputs and the results for the check), and the stream the calls go on.
  void* dsend_ = nullptr;
  void* drecv_ = nullptr;
  size_t sendBytes_ = 0, recvBytes_ = 0;
  braidStream_t stream_ = nullptr;
  Requests reqs_;
  std::vector<Row> rows_;
  unsigned long long wrongTotal_ = 0;
  unsigned long long oobTotal_ = 0;
};

int Bench::run() {
  init();
  FILE* json = nullptr;
  if (rank_ == 0 && !opts_.json.empty()) {
    json = std::fopen(opts_.json.c_str(), "w");
    if (json == nullptr) {
      std::fprintf(stderr, "rank 0: cannot open -J file '%s': %s\n", opts_.json.c_str(), std::strerror(errno));
      braidCommAbort(comm_);
      return 2;
    }
  }
  if (opts_.device && desc_.hostOnly) {
    if (rank_ == 0) std::fprintf(stderr, "%s_perf: -m device is not supported (host buffers only)\n", desc_.name);
    braidCommDestroy(comm_);
    return 2;
  }
  if (desc_.rooted && !opts_.allRoots && opts_.root >= nranks_) {
    if (rank_ == 0) std::fprintf(stderr, "%s_perf: -r %d is not a rank of %d\n", desc_.name, opts_.root, nranks_);
    braidCommDestroy(comm_);
    return 2;
  }
  gatherDevices();
  allocate();
  printHeader();

  for (braidDataType_t type : opts_.types) {
    std::vector<braidRedOp_t> ops = desc_.reduces ? opts_.ops : std::vector<braidRedOp_t>{braidSum};
    for (braidRedOp_t op : ops) {
      if (!desc_.rooted) {
        sweep(type, op, -1);
      } else if (!opts_.allRoots) {
        sweep(type, op, opts_.root);
      } else {
        for (int root = 0; root < nranks_; ++root) sweep(type, op, root);
      }
    }
  }

  double busbwSum = 0;
  for (const Row& r : rows_) busbwSum += r.res[0].busbw + r.res[1].busbw;
  double avgBusbw = rows_.empty() ? 0 : busbwSum / (2.0 * static_cast<double>(rows_.size()));
  if (rank_ == 0) {
    std::printf("# Out of bounds values : %llu %s\n", oobTotal_, oobTotal_ == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n#\n", avgBusbw);
    std::fflush(stdout);
    if (wrongTotal_ != 0) std::fprintf(stderr, "%s_perf: %llu wrong values\n", desc_.name, wrongTotal_);
  }
  if (json != nullptr) {
    writeJson(json, avgBusbw);
    if (std::fclose(json) != 0) std::fprintf(stderr, "rank 0: writing '%s' failed\n", opts_.json.c_str());
  }
  PERF_CHECK(braidCommDestroy(comm_));
  g_comm = nullptr;
  deviceFree(dsend_);
  deviceFree(drecv_);
  return wrongTotal_ != 0 || oobTotal_ != 0 ? 1 : 0;
}

void Bench::init() {
  if (!opts_.algo.empty()) setenv("BRAID_ALGO", opts_.algo.c_str(), 1);
  // Before the communicator: it takes the device current at init as its own.
  if (opts_.device) stream_ = deviceSetup(opts_.gpu);
  PERF_CHECK(braidGetVersion(&version_));
  PERF_CHECK(braidCommInitFromEnv(&comm_));
  g_comm = comm_;
  PERF_CHECK(braidCommUserRank(comm_, &rank_));
  g_rank = rank_;
  PERF_CHECK(braidCommCount(comm_, &nranks_));
  reqs_.reserve(static_cast<size_t>(opts_.agg) * static_cast<size_t>(desc_.maxRequestsPerOp));
}

void Bench::gatherDevices() {
  std::vector<char> hosts(kHostBytes * static_cast<size_t>(nranks_));
  char host[kHostBytes] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  host[kHostBytes - 1] = '\0';
  PERF_CHECK(braidAllGather(host, hosts.data(), kHostBytes, braidUint8, comm_, nullptr));
  std::vector<int64_t> pids(static_cast<size_t>(nranks_));
  int64_t pid = getpid();
  PERF_CHECK(braidAllGather(&pid, pids.data(), 1, braidInt64, comm_, nullptr));
  for (int r = 0; r < nranks_; ++r) {
    const char* h = hosts.data() + kHostBytes * static_cast<size_t>(r);
    devices_.push_back({pids[r], std::string(h, strnlen(h, kHostBytes))});
  }
}

// One send and one receive buffer for the largest row of any datatype, reused by every row.
void Bench::allocate() {
  size_t sendBytes = 0;
  size_t recvBytes = 0;
  for (braidDataType_t type : opts_.types) {
    Ctx ctx{comm_, rank_, nranks_, type, typeSize(type)};
    Sizes s = desc_.sizes(ctx, opts_.maxBytes);
    sendBytes = std::max(sendBytes, s.sendElems * ctx.eltSize);
    recvBytes = std::max(recvBytes, std::max(s.sendElems, s.recvElems) * ctx.eltSize);
  }
  send_ = allocBuffer(sendBytes + kGuardBytes, opts_.registered);
  recv_ = allocBuffer(recvBytes + kGuardBytes, opts_.registered);
  sendBytes_ = sendBytes + kGuardBytes;
  recvBytes_ = recvBytes + kGuardBytes;
  if (opts_.registered) {  // as nccl-tests' -R 1; released by braidCommDestroy
    void* h = nullptr;
    if (braidCommRegister(comm_, send_.get(), sendBytes_, &h) != braidSuccess ||
        braidCommRegister(comm_, recv_.get(), recvBytes_, &h) != braidSuccess) {
      std::fprintf(stderr, "rank %d: braidCommRegister: %s\n", rank_, braidGetLastError());
      braidCommAbort(comm_);
      std::exit(1);
    }
  }
  if (opts_.device) {
    dsend_ = deviceAlloc(sendBytes_, kPoison);
    drecv_ = deviceAlloc(recvBytes_, kPoison);
  }
}

void Bench::printHeader() const {
  if (rank_ != 0) return;
  std::printf("# %s_perf: braid %d.%d.%d, %d ranks\n", desc_.name, version_ / 10000, version_ / 100 % 100,
              version_ % 100, nranks_);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
      "validation: %d\n",
      opts_.minBytes, opts_.maxBytes, opts_.stepBytes ? opts_.stepBytes : opts_.stepFactor,
      opts_.stepBytes ? "bytes" : "factor", opts_.warmup, opts_.iters, opts_.agg, opts_.check ? 1 : 0);
  if (opts_.budget > 0)
    std::printf("# iterations per size from a budget of %zu bytes (-B): the -n and -w above are not used\n",
                opts_.budget);
  std::printf("# blocking: %d time aggregation: %s algo: %s memory: %s\n#\n# Using devices\n", opts_.blocking ? 1 : 0,
              averageName(opts_.average), opts_.algo.empty() ? "default" : opts_.algo.c_str(),
              opts_.device ? "device" : "host");
  for (int r = 0; r < nranks_; ++r) {
    std::printf("#  Rank %2d Pid %6lld on %10s\n", r, static_cast<long long>(devices_[r].pid),
                devices_[r].host.c_str());
  }
  std::printf(
      "#\n"
      "#                                                              out-of-place                       in-place\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
      "#wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
      "\n");
  std::fflush(stdout);
}

// Rows from -b to -e for one (type, op, root). Sizes that round to the previous row's are skipped.
void Bench::sweep(braidDataType_t type, braidRedOp_t op, int root) {
  Ctx ctx{comm_, rank_, nranks_, type, typeSize(type), op, root};
  ctx.stream = stream_;
  size_t prevBytes = 0;
  bool first = true;
  for (size_t bytes = opts_.minBytes; bytes <= opts_.maxBytes;) {
    Sizes sizes = desc_.sizes(ctx, bytes);
    if (first || sizes.bytes != prevBytes) runRow(ctx, sizes);
    first = false;
    prevBytes = sizes.bytes;
    size_t next = opts_.stepBytes ? bytes + opts_.stepBytes : bytes == 0 ? 1 : bytes * opts_.stepFactor;
    if (next <= bytes || (opts_.stepBytes == 0 && bytes != 0 && next / opts_.stepFactor != bytes)) break;  // overflow
    bytes = next;
  }
}

void Bench::runRow(Ctx& ctx, const Sizes& sizes) {
  ctx.count = sizes.count;
  Row row{sizes.bytes, sizes.bytes / ctx.eltSize, ctx.type, desc_.reduces ? opName(ctx.op) : "none", ctx.root, {}};
  size_t oob[2] = {0, 0};
  row.res[0] = measure(ctx, sizes, false, &oob[0]);
  row.res[1] = measure(ctx, sizes, true, &oob[1]);

  // Every rank takes part in the same reductions, so the sequence of collectives matches.
  double times[2] = {row.res[0].timeUs, row.res[1].timeUs};
  if (opts_.average != 0) {
    braidRedOp_t op = opts_.average == 2 ? braidMin : opts_.average == 3 ? braidMax : braidSum;
    PERF_CHECK(braidAllReduce(times, times, 2, braidFloat64, op, comm_, nullptr));
    if (opts_.average == 1) times[0] /= nranks_, times[1] /= nranks_;
  }
  if (opts_.check) {
    uint64_t counts[3] = {static_cast<uint64_t>(row.res[0].wrong), static_cast<uint64_t>(row.res[1].wrong),
                          oob[0] + oob[1]};
    PERF_CHECK(braidAllReduce(counts, counts, 3, braidUint64, braidSum, comm_, nullptr));
    row.res[0].wrong = static_cast<long long>(counts[0]);
    row.res[1].wrong = static_cast<long long>(counts[1]);
    wrongTotal_ += counts[0] + counts[1];
    oobTotal_ += counts[2];
  }
  for (int p = 0; p < 2; ++p) {
    Result& r = row.res[p];
    r.timeUs = times[p];
    r.algbw = r.timeUs > 0 ? static_cast<double>(row.bytes) / (r.timeUs * 1e3) : 0;  // bytes/us/1e3 = GB/s
    r.busbw = r.algbw * desc_.busFactor(nranks_);
  }
  rows_.push_back(row);
  printRow(row);
}

// Times one placement; then, with -c 1, runs once more on fresh inputs and checks this rank's part.
Result Bench::measure(const Ctx& ctx, const Sizes& sizes, bool inPlace, size_t* oob) {
  unsigned char* send = inPlace ? recv_.get() + sizes.inPlaceSendOffset * ctx.eltSize : send_.get();
  unsigned char* recv = inPlace ? recv_.get() + sizes.inPlaceRecvOffset * ctx.eltSize : recv_.get();
  // The calls' buffers: the host ones, or their device copies at the same offsets.
  const void* csend = send;
  void* crecv = recv;
  if (opts_.device) {
    auto* ds = static_cast<unsigned char*>(dsend_);
    auto* dr = static_cast<unsigned char*>(drecv_);
    csend = inPlace ? dr + sizes.inPlaceSendOffset * ctx.eltSize : ds;
    crecv = inPlace ? dr + sizes.inPlaceRecvOffset * ctx.eltSize : dr;
  }
  Result res;
  int iters = opts_.iters, warmup = opts_.warmup;
  if (opts_.budget > 0) budgetIters(opts_.budget, sizes.bytes, &iters, &warmup);
  prepare(ctx, sizes, inPlace, send);
  for (int i = 0; i < warmup; ++i) iterate(ctx, csend, crecv, opts_.agg);
  if (opts_.device) deviceSync(stream_);
  PERF_CHECK(braidBarrier(comm_, nullptr));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) iterate(ctx, csend, crecv, opts_.agg);
  // Device calls return before their data moved: the time ends when the stream has the results.
  if (opts_.device) deviceSync(stream_);
  std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  res.timeUs = elapsed.count() / (static_cast<double>(iters) * opts_.agg);
  if (opts_.check) {
    prepare(ctx, sizes, inPlace, send);
    iterate(ctx, csend, crecv, 1);
    if (opts_.device) deviceDownload(recv_.get(), drecv_, recvBytes_, stream_);
    res.wrong = static_cast<long long>(countWrong(ctx, desc_, recv, sizes.recvElems, inPlace));
    size_t used = inPlace ? std::max(sizes.sendElems, sizes.recvElems) : sizes.recvElems;
    *oob = countGuardDamage(recv_.get(), used * ctx.eltSize);
  }
  return res;
}

// Poisons the receive side (the whole buffer in place) and its guard, then writes this rank's input.
void Bench::prepare(const Ctx& ctx, const Sizes& sizes, bool inPlace, void* send) {
  size_t used = inPlace ? std::max(sizes.sendElems, sizes.recvElems) : sizes.recvElems;
  std::memset(recv_.get(), kPoison, used * ctx.eltSize + kGuardBytes);
  fillInputs(ctx, desc_, send, sizes.sendElems);
  if (opts_.device) {  // the same bytes on the device (in place, the input sits inside recv_)
    deviceUpload(dsend_, send_.get(), sendBytes_, stream_);
    deviceUpload(drecv_, recv_.get(), recvBytes_, stream_);
  }
}

// Posts nops operations, then waits for all of them. Blocking calls are grouped when nops > 1, so
// that they too are issued together.
void Bench::iterate(const Ctx& ctx, const void* send, void* recv, int nops) {
  if (opts_.blocking) {
    // Device calls are not grouped (braid refuses them in a group); they return at once anyway.
    const bool group = nops > 1 && !opts_.device;
    if (group) PERF_CHECK(braidGroupStart());
    for (int k = 0; k < nops; ++k) desc_.post(ctx, send, recv, nullptr);
    if (group) PERF_CHECK(braidGroupEnd());
    return;
  }
  reqs_.clear();
  for (int k = 0; k < nops; ++k) desc_.post(ctx, send, recv, &reqs_);
  PERF_CHECK(braidWaitAll(reqs_.size(), reqs_.data()));
}

void Bench::printRow(const Row& row) const {
  if (rank_ != 0) return;
  std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, typeName(row.type), row.redop, row.root);
  for (const Result& r : row.res) {
    char time[32];
    char wrong[32];
    formatTime(r.timeUs, time, sizeof(time));
    if (r.wrong < 0) {
      std::snprintf(wrong, sizeof(wrong), "N/A");
    } else {
      std::snprintf(wrong, sizeof(wrong), "%lld", r.wrong);
    }
    std::printf("  %7s  %6.2f  %6.2f %6s", time, r.algbw, r.busbw, wrong);
  }
  std::printf("\n");
  std::fflush(stdout);
}

void Bench::writeJson(FILE* f, double avgBusbw) const {
  std::fprintf(f, "{\n  \"benchmark\": %s,\n", jsonString(std::string(desc_.name) + "_perf").c_str());
  std::fprintf(f, "  \"braid_version\": %d,\n  \"nranks\": %d,\n  \"nThread\": 1,\n  \"nGpus\": 1,\n", version_,
               nranks_);
  std::fprintf(f, "  \"minBytes\": %zu,\n  \"maxBytes\": %zu,\n", opts_.minBytes, opts_.maxBytes);
  std::fprintf(f, "  \"step\": %zu,\n  \"step_kind\": \"%s\",\n", opts_.stepBytes ? opts_.stepBytes : opts_.stepFactor,
               opts_.stepBytes ? "bytes" : "factor");
  std::fprintf(f, "  \"warmup_iters\": %d,\n  \"iters\": %d,\n  \"agg_iters\": %d,\n  \"validation\": %d,\n",
               opts_.warmup, opts_.iters, opts_.agg, opts_.check ? 1 : 0);
  std::fprintf(f, "  \"budget_bytes\": %zu,\n", opts_.budget);
  std::fprintf(f, "  \"blocking\": %d,\n  \"time_aggregation\": \"%s\",\n  \"algo\": %s,\n", opts_.blocking ? 1 : 0,
               averageName(opts_.average), jsonString(opts_.algo.empty() ? "default" : opts_.algo).c_str());
  std::fprintf(f, "  \"devices\": [");
  for (int r = 0; r < nranks_; ++r) {
    std::fprintf(f, "%s\n    {\"rank\": %d, \"pid\": %lld, \"host\": %s}", r ? "," : "", r,
                 static_cast<long long>(devices_[r].pid), jsonString(devices_[r].host).c_str());
  }
  std::fprintf(f, "\n  ],\n  \"results\": [");
  const char* prefix[2] = {"oop", "ip"};
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& row = rows_[i];
    std::fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d",
                 i ? "," : "", row.bytes, row.count, typeName(row.type), row.redop, row.root);
    for (int p = 0; p < 2; ++p) {
      const Result& r = row.res[p];
      std::string wrong = r.wrong < 0 ? "null" : std::to_string(r.wrong);
      std::fprintf(f, ", \"%s_time_us\": %.3f, \"%s_algbw_GBps\": %.4f, \"%s_busbw_GBps\": %.4f, \"%s_wrong\": %s",
                   prefix[p], r.timeUs, prefix[p], r.algbw, prefix[p], r.busbw, prefix[p], wrong.c_str());
    }
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  \"out_of_bounds\": %llu,\n  \"wrong_total\": %llu,\n  \"avg_busbw_GBps\": %.4f\n}\n",
               oobTotal_, wrongTotal_, avgBusbw);
}

}  // namespace

braidRequest_t* Requests::add() {
  reqs_.push_back(nullptr);
  return &reqs_.back();
}

double copyValue(uint64_t stream, size_t index) {
  return static_cast<double>((stream % 101 * 37 + index % 101 * 11 + 5) % 101);
}

double reduceInput(const Ctx& ctx, int rank, size_t index) {
  const auto r = static_cast<size_t>(rank);
  switch (ctx.op) {
    case braidProd:
      return (r + index) % static_cast<size_t>(ctx.nranks) < index % 4 ? 2 : 1;
    case braidMin:
    case braidMax:
      return static_cast<double>(1 + (r % 100 * 13 + index % 100 * 7) % 100);
    default:
      return static_cast<double>(1 + (r + index) % 3);
  }
}

double reduceExpected(const Ctx& ctx, size_t index) {
  const auto n = static_cast<size_t>(ctx.nranks);
  if (ctx.op == braidProd) return static_cast<double>(size_t{1} << std::min(index % 4, n));  // one 2 per rank
  if (ctx.op == braidMin || ctx.op == braidMax) {
    double best = reduceInput(ctx, 0, index);
    for (int r = 1; r < ctx.nranks && r < 100; ++r) {  // 13 is prime to 100: 100 ranks see every value
      double v = reduceInput(ctx, r, index);
      best = ctx.op == braidMin ? std::min(best, v) : std::max(best, v);
    }
    return best;
  }
  // Sum of 1 + (r + index) % 3 over r < n: whole cycles of 1+2+3, then the first n % 3 of the next.
  double sum = static_cast<double>(6 * (n / 3));
  for (size_t k = 0; k < n % 3; ++k) sum += static_cast<double>(1 + (index + k) % 3);
  if (ctx.op != braidAvg) return sum;
  double avg = sum / static_cast<double>(n);
  return typeIsFloat(ctx.type) ? avg : static_cast<double>(static_cast<int64_t>(avg));  // ints truncate
}

void failCall(braidResult_t result, const char* expr) {
  const char* paren = std::strchr(expr, '(');
  int nameLen = paren ? static_cast<int>(paren - expr) : static_cast<int>(std::strlen(expr));
  std::string last = braidGetLastError();  // read before the abort below can replace it
  if (g_rank >= 0) {
    std::fprintf(stderr, "rank %d: %.*s failed: %s: %s\n", g_rank, nameLen, expr, braidGetErrorString(result),
                 last.c_str());
  } else {
    std::fprintf(stderr, "rank ?: %.*s failed: %s: %s\n", nameLen, expr, braidGetErrorString(result), last.c_str());
  }
  if (g_comm != nullptr) braidCommAbort(g_comm);
  std::exit(1);
}

int benchMain(int argc, char** argv, const CollDesc& desc) {
  Options opts = parseOptions(argc, argv);
  Bench bench(opts, desc);
  return bench.run();
}

}  // namespace braid::perf
