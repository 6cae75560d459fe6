// The peer-read builders ("peer": allreduce, reduce-scatter, allgather, alltoall, broadcast,
// reduce, gather, scatter; costs in builders_reduce.h): the ranks of one host read each other's Input and Output
// in place (plan.h, peerBuffer), so every byte moves with one copy and no message is sent.
#include <string>

#include "collectives/builders_reduce.h"
#include "base/status.h"

namespace loom::collectives {
namespace {

// Rank j's buffer `buf` (kInput or kOutput) as rank `rank` names it: its own, or a peer's.
Region of(int rank, int j, uint32_t buf, uint64_t offset, uint64_t count) {
  return {j == rank ? buf : peerBuffer(j, buf), offset, count};
}

// A one-lane plan that reads peers between an opening and a closing Barrier: body(lane) adds
// the steps between. N = 1 has no peers: body alone (its steps name only the rank's buffers).
template <typename Body>
RankPlan peerPlan(const CollArgs& a, Body body) {
  RankPlan plan;
  plan.algorithm = "peer";
  plan.lanes.resize(1);
  plan.readByPeers = a.nranks > 1 && a.count > 0;
  Lane& lane = plan.lanes[0];
  if (a.nranks > 1) addBarrier(lane);
  body(lane);
  if (a.nranks > 1) addBarrier(lane);
  if (a.count == 0) lane.steps.clear();  // nothing to move on any rank: no barriers either
  return plan;
}

// dst = Σ over ranks of their Input at [offset, offset+count), this rank's own first, then the
// others from rank+1 on (so the N ranks summing slices at once read N different peers).
void addSum(Lane& lane, const CollArgs& a, int rank, uint64_t offset, uint64_t count, Region dst) {
  addCopy(lane, {kInput, offset, count}, dst);
  for (int k = 1; k < a.nranks; ++k)
    addReduce(lane, of(rank, wrap(rank + k, a.nranks), kInput, offset, count), dst);
}

}  // namespace

std::string refusePeer(const CollArgs& a) { return refuseOffHost("peer", a); }

RankPlan buildPeerAllReduce(const CollArgs& a, int rank) {
  const uint64_t c = a.count, n = uint64_t(a.nranks), r = uint64_t(rank);
  if (n == 1)
    return peerPlan(a, [&](Lane& lane) { addCopy(lane, {kInput, 0, c}, {kOutput, 0, c}); });
  // Rank r sums slice r of every Input into its Output; after a barrier every rank copies the
  // other slices from their owners' Outputs. In place, rank r writes only slice r of its buffer
  // in the first phase, which no peer reads; in the second it overwrites the others, which
  // their owners have finished reading.
  return peerPlan(a, [&](Lane& lane) {
    const uint64_t off = partOffset(c, n, r), mine = partCount(c, n, r);
    addSum(lane, a, rank, off, mine, {kOutput, off, mine});
    addBarrier(lane);
    for (uint64_t k = 1; k < n; ++k) {
      const int j = wrap(int64_t(r + k), a.nranks);
      const uint64_t at = partOffset(c, n, uint64_t(j)), len = partCount(c, n, uint64_t(j));
      addCopy(lane, of(rank, j, kOutput, at, len), {kOutput, at, len});
    }
  });
}

RankPlan buildPeerReduceScatter(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    addSum(lane, a, rank, uint64_t(rank) * c, c, {kOutput, 0, c});
  });
}

RankPlan buildPeerAllGather(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    for (int k = 0; k < a.nranks; ++k) {
      const int j = wrap(rank + k, a.nranks);
      addCopy(lane, of(rank, j, kInput, 0, c), {kOutput, uint64_t(j) * c, c});
    }
  });
}

RankPlan buildPeerAlltoAll(const CollArgs& a, int rank) {
  const uint64_t c = a.count, r = uint64_t(rank);
  return peerPlan(a, [&](Lane& lane) {
    for (int k = 0; k < a.nranks; ++k) {
      const int j = wrap(rank + k, a.nranks);
      addCopy(lane, of(rank, j, kInput, r * c, c), {kOutput, uint64_t(j) * c, c});
    }
  });
}

RankPlan buildPeerBroadcast(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    addCopy(lane, of(rank, a.root, kInput, 0, c), {kOutput, 0, c});
  });
}

RankPlan buildPeerReduce(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    if (rank == a.root) addSum(lane, a, rank, 0, c, {kOutput, 0, c});
  });
}

RankPlan buildPeerGather(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    if (rank != a.root) return;
    for (int k = 0; k < a.nranks; ++k) {
      const int j = wrap(rank + k, a.nranks);
      addCopy(lane, of(rank, j, kInput, 0, c), {kOutput, uint64_t(j) * c, c});
    }
  });
}

RankPlan buildPeerScatter(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  return peerPlan(a, [&](Lane& lane) {
    addCopy(lane, of(rank, a.root, kInput, uint64_t(rank) * c, c), {kOutput, 0, c});
  });
}

}  // namespace loom::collectives
