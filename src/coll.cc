#include "src/coll.h"

#include <cstring>

namespace braid {

const char* collName(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "AllReduce";
    case Coll::kBroadcast:
      return "Broadcast";
    case Coll::kReduce:
      return "Reduce";
    case Coll::kAllGather:
      return "AllGather";
    case Coll::kReduceScatter:
      return "ReduceScatter";
    case Coll::kAllToAll:
      return "AllToAll";
    case Coll::kSendRecv:
      return "SendRecv";
    case Coll::kBarrier:
      return "Barrier";
    case Coll::kGather:
      return "Gather";
    case Coll::kScatter:
      return "Scatter";
  }
  return "?";
}

namespace {
constexpr const char* kAlgoNames[kNumAlgos] = {"ring",         "tree",   "rabenseifner", "recursive_doubling",
                                               "hierarchical", "gossip", "linear"};
}

const char* algoName(Algo a) {
  int i = static_cast<int>(a);
  return i >= 0 && i < kNumAlgos ? kAlgoNames[i] : "?";
}

const char* algoNameFor(Coll c, Algo a) {
  if (c == Coll::kAllToAll) return a == Algo::kRecursiveDoubling ? "bruck" : "pairwise";
  if (c == Coll::kBarrier) return "dissemination";
  return algoName(a);
}

bool parseAlgo(const char* name, Algo* out) {
  for (int i = 0; i < kNumAlgos; ++i) {
    if (strcmp(name, kAlgoNames[i]) == 0) {
      *out = static_cast<Algo>(i);
      return true;
    }
  }
  return false;
}

bool algoAvailable(Coll coll, Algo a) {
  switch (coll) {
    case Coll::kAllReduce:
      return a != Algo::kLinear;
    case Coll::kBroadcast:
    case Coll::kReduce:
      return a == Algo::kRing || a == Algo::kTree;
    case Coll::kAllGather:  // recursive_doubling: the gathered blocks doubling each round (Bruck's)
      return a == Algo::kRing || a == Algo::kLinear || a == Algo::kRecursiveDoubling;
    case Coll::kReduceScatter:
      return a == Algo::kRing || a == Algo::kRabenseifner;  // rabenseifner: its recursive-halving half
    case Coll::kAllToAll:  // ring: the pairwise exchange; recursive_doubling: Bruck's
      return a == Algo::kRing || a == Algo::kRecursiveDoubling;
    case Coll::kBarrier:
    case Coll::kSendRecv:
      return a == Algo::kRing;
    case Coll::kGather:
    case Coll::kScatter:
      return a == Algo::kLinear || a == Algo::kTree;
  }
  return false;
}

}  // namespace braid
