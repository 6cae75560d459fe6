#include "comm/buffer_agreement.h"

#include <algorithm>

#include "collectives/builders.h"

namespace loom {

const collectives::PreparedPlan& BufferAgreement::barrier() {
  if (barrier_.lanes.empty()) {
    collectives::RankPlan plan;
    plan.algorithm = "buffer agreement";
    plan.lanes.resize(1);
    collectives::addBarrier(plan.lanes[0]);
    barrier_ = collectives::preparePlan(plan, {});
  }
  return barrier_;
}

void BufferAgreement::answered(bool all) {
  ++rounds_;
  notAllAnswers_ = all ? 0 : std::min(notAllAnswers_ + 1, kMaxNotAllAnswers);
  asksToSkip_ = (1 << notAllAnswers_) - 1;
}

}  // namespace loom
