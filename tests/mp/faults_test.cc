// A rank that dies mid-collective becomes an error on every other rank within seconds, and one
// that stops answering an error within the deadline.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/rank_sets.h"
#include "tests/support/two_hosts.h"
#include "transports/shm/shm_util.h"

namespace loom::testing {
namespace {

// One rank's part in a kill test: rank `victim` kills itself 300 ms into a loop of 16 MiB
// allreduces; every other rank must get loomRemoteError, with context, within 10 s. `host`, if
// set, names each rank's network namespace.
int killedPeerRank(RankContext& ctx, const char* transport, int victim,
                   const std::function<std::string(int rank)>& host = nullptr) {
  if (host) RANK_CHECK(TwoHostsTest::enter(host(ctx.rank())) == 0, "setns failed");
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = transport;
  config.timeoutMs = 60000;  // far beyond the 10 s bound: detection must not rely on it
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm, &config));
  std::vector<float> a(4 << 20, 1.0f), b(4 << 20);
  RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
  auto killAt = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  if (ctx.rank() == victim) {
    std::thread([killAt] {
      std::this_thread::sleep_until(killAt);
      raise(SIGKILL);
    }).detach();
  }
  loomResult_t rc = loomSuccess;
  for (int i = 0; i < 100000 && rc == loomSuccess; ++i)
    rc = loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killAt)
                       .count();
  RANK_CHECK(rc == loomRemoteError, "got %s: %s", loomGetErrorString(rc),
             loomGetLastError(comm));
  RANK_CHECK(seconds < 10, "the error took %.1f s", seconds);
  std::string msg = loomGetLastError(comm);
  RANK_CHECK(msg.find("allreduce #") != std::string::npos, "message lacks context: %s",
             msg.c_str());
  RANK_CHECK(msg.find("rank " + std::to_string(victim) + " ") != std::string::npos,
             "message does not name rank %d: %s", victim, msg.c_str());
  fprintf(stderr, "rank %d after %.2f s: %s\n", ctx.rank(), seconds, msg.c_str());
  loomResult_t async = loomSuccess;
  RANK_LOOM(loomCommGetAsyncError(comm, &async));
  RANK_CHECK(async != loomSuccess, "no async error recorded");
  // The communicator refuses further work instead of hanging.
  rc = loomAllReduce(a.data(), b.data(), 16, loomFloat32, loomSum, comm, nullptr);
  RANK_CHECK(rc != loomSuccess, "a failed communicator accepted more work");
  RANK_LOOM(loomCommAbort(comm));
  return 0;
}

class KillMidAllreduce : public ::testing::TestWithParam<RankSet> {};

TEST_P(KillMidAllreduce, EveryOtherRankGetsAnErrorQuickly) {
  RankSetEnvironment environment(GetParam());
  const int victim = 2;
  ForkOptions options;
  options.timeoutSec = 60;
  options.expectedToDie = {victim};
  auto results = runRanks(GetParam().nranks, [&](RankContext& ctx) {
    return killedPeerRank(ctx, GetParam().transport, victim);
  }, options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
}

// Over UCX's TCP between two hosts (network namespaces, two ranks each): the endpoints to the
// other host have UCX's peer error handling, which makes the death an error.
class UcxFaultsTwoHosts : public TwoHostsTest {};

TEST_F(UcxFaultsTwoHosts, AKilledPeerIsAnErrorOnEveryRank) {
  setenv("UCX_TLS", "tcp", 1);
  const int victim = 2;
  ForkOptions options;
  options.timeoutSec = 60;
  options.expectedToDie = {victim};
  const std::string a = hostA_, b = hostB_;
  auto results = runRanks(4, [&](RankContext& ctx) {
    return killedPeerRank(ctx, "ucx", victim, [&](int rank) { return rank < 2 ? a : b; });
  }, options);
  unsetenv("UCX_TLS");
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
}

// Over UCX within a host: its TCP, its shared memory (posix and CMA: UCX_TLS=sm; posix alone:
// posix,sysv) and its default choice, all with UCX's peer error handling, under which a CMA read
// of the dead rank or a reset TCP connection fails the endpoint instead of aborting the reader
// (docs/ARCHITECTURE.md, "The UCX transport"); across hosts, UcxFaultsTwoHosts above.
INSTANTIATE_TEST_SUITE_P(Transports, KillMidAllreduce,
                         ::testing::Values(RankSet{4, "shm"}, RankSet{4, "tcp"},
                                           RankSet{4, "ucx", "tcp"}, RankSet{4, "ucx", "sm"},
                                           RankSet{4, "ucx", "posix,sysv"}, RankSet{4, "ucx"}),
                         rankSetName);

// A rank that stops answering mid-collective (SIGSTOP: alive, its sockets and shared memory
// intact, but silent) ends every other rank's call with an error within the deadline; none
// waits longer, whether or not it talks to the stopped rank directly.
class StoppedPeer : public ::testing::TestWithParam<RankSet> {};

TEST_P(StoppedPeer, EveryOtherRankGetsAnErrorWithinTheDeadline) {
  RankSetEnvironment environment(GetParam());
  const int n = GetParam().nranks, victim = 1;
  const int64_t timeoutMs = 3000;
  ForkOptions options;
  options.timeoutSec = 60;
  options.expectedToDie = {victim};
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = GetParam().transport;
    config.timeoutMs = int(timeoutMs);
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    const pid_t me = getpid();
    const std::vector<std::string> pids =
        ctx.allgather(std::string(reinterpret_cast<const char*>(&me), sizeof(me)));
    std::vector<float> a(1 << 20, 1.0f), b(1 << 20);
    RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    RANK_CHECK(b[12345] == float(n), "the first allreduce gave %g", double(b[12345]));
    if (ctx.rank() == victim) {
      raise(SIGSTOP);  // killed below by rank 0; never resumes
      return 1;
    }
    const auto start = std::chrono::steady_clock::now();
    loomResult_t rc = loomSuccess;
    for (int i = 0; i < 1000000 && rc == loomSuccess; ++i)
      rc = loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = loomGetLastError(comm);
    fprintf(stderr, "rank %d after %.2f s: %s: %s\n", ctx.rank(), seconds,
            loomGetErrorString(rc), msg.c_str());
    RANK_CHECK(rc == loomTimeout || rc == loomRemoteError, "got %s: %s", loomGetErrorString(rc),
               msg.c_str());
    // The deadline counts from a call's first idle moment; the calls before the stop are short.
    RANK_CHECK(seconds < timeoutMs / 1e3 + 3, "the error took %.1f s", seconds);
    RANK_CHECK(msg.find("allreduce #") != std::string::npos, "message lacks context: %s",
               msg.c_str());
    RANK_CHECK(msg.find("rank " + std::to_string(victim) + " ") != std::string::npos,
               "message does not name rank %d: %s", victim, msg.c_str());
    // Before the abort: rank 0's process serves the bootstrap, and its abort waits for every
    // rank to leave it, which the stopped rank never does.
    if (ctx.rank() == 0) {
      pid_t stopped = 0;
      memcpy(&stopped, pids[victim].data(), sizeof(stopped));
      kill(stopped, SIGKILL);
    }
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Transports, StoppedPeer,
                         ::testing::Values(RankSet{3, "ucx", "tcp"}, RankSet{3, "ucx", "sm"},
                                           RankSet{3, "ucx"}),
                         rankSetName);

TEST(Timeouts, APeerThatNeverCallsTimesOut) {
  auto results = runRanks(2, [](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 1500;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    if (ctx.rank() == 0) {
      float x = 1, y = 0;
      auto start = std::chrono::steady_clock::now();
      loomResult_t rc = loomAllReduce(&x, &y, 1, loomFloat32, loomSum, comm, nullptr);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      RANK_CHECK(rc == loomTimeout, "got %s", loomGetErrorString(rc));
      RANK_CHECK(s > 1.0 && s < 6, "timed out after %.1f s", s);
      std::string msg = loomGetLastError(comm);
      RANK_CHECK(msg.find("rank 1") != std::string::npos, "message: %s", msg.c_str());
    }
    ctx.allgather("");  // rank 1 waits here, silent, until rank 0 has timed out
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

// A rank that destroys its communicator after its last call and exits is no dead rank: the
// others go on with calls of their own, though the host's arena (mapped by a direct
// allreduce) holds its record and every wait of theirs looks there for dead members.
TEST(Leaving, ARankThatLeftAndExitedIsNotTakenForADeadOne) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = "shm";
    config.algorithms = "allreduce=direct";
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    const pid_t me = getpid();
    const std::vector<std::string> pids =
        ctx.allgather(std::string(reinterpret_cast<const char*>(&me), sizeof(me)));
    float x = 1, sum = 0;
    RANK_LOOM(loomAllReduce(&x, &sum, 1, loomFloat32, loomSum, comm, nullptr));
    RANK_CHECK(sum == 3, "the allreduce gave %g", double(sum));
    if (ctx.rank() == 2) {
      RANK_LOOM(loomCommDestroy(comm));
      return 0;
    }
    if (ctx.rank() == 1) {
      // Sends once rank 2 has exited, while rank 0 waits in its receive.
      pid_t left = 0;
      memcpy(&left, pids[2].data(), sizeof(left));
      const int pidfd = transports::pidfdOpen(left);
      const auto start = std::chrono::steady_clock::now();
      bool exited = false;
      while (!(exited = transports::processExited(pidfd, left)) &&
             std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (pidfd >= 0) close(pidfd);
      RANK_CHECK(exited, "rank 2 (pid %d) has not exited", int(left));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 looks meanwhile
      const float value = 7;
      RANK_LOOM(loomSend(&value, 1, loomFloat32, 0, comm, nullptr));
    } else {
      float got = 0;
      RANK_LOOM(loomRecv(&got, 1, loomFloat32, 1, comm, nullptr));
      RANK_CHECK(got == 7, "received %g", double(got));
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
