// The flight recorder keeps the last calls in a ring and writes them as JSON that loom-trace
// reads back; loom-trace's analysis finds the rank behind, the mismatched collective and the
// peers a failure waited on.
#include "comm/flight_recorder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "toolkit/trace_analysis.h"

namespace loom {
namespace {

using toolkit::TraceCall;
using toolkit::TraceDump;

FlightRecorderOptions keep(uint32_t capacity, const std::string& dir) {
  FlightRecorderOptions o;
  o.capacity = capacity;
  o.dir = dir;
  return o;
}

TEST(FlightRecorder, KeepsTheLastCallsAndWritesThemAsJson) {
  testing::TempDir dir("flight");
  std::filesystem::create_directories(dir.path());
  FlightRecorder r;
  r.configure(keep(4, dir.path()), 0xabcdef0123456789ull, 1, 3);
  for (uint64_t i = 1; i <= 6; ++i) {
    uint64_t call = r.open("allreduce", true, 100 * i, 400 * i, loomFloat32, loomMax, 0,
                           FlightRecorder::State::Running);
    ASSERT_EQ(call, i);
    r.setAlgorithm(call, "ring", 2);
    if (i < 6) r.close(call, i != 5);
  }
  r.noteFailure("allreduce #5: no progress \"quoted\"\n from rank 2");
  std::string written;
  ASSERT_EQ(r.dump("request", nullptr, &written), loomSuccess);
  EXPECT_EQ(written, dir.path() + "/loom-trace-abcdef0123456789-rank1.json");

  std::string error;
  auto d = toolkit::readTraceDump(written, &error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->comm, "abcdef0123456789");
  EXPECT_EQ(d->rank, 1);
  EXPECT_EQ(d->nranks, 3);
  EXPECT_EQ(d->reason, "request");
  EXPECT_EQ(d->callsRecorded, 6u);
  EXPECT_EQ(d->failedCall, 5u);
  EXPECT_EQ(d->failure, "allreduce #5: no progress \"quoted\"\n from rank 2");
  ASSERT_EQ(d->calls.size(), 4u);  // the ring kept calls 3 to 6
  for (size_t k = 0; k < 4; ++k) {
    const TraceCall& c = d->calls[k];
    EXPECT_EQ(c.call, 3 + k);
    EXPECT_EQ(c.collectiveNumber, 3 + k);
    EXPECT_EQ(c.count, 100 * (3 + k));
    EXPECT_EQ(c.bytes, 400 * (3 + k));
    EXPECT_EQ(c.signature(), "allreduce count " + std::to_string(100 * (3 + k)) + " float max");
    EXPECT_EQ(c.algorithm, "ring");
    EXPECT_EQ(c.lanes, 2);
    EXPECT_GT(c.startUs, 0u);
  }
  EXPECT_EQ(d->calls[2].state, "failed");
  EXPECT_EQ(d->calls[3].state, "running");
  EXPECT_EQ(d->calls[3].endUs, 0u);
  EXPECT_GE(d->calls[1].endUs, d->calls[1].startUs);
}

TEST(FlightRecorder, SendsAndReceivesTakeNoCollectiveNumber) {
  testing::TempDir dir("flight");
  std::filesystem::create_directories(dir.path());
  FlightRecorder r;
  r.configure(keep(8, dir.path()), 1, 0, 2);
  r.close(r.open("sendrecv", false, 2, 64, loomUint8, loomSum, -1, FlightRecorder::State::Running),
          true);
  uint64_t queued = r.open("broadcast", true, 8, 8, loomInt8, loomSum, 1,
                           FlightRecorder::State::Queued);
  std::string written, error;
  ASSERT_EQ(r.dump("request", (dir.path() + "/mine.json").c_str(), &written), loomSuccess);
  auto d = toolkit::readTraceDump(written, &error);
  ASSERT_TRUE(d) << error;
  ASSERT_EQ(d->calls.size(), 2u);
  EXPECT_EQ(d->calls[0].collectiveNumber, 0u);
  EXPECT_EQ(d->calls[1].collectiveNumber, 1u);
  EXPECT_EQ(d->calls[1].state, "queued");
  EXPECT_EQ(d->calls[1].signature(), "broadcast count 8 int8 root 1");
  r.setState(queued, FlightRecorder::State::Running);
  ASSERT_EQ(r.dump("request", written.c_str(), nullptr), loomSuccess);
  EXPECT_EQ(toolkit::readTraceDump(written, &error)->calls[1].state, "running");
}

TEST(FlightRecorder, OffRecordsNothingAndRefusesToDump) {
  FlightRecorder r;
  r.configure(keep(0, "/tmp"), 1, 0, 1);
  EXPECT_FALSE(r.enabled());
  EXPECT_EQ(r.open("allreduce", true, 1, 4, loomFloat32, loomSum, 0,
                   FlightRecorder::State::Running),
            0u);
  EXPECT_EQ(r.dump("request", nullptr, nullptr), loomInvalidUsage);
}

TEST(FlightRecorder, AnUnwritablePathIsASystemError) {
  FlightRecorder r;
  r.configure(keep(2, "/nonexistent-dir-of-loom"), 1, 0, 1);
  EXPECT_EQ(r.dump("request", nullptr, nullptr), loomSystemError);
}

TEST(FlightRecorder, DumpWordsParseAndAnUnknownOneIsNamed) {
  unsigned bits = 0;
  std::string error;
  ASSERT_EQ(parseDumpWhen("error,abort,fatal", &bits, &error), loomSuccess);
  EXPECT_EQ(bits, unsigned(kDumpOnError | kDumpOnAbort | kDumpOnFatal));
  ASSERT_EQ(parseDumpWhen("none", &bits, &error), loomSuccess);
  EXPECT_EQ(bits, 0u);
  ASSERT_EQ(parseDumpWhen("usr1", &bits, &error), loomSuccess);
  EXPECT_EQ(bits, unsigned(kDumpOnUsr1));
  EXPECT_EQ(parseDumpWhen("error,timeouts", &bits, &error), loomInvalidArgument);
  EXPECT_NE(error.find("'timeouts'"), std::string::npos) << error;
}

// A dump of rank `rank` of 3 whose collectives have the given counts (allreduce, float, sum).
TraceDump dumpOf(int rank, std::vector<uint64_t> counts, const std::string& lastState,
                 const std::string& failure = "") {
  TraceDump d;
  d.comm = "c0ffee";
  d.rank = rank;
  d.nranks = 3;
  d.failure = failure;
  for (size_t i = 0; i < counts.size(); ++i) {
    TraceCall c;
    c.call = c.collectiveNumber = i + 1;
    c.collective = "allreduce", c.dtype = "float", c.op = "sum";
    c.count = counts[i];
    c.state = i + 1 == counts.size() ? lastState : "done";
    c.endUs = c.state == "running" ? 0 : 1000 * (i + 1) + rank;
    d.calls.push_back(c);
  }
  d.callsRecorded = counts.size();
  if (!failure.empty()) d.failedCall = counts.size();
  return d;
}

TEST(TraceAnalysis, NamesTheRankBehindAndThePeersTheFailuresWaitedOn) {
  std::vector<TraceDump> dumps = {
      dumpOf(0, {8, 8, 8}, "failed", "allreduce #3: lane 0 step 1 (Recv from rank 2, 0 of 4)"),
      dumpOf(1, {8, 8, 8}, "failed", "allreduce #3: aborted by a peer: rank 0: ..."),
      dumpOf(2, {8, 8}, "done"),
  };
  dumps[1].calls.back().endUs += 500;  // rank 1 failed after rank 0
  auto all = toolkit::analyzeTraces(dumps);
  ASSERT_EQ(all.size(), 1u);
  const toolkit::TraceAnalysis& a = all[0];
  EXPECT_TRUE(a.missingRanks.empty());
  EXPECT_EQ(a.frontCollective, 3u);
  EXPECT_EQ(a.behindRanks, std::vector<int>{2});
  EXPECT_EQ(a.mismatchedCollective, 0u);
  EXPECT_EQ(a.firstFailedRank, 0);
  EXPECT_EQ(a.waitedOn.at(0), std::vector<int>{2});
  bool named = false;
  for (const std::string& line : a.report)
    named |= line.find("rank 2 is behind: ranks 0, 1 are in collective #3") == 0;
  EXPECT_TRUE(named);
}

TEST(TraceAnalysis, FindsTheFirstCollectiveCalledDifferently) {
  std::vector<TraceDump> dumps = {dumpOf(0, {8, 100, 5}, "done"), dumpOf(1, {8, 100, 5}, "done"),
                                  dumpOf(2, {8, 200, 5}, "done")};
  auto a = toolkit::analyzeTraces({dumps[0], dumps[2]})[0];  // rank 1's dump is missing
  EXPECT_EQ(a.missingRanks, std::vector<int>{1});
  EXPECT_EQ(a.mismatchedCollective, 2u);
  EXPECT_EQ(a.mismatch.at("allreduce count 100 float sum"), std::vector<int>{0});
  EXPECT_EQ(a.mismatch.at("allreduce count 200 float sum"), std::vector<int>{2});
  EXPECT_TRUE(a.behindRanks.empty());
  EXPECT_EQ(a.firstFailedRank, -1);
}

TEST(TraceAnalysis, AFileThatIsNotADumpIsRefused) {
  std::string error;
  EXPECT_FALSE(toolkit::readTraceDump("/nonexistent.json", &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace loom
