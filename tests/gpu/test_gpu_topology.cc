// Topology detection on a machine with GPUs: every CUDA device is a GPU node whose index is its CUDA
// ordinal, whose bus id is CUDA's, and whose memory and name are CUDA's; NVLinks join GPUs only, and
// a dump and load of the machine keeps all of it. Skipped where no GPU is present.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <string>

#include "tests/gpu/gpu_test.h"
#include "topology/topology.h"

namespace braid {
namespace {

using namespace gputest;

std::string lowerBusId(int device) {
  char buf[32] = {};
  REQUIRE(cudaDeviceGetPCIBusId(buf, sizeof(buf), device) == cudaSuccess);
  std::string s(buf);
  for (char& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST_CASE("topology: every CUDA device is a GPU node with CUDA's ordinal, bus id, name and memory", "[gpu][topology]") {
  if (noGpu()) return;
  topo::Machine m;
  REQUIRE(topo::detectMachine(&m).ok());
  REQUIRE(m.count(topo::NodeKind::kGpu) >= gpuDeviceCount());
  for (int d = 0; d < gpuDeviceCount(); ++d) {
    INFO("CUDA device " << d);
    cudaDeviceProp p{};
    REQUIRE(cudaGetDeviceProperties(&p, d) == cudaSuccess);
    const topo::Node* g = nullptr;
    for (const topo::Node& n : m.nodes)
      if (n.kind == topo::NodeKind::kGpu && n.index == d) g = &n;
    REQUIRE(g != nullptr);
    CHECK(g->busId == lowerBusId(d));
    CHECK(g->name == std::string(p.name));
    CHECK(g->bytes == p.totalGlobalMem);
  }
  for (const topo::Link& l : m.links) {
    if (l.kind != topo::LinkKind::kNvlink) continue;
    CHECK(m.nodes[l.a].kind == topo::NodeKind::kGpu);
    CHECK(m.nodes[l.b].kind == topo::NodeKind::kGpu);
    CHECK(l.count > 0);
  }
  // The dump keeps what CUDA added.
  topo::TopoFile f;
  f.machine = m;
  topo::TopoFile back;
  REQUIRE(topo::parseTopoFile(topo::formatTopoFile(f), "dump", &back).ok());
  REQUIRE(back.machine.nodes.size() == m.nodes.size());
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    CHECK(back.machine.nodes[i].busId == m.nodes[i].busId);
    CHECK(back.machine.nodes[i].bytes == m.nodes[i].bytes);
  }
  CHECK(back.machine.links.size() == m.links.size());
}

}  // namespace
}  // namespace braid
