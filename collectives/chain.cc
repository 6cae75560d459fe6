// Chain builders: broadcast down the chain root → root+1 → … and reduce up it. The executor
// pipelines a chain at element granularity, so its latency is about one hop per rank plus the
// time of one pass over the data.
#include "collectives/builders.h"

namespace loom::collectives {

namespace {

struct ChainPosition {
  int pos;   // distance from the root along the chain
  int next;  // the rank after this one (away from the root)
  int prev;  // the rank before this one (toward the root)
};

ChainPosition chainPosition(const CollArgs& a, int rank) {
  const int n = a.nranks;
  return {wrap(rank - a.root, n), wrap(rank + 1, n), wrap(rank - 1, n)};
}

int chainLanes(const CollArgs& a) { return usableLanes(a.count, 1, a.nranks == 1 ? 1 : a.lanes); }

}  // namespace

RankPlan buildChainBroadcast(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const ChainPosition c = chainPosition(a, rank);
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    const Region in{kInput, base, len}, out{kOutput, base, len};
    if (c.pos == 0) {
      // The root forwards from Input so that its send need not wait for its own copy.
      if (n > 1) addSend(lane, c.next, in);
      return addCopy(lane, in, out);
    }
    addRecv(lane, c.prev, out);
    if (c.pos + 1 < n) addSend(lane, c.next, out);
  };
  return splitIntoLanes("chain", a.count, chainLanes(a), fill);
}

RankPlan buildChainReduce(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const ChainPosition c = chainPosition(a, rank);
  const bool between = c.pos > 0 && c.pos + 1 < n;
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    const Region in{kInput, base, len};
    if (n == 1) return addCopy(lane, in, {kOutput, base, len});
    if (c.pos + 1 == n) return addSend(lane, c.prev, in);  // the far end starts the sum
    // NCCL ignores recvbuff on non-roots, so they keep their partial sums in scratch.
    const Region acc = between ? Region{kScratch, base, len} : Region{kOutput, base, len};
    addRecvReduce(lane, c.next, in, acc);
    if (between) addSend(lane, c.prev, acc);
  };
  RankPlan plan = splitIntoLanes("chain", a.count, chainLanes(a), fill);
  plan.scratchCount = between ? a.count : 0;
  return plan;
}

}  // namespace loom::collectives
