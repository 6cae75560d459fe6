// What a communicator costs while it does nothing: no CPU (no thread spins while idle), and a
// rank waiting in a call for a late peer sleeps once its spinning and yielding are over.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

double cpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);  // every thread of the process, the bootstrap root's included
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

class Idle : public ::testing::TestWithParam<const char*> {};

TEST_P(Idle, ACommunicatorWithNothingInFlightUsesNoCpu) {
  const char* transport = GetParam();
  auto results = runRanks(3, [transport](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = transport;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    std::vector<float> a(1 << 16, 1.0f);
    // Connections exist and have carried data before the idle period.
    RANK_LOOM(loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    double before = cpuSeconds();
    usleep(1000 * 1000);
    double used = cpuSeconds() - before;
    RANK_CHECK(used < 0.02, "%.3f s of CPU in 1 s of idling", used);
    RANK_LOOM(loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    RANK_CHECK(a[0] == 9.0f, "got %f", a[0]);
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// Rank 1 joins an allreduce 1 s late; rank 0, waiting in it, sleeps (the shm transport on its
// futex, tcp in poll, ucx on the UCX worker's event fd) rather than spinning.
TEST_P(Idle, AWaitForALatePeerSleeps) {
  const char* transport = GetParam();
  auto results = runRanks(2, [transport](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = transport;
    config.timeoutMs = 30000;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    std::vector<float> a(1 << 16, 1.0f);
    RANK_LOOM(loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    if (ctx.rank() == 1) usleep(1000 * 1000);
    const double before = cpuSeconds();
    RANK_LOOM(loomAllReduce(a.data(), a.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    const double used = cpuSeconds() - before;
    RANK_CHECK(a[0] == 4.0f, "got %f", a[0]);
    // Spinning, then 2 ms of yielding (LOOM_YIELD_USEC), then sleep: far below the 1 s wait.
    if (ctx.rank() == 0) RANK_CHECK(used < 0.1, "%.3f s of CPU in a 1 s wait", used);
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, Idle, ::testing::Values("shm", "tcp", "ucx"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace loom::testing
