// braid-topo: shows the machine as braid sees it (tree, GPU/NIC matrix, what detection could not
// find), as JSON or Graphviz, and writes or reads topology files (topology/FORMAT.md) so that a
// machine we do not have can be inspected and planned for.
//
// main() parses the command line into Options and dispatches to one run* function per mode; --plan
// and --config print through tools/braid_topo_plan.cc.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "src/base/config.h"
#include "tools/braid_topo_plan.h"
#include "topology/topology.h"

namespace braid::topo {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // detection or a write failed
constexpr int kExitUsage = 2;   // bad option, unreadable or malformed file

const char kUsage[] =
    "usage: braid-topo [options]\n"
    "Shows this machine as braid sees it: the hardware tree, the GPU/NIC connectivity matrix and\n"
    "what detection could not find.\n"
    "  --load FILE     read a topology file (topology/FORMAT.md) instead of detecting\n"
    "  --dump FILE     write the machine, with the cost constants in effect, to FILE\n"
    "  --json          print the machine as JSON instead of text\n"
    "  --dot           print the machine as a Graphviz digraph instead of text\n"
    "  --plan          the algorithm the selector picks per size for a cluster, its predicted time and\n"
    "                  busbw, and the runner-up (--ranks N [--hosts H] [--coll C]; BRAID_ALGO applies)\n"
    "  --fifo-from B   with --plan --ranks: every host's ranks receive through shm FIFOs with two copies\n"
    "                  for calls with more than B bytes of buffers on the host (0: single copy off; the\n"
    "                  single-copy cut where it is on), as a communicator's links tell it\n"
    "  --config        list every BRAID_* variable with its default and help\n"
    "  -h, --help      this text\n"
    "Exit status: 0 ok, 1 detection or writing failed, 2 bad usage or unreadable/malformed file.\n";

enum class Mode { kShow, kJson, kDot, kPlan, kConfig, kHelp };

struct Options {
  Mode mode = Mode::kShow;
  std::string load;  // --load FILE: the machine comes from this file
  std::string dump;  // --dump FILE
  // --plan (the lead's): the cluster to plan for. 0 = not given.
  int ranks = 0;
  int hosts = 0;
  std::string coll;
  const char* fifoFrom = nullptr;  // --fifo-from BYTES
};

// Fails with a message on stderr naming the problem; true on success.
bool parseInt(const char* opt, const char* s, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < 1 || v > (1 << 24)) {
    fprintf(stderr, "braid-topo: %s wants a positive integer, got '%s'\n", opt, s);
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool setMode(Options* o, Mode m, const char* opt) {
  if (o->mode != Mode::kShow && o->mode != m) {
    fprintf(stderr, "braid-topo: %s cannot be combined with the other output options\n", opt);
    return false;
  }
  o->mode = m;
  return true;
}

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](const char** v) {
      if (i + 1 >= argc) {
        fprintf(stderr, "braid-topo: %s wants a value\n", argv[i]);
        return false;
      }
      *v = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") {
      o->mode = Mode::kHelp;
      return true;
    } else if (a == "--json") {
      if (!setMode(o, Mode::kJson, argv[i])) return false;
    } else if (a == "--dot") {
      if (!setMode(o, Mode::kDot, argv[i])) return false;
    } else if (a == "--plan") {
      if (!setMode(o, Mode::kPlan, argv[i])) return false;
    } else if (a == "--config") {
      if (!setMode(o, Mode::kConfig, argv[i])) return false;
    } else if (a == "--load") {
      if (!value(&v)) return false;
      o->load = v;
    } else if (a == "--dump") {
      if (!value(&v)) return false;
      o->dump = v;
    } else if (a == "--ranks") {
      if (!value(&v) || !parseInt("--ranks", v, &o->ranks)) return false;
    } else if (a == "--hosts") {
      if (!value(&v) || !parseInt("--hosts", v, &o->hosts)) return false;
    } else if (a == "--fifo-from") {
      if (!value(&v)) return false;
      o->fifoFrom = v;
    } else if (a == "--coll") {
      if (!value(&v)) return false;
      o->coll = v;
    } else {
      fprintf(stderr, "braid-topo: unknown option '%s' (try --help)\n", argv[i]);
      return false;
    }
  }
  if (o->mode != Mode::kPlan && (o->ranks || o->hosts || !o->coll.empty() || o->fifoFrom != nullptr)) {
    fprintf(stderr, "braid-topo: --ranks, --hosts, --coll and --fifo-from go with --plan\n");
    return false;
  }
  if (o->fifoFrom != nullptr && o->ranks == 0) {
    fprintf(stderr, "braid-topo: --fifo-from goes with --ranks (a loaded cluster line says it with fifo_from=)\n");
    return false;
  }
  return true;
}

// The machine to show: loaded (with the file's cost and cluster) or detected. The cost in effect is
// the file's cost line, else CostParams::defaults(), then BRAID_COST_* overrides either way.
// Returns an exit status.
int loadOrDetect(const Options& o, TopoFile* f) {
  if (!o.load.empty()) {
    Status s = loadTopoFile(o.load, f);
    if (!s.ok()) {
      fprintf(stderr, "braid-topo: %s\n", s.message().c_str());
      return kExitUsage;
    }
  } else {
    Status s = detectMachine(&f->machine);
    if (!s.ok()) {
      fprintf(stderr, "braid-topo: detecting this machine: %s\n", s.message().c_str());
      return kExitFailed;
    }
    f->comments = {" braid-topo --dump of host " + f->machine.hostname + "; format: topology/FORMAT.md"};
  }
  if (!f->hasCost) f->cost = CostParams::defaults();
  f->hasCost = true;
  Status s = f->cost.applyEnv();
  if (!s.ok()) {
    fprintf(stderr, "braid-topo: %s\n", s.message().c_str());
    return kExitUsage;
  }
  return kExitOk;
}

int runShow(const TopoFile& f) {
  const Machine& m = f.machine;
  std::string out = renderTree(m) + "\n" + renderMatrix(m);
  if (!m.missing.empty()) {
    out += "\nmissing:\n";
    for (const std::string& s : m.missing) out += "  " + s + "\n";
  }
  fputs(out.c_str(), stdout);
  return kExitOk;
}

// --plan --ranks N [--hosts H] [--coll C]: what the selector picks at each size for that cluster of
// this (or the loaded) machine, with the same cost constants and BRAID_ALGO the library would use.
// Without --ranks, a loaded file's cluster line gives the cluster.
int runPlan(const Options& o, const TopoFile& f) {
  ClusterShape cluster;
  if (o.ranks > 0) {
    cluster = ClusterShape::blocks(o.ranks, o.hosts > 0 ? o.hosts : 1, f.machine.cores);
    if (o.fifoFrom != nullptr) {
      uint64_t from = 0;
      // A byte count as a file's fifo_from= entry takes it; "-" (never) is what leaving it out says.
      if (!ClusterShape::parseTwoCopiesFrom(o.fifoFrom, &from) || from == ClusterShape::kNever) {
        fprintf(stderr, "braid-topo: --fifo-from wants a byte count below 2^64 - 1, got '%s'\n", o.fifoFrom);
        return kExitUsage;
      }
      cluster.hostTwoCopiesFrom.assign(cluster.nhosts, from);
    }
  } else if (f.hasCluster) {
    cluster = f.cluster;
  } else {
    fprintf(stderr, "braid-topo: --plan wants --ranks N (or --load a file with a cluster line)\n");
    return kExitUsage;
  }
  // The spellings a communicator accepts ("off" was read as on here).
  bool approx = false;
  Status s = paramBool("BRAID_APPROXIMATE", &approx);
  if (!s.ok()) {
    fprintf(stderr, "braid-topo: %s\n", s.message().c_str());
    return kExitUsage;
  }
  return tools::printPlan(cluster, f.cost, o.coll.empty() ? "allreduce" : o.coll, paramString("BRAID_ALGO"), approx);
}

int runConfig(const Options&) { return tools::printConfig(); }

int run(int argc, char** argv) {
  Options o;
  if (!parseOptions(argc, argv, &o)) return kExitUsage;
  if (o.mode == Mode::kHelp) {
    fputs(kUsage, stdout);
    return kExitOk;
  }
  if (o.mode == Mode::kConfig) return runConfig(o);
  TopoFile f;
  if (int rc = loadOrDetect(o, &f); rc != kExitOk) return rc;
  if (!o.dump.empty()) {
    Status s = dumpTopoFile(o.dump, f);
    if (!s.ok()) {
      fprintf(stderr, "braid-topo: %s\n", s.message().c_str());
      return kExitFailed;
    }
    fprintf(stderr, "braid-topo: wrote %s (%zu nodes)\n", o.dump.c_str(), f.machine.nodes.size());
  }
  switch (o.mode) {
    case Mode::kJson:
      fputs(renderJson(f).c_str(), stdout);
      return kExitOk;
    case Mode::kDot:
      fputs(renderDot(f.machine).c_str(), stdout);
      return kExitOk;
    case Mode::kPlan:
      return runPlan(o, f);
    case Mode::kShow:
      return o.dump.empty() ? runShow(f) : kExitOk;  // --dump alone only writes
    default:
      return kExitOk;
  }
}

}  // namespace
}  // namespace braid::topo

int main(int argc, char** argv) { return braid::topo::run(argc, argv); }
