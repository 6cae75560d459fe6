// The flight recorder in real communicators: a failed call writes every rank's dump, and
// loom-trace's analysis of them names the rank that never made the call; a mismatch shows as
// the collective the ranks called differently; a fatal signal and SIGUSR1 write the dump; an
// abort writes it; loom-trace prints the findings.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "toolkit/trace_analysis.h"

namespace loom::testing {
namespace {

// Short: the tests wait for it on purpose.
constexpr int kTimeoutMs = 3000;

// A communicator whose flight recorder writes into dir, dumping on `when`.
loomResult_t recordedComm(RankContext& ctx, const std::string& dir, const char* when,
                          const char* transport, loomComm_t* comm) {
  setenv("LOOM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  setenv("LOOM_FLIGHT_RECORDER_DUMP", when, 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = transport;
  config.timeoutMs = kTimeoutMs;
  return initComm(ctx, comm, &config);
}

std::vector<toolkit::TraceDump> readDumps(const std::string& dir) {
  std::vector<toolkit::TraceDump> dumps;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string error;
    auto d = toolkit::readTraceDump(e.path().string(), &error);
    EXPECT_TRUE(d) << error;
    if (d) dumps.push_back(std::move(*d));
  }
  return dumps;
}

std::string runTool(const std::string& dir) {
  std::string out;
  FILE* p = popen((std::string(LOOM_TRACE_BINARY) + " " + dir + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  return out;
}

class FlightRecorderRanks : public ::testing::TestWithParam<const char*> {};

// Rank 2 skips the fourth allreduce and writes its dump on demand; the others time out in it
// and write theirs. The analysis names rank 2 as behind and the failed calls as waiting on it.
TEST_P(FlightRecorderRanks, TheRankThatSkippedACallIsNamedBehind) {
  TempDir dir("trace-behind");
  std::filesystem::create_directories(dir.path());
  auto results = runRanks(3, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(recordedComm(ctx, dir.path(), "error", GetParam(), &comm));
    float x[64], y[64];
    for (float& v : x) v = float(ctx.rank());
    for (int i = 0; i < 3; ++i) RANK_LOOM(loomAllReduce(x, y, 64, loomFloat32, loomSum, comm, 0));
    if (ctx.rank() == 2) {
      RANK_LOOM(loomCommDumpTrace(comm, nullptr));
      ctx.allgather("");  // the others' calls have failed
    } else {
      loomResult_t rc = loomAllReduce(x, y, 64, loomFloat32, loomSum, comm, nullptr);
      RANK_CHECK(rc != loomSuccess, "the allreduce without rank 2 succeeded");
      ctx.allgather("");
    }
    loomCommAbort(comm);
    return 0;
  }, ForkOptions::timeout(60));
  ASSERT_EQ(describeFailures(results), "");
  auto dumps = readDumps(dir.path());
  ASSERT_EQ(dumps.size(), 3u);
  auto analyses = toolkit::analyzeTraces(dumps);
  ASSERT_EQ(analyses.size(), 1u);
  const toolkit::TraceAnalysis& a = analyses[0];
  std::string report;
  for (const std::string& line : a.report) report += line + "\n";
  EXPECT_EQ(a.behindRanks, std::vector<int>{2}) << report;
  EXPECT_EQ(a.frontCollective, 4u) << report;
  EXPECT_EQ(a.mismatchedCollective, 0u) << report;
  ASSERT_TRUE(a.firstFailedRank == 0 || a.firstFailedRank == 1) << report;
  bool waitedOnRank2 = false;
  for (auto& [rank, peers] : a.waitedOn)
    for (int p : peers) waitedOnRank2 |= p == 2;
  EXPECT_TRUE(waitedOnRank2) << report;
  for (const toolkit::TraceDump& d : dumps) {
    EXPECT_EQ(d.reason, d.rank == 2 ? "request" : "error");
    EXPECT_EQ(d.calls.front().algorithm.empty(), false);
  }
  const std::string printed = runTool(dir.path());
  EXPECT_NE(printed.find("rank 2 is behind: ranks 0, 1 are in collective #4 allreduce count 64"),
            std::string::npos)
      << printed;
}

// Over tcp (shm's arena stamps catch this by themselves), rank 1 asks for more elements than
// rank 0: the calls fail or time out, and the dumps show the collective they called differently.
TEST(FlightRecorder, AMismatchShowsAsTheCollectiveCalledDifferently) {
  TempDir dir("trace-mismatch");
  std::filesystem::create_directories(dir.path());
  auto results = runRanks(2, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(recordedComm(ctx, dir.path(), "none", "tcp", &comm));
    std::vector<float> x(1000, 1.0f), y(1000);
    RANK_LOOM(loomAllReduce(x.data(), y.data(), 10, loomFloat32, loomSum, comm, nullptr));
    (void)loomAllReduce(x.data(), y.data(), ctx.rank() == 0 ? 100 : 1000, loomFloat32, loomSum,
                        comm, nullptr);
    RANK_LOOM(loomCommDumpTrace(comm, nullptr));
    ctx.allgather("");
    loomCommAbort(comm);
    return 0;
  }, ForkOptions::timeout(60));
  ASSERT_EQ(describeFailures(results), "");
  auto a = toolkit::analyzeTraces(readDumps(dir.path()));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].mismatchedCollective, 2u);
  EXPECT_EQ(a[0].mismatch.at("allreduce count 100 float sum"), std::vector<int>{0});
  EXPECT_EQ(a[0].mismatch.at("allreduce count 1000 float sum"), std::vector<int>{1});
}

// A rank that dies of SIGSEGV writes its dump first (and still dies of the signal); SIGUSR1
// writes the dump where asked and the rank goes on; an abort writes it too.
TEST(FlightRecorder, SignalsAndAbortsWriteTheDump) {
  TempDir dir("trace-signals");
  std::filesystem::create_directories(dir.path());
  for (const char* event : {"fatal", "usr1", "abort"}) {
    SCOPED_TRACE(event);
    std::filesystem::remove_all(dir.path());
    std::filesystem::create_directories(dir.path());
    ForkOptions options = ForkOptions::timeout(60);
    if (std::string(event) == "fatal") options.expectedToDie = {1};
    auto results = runRanks(2, [&](RankContext& ctx) {
      loomComm_t comm = nullptr;
      RANK_LOOM(recordedComm(ctx, dir.path(), event, "auto", &comm));
      int32_t x = 1, y = 0;
      for (int i = 0; i < 5; ++i) RANK_LOOM(loomAllReduce(&x, &y, 1, loomInt32, loomSum, comm, 0));
      ctx.allgather("");
      if (ctx.rank() == 1) {
        if (std::string(event) == "fatal") raise(SIGSEGV);
        if (std::string(event) == "usr1") raise(SIGUSR1);
        if (std::string(event) == "abort") loomCommAbort(comm);
        else loomCommDestroy(comm);
      } else {
        loomCommDestroy(comm);
      }
      return 0;
    }, options);
    if (std::string(event) == "fatal") {
      EXPECT_EQ(results[1].signal, SIGSEGV);
      EXPECT_EQ(results[0].exitCode, 0) << results[0].output;
    } else {
      ASSERT_EQ(describeFailures(results), "");
    }
    auto dumps = readDumps(dir.path());
    ASSERT_EQ(dumps.size(), 1u);  // rank 1's only
    EXPECT_EQ(dumps[0].rank, 1);
    EXPECT_EQ(dumps[0].reason, std::string(event) == "fatal"  ? "signal SIGSEGV"
                               : std::string(event) == "usr1" ? "signal SIGUSR1"
                                                              : "abort");
    EXPECT_EQ(dumps[0].callsRecorded, 5u);
    for (const toolkit::TraceCall& c : dumps[0].calls) EXPECT_EQ(c.state, "done");
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, FlightRecorderRanks, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace loom::testing
