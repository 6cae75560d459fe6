// LOOM_AUTOTUNE's pure parts (tuner/autotune.h): the cache file's round trip and the files it
// refuses or partly ignores, the agreed winner, which calls are measured, and the candidates.
#include "tuner/autotune.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tuner/uniform_topology.h"

namespace loom::tuner {
namespace {

using collectives::CollArgs;
using collectives::Collective;
using collectives::findBuilder;

constexpr char kSignature[] = "1h4r-0123456789abcdef";

const collectives::Builder* builder(Collective c, const char* name) {
  const collectives::Builder* b = findBuilder(c, name);
  EXPECT_NE(b, nullptr) << name;
  return b;
}

// Two measured buckets: allreduce 64K (ring lanes=2 won over rd; peer on loomMemAlloc buffers
// took 9 us) and allgather 4K (ring alone).
AutotuneCache sampleCache() {
  AutotuneCache cache;
  AutotuneEntry allreduce;
  allreduce.bytes = 65536;
  allreduce.winner = {builder(Collective::AllReduce, "ring"), {2, 0, 0, 0, 0}, 12.5e-6};
  allreduce.others = {{builder(Collective::AllReduce, "rd"), {}, 20e-6},
                      {builder(Collective::AllReduce, "torus"), {1, 2, 2, 0, 0}, 31e-6}};
  allreduce.mapped = {{builder(Collective::AllReduce, "peer"), {}, 9e-6}};
  cache.insert({Collective::AllReduce, 16, 4, 4}, allreduce);
  AutotuneEntry allgather;
  allgather.bytes = 4096;
  allgather.winner = {builder(Collective::AllGather, "ring"), {}, 3e-6};
  cache.insert({Collective::AllGather, 12, 2, 4}, allgather);
  return cache;
}

void expectSameCandidate(const Candidate& got, const Candidate& want) {
  EXPECT_EQ(got.builder, want.builder);
  EXPECT_EQ(got.params, want.params);
  EXPECT_DOUBLE_EQ(got.time, want.time);
}

// `text` with the first occurrence of `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " in " << text;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// A directory of its own for each test, removed with it.
class AutotuneFile : public ::testing::Test {
 protected:
  void write(const std::string& text) {
    std::filesystem::create_directories(dir_);
    std::ofstream(path_) << text;
  }

  loom::testing::TempDir temp_{"autotune-file"};
  std::string dir_ = temp_.path();
  std::string path_ = autotuneCachePath(dir_, kSignature);
};

TEST_F(AutotuneFile, SaveAndLoadRoundTrip) {
  const AutotuneCache saved = sampleCache();
  ASSERT_TRUE(saved.save(path_, kSignature).isOk());
  EXPECT_EQ(path_, dir_ + "/autotune-1h4r-0123456789abcdef.json");
  AutotuneCache loaded;
  std::vector<std::string> skipped;
  Status st = loaded.load(path_, kSignature, &skipped);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_TRUE(skipped.empty());
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded.digest(), saved.digest());
  const AutotuneEntry* e = loaded.find({Collective::AllReduce, 16, 4, 4});
  ASSERT_NE(e, nullptr);
  const AutotuneEntry* want = saved.find({Collective::AllReduce, 16, 4, 4});
  EXPECT_EQ(e->bytes, 65536u);
  expectSameCandidate(e->winner, want->winner);
  ASSERT_EQ(e->others.size(), 2u);
  for (size_t i = 0; i < 2; ++i) expectSameCandidate(e->others[i], want->others[i]);
  ASSERT_EQ(e->mapped.size(), 1u);
  expectSameCandidate(e->mapped[0], want->mapped[0]);
  EXPECT_TRUE(loaded.find({Collective::AllGather, 12, 2, 4})->mapped.empty());
  // The key's fields all count: another element size or rank count is another bucket.
  EXPECT_EQ(loaded.find({Collective::AllReduce, 16, 2, 4}), nullptr);
  EXPECT_EQ(loaded.find({Collective::AllReduce, 16, 4, 8}), nullptr);
  EXPECT_NE(loaded.find({Collective::AllGather, 12, 2, 4}), nullptr);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir_)) files += f.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST_F(AutotuneFile, DigestFollowsTheDecisionsOnly) {
  AutotuneCache a = sampleCache(), b = sampleCache();
  EXPECT_EQ(a.digest(), b.digest());
  AutotuneEntry slower = *b.find({Collective::AllGather, 12, 2, 4});
  slower.winner.time *= 2;  // measured again, same winner: still the same decisions
  b.insert({Collective::AllGather, 12, 2, 4}, slower);
  EXPECT_EQ(a.digest(), b.digest());
  slower.winner.params.lanes = 2;
  b.insert({Collective::AllGather, 12, 2, 4}, slower);
  EXPECT_NE(a.digest(), b.digest());
  EXPECT_NE(AutotuneCache().digest(), a.digest());
  // Where candidates were measured on mapped buffers, their times and the winner's decide too
  // (autotunedDecision).
  AutotuneCache c = sampleCache();
  AutotuneEntry reduce = *c.find({Collective::AllReduce, 16, 4, 4});
  reduce.mapped[0].time = 20e-6;
  c.insert({Collective::AllReduce, 16, 4, 4}, reduce);
  EXPECT_NE(c.digest(), a.digest());
  reduce = *a.find({Collective::AllReduce, 16, 4, 4});
  reduce.winner.time = 8e-6;
  c.insert({Collective::AllReduce, 16, 4, 4}, reduce);
  EXPECT_NE(c.digest(), a.digest());
}

TEST_F(AutotuneFile, FilesWithoutMappedMeasurementsLoad) {
  // As autotune wrote them before it measured on mapped buffers: no "mapped" list.
  const std::string old = replaced(sampleCache().toJson(kSignature), "\"mapped\"", "\"unused\"");
  write(old);
  AutotuneCache cache;
  std::vector<std::string> skipped;
  ASSERT_TRUE(cache.load(path_, kSignature, &skipped).isOk());
  EXPECT_TRUE(skipped.empty());
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.find({Collective::AllReduce, 16, 4, 4})->mapped.empty());
}

TEST_F(AutotuneFile, MissingFileIsAFirstRun) {
  AutotuneCache cache = sampleCache();
  std::vector<std::string> skipped;
  Status st = cache.load(path_, kSignature, &skipped);
  EXPECT_EQ(st.code(), loomInvalidUsage) << st.message();
  EXPECT_EQ(cache.size(), 0u);
}

TEST_F(AutotuneFile, MalformedFileIsRefusedWithItsPath) {
  for (const char* text : {"{\"signature\": \"1h4r-0123456789abcdef\", \"entries\": [", "[]",
                           "{\"signature\": \"1h4r-0123456789abcdef\"}",
                           "{\"signature\": \"1h4r-0123456789abcdef\", \"entries\": "
                           "[{\"collective\": \"allreduce\"}]}"}) {
    write(text);
    AutotuneCache cache = sampleCache();
    std::vector<std::string> skipped;
    Status st = cache.load(path_, kSignature, &skipped);
    EXPECT_EQ(st.code(), loomSystemError) << text;
    EXPECT_NE(st.message().find(path_ + ": malformed"), std::string::npos) << st.message();
    EXPECT_EQ(cache.size(), 0u) << text;
  }
}

TEST_F(AutotuneFile, AnotherSignatureIsRefused) {
  ASSERT_TRUE(sampleCache().save(path_, "2h8r-fedcba9876543210").isOk());
  AutotuneCache cache;
  std::vector<std::string> skipped;
  Status st = cache.load(path_, kSignature, &skipped);
  EXPECT_EQ(st.code(), loomSystemError);
  EXPECT_NE(st.message().find("measured on another topology (signature 2h8r-fedcba9876543210"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(cache.size(), 0u);
}

TEST_F(AutotuneFile, EntriesThisVersionCannotUseAreSkippedWithTheReason) {
  // As an older or newer loom might have written it: the allreduce entry (listed first: the table
  // is ordered by key) names an algorithm this one does not have, or a parameter its grammar does
  // not know. The allgather entry after it is kept.
  const std::string good = sampleCache().toJson(kSignature);
  const struct {
    std::string text, reason;
  } cases[] = {
      {replaced(good, "\"algorithm\": \"rd\"", "\"algorithm\": \"warp\""),
       "allreduce has no algorithm \"warp\""},
      {replaced(good, "\"params\": \"lanes=2\"", "\"params\": \"speed=11\""), "speed=11"},
      // A name that would smuggle a second rule in is no algorithm either.
      {replaced(good, "\"algorithm\": \"rd\"", "\"algorithm\": \"rd; allgather -> tree\""),
       "is not an algorithm"},
  };
  for (const auto& c : cases) {
    write(c.text);
    AutotuneCache cache;
    std::vector<std::string> skipped;
    ASSERT_TRUE(cache.load(path_, kSignature, &skipped).isOk());
    EXPECT_EQ(cache.size(), 1u) << c.reason;
    EXPECT_NE(cache.find({Collective::AllGather, 12, 2, 4}), nullptr) << c.reason;
    ASSERT_EQ(skipped.size(), 1u) << c.reason;
    EXPECT_EQ(skipped[0].rfind("entry 1: ", 0), 0u) << skipped[0];
    EXPECT_NE(skipped[0].find(c.reason), std::string::npos) << skipped[0];
  }
}

TEST(Autotune, WinnerIsTheFastestOfEachCandidatesSlowestRank) {
  std::vector<double> agreed;
  // Rank 0 finds candidate 0 fastest, rank 1 candidate 1; the slowest ranks say candidate 2.
  EXPECT_EQ(agreedWinner({{1, 5, 3}, {4, 2, 3.5}}, &agreed), 2);
  EXPECT_EQ(agreed, (std::vector<double>{4, 5, 3.5}));
  EXPECT_EQ(agreedWinner({{2, 2}, {1, 1}}, &agreed), 0);  // a tie: the first (model order)
  EXPECT_EQ(agreedWinner({{1, 2}, {1}}, &agreed), -1);
  EXPECT_EQ(agreedWinner({{}, {}}, &agreed), -1);
  EXPECT_EQ(agreedWinner({}, &agreed), -1);
}

TEST(Autotune, SmallCallsGetRoundsEnoughToFillTheBudget) {
  auto predicted = [](std::vector<double> seconds) {
    std::vector<Candidate> out;
    for (double s : seconds) out.push_back({nullptr, {}, s});
    return out;
  };
  auto rounds = [](const AutotuneSchedule& s) { return s.rounds; };
  auto batch = [](const AutotuneSchedule& s) { return s.batch; };
  // 3 candidates of ~20 µs: 60 µs a round, so 5 ms wants 84 rounds, capped; the 3.84 ms of
  // those leave no room for a second call per turn, but turns of kAutotuneMinBatch take only
  // 61 ms of kAutotuneMinBatchSeconds: each turn is a lead call and 16 timed ones.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({20e-6, 20e-6, 20e-6}), 3)), kAutotuneMaxRounds);
  EXPECT_EQ(batch(autotuneSchedule(predicted({20e-6, 20e-6, 20e-6}), 3)), kAutotuneMinBatch);
  // 3 µs calls: 64 rounds of 9 µs take 0.576 ms, so the budget alone gives floor(5 / 0.576) = 8
  // calls a turn; the minimum is more.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({3e-6, 3e-6, 3e-6}), 3)), kAutotuneMaxRounds);
  EXPECT_EQ(batch(autotuneSchedule(predicted({3e-6, 3e-6, 3e-6}), 3)), kAutotuneMinBatch);
  // ...and the budget's batches have their cap.
  EXPECT_EQ(batch(autotuneSchedule(predicted({1e-8}), 3)), kAutotuneMaxBatch);
  // 93 µs a round: ceil(5 ms / 93 µs) = 54 rounds, batched in 80 ms.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({27e-6, 31e-6, 35e-6}), 3)), 54);
  EXPECT_EQ(batch(autotuneSchedule(predicted({27e-6, 31e-6, 35e-6}), 3)), kAutotuneMinBatch);
  // 0.6 ms a round: ceil(5 ms / 0.6 ms) = 9 rounds, batched in 86 ms.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({100e-6, 200e-6, 300e-6}), 3)), 9);
  EXPECT_EQ(batch(autotuneSchedule(predicted({100e-6, 200e-6, 300e-6}), 3)), kAutotuneMinBatch);
  // 2 ms a round: 3 rounds (the floor), batched in 96 ms.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({1e-3, 1e-3}), 3)), 3);
  EXPECT_EQ(batch(autotuneSchedule(predicted({1e-3, 1e-3}), 3)), kAutotuneMinBatch);
  // 8 ms a round: turns of 16 would allow 1 round, fewer than the 3 asked for; 3 rounds of
  // floor(250 / 24) = 10 calls.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({4e-3, 4e-3}), 3)), 3);
  EXPECT_EQ(batch(autotuneSchedule(predicted({4e-3, 4e-3}), 3)), 10);
  // Large calls keep the floors, and so do candidates without a prediction (the model off).
  EXPECT_EQ(rounds(autotuneSchedule(predicted({0.01, 0.02}), 3)), 3);
  EXPECT_EQ(batch(autotuneSchedule(predicted({0.01, 0.02}), 3)), kAutotuneBackToBack);
  EXPECT_EQ(rounds(autotuneSchedule(predicted({0, 0}), 5)), 5);
  EXPECT_EQ(batch(autotuneSchedule(predicted({0, 0}), 5)), kAutotuneBackToBack);
  EXPECT_EQ(rounds(autotuneSchedule({}, 0)), 1);
  // LOOM_AUTOTUNE_RUNS above the cap is what the user asked for.
  EXPECT_EQ(rounds(autotuneSchedule(predicted({1e-6}), 100)), 100);
}

// Autotune takes the model's lane margin over what it measured: times from a netns sweep, where
// hierarchical allgather on 2 lanes measured 1.6% ahead of one lane at 512 KiB
// (and ran 36% slower in a loop), and on 4 lanes 28% ahead of one at 128 KiB.
TEST(Autotune, FewerLanesWithinTheMarginWin) {
  const collectives::Builder* hierarchical = findBuilder(Collective::AllGather, "hierarchical");
  const collectives::Builder* ring = findBuilder(Collective::AllGather, "ring");
  ASSERT_NE(hierarchical, nullptr);
  ASSERT_NE(ring, nullptr);
  auto on = [](const collectives::Builder* b, int lanes, double us) {
    AlgoParams p;
    p.lanes = lanes;
    return Candidate{b, p, us * 1e-6};
  };
  const std::vector<Candidate> at512K = {on(hierarchical, 2, 2188), on(hierarchical, 4, 2408),
                                         on(ring, 4, 3343), on(hierarchical, 1, 2224)};
  EXPECT_EQ(chooseWithLaneMargin(at512K), 3u);
  const std::vector<Candidate> at128K = {on(hierarchical, 4, 456), on(ring, 2, 832),
                                         on(hierarchical, 2, 481), on(hierarchical, 1, 583)};
  EXPECT_EQ(chooseWithLaneMargin(at128K), 0u);  // 2 lanes are 5.5% behind: past it
  // Another algorithm within the margin, or the same one with other parameters, is not taken.
  std::vector<Candidate> others = {on(hierarchical, 2, 100), on(ring, 1, 101)};
  EXPECT_EQ(chooseWithLaneMargin(others), 0u);
  others[1] = on(hierarchical, 1, 101);
  others[1].params.fanIn = 2;
  EXPECT_EQ(chooseWithLaneMargin(others), 0u);
  // The fewer-lanes variant is not taken over another algorithm faster than it.
  others = {on(hierarchical, 2, 100), on(ring, 1, 102), on(hierarchical, 1, 103)};
  EXPECT_EQ(chooseWithLaneMargin(others), 1u);
}

// The measurement replaces the model's choice only where it beats it by more than
// kAutotuneModelMargin (times of a local sweep: alltoall 2 MiB and 8 MiB, µs).
TEST(Autotune, MeasuredWinnerMustBeatTheModelsChoiceByTheMargin) {
  const collectives::Builder* direct = findBuilder(Collective::AlltoAll, "direct");
  const collectives::Builder* xorBuilder = findBuilder(Collective::AlltoAll, "xor");
  const collectives::Builder* pairwise = findBuilder(Collective::AlltoAll, "pairwise");
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(xorBuilder, nullptr);
  ASSERT_NE(pairwise, nullptr);
  auto list = [&](double d, double x, double p) {
    return std::vector<Candidate>{{direct, {}, d * 1e-6}, {xorBuilder, {}, x * 1e-6},
                                  {pairwise, {}, p * 1e-6}};
  };
  const std::vector<Candidate> predicted = list(250, 300, 310);  // the model chooses direct
  EXPECT_EQ(autotuneWinner(predicted, list(238.7, 220.9, 224.4)), 0u);   // 8% behind: kept
  EXPECT_EQ(autotuneWinner(predicted, list(1580.3, 1315.6, 1331.8)), 1u);  // 20% behind
  EXPECT_EQ(autotuneWinner(predicted, list(200, 230, 240)), 0u);
  // The model's choice is its own, lane margin and all: here pairwise on 1 lane, not 2.
  std::vector<Candidate> lanes = {{pairwise, {2, 0, 0, 0, 0}, 98e-6},
                                  {pairwise, {1, 0, 0, 0, 0}, 100e-6}, {xorBuilder, {}, 120e-6}};
  std::vector<Candidate> measured = lanes;
  measured[0].time = 80e-6, measured[1].time = 200e-6, measured[2].time = 95e-6;
  EXPECT_EQ(autotuneWinner(lanes, measured), 0u);  // 1 lane measured 2.5x the fastest
  measured[1].time = 85e-6;
  EXPECT_EQ(autotuneWinner(lanes, measured), 1u);
  // Without predictions (the model off) the fastest wins.
  for (Candidate& c : lanes) c.time = 0;
  EXPECT_EQ(autotuneWinner(lanes, measured), 0u);
}

TEST(Autotune, AppliesToSizedCallsUpToTheLimit) {
  CollArgs a;
  a.nranks = 4;
  a.elemSize = 4;
  a.count = 1024;  // 4 KiB
  EXPECT_TRUE(autotuneApplies(a, 4096));
  EXPECT_FALSE(autotuneApplies(a, 4095));
  a.coll = Collective::AllGather;  // 1024 per rank: 16 KiB in nccl-tests' bytes
  EXPECT_FALSE(autotuneApplies(a, 8192));
  EXPECT_TRUE(autotuneApplies(a, 16384));
  EXPECT_EQ(autotuneKey(a).bucket, 14);
  a.count = 0;
  EXPECT_FALSE(autotuneApplies(a, 1 << 30));
  a.count = 1024;
  a.nranks = 1;
  EXPECT_FALSE(autotuneApplies(a, 1 << 30));
  a.nranks = 4;
  a.coll = Collective::AlltoAllv;  // no size the ranks share
  EXPECT_FALSE(autotuneApplies(a, 1 << 30));
}

// A 1 MiB float allreduce of 4 ranks: many candidates, several of them variants.
CollArgs allReduceOf1MiB() {
  CollArgs a;
  a.nranks = 4;
  a.elemSize = 4;
  a.count = 1 << 18;
  return a;
}

// The model's ranking of a's candidates, the fastest variant of each algorithm.
std::vector<Candidate> firstOfEachAlgorithm(Tuner& model, const CollArgs& a) {
  std::vector<Candidate> out;
  for (const Candidate& c : model.candidates(a))
    if (std::none_of(out.begin(), out.end(), [&](const Candidate& f) { return f.builder == c.builder; }))
      out.push_back(c);
  return out;
}

// Checks autotuneCandidates(model, a, 3) against the model's ranking; returns how many
// algorithms it lists (3, and more where the band admits them).
size_t checkCandidatesOfThree(Tuner& model, const CollArgs& a) {
  const std::vector<Candidate> all = model.candidates(a);
  const std::vector<Candidate> firstOfEach = firstOfEachAlgorithm(model, a);
  EXPECT_GE(firstOfEach.size(), 3u);
  const std::vector<Candidate> top = autotuneCandidates(model, a, 3);
  // The fastest variant of each of the 3 fastest algorithms, then of the next ones within
  // kAutotuneBand of the fastest, 5 at most, in the model's order...
  size_t algorithms = 3;
  while (algorithms < std::min<size_t>(5, firstOfEach.size()) &&
         firstOfEach[algorithms].time <= kAutotuneBand * firstOfEach[0].time)
    ++algorithms;
  EXPECT_GE(top.size(), algorithms);
  for (size_t i = 0; i < std::min(algorithms, top.size()); ++i) {
    EXPECT_EQ(top[i].builder, firstOfEach[i].builder) << i;
    EXPECT_EQ(top[i].params, firstOfEach[i].params) << i;
  }
  // ...then up to 2 other variants of the model's fastest algorithm, in the model's order.
  std::vector<Candidate> topVariants;
  for (const Candidate& c : all)
    if (c.builder == firstOfEach[0].builder && !(c.params == firstOfEach[0].params))
      topVariants.push_back(c);
  EXPECT_EQ(top.size(), algorithms + std::min<size_t>(2, topVariants.size()));
  for (size_t i = algorithms; i < top.size(); ++i) {
    EXPECT_EQ(top[i].builder, firstOfEach[0].builder);
    EXPECT_EQ(top[i].params, topVariants[i - algorithms].params);
  }
  return algorithms;
}

TEST(Autotune, CandidatesAreTheModelsFastestOrEveryAcceptingBuilder) {
  const CollArgs a = allReduceOf1MiB();
  Tuner model(uniformTopology({1, 4}), TunerConfig{});
  const std::vector<Candidate> all = model.candidates(a);
  const std::vector<Candidate> firstOfEach = firstOfEachAlgorithm(model, a);
  ASSERT_GE(all.size(), 4u);
  // 1 MiB: the fourth algorithm is more than 25% behind the fastest (torus, 33% behind ring).
  EXPECT_EQ(checkCandidatesOfThree(model, a), 3u);
  // 64 KiB: the fourth and fifth are within 25% (torus and rd behind ring, hierarchical, rhd).
  CollArgs small = a;
  small.count = 1 << 14;
  EXPECT_EQ(checkCandidatesOfThree(model, small), 5u);
  EXPECT_EQ(autotuneCandidates(model, a, 1).size(), 1u);  // the model's choice alone
  EXPECT_EQ(autotuneCandidates(model, a, 0).size(), 1u);  // at least one
  // More wanted than there are algorithms: their other variants fill the list, fastest first;
  // nothing is listed twice.
  const size_t wanted = firstOfEach.size() + 1;
  const std::vector<Candidate> many = autotuneCandidates(model, a, int(wanted));
  ASSERT_GE(many.size(), std::min(all.size(), wanted));
  for (size_t i = 1; i < std::min(all.size(), wanted); ++i)
    EXPECT_LE(many[i - 1].time, many[i].time);
  for (size_t i = 0; i < many.size(); ++i)
    for (size_t j = i + 1; j < many.size(); ++j)
      EXPECT_FALSE(many[i].builder == many[j].builder && many[i].params == many[j].params);

  // Without a model: every allreduce builder that accepts the call (direct does not: this call
  // has no shared arena).
  Tuner noModel;
  const std::vector<Candidate> builders = autotuneCandidates(noModel, a, 3);
  std::vector<std::string> names;
  for (const Candidate& c : builders) names.push_back(c.builder->name);
  for (const collectives::Builder& b : collectives::allBuilders()) {
    if (b.coll != Collective::AllReduce || b.build == nullptr) continue;
    const bool accepts = refusal(b, a, {}).empty();
    EXPECT_EQ(std::find(names.begin(), names.end(), b.name) != names.end(), accepts) << b.name;
  }
  EXPECT_GE(names.size(), 3u);
  EXPECT_EQ(std::find(names.begin(), names.end(), "direct"), names.end());
}

TEST(Autotune, DescribeNamesTheWinnerThenTheOthers) {
  const AutotuneCache cache = sampleCache();
  const AutotuneKey reduce{Collective::AllReduce, 16, 4, 4};
  EXPECT_EQ(describeEntry(reduce, *cache.find(reduce)),
            "allreduce 64K bytes, 4-byte elements, 4 ranks: ring lanes=2 12.5 "
            "us beats rd 20.0 us, "
            "torus lanes=1 dims=2x2 31.0 us; on loomMemAlloc buffers peer 9.0 us");
  const AutotuneKey gather{Collective::AllGather, 12, 2, 4};
  EXPECT_EQ(describeEntry(gather, *cache.find(gather)),
            "allgather 4K bytes, 2-byte elements, 4 ranks: ring 3.0 us (the "
            "only candidate)");
}

// A measured entry asks the ranks whether their buffers are mapped only where its fastest
// candidate on such buffers (the lane margin taken) beats the winner by more than asking costs.
TEST(Autotune, MappedBuffersAreAskedForOnlyWhereTheySaveMoreThanAsking) {
  const AutotuneEntry e = *sampleCache().find({Collective::AllReduce, 16, 4, 4});
  Decision d = autotunedDecision(e, 1e-6);  // peer 9 us + 1 us against ring's 12.5
  EXPECT_EQ(d.source, Source::Autotune);
  expectSameCandidate(d.choice, e.winner);
  expectSameCandidate(d.whenMapped, e.mapped[0]);
  d = autotunedDecision(e, 4e-6);  // 13 us: asking would cost more than it saves
  expectSameCandidate(d.choice, e.winner);
  EXPECT_EQ(d.whenMapped.builder, nullptr);
  AutotuneEntry lanes = e;  // peer on 2 lanes 4% ahead of its 1 lane: the 1 lane is asked for
  lanes.mapped = {{builder(Collective::AllReduce, "peer"), {2, 0, 0, 0, 0}, 8.64e-6},
                  {builder(Collective::AllReduce, "peer"), {1, 0, 0, 0, 0}, 9e-6}};
  expectSameCandidate(autotunedDecision(lanes, 1e-6).whenMapped, lanes.mapped[1]);
  // Nothing measured on mapped buffers (several hosts, or no candidate reads peers): no asking.
  EXPECT_EQ(autotunedDecision(*sampleCache().find({Collective::AllGather, 12, 2, 4}), 0)
                .whenMapped.builder,
            nullptr);
}

}  // namespace
}  // namespace loom::tuner
