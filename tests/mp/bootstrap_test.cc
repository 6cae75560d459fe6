// Bootstrap over IPv4 and IPv6, chosen through LOOM_SOCKET_IFNAME / LOOM_SOCKET_FAMILY.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

bool hasIpv6Loopback() {
  std::ifstream f("/proc/net/if_inet6");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("00000000000000000000000000000001", 0) == 0) return true;
  return false;
}

class Family : public ::testing::TestWithParam<int> {};

TEST_P(Family, BootstrapAndTcpOverLoopback) {
  int family = GetParam();
  if (family == AF_INET6 && !hasIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) here";
  auto results = runRanks(2, [family](RankContext& ctx) {
    setenv("LOOM_SOCKET_IFNAME", "=lo", 1);
    setenv("LOOM_SOCKET_FAMILY", family == AF_INET6 ? "AF_INET6" : "AF_INET", 1);
    params::reloadFromEnvironment();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = "tcp";
    config.timeoutMs = 20000;
    loomUniqueId id;
    std::string mine;
    if (ctx.rank() == 0) {
      RANK_LOOM(loomGetUniqueId(&id));
      // The id carries the root's sockaddr after its magic and length fields.
      sa_family_t f;
      memcpy(&f, id.internal + 8, sizeof(f));
      RANK_CHECK(f == family, "unique id address family %d, want %d", f, family);
      mine.assign(id.internal, sizeof(id.internal));
    }
    std::string shared = ctx.allgather(mine)[0];
    memcpy(id.internal, shared.data(), sizeof(id.internal));
    loomComm_t comm = nullptr;
    RANK_LOOM(loomCommInitRankConfig(&comm, 2, id, ctx.rank(), &config));
    double x[1000], y[1000];
    for (int i = 0; i < 1000; ++i) x[i] = i * (ctx.rank() + 1);
    RANK_LOOM(loomAllReduce(x, y, 1000, loomFloat64, loomSum, comm, nullptr));
    for (int i = 0; i < 1000; ++i) RANK_CHECK(y[i] == 3.0 * i, "element %d = %f", i, y[i]);
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ip, Family, ::testing::Values(AF_INET, AF_INET6),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == AF_INET6 ? "v6" : "v4");
                         });

// The common launcher pattern: one process makes the id, then forks the ranks. The root's
// thread stays in the parent; the children inherit its record but not the thread, and must not
// wait for it when they leave (they did, for LOOM_TIMEOUT_MS, before every exit).
TEST(RootInParent, ForkedRanksLeaveWithoutWaitingForIt) {
  loomUniqueId id;
  ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
  auto results = runRanks(2, [&id](RankContext& ctx) {
    setenv("LOOM_TIMEOUT_MS", "120000", 1);  // far past the run's own 30 s bound
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    RANK_LOOM(loomCommInitRank(&comm, 2, id, ctx.rank()));
    int64_t v = ctx.rank() + 1, sum = 0;
    RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt64, loomSum, comm, nullptr));
    RANK_CHECK(sum == 3, "sum %lld", (long long)sum);
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

// Launchers fork their ranks while loomGetUniqueId's root thread runs, and that thread reads
// parameters under the registry's lock. A child forked while the lock was held once inherited
// it locked and hung in its first init. Here a thread keeps that lock busy while the test forks
// children that each read a parameter: every child must exit.
TEST(RootInParent, ForkedWhileAThreadReadsParametersTheChildCanReadThem) {
  // The registry exists before the thread starts, as loomGetUniqueId makes it before its root
  // thread: a fork during the registry's one-time construction is not what this is about.
  ASSERT_NE(params::getInt("LOOM_TIMEOUT_MS"), 0);
  std::atomic<bool> stop{false};
  std::thread reader([&stop] {
    while (!stop.load()) params::reloadFromEnvironment();
  });
  int hung = 0;
  int forked = 0;
  for (; forked < 200 && hung == 0; ++forked) {
    pid_t child = fork();
    if (child == 0) _exit(params::getInt("LOOM_TIMEOUT_MS") != 0 ? 0 : 1);
    ASSERT_GT(child, 0);
    int status = -1;
    Deadline deadline(30000);  // a hung child never ends; a slow one (under load) does
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (deadline.expired()) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        ++hung;
        break;
      }
      usleep(200);
    }
  }
  stop = true;
  reader.join();
  EXPECT_EQ(hung, 0) << hung << " of " << forked << " children hung reading a parameter";
}

// An init some ranks never join fails on every rank that did, at that rank's deadline (the
// root's own LOOM_TIMEOUT_MS is minutes), with the ranks that never came named.
struct MissingRanks {
  int nranks;
  std::vector<int> missing;
  const char* named;
};
void PrintTo(const MissingRanks& c, std::ostream* os) { *os << c.named; }
class NeverJoined : public ::testing::TestWithParam<MissingRanks> {};

TEST_P(NeverJoined, EveryRankThatJoinedIsToldWhichDidNot) {
  const MissingRanks& c = GetParam();
  auto results = runRanks(c.nranks, [&c](RankContext& ctx) {
    const bool missing =
        std::find(c.missing.begin(), c.missing.end(), ctx.rank()) != c.missing.end();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 1500;
    loomComm_t comm = nullptr;
    loomResult_t rc = loomSuccess;
    const auto start = std::chrono::steady_clock::now();
    if (missing) ctx.allgather("");  // takes the unique id, never calls init
    else rc = initComm(ctx, &comm, &config);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = loomGetLastError(nullptr);
    ctx.allgather("");  // the missing ranks stay until the others have failed
    if (missing) return 0;
    RANK_CHECK(rc == loomTimeout, "init gave %s: %s", loomGetErrorString(rc), msg.c_str());
    RANK_CHECK(msg.find(c.named) != std::string::npos, "the error does not say \"%s\": %s",
               c.named, msg.c_str());
    RANK_CHECK(seconds > 1.0 && seconds < 6, "init failed after %.1f s", seconds);
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(
    Bootstrap, NeverJoined,
    ::testing::Values(MissingRanks{4, {2}, "rank 2 of 4 never joined"},
                      MissingRanks{8, {1, 3, 4, 5, 6}, "ranks 1, 3-6 of 8 never joined"}),
    [](const ::testing::TestParamInfo<MissingRanks>& i) {
      return std::to_string(i.param.missing.size()) + "of" + std::to_string(i.param.nranks);
    });

TEST(EnvInit, TorchrunStyleVariables) {
  auto results = runRanks(3, [](RankContext& ctx) {
    // A port unlikely to be taken: derived from the pid of the test's parent.
    static const int port = 20000 + getppid() % 20000;
    setenv("RANK", std::to_string(ctx.rank()).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    RANK_LOOM(loomCommInitFromEnv(&comm, nullptr));
    int n = 0, r = -1;
    RANK_LOOM(loomCommCount(comm, &n));
    RANK_LOOM(loomCommUserRank(comm, &r));
    RANK_CHECK(n == 3 && r == ctx.rank(), "got rank %d of %d", r, n);
    int64_t v = r, sum = 0;
    RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt64, loomSum, comm, nullptr));
    RANK_CHECK(sum == 3, "sum %lld", (long long)sum);
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// Communicators made one after another through one LOOM_ROOT: ranks that are done with one
// reach the address while its root still serves the slower ranks; they wait for the next one's
// root instead of joining the last one's, and every communicator has the right ranks.
TEST(EnvInit, SuccessiveCommunicatorsThroughOneRootKeepApart) {
  auto results = runRanks(3, [](RankContext& ctx) {
    static const int port = 20000 + (getppid() + 7919) % 20000;
    setenv("LOOM_RANK", std::to_string(ctx.rank()).c_str(), 1);
    setenv("LOOM_WORLD_SIZE", "3", 1);
    setenv("LOOM_ROOT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
    params::reloadFromEnvironment();
    for (int round = 0; round < 6; ++round) {
      loomComm_t comm = nullptr;
      RANK_LOOM(loomCommInitFromEnv(&comm, nullptr));
      int64_t v = ctx.rank() + 10 * round, sum = 0;
      RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt64, loomSum, comm, nullptr));
      RANK_CHECK(sum == 3 + 30 * round, "round %d: sum %lld", round, (long long)sum);
      // Rank 0, which serves the root, leaves last in odd rounds, first in even ones.
      const int lateRank = round % 2 == 1 ? 0 : 2;
      if (ctx.rank() == lateRank) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      RANK_LOOM(loomCommDestroy(comm));
    }
    return 0;
  }, ForkOptions::timeout(90));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(EnvInit, MissingVariablesAreAClearError) {
  auto results = runRanks(1, [](RankContext&) {
    for (const char* v : {"LOOM_RANK", "LOOM_WORLD_SIZE", "LOOM_ROOT", "RANK", "WORLD_SIZE",
                          "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                          "PMIX_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
      unsetenv(v);
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    loomResult_t rc = loomCommInitFromEnv(&comm, nullptr);
    RANK_CHECK(rc == loomInvalidUsage, "got %s", loomGetErrorString(rc));
    RANK_CHECK(strstr(loomGetLastError(nullptr), "RANK") != nullptr, "message: %s",
               loomGetLastError(nullptr));
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
