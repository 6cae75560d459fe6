// Double binary tree allreduce (NCCL's scheme): two complementary binary trees, each reducing
// half of the data up to its root and broadcasting it back down.
#include <algorithm>
#include <vector>

#include "collectives/builders_reduce.h"

namespace loom::collectives {

namespace {

// The binary tree rooted at 0 whose leaves are the odd ranks: a rank's parent clears its
// lowest set bit and sets the next one up (or only clears it when that is out of range), so
// parents always have a higher lowest bit and the tree is ⌈log2 n⌉ deep for any n.
int btreeParent(int n, int rank) {
  if (rank == 0) return -1;
  const int bit = rank & -rank;
  const int up = (rank ^ bit) | (bit << 1);
  return up < n ? up : rank ^ bit;
}

}  // namespace

// Tree 1 maps ranks so that tree 0's leaves (odd ranks) become its interior: mirroring swaps
// parity when n is even, shifting by one does when n is odd.
int treeParent(int n, int tree, int rank) {
  if (tree == 0) return btreeParent(n, rank);
  if (n % 2 == 1) {
    const int up = btreeParent(n, wrap(rank - 1, n));
    return up < 0 ? -1 : (up + 1) % n;
  }
  const int up = btreeParent(n, n - 1 - rank);
  return up < 0 ? -1 : n - 1 - up;
}

RankPlan buildTreeAllReduce(const CollArgs& a, int rank) {
  const int n = a.nranks;
  // At least two lanes so that both trees carry data; one when there is a single element.
  const int lanes = n == 1 ? 1 : usableLanes(a.count, 1, std::max(2, a.lanes));
  std::vector<int> children[2];
  for (int t = 0; t < 2 && n > 1; ++t) {
    for (int c = 0; c < n; ++c) {
      if (treeParent(n, t, c) == rank) children[t].push_back(c);
    }
  }
  int lane = 0;
  return splitIntoLanes("tree", a.count, lanes, [&](Lane& steps, uint64_t base, uint64_t len) {
    const int t = lane++ % 2;
    const Region in{kInput, base, len}, out{kOutput, base, len};
    if (n == 1) return addCopy(steps, in, out);
    // Reduce up: the first child's data meets Input on its way into Output, so Input is read
    // only there and the plan is correct in place.
    bool reduced = false;
    for (int c : children[t]) {
      addRecvReduce(steps, c, reduced ? out : in, out);
      reduced = true;
    }
    const int parent = treeParent(n, t, rank);
    if (parent >= 0) {
      addSend(steps, parent, reduced ? out : in);
      addRecv(steps, parent, out);
    }
    for (int c : children[t]) addSend(steps, c, out);
  });
}

}  // namespace loom::collectives
