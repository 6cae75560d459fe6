// Broadcast and reduce builders beyond the chain: a pipelined binary tree for both, scatter +
// allgather broadcast and reduce-scatter + gather reduce for large messages
// (collectives/builders_exchange.h states each one's cost).
#include "collectives/builders.h"
#include "collectives/builders_exchange.h"

namespace loom::collectives {

namespace {

// Binary tree over places: parent (v−1)/2, children 2v+1 and 2v+2 (those below N).
struct TreePlace : Rooted {
  int children[2] = {-1, -1};
  int childCount = 0;
  TreePlace(const CollArgs& a, int rank) : Rooted(a, rank) {
    for (int c : {2 * v + 1, 2 * v + 2}) {
      if (c < n) children[childCount++] = rankAt(c);
    }
  }
  int parent() const { return rankAt((v - 1) / 2); }
};

int treeLanes(const CollArgs& a) { return usableLanes(a.count, 1, a.nranks == 1 ? 1 : a.lanes); }

// Parts [from, to) of the buffer cut into N parts, in place order: one contiguous region.
Region parts(uint32_t buf, const CollArgs& a, int from, int to) {
  const uint64_t n = uint64_t(a.nranks), begin = partOffset(a.count, n, uint64_t(from));
  return {buf, begin, partOffset(a.count, n, uint64_t(to)) - begin};
}
Region part(uint32_t buf, const CollArgs& a, int p) { return parts(buf, a, p, p + 1); }

RankPlan singleCopy(const char* algorithm, const CollArgs& a) {
  RankPlan plan;
  plan.algorithm = algorithm;
  plan.lanes.resize(1);
  addCopy(plan.lanes[0], {kInput, 0, a.count}, {kOutput, 0, a.count});
  return plan;
}

}  // namespace

RankPlan buildTreeBroadcast(const CollArgs& a, int rank) {
  const TreePlace t(a, rank);
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    const Region in{kInput, base, len}, out{kOutput, base, len};
    if (t.v != 0) addRecv(lane, t.parent(), out);
    // The root forwards from Input so that its sends need not wait for its own copy.
    for (int i = 0; i < t.childCount; ++i) addSend(lane, t.children[i], t.v == 0 ? in : out);
    if (t.v == 0) addCopy(lane, in, out);
  };
  return splitIntoLanes("tree", a.count, treeLanes(a), fill);
}

RankPlan buildTreeReduce(const CollArgs& a, int rank) {
  if (a.nranks == 1) return singleCopy("tree", a);
  const TreePlace t(a, rank);
  // NCCL ignores recvbuff on non-roots, so they keep their partial sums in scratch.
  const uint32_t accBuf = t.v == 0 ? kOutput : kScratch;
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    const Region in{kInput, base, len}, acc{accBuf, base, len};
    if (t.childCount == 0) return addSend(lane, t.parent(), in);
    addRecvReduce(lane, t.children[0], in, acc);
    if (t.childCount == 2) addRecvReduce(lane, t.children[1], acc, acc);
    if (t.v != 0) addSend(lane, t.parent(), acc);
  };
  RankPlan plan = splitIntoLanes("tree", a.count, treeLanes(a), fill);
  plan.scratchCount = t.v != 0 && t.childCount > 0 ? a.count : 0;
  return plan;
}

RankPlan buildScatterAllgatherBroadcast(const CollArgs& a, int rank) {
  if (a.nranks == 1) return singleCopy("scatter_allgather", a);
  const Rooted t(a, rank);
  const int n = t.n, v = t.v;
  RankPlan plan;
  plan.algorithm = "scatter_allgather";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  const uint32_t src = v == 0 ? kInput : kOutput;
  // Binomial scatter: place v receives parts [v, v + low(v)) from v − low(v) and hands the
  // upper halves of that range on, largest first.
  auto low = [&](int place) { return binomialSpan(place, n); };
  const int mine = low(v);
  if (v != 0) addRecv(lane, t.rankAt(v - mine), parts(kOutput, a, v, std::min(v + mine, n)));
  for (int m = mine / 2; m >= 1; m >>= 1) {
    if (v + m < n) addSend(lane, t.rankAt(v + m), parts(src, a, v + m, std::min(v + 2 * m, n)));
  }
  // Chain allgather 0 → 1 → … → N−1: at step s place v passes part v − s on; a place skips
  // the parts its scatter range already gave it (its predecessor knows that range too).
  auto has = [&](int place, int p) { return p >= place && p < std::min(place + low(place), n); };
  for (int s = 0; s + 1 < n; ++s) {
    const int out = wrap(v - s, n), in = wrap(v - s - 1, n);
    if (v + 1 < n && !has(v + 1, out)) addSend(lane, t.rankAt(v + 1), part(src, a, out));
    if (v != 0 && !has(v, in)) addRecv(lane, t.rankAt(v - 1), part(kOutput, a, in));
  }
  if (v == 0) addCopy(lane, {kInput, 0, a.count}, {kOutput, 0, a.count});
  return plan;
}

RankPlan buildRsagReduce(const CollArgs& a, int rank) {
  if (a.nranks == 1) return singleCopy("rsag", a);
  const Rooted t(a, rank);
  const int n = t.n, v = t.v;
  RankPlan plan;
  plan.algorithm = "rsag";
  plan.lanes.resize(1);
  plan.scratchCount = v == 0 ? 0 : a.count;
  Lane& lane = plan.lanes[0];
  const uint32_t acc = v == 0 ? kOutput : kScratch;
  // Ring reduce-scatter in place order: at step s place v passes the partial sum of part
  // v − s − 1 on and adds its Input to the partial sum of part v − s − 2; the last one it
  // completes is its own part v.
  for (int s = 0; s + 1 < n; ++s) {
    const int out = wrap(v - s - 1, n), in = wrap(v - s - 2, n);
    addSend(lane, t.rankAt(v + 1), part(s == 0 ? kInput : acc, a, out));
    addRecvReduce(lane, t.rankAt(v - 1), part(kInput, a, in), part(acc, a, in));
  }
  if (v != 0) {
    addSend(lane, t.rankAt(0), part(acc, a, v));
  } else {
    for (int p = 1; p < n; ++p) addRecv(lane, t.rankAt(p), part(kOutput, a, p));
  }
  return plan;
}

}  // namespace loom::collectives
