// rankRanges: the lists of ranks that error messages name.
#include <gtest/gtest.h>

#include "base/status.h"

namespace loom {
namespace {

TEST(RankRanges, RunsOfThreeOrMoreBecomeRanges) {
  EXPECT_EQ(rankRanges({}), "");
  EXPECT_EQ(rankRanges({2}), "2");
  EXPECT_EQ(rankRanges({2, 5}), "2, 5");
  EXPECT_EQ(rankRanges({2, 3}), "2, 3");
  EXPECT_EQ(rankRanges({3, 4, 5, 6, 7}), "3-7");
  EXPECT_EQ(rankRanges({0, 3, 4, 5, 9, 10, 12, 13, 14}), "0, 3-5, 9, 10, 12-14");
}

}  // namespace
}  // namespace loom
