// rankNamedIn: how the bootstrap root reads which rank a failure report waited on, and a rank
// the origin of a relayed cause. A wrong reading names the wrong rank on every survivor.
#include <gtest/gtest.h>

#include "comm/bootstrap.h"

namespace loom {
namespace {

TEST(RankNamedIn, SkipsTheReporterAndFindsThePeer) {
  const std::string report =
      "rank 3: allreduce #7 (rhd), lane 0 step 11 (Recv from rank 7, 0 of 524288 elements "
      "done): no progress before the deadline (LOOM_TIMEOUT_MS)";
  EXPECT_EQ(rankNamedIn(report, 3), 7);
  EXPECT_EQ(rankNamedIn(report), 3);
}

TEST(RankNamedIn, TakesWholeNumbersAndSkipsWhatIsNoRank) {
  EXPECT_EQ(rankNamedIn("rank 12 lost its bootstrap connection", 1), 12);
  // A step without a peer reads "from rank -1": not a rank.
  EXPECT_EQ(rankNamedIn("rank 1: (Copy from rank -1, 0 of 8 done): not there yet: rank 2", 1), 2);
  EXPECT_EQ(rankNamedIn("the ranks' calls differ; ranking 4", -1), -1);
  EXPECT_EQ(rankNamedIn("rank 5: rank 5 closed", 5), -1);
}

}  // namespace
}  // namespace loom
