// What a joining rank reads from rank 0 after its hello: a welcome, then the rank table or a
// refusal. Input: one byte choosing the rank count the joiner expects (1..16), the 8-byte header,
// then the body.
#include <cstring>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "src/wire.h"

using namespace braid;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 + sizeof(TableHeader)) return 0;
  const int nranks = 1 + data[0] % 16;
  RootFrame kind;
  size_t bodyBytes = 0;
  if (!decodeRootHeader(data + 1, sizeof(TableHeader), nranks, &kind, &bodyBytes).ok()) return 0;
  const uint8_t* body = data + 1 + sizeof(TableHeader);
  const size_t got = size - 1 - sizeof(TableHeader);
  switch (kind) {
    case RootFrame::kWelcome:
      fuzz::require(bodyBytes == 0);
      return 0;
    case RootFrame::kRefusal:
      fuzz::require(bodyBytes <= kMaxCtrlText);
      return 0;
    case RootFrame::kTable:
      break;
  }
  fuzz::require(bodyBytes == sizeof(PeerInfo) * nranks);
  std::vector<PeerInfo> table;
  if (!decodeTableBody(body, got, nranks, &table).ok()) return 0;
  fuzz::require(table.size() == static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    fuzz::require(table[r].rank == r);
    fuzz::require(strnlen(table[r].hostname, sizeof(table[r].hostname)) < sizeof(table[r].hostname));
    fuzz::require(strnlen(table[r].hostId, sizeof(table[r].hostId)) < sizeof(table[r].hostId));
  }
  return 0;
}
