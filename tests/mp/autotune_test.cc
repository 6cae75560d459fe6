// LOOM_AUTOTUNE in a communicator (tuner/autotuner.h, tuner/autotune.h): the first
// communicator measures each size bucket once and files the winners under the topology
// signature; the next one reads them and measures nothing; ranks whose hosts' files differ
// trust none of them; without LOOM_AUTOTUNE nothing is measured or written. Every rank checks
// what its communicator's autotune did (Comm::autotuner, callsRun, lastSource) before it
// destroys it; the tests read the files it wrote.
#include "tuner/autotune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/params.h"
#include "comm/comm.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "tuner/tuner.h"

namespace loom::testing {
namespace {

using collectives::Collective;

constexpr size_t kSmall = 1001;             // float: 4004 B, bucket 12
constexpr size_t kLarge = size_t(1) << 16;  // float: 256 KiB, bucket 18
constexpr size_t kGather = 7;               // int32 per rank

constexpr uint64_t kUserCalls = 4;         // runCalls'

// In a rank: this test's settings.
void useEnvironment(const std::string& cacheDir, bool autotune) {
  setenv("LOOM_CACHE_DIR", cacheDir.c_str(), 1);
  if (autotune)
    setenv("LOOM_AUTOTUNE", "1", 1);
  else
    unsetenv("LOOM_AUTOTUNE");
  params::reloadFromEnvironment();
}

// What a communicator's autotune did, as every rank sees it.
struct Expected {
  bool on = true;           // LOOM_AUTOTUNE
  size_t read = 0;          // buckets read from the file and agreed on
  size_t measured = 0;      // buckets measured
  bool differed = false;    // the ranks' files differed
  bool onlyUserCalls = false;  // no measurement: the user's calls only, each autotune's choice
};

// The communicator's autotune against `want`, on this rank.
int checkAutotune(loomComm_t comm, const Expected& want) {
  const Comm& c = commOf(comm);
  const tuner::Autotuner* t = c.autotuner();
  if (!want.on) {
    RANK_CHECK(t == nullptr, "autotune is on without LOOM_AUTOTUNE");
    RANK_CHECK(c.callsRun() == kUserCalls, "%llu plans run, not the user's %llu",
               (unsigned long long)c.callsRun(), (unsigned long long)kUserCalls);
    return 0;
  }
  RANK_CHECK(t != nullptr, "autotune is off under LOOM_AUTOTUNE");
  RANK_CHECK(t->bucketsRead() == want.read, "%zu buckets read, not %zu", t->bucketsRead(),
             want.read);
  RANK_CHECK(t->bucketsMeasured() == want.measured, "%zu buckets measured, not %zu",
             t->bucketsMeasured(), want.measured);
  RANK_CHECK(t->filesDiffered() == want.differed, "the ranks' files %s",
             t->filesDiffered() ? "differed" : "did not differ");
  if (want.onlyUserCalls)
    RANK_CHECK(c.callsRun() == kUserCalls, "%llu plans run, not the user's %llu",
               (unsigned long long)c.callsRun(), (unsigned long long)kUserCalls);
  else
    RANK_CHECK(c.callsRun() > kUserCalls + want.measured, "%llu plans run: no measurement runs",
               (unsigned long long)c.callsRun());
  return 0;
}

// One communicator's calls, each checked bit for bit (small integers are exact in float):
// allreduce out of place, in place (the larger bucket), an allgather, then the first bucket
// again. The out-of-place input must come back untouched. Then its autotune against `want`.
int runCalls(RankContext& ctx, const Expected& want) {
  const int n = ctx.nranks();
  const float sum = float(n * (n + 1) / 2);
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm));
  // Where nothing is measured, every call runs what autotune's table says.
  const auto decidedByTable = [&](const char* call) {
    if (!want.onlyUserCalls) return 0;
    RANK_CHECK(commOf(comm).lastSource() == tuner::Source::Autotune,
               "%s was not autotune's choice", call);
    return 0;
  };
  for (int round = 0; round < 2; ++round) {
    std::vector<float> in(kSmall, float(ctx.rank() + 1)), out(kSmall, -1);
    RANK_LOOM(loomAllReduce(in.data(), out.data(), kSmall, loomFloat32, loomSum, comm, nullptr));
    if (decidedByTable("the small allreduce") != 0) return 1;
    for (size_t i = 0; i < kSmall; ++i) {
      RANK_CHECK(out[i] == sum, "allreduce element %zu: %g, not %g", i, out[i], sum);
      RANK_CHECK(in[i] == float(ctx.rank() + 1), "allreduce changed its input: %g", in[i]);
    }
    if (round == 1) break;
    std::vector<float> inPlace(kLarge, float(ctx.rank() + 1));
    RANK_LOOM(
        loomAllReduce(inPlace.data(), inPlace.data(), kLarge, loomFloat32, loomSum, comm, nullptr));
    if (decidedByTable("the large allreduce") != 0) return 1;
    for (size_t i = 0; i < kLarge; ++i)
      RANK_CHECK(inPlace[i] == sum, "in-place allreduce element %zu: %g", i, inPlace[i]);
    std::vector<int32_t> mine(kGather, ctx.rank()), all(kGather * size_t(n), -1);
    RANK_LOOM(loomAllGather(mine.data(), all.data(), kGather, loomInt32, comm, nullptr));
    if (decidedByTable("the allgather") != 0) return 1;
    for (size_t i = 0; i < all.size(); ++i)
      RANK_CHECK(all[i] == int32_t(i / kGather), "allgather element %zu: %d", i, all[i]);
  }
  if (checkAutotune(comm, want) != 0) return 1;
  RANK_LOOM(loomCommDestroy(comm));
  return 0;
}

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
    // The first communicator measures each bucket once; the second reads the file and runs the
    // user's calls only, each on the measured winner.
    if (runCalls(ctx, {.measured = 3}) != 0) return 1;
    ctx.allgather("");  // every rank is done with the first communicator
    return runCalls(ctx, {.read = 3, .onlyUserCalls = true});
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
}

TEST_P(Autotune, FilesThatDifferBetweenTheRanksHostsAreNotTrusted) {
  const int n = GetParam();
  TempDir cacheA("autotune-host-a"), cacheB("autotune-host-b");
  const std::string dirA = cacheA.path(), dirB = cacheB.path();
  auto results = runRanks(n, [&](RankContext& ctx) {
    useEnvironment(dirA, true);
    if (runCalls(ctx, {.measured = 3}) != 0) return 1;
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
    // Every rank drops what it read and measures all 3 buckets afresh.
    return runCalls(ctx, {.measured = 3, .differed = true});
  });
  ASSERT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Autotune, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::to_string(p.param) + "ranks";
                         });

// The entry of a bucket in the one autotune file of dir (null: none).
std::optional<tuner::AutotuneEntry> filedEntry(const std::string& dir, tuner::AutotuneKey key) {
  const auto files = autotuneFiles(dir);
  if (files.size() != 1) return std::nullopt;
  tuner::AutotuneCache table;
  std::vector<std::string> skipped;
  if (!table.load(files[0].string(), signatureOf(files[0]), &skipped).isOk()) return std::nullopt;
  const tuner::AutotuneEntry* e = table.find(key);
  if (e == nullptr) return std::nullopt;
  return *e;
}

// The names of candidates.
std::vector<std::string> namesOf(const std::vector<tuner::Candidate>& candidates) {
  std::vector<std::string> names;
  for (const tuner::Candidate& c : candidates) names.push_back(c.builder->name);
  return names;
}

TEST(AutotuneTable, WithoutTheModelEveryAcceptingAlgorithmIsMeasured) {
  TempDir cache("autotune-table");
  const std::string dir = cache.path();
  auto results = runRanks(4, [&](RankContext& ctx) {
    setenv("LOOM_TUNER", "table", 1);
    useEnvironment(dir, true);
    return runCalls(ctx, {.measured = 3});
  });
  ASSERT_EQ(describeFailures(results), "");
  // No allreduce algorithm refuses 4004 bytes on one host of 4 ranks: all are measured and
  // filed, each with the communicator's parameters (and those that read their peers' buffers
  // also on buffers from loomMemAlloc).
  const auto e = filedEntry(dir, {Collective::AllReduce, 12, 4, 4});
  ASSERT_TRUE(e.has_value());
  std::vector<std::string> measured = namesOf(e->others);
  measured.push_back(e->winner.builder->name);
  std::sort(measured.begin(), measured.end());
  std::vector<std::string> names;
  for (std::string_view name : collectives::builderNames(Collective::AllReduce))
    names.emplace_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(measured, names);
  const std::vector<std::string> mapped = namesOf(e->mapped);
  EXPECT_NE(std::find(mapped.begin(), mapped.end(), "peer"), mapped.end());
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
  const auto e = filedEntry(dir, {Collective::AllReduce, 17, 4, 4});
  ASSERT_TRUE(e.has_value());
  for (const tuner::Candidate& c : e->mapped) EXPECT_GT(c.time, 0) << c.builder->name;
  const std::vector<std::string> mapped = namesOf(e->mapped);
  EXPECT_NE(std::find(mapped.begin(), mapped.end(), "peer"), mapped.end());
}

TEST(AutotuneOff, NothingIsMeasuredOrWritten) {
  TempDir cache("autotune-off");
  const std::string dir = cache.path();
  auto results = runRanks(2, [&](RankContext& ctx) {
    useEnvironment(dir, false);
    return runCalls(ctx, {.on = false});
  });
  ASSERT_EQ(describeFailures(results), "");
  EXPECT_TRUE(autotuneFiles(dir).empty());
}

}  // namespace
}  // namespace loom::testing
