// The builder registry and the helpers every builder shares.
#include "collectives/builders.h"

#include <algorithm>

#include "collectives/builders_exchange.h"
#include "collectives/builders_reduce.h"

namespace loom::collectives {

namespace {

// Registry order within a collective is the order names are listed in (loom-info, errors).
const Builder kBuilders[] = {
    // Foundation: ring, chain, pairwise, linear, p2p.
    {Collective::AllReduce, "ring", buildRingAllReduce},
    {Collective::Broadcast, "chain", buildChainBroadcast},
    {Collective::Reduce, "chain", buildChainReduce},
    {Collective::AllGather, "ring", buildRingAllGather},
    {Collective::ReduceScatter, "ring", buildRingReduceScatter},
    {Collective::AlltoAll, "pairwise", buildPairwiseAlltoAll},
    {Collective::AlltoAllv, "pairwise", buildPairwiseAlltoAllv},
    {Collective::Gather, "linear", buildLinearGather},
    {Collective::Scatter, "linear", buildLinearScatter},
    {Collective::SendRecv, "p2p", nullptr},
    // Allreduce, allgather and reduce-scatter families (tree, halving-doubling, torus, ...).
    {Collective::AllReduce, "tree", buildTreeAllReduce},
    {Collective::AllReduce, "rhd", buildRhdAllReduce},
    {Collective::AllReduce, "rd", buildRdAllReduce},
    {Collective::AllReduce, "torus", buildTorusAllReduce, refuseTorus},
    {Collective::AllReduce, "hierarchical", buildHierarchicalAllReduce, refuseHierarchical},
    {Collective::AllReduce, "direct", buildDirectAllReduce, refuseDirect},
    {Collective::AllGather, "rd", buildRdAllGather},
    {Collective::AllGather, "bruck", buildBruckAllGather},
    {Collective::AllGather, "hierarchical", buildHierarchicalAllGather, refuseHierarchical},
    {Collective::AllGather, "direct", buildDirectAllGather, refuseDirect},
    {Collective::AllGather, "pairwise", buildPairwiseAllGather},
    {Collective::ReduceScatter, "rh", buildRhReduceScatter},
    {Collective::ReduceScatter, "hierarchical", buildHierarchicalReduceScatter,
     refuseHierarchical},
    // Alltoall, broadcast, reduce, gather and scatter families (bruck, incast-aware, trees).
    {Collective::AlltoAll, "xor", buildXorAlltoAll},
    {Collective::AlltoAll, "bruck", buildBruckAlltoAll},
    {Collective::AlltoAll, "hierarchical", buildHierarchicalAlltoAll, refuseHierarchicalAlltoAll},
    {Collective::AlltoAll, "incast", buildIncastAlltoAll, refuseIncast},
    // Every rank copies its blocks into the arena before the barrier that lets anyone write
    // them back out, so the direct alltoall needs no copy of its input in place.
    {Collective::AlltoAll, "direct", buildDirectAlltoAll, refuseDirect, true},
    {Collective::AlltoAllv, "xor", buildXorAlltoAllv},
    {Collective::AlltoAllv, "incast", buildIncastAlltoAllv, refuseIncast},
    {Collective::Broadcast, "tree", buildTreeBroadcast},
    {Collective::Broadcast, "scatter_allgather", buildScatterAllgatherBroadcast},
    {Collective::Reduce, "tree", buildTreeReduce},
    {Collective::Reduce, "rsag", buildRsagReduce},
    {Collective::Gather, "tree", buildTreeGather},
    {Collective::Scatter, "tree", buildTreeScatter},
    // Peer reads: one host's ranks copy straight out of each other's buffers.
    {Collective::AllReduce, "peer", buildPeerAllReduce, refusePeer},
    {Collective::ReduceScatter, "peer", buildPeerReduceScatter, refusePeer},
    {Collective::AllGather, "peer", buildPeerAllGather, refusePeer},
    {Collective::AlltoAll, "peer", buildPeerAlltoAll, refusePeer},
    {Collective::Broadcast, "peer", buildPeerBroadcast, refusePeer},
    {Collective::Reduce, "peer", buildPeerReduce, refusePeer},
    {Collective::Gather, "peer", buildPeerGather, refusePeer},
    {Collective::Scatter, "peer", buildPeerScatter, refusePeer},
};

}  // namespace

std::span<const Builder> allBuilders() { return kBuilders; }

std::vector<std::string_view> builderNames(Collective c) {
  std::vector<std::string_view> names;
  for (const Builder& b : kBuilders) {
    if (b.coll == c) names.push_back(b.name);
  }
  return names;
}

const Builder* findBuilder(Collective c, std::string_view name) {
  for (const Builder& b : kBuilders) {
    if (b.coll == c && name == b.name) return &b;
  }
  return nullptr;
}

int usableLanes(uint64_t count, uint64_t minPerLane, int hint) {
  const uint64_t byData = std::max<uint64_t>(1, count / std::max<uint64_t>(1, minPerLane));
  return int(std::min<uint64_t>(uint64_t(std::max(1, hint)), byData));
}

namespace {

void add(Lane& lane, StepKind kind, int peer, Region src, Region dst) {
  if (std::max(src.count, dst.count) == 0) return;
  lane.steps.push_back(Step{kind, peer, src, dst});
}

}  // namespace

void addSend(Lane& lane, int peer, Region src) { add(lane, StepKind::Send, peer, src, {}); }
void addRecv(Lane& lane, int peer, Region dst) { add(lane, StepKind::Recv, peer, {}, dst); }
void addRecvReduce(Lane& lane, int peer, Region src, Region dst) {
  add(lane, StepKind::RecvReduce, peer, src, dst);
}
void addCopy(Lane& lane, Region src, Region dst) { add(lane, StepKind::Copy, -1, src, dst); }
void addReduce(Lane& lane, Region src, Region dst) { add(lane, StepKind::Reduce, -1, src, dst); }
void addBarrier(Lane& lane, Region flags) {
  lane.steps.push_back(Step{StepKind::Barrier, -1, flags, {}});
}

uint64_t flagElements(uint32_t elemSize) {
  return elemSize > 0 && elemSize <= 8 && 8 % elemSize == 0 ? 8 / elemSize : 0;
}

}  // namespace loom::collectives
