// The builder registry and the helpers every builder shares.
#include "collectives/builders.h"

#include <algorithm>

#include "collectives/builders_exchange.h"
#include "collectives/builders_reduce.h"

namespace loom::collectives {

namespace {

// Registry order within a collective is the order names are listed in (loom-info, errors).
const Builder kBuilders[] = {
    // Foundation: ring, chain, pairwise, p2p.
    {Collective::AllReduce, "ring", buildRingAllReduce},
    {Collective::Broadcast, "chain", buildChainBroadcast},
    {Collective::Reduce, "chain", buildChainReduce},
    {Collective::AllGather, "ring", buildRingAllGather},
    {Collective::ReduceScatter, "ring", buildRingReduceScatter},
    {Collective::AlltoAll, "pairwise", buildPairwiseAlltoAll},
    {Collective::AlltoAllv, "pairwise", buildPairwiseAlltoAllv},
    {Collective::SendRecv, "p2p", nullptr},
    // Allreduce, allgather and reduce-scatter families (tree, halving-doubling, torus, ...).
    {Collective::AllReduce, "tree", buildTreeAllReduce},
    {Collective::AllReduce, "rhd", buildRhdAllReduce},
    {Collective::AllReduce, "rd", buildRdAllReduce},
    {Collective::AllReduce, "torus", buildTorusAllReduce, refuseTorus},
    {Collective::AllReduce, "hierarchical", buildHierarchicalAllReduce, refuseHierarchical},
    {Collective::AllGather, "rd", buildRdAllGather},
    {Collective::AllGather, "bruck", buildBruckAllGather},
    {Collective::AllGather, "hierarchical", buildHierarchicalAllGather, refuseHierarchical},
    {Collective::ReduceScatter, "rh", buildRhReduceScatter},
    {Collective::ReduceScatter, "hierarchical", buildHierarchicalReduceScatter,
     refuseHierarchical},
    // Alltoall, broadcast and reduce families (bruck, incast-aware, trees, ...).
    {Collective::AlltoAll, "xor", buildXorAlltoAll},
    {Collective::AlltoAll, "bruck", buildBruckAlltoAll},
    {Collective::AlltoAll, "hierarchical", buildHierarchicalAlltoAll, refuseHierarchicalAlltoAll},
    {Collective::AlltoAll, "incast", buildIncastAlltoAll, refuseIncast},
    {Collective::AlltoAllv, "xor", buildXorAlltoAllv},
    {Collective::AlltoAllv, "incast", buildIncastAlltoAllv, refuseIncast},
    {Collective::Broadcast, "tree", buildTreeBroadcast},
    {Collective::Broadcast, "scatter_allgather", buildScatterAllgatherBroadcast},
    {Collective::Reduce, "tree", buildTreeReduce},
    {Collective::Reduce, "rsag", buildRsagReduce},
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

// Until the tuner costs every candidate on the real topology, a size and rank-count rule:
// latency-bound calls take the algorithms with the fewest rounds (log N instead of N), larger
// ones the bandwidth-optimal ring/chain/pairwise, and hierarchical plans serve several equal
// hosts. Thresholds are in bytes per rank buffer, where the measured crossover sits on one host.
const Builder& defaultBuilder(const CollArgs& a) {
  constexpr uint64_t kSmallBytes = 16 << 10;
  uint64_t bytes = a.count * a.elemSize;
  const char* name = nullptr;
  bool severalHosts = false;
  for (int32_t h : a.hostOf) severalHosts = severalHosts || h != 0;
  switch (a.coll) {
    case Collective::AllReduce:
      if (a.nranks >= 2 && bytes <= kSmallBytes) name = "rd";
      else if (severalHosts && !refuseHierarchical(a).size()) name = "hierarchical";
      break;
    case Collective::AllGather:
      if (a.nranks > 2 && bytes * uint64_t(a.nranks) <= kSmallBytes) name = "bruck";
      break;
    case Collective::AlltoAll:
      if (a.nranks > 2 && bytes * uint64_t(a.nranks) <= kSmallBytes) name = "bruck";
      break;
    case Collective::Broadcast:
      if (a.nranks > 3 && bytes <= kSmallBytes) name = "tree";
      break;
    case Collective::Reduce:
      if (a.nranks > 3 && bytes <= kSmallBytes) name = "tree";
      break;
    default:
      break;
  }
  if (name != nullptr) {
    if (const Builder* b = findBuilder(a.coll, name)) return *b;
  }
  for (const Builder& b : kBuilders) {  // the first registered: ring, chain, pairwise, p2p
    if (b.coll == a.coll) return b;
  }
  return kBuilders[0];  // unreachable: every collective has a builder
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

}  // namespace loom::collectives
