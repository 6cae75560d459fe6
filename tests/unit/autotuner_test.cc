// A communicator's autotune without a communicator (tuner/autotuner.h): the measurement through
// a runner that plays every rank, and the table's file, which later communicators read only
// where every rank read the same.
#include "tuner/autotuner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/support/temp_dir.h"
#include "tuner/uniform_topology.h"

namespace loom::tuner {
namespace {

using collectives::CollArgs;

constexpr int kRanks = 4;
constexpr char kSignature[] = "1h4r-0123456789abcdef";

// Runs nothing but counts the calls; trial 0 (the model's choice) takes kSlowCall per call.
// Its allgather and its exchange give every rank this rank's blob, unless `otherBlob` is set:
// then the ranks after the first give that.
class FakeRanks final : public AutotuneRunner, public RankExchange {
 public:
  static constexpr auto kSlowCall = std::chrono::microseconds(200);
  std::vector<AutotuneTrial> trials;
  std::vector<int> calls;  // per trial
  int syncs = 0, allgathers = 0;
  std::string otherBlob;

  void prepare(const std::vector<AutotuneTrial>& t) override {
    trials = t;
    calls.assign(t.size(), 0);
  }
  Status run(size_t i, int times) override {
    calls[i] += times;
    if (i == 0) std::this_thread::sleep_for(kSlowCall * times);
    return Status::ok();
  }
  Status syncRanks() override {
    ++syncs;
    return Status::ok();
  }
  Status allgather(const std::string& mine, std::vector<std::string>* all) override {
    ++allgathers;
    all->assign(kRanks, mine);
    if (!otherBlob.empty()) std::fill(all->begin() + 1, all->end(), otherBlob);
    return Status::ok();
  }
  Status allgather(const std::string& mine, std::vector<std::string>* all,
                   const Deadline&) override {
    return allgather(mine, all);
  }
};

transports::CommContext fourRanks() {
  transports::CommContext comm;
  comm.nranks = kRanks;
  comm.peers.resize(kRanks);
  return comm;
}

AutotuneSettings settingsIn(const std::string& dir) {
  AutotuneSettings s;
  s.cacheDir = dir;
  return s;
}

TEST(Autotuner, MeasuresThroughTheRunnerAndFilesTheWinner) {
  testing::TempDir dir("autotuner");
  Tuner model(uniformTopology({1, kRanks}), TunerConfig{});
  CollArgs args;
  args.nranks = kRanks;
  args.elemSize = 4;
  args.count = 1 << 18;  // 1 MiB
  std::vector<char> input(args.count * 4 + 100), output(args.count * 4);
  const AutotuneCall call{&args, input.data() + 100, output.data(), args.count * 4,
                          args.count * 4, false};

  FakeRanks ranks;
  Autotuner autotuner;
  ASSERT_TRUE(autotuner.init(settingsIn(dir.path()), kSignature, fourRanks(), true, ranks,
                             Deadline(1000))
                  .isOk());
  Decision decided;
  ASSERT_TRUE(autotuner.decide(model, call, ranks, &decided).isOk());

  // Every candidate ran on scratch at the user's place in a page, never on the user's buffers,
  // and alike: two warm-up calls, then per round a lead call and a batch.
  ASSERT_GE(ranks.trials.size(), 2u);
  std::vector<Candidate> tried;
  for (const AutotuneTrial& t : ranks.trials) {
    tried.push_back(t.decision.choice);
    EXPECT_EQ(t.decision.source, Source::Autotune);
    EXPECT_EQ(t.inputBytes, args.count * 4);
    EXPECT_EQ(t.outputBytes, args.count * 4);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.input) % 4096,
              reinterpret_cast<uintptr_t>(call.input) % 4096);
    EXPECT_NE(t.input, call.input);
    EXPECT_NE(t.output, call.output);
  }
  // Those measured on loomMemAlloc scratch come last.
  for (size_t i = 1; i < ranks.trials.size(); ++i)
    EXPECT_LE(ranks.trials[i - 1].buffersMapped, ranks.trials[i].buffersMapped);
  EXPECT_FALSE(ranks.trials[0].buffersMapped);
  const AutotuneSchedule schedule = autotuneSchedule(tried, AutotuneSettings{}.runs);
  for (int n : ranks.calls) EXPECT_EQ(n, 2 + schedule.rounds * (1 + schedule.batch));
  EXPECT_EQ(ranks.syncs, schedule.batch < kAutotuneMinBatch
                             ? schedule.rounds * int(ranks.trials.size())
                             : 0);
  EXPECT_EQ(ranks.allgathers, 2);  // the table's agreement at init, the times

  // The model's choice measured slow: another candidate wins.
  EXPECT_EQ(decided.source, Source::Autotune);
  EXPECT_FALSE(decided.choice.builder == tried[0].builder &&
               decided.choice.params == tried[0].params);

  // The bucket is known now: a second call measures nothing.
  ASSERT_TRUE(autotuner.decide(model, call, ranks, &decided).isOk());
  EXPECT_EQ(ranks.allgathers, 2);

  // A later communicator reads the winner from the file, where every rank read the same...
  FakeRanks later;
  Autotuner again;
  ASSERT_TRUE(
      again.init(settingsIn(dir.path()), kSignature, fourRanks(), false, later, Deadline(1000))
          .isOk());
  Decision read;
  ASSERT_TRUE(again.decide(model, call, later, &read).isOk());
  EXPECT_TRUE(later.trials.empty());
  EXPECT_EQ(read.choice.builder, decided.choice.builder);
  AlgoParams filed = decided.choice.params;
  filed.slices = 0;  // the simulator's, which the file leaves out
  EXPECT_EQ(read.choice.params, filed);

  // ...and measures afresh where another rank read other measurements.
  FakeRanks disagreeing;
  disagreeing.otherBlob = std::string(sizeof(uint64_t), '\0');
  Autotuner afresh;
  ASSERT_TRUE(afresh
                  .init(settingsIn(dir.path()), kSignature, fourRanks(), false, disagreeing,
                        Deadline(1000))
                  .isOk());
  disagreeing.otherBlob.clear();
  ASSERT_TRUE(afresh.decide(model, call, disagreeing, &read).isOk());
  EXPECT_FALSE(disagreeing.trials.empty());
}

}  // namespace
}  // namespace loom::tuner
