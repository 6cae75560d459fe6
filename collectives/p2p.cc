// Groups of point-to-point operations (loomSend/loomRecv between GroupStart and GroupEnd).
#include "collectives/builders.h"

namespace loom::collectives {

RankPlan buildP2P(const std::vector<P2POp>& ops) {
  RankPlan plan;
  plan.algorithm = "p2p";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  for (size_t i = 0; i < ops.size(); ++i) {
    const Region buf{uint32_t(kFirstUserBuffer + i), 0, ops[i].bytes};
    if (ops[i].kind == P2POp::Kind::Send) {
      addSend(lane, ops[i].peer, buf);
    } else {
      addRecv(lane, ops[i].peer, buf);
    }
  }
  return plan;
}

}  // namespace loom::collectives
