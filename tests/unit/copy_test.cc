// The streaming copy (base/copy.h) and which Copy steps the executor lets use it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/builders.h"
#include "collectives/builders_reduce.h"
#include "collectives/executor.h"
#include "base/copy.h"

namespace loom {
namespace {

// Every length up to a few lines at every alignment of source and destination: the bytes
// arrive exactly and nothing around the destination is written.
TEST(CopyBypassingCache, EveryLengthAndAlignmentExactlyAndNothingAround) {
  constexpr size_t kMax = 300, kGuard = 64;
  std::vector<uint8_t> src(kMax + 128), dst(kMax + 128 + 2 * kGuard);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 37 + 11);
  for (size_t so = 0; so < 64; so += 7)
    for (size_t dof = 0; dof < 64; dof += 5)
      for (size_t n = 0; n <= kMax; ++n) {
        memset(dst.data(), 0xA5, dst.size());
        uint8_t* d = dst.data() + kGuard + dof;
        copyBypassingCache(d, src.data() + so, n);
        ASSERT_EQ(memcmp(d, src.data() + so, n), 0) << "n=" << n << " src+" << so << " dst+" << dof;
        for (uint8_t* p = dst.data(); p < d; ++p) ASSERT_EQ(*p, 0xA5) << "before, n=" << n;
        for (uint8_t* p = d + n; p < dst.data() + dst.size(); ++p)
          ASSERT_EQ(*p, 0xA5) << "after, n=" << n;
      }
}

TEST(CopyBypassingCache, LargeCopyExact) {
  std::vector<uint32_t> src(3 << 20), dst(src.size() + 1, 7);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint32_t(i * 2654435761u);
  copyBypassingCache(dst.data() + 1, src.data(), src.size() * 4);  // misaligned by 4 bytes
  EXPECT_EQ(dst[0], 7u);
  EXPECT_EQ(memcmp(dst.data() + 1, src.data(), src.size() * 4), 0);
}

// Only a Copy whose destination no later step of its lane reads or writes may stream.
TEST(PreparePlan, FinalCopyIsACopyWhoseDestinationItsLaneLeavesAlone) {
  using namespace collectives;
  RankPlan plan;
  plan.lanes.resize(2);
  Lane& lane = plan.lanes[0];
  addCopy(lane, {kInput, 0, 10}, {kOutput, 0, 10});    // 0: reduced into later: not final
  addCopy(lane, {kInput, 10, 10}, {kOutput, 10, 10});  // 1: sent later: not final
  addCopy(lane, {kInput, 20, 10}, {kOutput, 20, 10});  // 2: final
  addReduce(lane, {kInput, 0, 4}, {kOutput, 6, 4});
  lane.steps.push_back({StepKind::Send, 1, {kOutput, 19, 1}, {}});
  addReduce(lane, {kInput, 30, 5}, {kOutput, 30, 5});  // 5: a Reduce is never a final Copy
  addCopy(plan.lanes[1], {kInput, 0, 10}, {kOutput, 40, 10});  // other lanes do not count
  addCopy(plan.lanes[1], {kInput, 0, 10}, {kScratch, 0, 10});
  addCopy(plan.lanes[1], {kScratch, 0, 10}, {kOutput, 50, 10});
  const PreparedPlan p = preparePlan(plan, {});
  EXPECT_EQ(p.lanes[0].finalCopy, (std::vector<uint8_t>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(p.lanes[1].finalCopy, (std::vector<uint8_t>{1, 0, 1}));
}

// The direct plans (one lane, local steps and Barriers) run step after step; a plan with a
// transfer or a second lane goes through the general loop.
TEST(PreparePlan, OnlyOneLaneWithoutTransfersRunsInOrder) {
  using namespace collectives;
  CollArgs a;
  a.nranks = 4;
  a.count = 100;
  a.sharedBytes = 1 << 20;
  EXPECT_TRUE(preparePlan(buildDirectAllReduce(a, 1), {}).inOrder);
  a.count = 1 << 20;  // two-phase chunks
  EXPECT_TRUE(preparePlan(buildDirectAllReduce(a, 1), {}).inOrder);
  RankPlan plan;
  plan.lanes.resize(1);
  addCopy(plan.lanes[0], {kInput, 0, 10}, {kOutput, 0, 10});
  addBarrier(plan.lanes[0]);
  EXPECT_TRUE(preparePlan(plan, {}).inOrder);
  plan.lanes.resize(2);
  EXPECT_FALSE(preparePlan(plan, {}).inOrder);
  plan.lanes.resize(1);
  plan.lanes[0].steps.push_back({StepKind::Send, 1, {kOutput, 0, 10}, {}});
  EXPECT_FALSE(preparePlan(plan, {}).inOrder);
}

}  // namespace
}  // namespace loom
