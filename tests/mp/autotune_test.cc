// LOOM_AUTOTUNE in a communicator (tuner/autotuner.h, tuner/autotune.h): the first
// communicator measures each size bucket once and files the winners under the topology
// signature; the next one reads them and measures nothing; ranks whose hosts' files differ
// trust none of them; without LOOM_AUTOTUNE nothing is measured or written. What happened is
// read from the log (INFO "autotune: measured", TRACE "(autotune)" per call), which the harness
// captures from every rank's stderr.
#include "tuner/autotune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "tuner/tuner.h"

namespace loom::testing {
namespace {

using collectives::Collective;

constexpr char kMarker[] = "=== second communicator ===";
constexpr size_t kSmall = 1001;             // float: 4004 B, bucket 12
constexpr size_t kLarge = size_t(1) << 16;  // float: 256 KiB, bucket 18
constexpr size_t kGather = 7;               // int32 per rank

// In a rank: this test's settings, with the log that shows autotune's work.
void useEnvironment(const std::string& cacheDir, bool autotune) {
  setenv("LOOM_CACHE_DIR", cacheDir.c_str(), 1);
  if (autotune)
    setenv("LOOM_AUTOTUNE", "1", 1);
  else
    unsetenv("LOOM_AUTOTUNE");
  setenv("LOOM_DEBUG", "TRACE", 1);
  setenv("LOOM_DEBUG_SUBSYS", "COLL,TUNE", 1);
  params::reloadFromEnvironment();
}

// One communicator's calls, each checked bit for bit (small integers are exact in float):
// allreduce out of place, in place (the larger bucket), an allgather, then the first bucket
// again. The out-of-place input must come back untouched.
int runCalls(RankContext& ctx) {
  const int n = ctx.nranks();
  const float sum = float(n * (n + 1) / 2);
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm));
  for (int round = 0; round < 2; ++round) {
    std::vector<float> in(kSmall, float(ctx.rank() + 1)), out(kSmall, -1);
    RANK_LOOM(loomAllReduce(in.data(), out.data(), kSmall, loomFloat32, loomSum, comm, nullptr));
    for (size_t i = 0; i < kSmall; ++i) {
      RANK_CHECK(out[i] == sum, "allreduce element %zu: %g, not %g", i, out[i], sum);
      RANK_CHECK(in[i] == float(ctx.rank() + 1), "allreduce changed its input: %g", in[i]);
    }
    if (round == 1) break;
    std::vector<float> inPlace(kLarge, float(ctx.rank() + 1));
    RANK_LOOM(
        loomAllReduce(inPlace.data(), inPlace.data(), kLarge, loomFloat32, loomSum, comm, nullptr));
    for (size_t i = 0; i < kLarge; ++i)
      RANK_CHECK(inPlace[i] == sum, "in-place allreduce element %zu: %g", i, inPlace[i]);
    std::vector<int32_t> mine(kGather, ctx.rank()), all(kGather * size_t(n), -1);
    RANK_LOOM(loomAllGather(mine.data(), all.data(), kGather, loomInt32, comm, nullptr));
    for (size_t i = 0; i < all.size(); ++i)
      RANK_CHECK(all[i] == int32_t(i / kGather), "allgather element %zu: %d", i, all[i]);
  }
  RANK_LOOM(loomCommDestroy(comm));
  return 0;
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The log of the first and of the second communicator of a rank.
std::pair<std::string, std::string> splitAtMarker(const std::string& output) {
  const size_t at = output.find(kMarker);
  if (at == std::string::npos) return {output, ""};
  return {output.substr(0, at), output.substr(at)};
}

// Collective calls the log shows (one TRACE line each), and those autotune decided.
size_t callsLogged(const std::string& log) { return countOf(log, " lane(s)"); }
size_t autotuneCallsLogged(const std::string& log) { return countOf(log, "(autotune), "); }

// The autotune files in a directory.
std::vector<std::filesystem::path> autotuneFiles(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::exists(dir)) return files;
  for (const auto& f : std::filesystem::directory_iterator(dir))
    if (f.path().filename().string().rfind("autotune-", 0) == 0) files.push_back(f.path());
  return files;
}

// The topology signature a cache file is named after.
std::string signatureOf(const std::filesystem::path& file) {
  const std::string name = file.stem().string();
  return name.substr(std::string("autotune-").size());
}

class Autotune : public ::testing::TestWithParam<int> {};

TEST_P(Autotune, FirstCommunicatorMeasuresTheNextReads) {
  const int n = GetParam();
  TempDir cache("autotune-reuse");
  const std::string dir = cache.path();
  auto results = runRanks(n, [&](RankContext& ctx) {
    useEnvironment(dir, true);
    if (runCalls(ctx) != 0) return 1;
    ctx.allgather("");  // every rank is done with the first communicator
    fprintf(stderr, "%s\n", kMarker);
    return runCalls(ctx);
  });
  ASSERT_EQ(describeFailures(results), "");

  // One file, with an entry for each bucket the calls used.
  const auto files = autotuneFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  tuner::AutotuneCache table;
  std::vector<std::string> skipped;
  Status st = table.load(files[0].string(), signatureOf(files[0]), &skipped);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(table.size(), 3u);
  const int gatherBucket = tuner::Tuner::sizeBucket(kGather * 4 * size_t(n));
  for (tuner::AutotuneKey key : {tuner::AutotuneKey{Collective::AllReduce, 12, 4, n},
                                 tuner::AutotuneKey{Collective::AllReduce, 18, 4, n},
                                 tuner::AutotuneKey{Collective::AllGather, gatherBucket, 4, n}}) {
    const tuner::AutotuneEntry* e = table.find(key);
    ASSERT_NE(e, nullptr) << collectives::collectiveName(key.coll) << " bucket " << key.bucket;
    EXPECT_GT(e->winner.time, 0);
    // The winner is the fastest but for the margins it may concede (tuner::autotuneWinner): a
    // variant on more lanes counts kLaneMargin slower, and the model's own choice stands within
    // kAutotuneModelMargin of the fastest.
    const double conceded = (1 + tuner::kLaneMargin) * (1 + tuner::kAutotuneModelMargin);
    for (const tuner::Candidate& other : e->others)
      EXPECT_GE(other.time * conceded, e->winner.time) << tuner::describe(other);
  }

  // The first communicator measured each bucket once (rank 0 logs it), and the calls after the
  // measurement ran the winner; the second read the file and ran only the user's 4 calls.
  const auto [first0, second0] = splitAtMarker(results[0].output);
  EXPECT_EQ(countOf(first0, "autotune: measured "), 3u) << first0;
  EXPECT_EQ(countOf(second0, "autotune: measured "), 0u) << second0;
  EXPECT_NE(second0.find("autotune: 3 measured bucket(s) read from " + files[0].string()),
            std::string::npos)
      << second0;
  for (int r = 0; r < n; ++r) {
    const auto [first, second] = splitAtMarker(results[size_t(r)].output);
    EXPECT_GT(callsLogged(first), 4u + 3u) << "rank " << r << ": no measurement runs\n" << first;
    EXPECT_EQ(callsLogged(second), 4u) << "rank " << r << "\n" << second;
    EXPECT_EQ(autotuneCallsLogged(second), 4u) << "rank " << r << "\n" << second;
  }
}

TEST_P(Autotune, FilesThatDifferBetweenTheRanksHostsAreNotTrusted) {
  const int n = GetParam();
  TempDir cacheA("autotune-host-a"), cacheB("autotune-host-b");
  const std::string dirA = cacheA.path(), dirB = cacheB.path();
  auto results = runRanks(n, [&](RankContext& ctx) {
    useEnvironment(dirA, true);
    if (runCalls(ctx) != 0) return 1;
    if (ctx.rank() == 0) {
      // The other "hosts" hold a file of the same topology whose large allreduce went to the
      // runner-up, as if measured there on another day.
      const auto files = autotuneFiles(dirA);
      RANK_CHECK(files.size() == 1, "%zu autotune files", files.size());
      const std::string signature = signatureOf(files[0]);
      tuner::AutotuneCache table;
      std::vector<std::string> skipped;
      RANK_CHECK(table.load(files[0].string(), signature, &skipped).isOk(), "cannot load");
      const tuner::AutotuneKey key{Collective::AllReduce, 18, 4, ctx.nranks()};
      RANK_CHECK(table.find(key) != nullptr && !table.find(key)->others.empty(),
                 "no runner-up for the large allreduce");
      tuner::AutotuneEntry changed = *table.find(key);
      std::swap(changed.winner, changed.others[0]);
      table.insert(key, changed);
      const Status st = table.save(tuner::autotuneCachePath(dirB, signature), signature);
      RANK_CHECK(st.isOk(), "%s", st.message().c_str());
    }
    ctx.allgather("");
    useEnvironment(ctx.rank() == 0 ? dirA : dirB, true);
    fprintf(stderr, "%s\n", kMarker);
    return runCalls(ctx);
  });
  ASSERT_EQ(describeFailures(results), "");
  // Every rank dropped what it read and measured afresh: the second communicator's calls are
  // more than the user's 4, and rank 0 says why and measures all 3 buckets again.
  const std::string second0 = splitAtMarker(results[0].output).second;
  EXPECT_NE(second0.find("autotune: rank 1 (host "), std::string::npos) << second0;
  EXPECT_NE(second0.find("read other measurements than rank 0"), std::string::npos) << second0;
  EXPECT_EQ(countOf(second0, "autotune: measured "), 3u) << second0;
  for (int r = 0; r < n; ++r) {
    const std::string second = splitAtMarker(results[size_t(r)].output).second;
    EXPECT_GT(callsLogged(second), 4u + 3u) << "rank " << r << "\n" << second;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Autotune, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "ranks";
                         });

// The line rank 0 logged for a measured bucket, e.g. "allreduce 4004 bytes".
std::string measuredLine(const std::string& log, const std::string& what) {
  const size_t at = log.find("autotune: measured " + what);
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}

TEST(AutotuneTable, WithoutTheModelEveryAcceptingAlgorithmIsMeasured) {
  TempDir cache("autotune-table");
  const std::string dir = cache.path();
  auto results = runRanks(4, [&](RankContext& ctx) {
    setenv("LOOM_TUNER", "table", 1);
    useEnvironment(dir, true);
    return runCalls(ctx);
  });
  ASSERT_EQ(describeFailures(results), "");
  // No allreduce algorithm refuses 4004 bytes on one host of 4 ranks: all are measured, each
  // with the communicator's parameters (and those that read their peers' buffers also on
  // buffers from loomMemAlloc, after them).
  const std::string full = measuredLine(results[0].output, "allreduce 4004 bytes");
  ASSERT_NE(full, "") << results[0].output;
  const size_t mappedAt = full.find("; on loomMemAlloc buffers ");
  ASSERT_NE(mappedAt, std::string::npos) << full;
  EXPECT_NE(full.find(" peer ", mappedAt), std::string::npos) << full;
  const std::string line = full.substr(0, mappedAt);
  const auto names = collectives::builderNames(Collective::AllReduce);
  EXPECT_EQ(countOf(line, " us"), names.size()) << line;
  for (std::string_view name : names)
    EXPECT_NE(line.find(" " + std::string(name) + " "), std::string::npos) << name << ": " << line;
  EXPECT_EQ(autotuneFiles(dir).size(), 1u);
}

// Calls on loomMemAlloc buffers: the measurement times the algorithms that read their peers'
// buffers on such buffers too, files them, and the calls (whatever they run) are exact.
TEST(AutotuneMapped, ReadersAreMeasuredOnMappedBuffersToo) {
  TempDir cache("autotune-mapped");
  const std::string dir = cache.path();
  constexpr size_t kCount = size_t(1) << 15;  // float: 128 KiB, bucket 17
  auto results = runRanks(4, [&](RankContext& ctx) {
    setenv("LOOM_TUNER", "table", 1);  // every accepting algorithm is a candidate
    useEnvironment(dir, true);
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    float *in = nullptr, *out = nullptr;
    RANK_LOOM(loomMemAlloc(reinterpret_cast<void**>(&in), kCount * sizeof(float)));
    RANK_LOOM(loomMemAlloc(reinterpret_cast<void**>(&out), kCount * sizeof(float)));
    const float sum = float(ctx.nranks() * (ctx.nranks() + 1) / 2);
    for (int call = 0; call < 3; ++call) {
      for (size_t i = 0; i < kCount; ++i) in[i] = float(ctx.rank() + 1 + call), out[i] = -1;
      RANK_LOOM(loomAllReduce(in, out, kCount, loomFloat32, loomSum, comm, nullptr));
      const float want = sum + float(call * ctx.nranks());
      for (size_t i = 0; i < kCount; ++i)
        RANK_CHECK(out[i] == want, "call %d element %zu: %g, not %g", call, i, out[i], want);
    }
    RANK_LOOM(loomMemFree(in));
    RANK_LOOM(loomMemFree(out));
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  ASSERT_EQ(describeFailures(results), "");
  const auto files = autotuneFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  tuner::AutotuneCache table;
  std::vector<std::string> skipped;
  ASSERT_TRUE(table.load(files[0].string(), signatureOf(files[0]), &skipped).isOk());
  const tuner::AutotuneEntry* e = table.find({Collective::AllReduce, 17, 4, 4});
  ASSERT_NE(e, nullptr);
  std::vector<std::string> mapped;
  for (const tuner::Candidate& c : e->mapped) {
    mapped.push_back(c.builder->name);
    EXPECT_GT(c.time, 0) << c.builder->name;
  }
  EXPECT_NE(std::find(mapped.begin(), mapped.end(), "peer"), mapped.end());
  EXPECT_NE(measuredLine(results[0].output, "allreduce 128K bytes").find(
                "; on loomMemAlloc buffers "),
            std::string::npos)
      << results[0].output;
}

TEST(AutotuneOff, NothingIsMeasuredOrWritten) {
  TempDir cache("autotune-off");
  const std::string dir = cache.path();
  auto results = runRanks(2, [&](RankContext& ctx) {
    useEnvironment(dir, false);
    return runCalls(ctx);
  });
  ASSERT_EQ(describeFailures(results), "");
  EXPECT_TRUE(autotuneFiles(dir).empty());
  for (const RankResult& r : results) {
    EXPECT_EQ(callsLogged(r.output), 4u) << r.output;
    EXPECT_EQ(countOf(r.output, "autotune"), 0u) << r.output;
  }
}

}  // namespace
}  // namespace loom::testing
