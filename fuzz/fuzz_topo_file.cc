// The topology file parser (BRAID_TOPO_FILE, braid-topo --load). What parses must format back to
// text that parses again to the same text (dump and load are inverse).
#include <string>
#include <string_view>

#include "fuzz/fuzz_common.h"
#include "topology/topology.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  topo::TopoFile f;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!topo::parseTopoFile(text, "fuzz", &f).ok()) return 0;
  const std::string once = topo::formatTopoFile(f);
  topo::TopoFile g;
  fuzz::require(topo::parseTopoFile(once, "fuzz (formatted)", &g).ok());
  fuzz::require(topo::formatTopoFile(g) == once);
  return 0;
}
