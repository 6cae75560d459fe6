// The tuner inside a communicator (comm/comm.cc, tuner/tuner.h): LOOM_TUNE picks the
// algorithm a call runs, the cost model decides the rest, and a bad LOOM_TUNE fails init with
// its parse error on every rank. What each call ran comes from loomCommGetLastAlgorithm, why
// (a rule, or the model) from the communicator (Comm::lastSource).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/params.h"
#include "comm/comm.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

constexpr int kRanks = 4;

// A source's name, as the tuner's decision table writes it.
std::string sourceName(tuner::Source s) {
  tuner::Decision d;
  d.source = s;
  return tuner::sourceText(d);
}

TEST(Tune, LoomTunePicksTheAlgorithmAndTheModelTheRest) {
  auto results = runRanks(kRanks, [](RankContext& ctx) {
    setenv("LOOM_TUNE", "allreduce size=0-1M -> tree lanes=2; allgather -> rd", 1);
    logInRank("INFO", "TUNE");  // the decision table
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    const size_t counts[] = {1001, size_t(1) << 19};  // 4004 B (rule 1), 2 MiB (the model)
    const char* algorithm = nullptr;
    for (size_t count : counts) {
      std::vector<float> in(count, float(ctx.rank() + 1)), out(count, 0);
      RANK_LOOM(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr));
      for (float v : out) RANK_CHECK(v == 10.0f, "allreduce of %zu: %g, not 10", count, v);
      RANK_LOOM(loomCommGetLastAlgorithm(comm, &algorithm));
      const tuner::Source source = commOf(comm).lastSource();
      const tuner::Source want = count == 1001 ? tuner::Source::Rule : tuner::Source::Model;
      RANK_CHECK(source == want, "count %zu was decided by %s, not %s", count,
                 sourceName(source).c_str(), sourceName(want).c_str());
      if (count == 1001)
        RANK_CHECK(std::string(algorithm) == "tree lanes=2", "count 1001 ran %s", algorithm);
    }
    std::vector<int32_t> mine(7, ctx.rank()), all(7 * kRanks, -1);
    RANK_LOOM(loomAllGather(mine.data(), all.data(), 7, loomInt32, comm, nullptr));
    for (size_t i = 0; i < all.size(); ++i)
      RANK_CHECK(all[i] == int32_t(i / 7), "allgather element %zu: %d", i, all[i]);
    RANK_LOOM(loomCommGetLastAlgorithm(comm, &algorithm));
    RANK_CHECK(std::string(algorithm).rfind("rd", 0) == 0, "allgather ran %s", algorithm);
    RANK_CHECK(commOf(comm).lastSource() == tuner::Source::Rule,
               "the allgather was decided by %s, not a rule",
               sourceName(commOf(comm).lastSource()).c_str());
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  ASSERT_EQ(describeFailures(results), "");
  // Rank 0 logs the communicator's decision table once, at INFO.
  EXPECT_NE(results[0].output.find("decision table (cost model, LOOM_TUNE rules first)"),
            std::string::npos)
      << results[0].output;
  EXPECT_NE(results[0].output.find("allreduce: 8-1M tree lanes=2 (rule 1); 2M-"), std::string::npos)
      << results[0].output;
  EXPECT_EQ(results[1].output.find("decision table"), std::string::npos);
}

TEST(Tune, BadLoomTuneFailsInitWithItsParseError) {
  auto results = runRanks(kRanks, [](RankContext& ctx) {
    setenv("LOOM_TUNE", "allreduce -> ring\nallreduce size=16Q -> rd", 1);
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    const loomResult_t rc = initComm(ctx, &comm);
    RANK_CHECK(rc == loomInvalidArgument, "init returned %s", loomGetErrorString(rc));
    const std::string error = loomGetLastError(nullptr);
    RANK_CHECK(error.find("LOOM_TUNE line 2: \"size=16Q\": unknown unit \"Q\" (use K, M, G)") !=
                   std::string::npos,
               "error: %s", error.c_str());
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
