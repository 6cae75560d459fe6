// The bootstrap root's first cause among timeouts: ranks that time out say whom they waited
// on, and the root names the rank that reported nothing while its connection stayed open (a
// stopped process). Ranks that the stop left waiting on each other (a loop of "waited on")
// must not hide it, whichever of them reported first.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/clock.h"
#include "comm/bootstrap.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

// A call's timeout as the executor words it: the rank waited on comes after this rank's own.
std::string timeout(int rank, const char* step, int peer) {
  return "rank " + std::to_string(rank) + ": allreduce #72 (ring), lane 0 step 7 (" + step +
         " rank " + std::to_string(peer) + ", 0 of 262144 elements done): no progress before " +
         "the deadline (LOOM_TIMEOUT_MS)";
}

// What one rank reports to the root, and when.
struct Script {
  int order;       // when it reports, in 50 ms turns (-1: it reports nothing)
  const char* step;
  int peer;
};

std::string firstCause(const Script (&scripts)[4]) {
  std::string causes[4];
  auto results = runRanks(4, [&scripts](RankContext& ctx) {
    loomUniqueId id;
    std::string mine;
    if (ctx.rank() == 0) {
      RANK_LOOM(loomGetUniqueId(&id));
      mine.assign(id.internal, sizeof(id.internal));
    }
    memcpy(id.internal, ctx.allgather(mine)[0].data(), sizeof(id.internal));
    Bootstrap boot;
    RANK_CHECK(boot.connect(id, ctx.rank(), 4, Deadline(20000)).isOk(), "connect");
    std::vector<std::string> all;
    RANK_CHECK(boot.allgather("x", &all, Deadline(20000)).isOk(), "allgather");
    const Script& s = scripts[ctx.rank()];
    if (s.order >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * s.order));
      boot.sendAbort(timeout(ctx.rank(), s.step, s.peer));
    }
    const Status st = boot.pollAbort(5000);
    RANK_CHECK(!st.isOk(), "no abort reached rank %d", ctx.rank());
    fprintf(stderr, "CAUSE %d %s\n", ctx.rank(), st.message().c_str());
    // The root runs in rank 0's process: it stays until the others have read their abort.
    if (ctx.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
  std::string first;
  for (const RankResult& r : results) {
    const size_t at = r.output.find("CAUSE ");
    if (at == std::string::npos) return "a rank printed no cause";
    const std::string line = r.output.substr(at + 8, r.output.find('\n', at) - at - 8);
    if (first.empty()) first = line;
    if (line != first) return "the ranks were told different causes: " + first + " | " + line;
  }
  return first;
}

// The stop of rank 2 in a ring: rank 1 waits to send to it, and ranks 0 and 3, stalled in turn,
// wait on each other; rank 0 reports first.
TEST(BootstrapFirstCause, AStoppedRankIsNamedPastRanksThatWaitOnEachOther) {
  const Script scripts[4] = {{0, "Recv from", 3}, {2, "Send to", 2}, {-1, "", 0},
                             {1, "Send to", 0}};
  const std::string cause = firstCause(scripts);
  EXPECT_NE(cause.find("rank 2 stopped responding: rank 1 waited on it"), std::string::npos)
      << cause;
}

// Without a silent rank, ranks that wait on each other in a loop are told the first report.
TEST(BootstrapFirstCause, ALoopWithNoSilentRankKeepsTheFirstReport) {
  const Script scripts[4] = {{0, "Recv from", 3}, {2, "Send to", 0}, {3, "Recv from", 1},
                             {1, "Send to", 0}};
  const std::string cause = firstCause(scripts);
  EXPECT_NE(cause.find(timeout(0, "Recv from", 3)), std::string::npos) << cause;
}

}  // namespace
}  // namespace loom::testing
