// Pairwise exchange for alltoall(v) and allgather: in round k every rank sends to r+k and
// receives from r−k, so each round is a permutation and no rank receives from two peers at once.
#include <functional>

#include "collectives/builders.h"

namespace loom::collectives {

namespace {

// sendBlock(j): the Input region destined to rank j; recvBlock(j): the Output region for
// the data from rank j. Round k goes on lane k % lanes on both of its ends, so the lanes of
// a message's sender and receiver agree.
RankPlan pairwise(const CollArgs& a, int rank, const std::function<Region(int)>& sendBlock,
                  const std::function<Region(int)>& recvBlock) {
  const int n = a.nranks;
  RankPlan plan;
  plan.algorithm = "pairwise";
  plan.lanes.resize(size_t(usableLanes(uint64_t(n - 1), 1, a.lanes)));
  addCopy(plan.lanes[0], sendBlock(rank), recvBlock(rank));
  for (int k = 1; k < n; ++k) {
    Lane& lane = plan.lanes[size_t(k) % plan.lanes.size()];
    const int to = wrap(rank + k, n), from = wrap(rank - k, n);
    addSend(lane, to, sendBlock(to));
    addRecv(lane, from, recvBlock(from));
  }
  return plan;
}

}  // namespace

RankPlan buildPairwiseAlltoAll(const CollArgs& a, int rank) {
  const uint64_t count = a.count;
  return pairwise(
      a, rank,
      [&](int j) {
        return Region{kInput, uint64_t(j) * count, count};
      },
      [&](int j) {
        return Region{kOutput, uint64_t(j) * count, count};
      });
}

RankPlan buildPairwiseAlltoAllv(const CollArgs& a, int rank) {
  return pairwise(
      a, rank,
      [&](int j) {
        return Region{kInput, a.sendDispls[size_t(j)], a.sendCounts[size_t(j)]};
      },
      [&](int j) {
        return Region{kOutput, a.recvDispls[size_t(j)], a.recvCounts[size_t(j)]};
      });
}

RankPlan buildPairwiseAllGather(const CollArgs& a, int rank) {
  const uint64_t count = a.count;
  return pairwise(
      a, rank, [&](int) { return Region{kInput, 0, count}; },
      [&](int j) {
        return Region{kOutput, uint64_t(j) * count, count};
      });
}

}  // namespace loom::collectives
