// Ring builders: allreduce, allgather, reduce-scatter. Each lane is a full ring over its own
// part of the data; rank r sends to r+1 and receives from r−1.
#include "collectives/builders.h"

namespace loom::collectives {

namespace {

// One reduce-scatter pass around the ring: at step s a rank sends chunk first−s and combines
// chunk first−s−1, arriving from its predecessor, with its own contribution. in(c) is this
// rank's contribution to chunk c; acc(s, c) is where the sum received at step s is stored (and
// read again at step s+1, to pass it on). After the last step acc holds chunk first+1 summed
// over all ranks. Step 0 sends straight from in(), so nothing is copied first.
template <typename In, typename Acc>
void reduceScatterPass(Lane& lane, int n, int rank, int first, In in, Acc acc) {
  const int next = wrap(rank + 1, n), prev = wrap(rank - 1, n);
  for (int s = 0; s + 1 < n; ++s) {
    addSend(lane, next, s == 0 ? in(wrap(first, n)) : acc(s - 1, wrap(first - s, n)));
    const int c = wrap(first - s - 1, n);
    addRecvReduce(lane, prev, in(c), acc(s, c));
  }
}

// One allgather pass around the ring: this rank holds chunk `first` (in `own`) and, at step s,
// passes chunk first−s on and receives chunk first−s−1 into out(c).
template <typename Out>
void allGatherPass(Lane& lane, int n, int rank, int first, Region own, Out out) {
  const int next = wrap(rank + 1, n), prev = wrap(rank - 1, n);
  for (int s = 0; s + 1 < n; ++s) {
    addSend(lane, next, s == 0 ? own : out(wrap(first - s, n)));
    addRecv(lane, prev, out(wrap(first - s - 1, n)));
  }
}

// Lanes help only when several ranks share the work; a lone rank just copies.
int laneHint(const CollArgs& a) { return a.nranks == 1 ? 1 : a.lanes; }

}  // namespace

RankPlan buildRingAllReduce(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const int lanes = usableLanes(a.count, uint64_t(n), laneHint(a));
  return splitIntoLanes("ring", a.count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    auto chunkOf = [=](uint32_t buf) {
      return [=](int c) { return Region{buf, base + partOffset(len, n, c), partCount(len, n, c)}; };
    };
    const auto in = chunkOf(kInput);
    const auto out = chunkOf(kOutput);
    if (n == 1) return addCopy(lane, in(0), out(0));
    // Partial sums land in Output chunk c only when Input chunk c is read for the last time
    // (by that same RecvReduce), which keeps the plan correct when Input and Output alias.
    reduceScatterPass(lane, n, rank, rank, in, [&](int, int c) { return out(c); });
    allGatherPass(lane, n, rank, rank + 1, out(wrap(rank + 1, n)), out);
  });
}

RankPlan buildRingAllGather(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const uint64_t count = a.count;
  const int lanes = usableLanes(count, 1, laneHint(a));
  return splitIntoLanes("ring", count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    auto block = [&](int c) { return Region{kOutput, uint64_t(c) * count + base, len}; };
    const Region own{kInput, base, len};
    addCopy(lane, own, block(rank));  // the executor skips it in place
    allGatherPass(lane, n, rank, rank, own, block);
  });
}

RankPlan buildRingReduceScatter(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const uint64_t count = a.count;
  const int lanes = usableLanes(count, 1, laneHint(a));
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    auto in = [&](int c) { return Region{kInput, uint64_t(c) * count + base, len}; };
    const Region result{kOutput, base, len};
    if (n == 1) return addCopy(lane, in(0), result);
    // Two scratch slots per lane: the sum received at step s is forwarded at step s+1, so the
    // slot written at s+2 is free once that send is done. Starting the pass at r−1 makes the
    // last step complete chunk r, which goes straight to Output; that step is also the only
    // reader of Input block r, so Output may alias it.
    auto acc = [&](int s, int) {
      return s == n - 2 ? result : Region{kScratch, 2 * base + uint64_t(s % 2) * len, len};
    };
    reduceScatterPass(lane, n, rank, rank - 1, in, acc);
  };
  RankPlan plan = splitIntoLanes("ring", count, lanes, fill);
  plan.scratchCount = n > 2 ? 2 * count : 0;
  return plan;
}

}  // namespace loom::collectives
