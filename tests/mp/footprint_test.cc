// What a communicator costs while it does nothing: no CPU (no thread spins while idle).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

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

INSTANTIATE_TEST_SUITE_P(Transports, Idle, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace loom::testing
