// The direct shared-memory allreduce (collectives/direct.cc), forced through
// loomConfig_t.algorithms: every dtype and op checked bit for bit for N = 2..8 forked ranks,
// sizes beyond the arena (many chunks, calls alternating arena halves), refusal across hosts,
// and a rank that dies or stays away while the others wait at a barrier.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/two_hosts.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

// Around the one-shot limit (16 KiB = 4096 floats) and past the 64 KiB arena's 8 KiB per
// call slots: with 8 ranks a chunk is 256 floats, so 1 << 20 takes thousands of chunks.
const uint64_t kFp32Counts[] = {0, 1, 7, 4096, 4097, 65537, uint64_t(1) << 20};

// Creates a communicator forced to the direct allreduce (or `algorithms`), with an arena of
// arenaBytes.
loomResult_t directComm(RankContext& ctx, const char* arenaBytes, int timeoutMs, loomComm_t* comm,
                        const char* algorithms = "allreduce=direct") {
  setenv("LOOM_SHM_DIRECT_BYTES", arenaBytes, 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.algorithms = algorithms;
  config.timeoutMs = timeoutMs;
  const loomResult_t rc = initComm(ctx, comm, &config);
  unsetenv("LOOM_SHM_DIRECT_BYTES");
  params::reloadFromEnvironment();
  return rc;
}

// One allreduce of count elements, checked; returns the failure or "".
std::string allReduceCase(loomComm_t comm, int rank, int n, loomDataType_t t, loomRedOp_t op,
                          uint64_t count, bool inPlace) {
  const size_t es = typeSize(t);
  std::vector<char> in(count * es + 1), out(count * es + 1);
  fillInput(in.data(), count, op, t, n, rank);
  void* dst = inPlace ? in.data() : out.data();
  const std::string what =
      strprintf("%s %s count %llu %s: ", typeName(t), opNameOf(op), (unsigned long long)count,
                inPlace ? "in place" : "out of place");
  if (loomAllReduce(in.data(), dst, count, t, op, comm, nullptr) != loomSuccess)
    return what + loomGetLastError(comm) + "\n";
  uint64_t firstBad = 0;
  const uint64_t bad = countReductionErrors(dst, count, op, t, n, 0, &firstBad);
  if (bad == 0) return "";
  return what + strprintf("%llu wrong elements, the first at %llu\n", (unsigned long long)bad,
                          (unsigned long long)firstBad);
}

class Direct : public ::testing::TestWithParam<int> {};

TEST_P(Direct, EveryTypeOpAndSize) {
  const int n = GetParam();
  const auto results = runRanks(
      n,
      [&](RankContext& ctx) {
        int failures = 0;
        auto report = [&](const std::string& text) {
          if (!text.empty()) fprintf(stderr, "rank %d: %s", ctx.rank(), text.c_str()), ++failures;
        };
        for (const char* arena : {"4M", "64K"}) {
          loomComm_t comm = nullptr;
          RANK_LOOM(directComm(ctx, arena, 60000, &comm));
          for (bool inPlace : {false, true}) {
            for (loomDataType_t t : kAllTypes) {
              report(allReduceCase(comm, ctx.rank(), n, t, loomSum, 1001, inPlace));
            }
            for (loomRedOp_t op : kAllOps) {
              report(allReduceCase(comm, ctx.rank(), n, loomFloat32, op, 5000, inPlace));
            }
            for (uint64_t count : kFp32Counts) {
              report(allReduceCase(comm, ctx.rank(), n, loomFloat32, loomSum, count, inPlace));
            }
          }
          // After a failure the peers may be gone: abort rather than wait for them in destroy.
          RANK_LOOM(failures == 0 ? loomCommDestroy(comm) : loomCommAbort(comm));
        }
        return failures == 0 ? 0 : 1;
      },
      ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Direct, ::testing::Values(2, 3, 4, 6, 8),
                         [](const auto& info) { return "x" + std::to_string(info.param); });

// No arena, or no shared memory at all (LOOM_TRANSPORT=tcp): a forced direct refuses clearly.
TEST(DirectErrors, NoArenaRefuses) {
  const auto results = runRanks(
      2,
      [](RankContext& ctx) {
        for (bool tcp : {false, true}) {
          if (tcp) setenv("LOOM_TRANSPORT", "tcp", 1);
          loomComm_t comm = nullptr;
          RANK_LOOM(directComm(ctx, tcp ? "4M" : "0", 30000, &comm));
          unsetenv("LOOM_TRANSPORT");
          float x = 1, y = 0;
          RANK_CHECK(
              loomAllReduce(&x, &y, 1, loomFloat32, loomSum, comm, nullptr) == loomInvalidArgument,
              "an allreduce without an arena ran (tcp: %d)", tcp);
          const std::string msg = loomGetLastError(comm);
          RANK_CHECK(msg.find("no shared-memory arena (LOOM_SHM_DIRECT_BYTES is 0, or "
                              "LOOM_TRANSPORT=tcp)") != std::string::npos,
                     "message: %s", msg.c_str());
          // The refusal needs no peer; wait for the other rank's init before rank 0 (whose
          // process holds the bootstrap root) destroys its communicator.
          ctx.allgather("");
          RANK_LOOM(loomCommDestroy(comm));
        }
        return 0;
      },
      ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

// The arena's algorithms: direct (through the arena) and peer (reading the others' buffers).
class ArenaAlgorithm : public ::testing::TestWithParam<const char*> {};

TEST_P(ArenaAlgorithm, APeerKilledAtABarrierIsAnErrorEverywhere) {
  const int n = 4, victim = 2;
  const std::string algorithms = std::string("allreduce=") + GetParam();
  ForkOptions options = ForkOptions::timeout(60);
  options.expectedToDie = {victim};
  const auto results = runRanks(
      n,
      [&](RankContext& ctx) {
        loomComm_t comm = nullptr;
        // Far beyond the 10 s bound: detection must not rely on the deadline.
        RANK_LOOM(directComm(ctx, "4M", 60000, &comm, algorithms.c_str()));
        std::vector<float> a(1 << 18, 1.0f), b(a.size());
        for (int i = 0; i < 3; ++i)
          RANK_LOOM(
              loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
        ctx.allgather("");  // everyone has mapped the arena and passed its barriers
        if (ctx.rank() == victim) raise(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        const loomResult_t rc =
            loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string msg = loomGetLastError(comm);
        RANK_CHECK(rc == loomRemoteError, "got %s: %s", loomGetErrorString(rc), msg.c_str());
        RANK_CHECK(seconds < 10, "the error took %.1f s", seconds);
        RANK_CHECK(msg.find("allreduce #3") != std::string::npos, "message lacks context: %s",
                   msg.c_str());
        fprintf(stderr, "rank %d after %.2f s: %s\n", ctx.rank(), seconds, msg.c_str());
        RANK_LOOM(loomCommAbort(comm));
        return 0;
      },
      options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
}

TEST(DirectErrors, APeerThatNeverComesTimesOutAtTheBarrier) {
  const auto results = runRanks(
      2,
      [](RankContext& ctx) {
        loomComm_t comm = nullptr;
        RANK_LOOM(directComm(ctx, "4M", 1500, &comm));
        if (ctx.rank() == 0) {
          float x = 1, y = 0;
          const auto start = std::chrono::steady_clock::now();
          const loomResult_t rc = loomAllReduce(&x, &y, 1, loomFloat32, loomSum, comm, nullptr);
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const std::string msg = loomGetLastError(comm);
          RANK_CHECK(rc == loomTimeout, "got %s: %s", loomGetErrorString(rc), msg.c_str());
          RANK_CHECK(s > 1.0 && s < 6, "timed out after %.1f s", s);
          RANK_CHECK(msg.find("rank 0: allreduce #0 (direct), lane 0 step 1 (Barrier of the 2 "
                              "ranks of this host; not there yet: rank 1)") != std::string::npos,
                     "message: %s", msg.c_str());
        }
        ctx.allgather("");  // rank 1 stays away until rank 0 has timed out
        RANK_LOOM(loomCommAbort(comm));
        return 0;
      },
      ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(DirectErrors, ArenaAlgorithm, ::testing::Values("direct", "peer"),
                         [](const auto& info) { return std::string(info.param); });

// Ranks on two hosts (network namespaces) share no memory: direct and peer refuse, clearly.
class DirectTwoHosts : public TwoHostsTest {};

TEST_F(DirectTwoHosts, Refuses) {
  const std::string a = hostA_, b = hostB_;
  for (const char* algorithm : {"direct", "peer"}) {
  const std::string algorithms = std::string("allreduce=") + algorithm;
  const std::string expected = strprintf(
      "%s (forced by LOOM_ALGO) cannot serve this call: %s needs every rank on one host, but "
      "ranks 0 and 1 are on different hosts",
      algorithms.c_str(), algorithm);
  const auto results = runRanks(
      4,
      [&](RankContext& ctx) {
        RANK_CHECK(enter(ctx.rank() % 2 == 0 ? a : b) == 0, "setns failed");
        loomComm_t comm = nullptr;
        RANK_LOOM(directComm(ctx, "4M", 30000, &comm, algorithms.c_str()));
        float x = 1, y = 0;
        const loomResult_t rc = loomAllReduce(&x, &y, 1, loomFloat32, loomSum, comm, nullptr);
        const std::string msg = loomGetLastError(comm);
        RANK_CHECK(rc == loomInvalidArgument, "got %s: %s", loomGetErrorString(rc), msg.c_str());
        RANK_CHECK(msg.find(expected) != std::string::npos, "message: %s", msg.c_str());
        // The refusal needs no peer; wait for every rank's init before rank 0 (whose process
        // holds the bootstrap root) destroys its communicator and exits.
        ctx.allgather("");
        RANK_LOOM(loomCommDestroy(comm));
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "") << algorithm;
  }
}

}  // namespace
}  // namespace loom::testing
