// Gather and scatter: linear (the root exchanges with every rank, for large messages) and
// binomial trees (⌈log2 N⌉ rounds, for small ones); collectives/builders_exchange.h states
// each one's cost.
#include <algorithm>

#include "collectives/builders.h"
#include "collectives/builders_exchange.h"

namespace loom::collectives {

namespace {

// Elements [base, base + len) of block j of the root's buffer (rank j's part).
Region block(uint32_t buf, const CollArgs& a, int j, uint64_t base, uint64_t len) {
  return {buf, uint64_t(j) * a.count + base, len};
}

int linearLanes(const CollArgs& a) {
  return usableLanes(a.count, 1, a.nranks == 1 ? 1 : a.lanes);
}

// A place in the binomial tree (binomialSpan): its subtree holds `size` places from v, whose
// blocks of c elements an inner non-root holds in Scratch in place order.
struct TreePlace : Rooted {
  int span, size;
  uint64_t c;
  TreePlace(const CollArgs& a, int rank)
      : Rooted(a, rank), span(binomialSpan(v, n)), size(std::min(span, n - v)), c(a.count) {}
  int parent() const { return rankAt(v - span); }
  bool leaf() const { return size == 1; }
  // Places [from, to) after v in Scratch.
  Region held(int from, int to) const {
    return {kScratch, uint64_t(from) * c, uint64_t(to - from) * c};
  }
  // The children's offsets m (child place v + m, subtree [v + m, v + min(2m, size))), largest
  // subtree first or last.
  template <typename F>
  void children(bool largestFirst, F f) const {
    for (int m = largestFirst ? span / 2 : 1; m >= 1 && m < span;
         m = largestFirst ? m / 2 : 2 * m)
      if (m < size) f(m, std::min(2 * m, size));
  }
  // The runs of places [from, to) (offsets from v) that are contiguous in rank order: one, or
  // two when the range holds place N − root (rank 0) past its start. f(first, end) for each.
  template <typename F>
  void rankRuns(int from, int to, F f) const {
    const int cut = n - root - v;  // rank 0's offset from v (≥ N − v when root = 0)
    if (from < cut && cut < to) {
      f(from, cut);
      f(cut, to);
    } else {
      f(from, to);
    }
  }
};

using Exchange = void (*)(Lane&, int, Region);  // addSend or addRecv

// The root's messages with its children: each child's range of blocks of `buf` (in rank
// order), one message per run.
void rootWithChildren(Lane& lane, const TreePlace& t, const CollArgs& a, uint32_t buf,
                      bool largestFirst, Exchange exchange) {
  t.children(largestFirst, [&](int m, int end) {
    t.rankRuns(m, end, [&](int from, int to) {
      exchange(lane, t.rankAt(m), block(buf, a, t.rankAt(from), 0, uint64_t(to - from) * t.c));
    });
  });
}

// An inner non-root's message with its parent: its whole subtree in Scratch, as runs when the
// parent is the root (which has no Scratch: the blocks land in its buffer in rank order).
void withParent(Lane& lane, const TreePlace& t, Exchange exchange) {
  if (t.v - t.span != 0) return exchange(lane, t.parent(), t.held(0, t.size));
  t.rankRuns(0, t.size, [&](int from, int to) { exchange(lane, t.parent(), t.held(from, to)); });
}

RankPlan treePlan(const TreePlace& t) {
  RankPlan plan;
  plan.algorithm = "tree";
  plan.lanes.resize(1);
  plan.scratchCount = t.v != 0 && !t.leaf() ? uint64_t(t.size) * t.c : 0;
  return plan;
}

}  // namespace

RankPlan buildLinearGather(const CollArgs& a, int rank) {
  const Rooted t(a, rank);
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    if (t.v != 0) return addSend(lane, a.root, {kInput, base, len});
    for (int p = 1; p < t.n; ++p)
      addRecv(lane, t.rankAt(p), block(kOutput, a, t.rankAt(p), base, len));
    addCopy(lane, {kInput, base, len}, block(kOutput, a, rank, base, len));
  };
  return splitIntoLanes("linear", a.count, linearLanes(a), fill);
}

RankPlan buildLinearScatter(const CollArgs& a, int rank) {
  const Rooted t(a, rank);
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    if (t.v != 0) return addRecv(lane, a.root, {kOutput, base, len});
    for (int p = 1; p < t.n; ++p)
      addSend(lane, t.rankAt(p), block(kInput, a, t.rankAt(p), base, len));
    addCopy(lane, block(kInput, a, rank, base, len), {kOutput, base, len});
  };
  return splitIntoLanes("linear", a.count, linearLanes(a), fill);
}

RankPlan buildTreeGather(const CollArgs& a, int rank) {
  const TreePlace t(a, rank);
  const uint64_t c = a.count;
  RankPlan plan = treePlan(t);
  Lane& lane = plan.lanes[0];
  if (t.v == 0) {
    rootWithChildren(lane, t, a, kOutput, false, addRecv);
    addCopy(lane, {kInput, 0, c}, block(kOutput, a, rank, 0, c));
  } else if (t.leaf()) {
    addSend(lane, t.parent(), {kInput, 0, c});
  } else {
    addCopy(lane, {kInput, 0, c}, t.held(0, 1));
    t.children(false, [&](int m, int end) { addRecv(lane, t.rankAt(t.v + m), t.held(m, end)); });
    withParent(lane, t, addSend);
  }
  return plan;
}

RankPlan buildTreeScatter(const CollArgs& a, int rank) {
  const TreePlace t(a, rank);
  const uint64_t c = a.count;
  RankPlan plan = treePlan(t);
  Lane& lane = plan.lanes[0];
  // Largest subtree first: its chain of forwards is the longest.
  if (t.v == 0) {
    rootWithChildren(lane, t, a, kInput, true, addSend);
    addCopy(lane, block(kInput, a, rank, 0, c), {kOutput, 0, c});
  } else if (t.leaf()) {
    addRecv(lane, t.parent(), {kOutput, 0, c});
  } else {
    withParent(lane, t, addRecv);
    t.children(true, [&](int m, int end) { addSend(lane, t.rankAt(t.v + m), t.held(m, end)); });
    addCopy(lane, t.held(0, 1), {kOutput, 0, c});
  }
  return plan;
}

}  // namespace loom::collectives
