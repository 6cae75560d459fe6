// Micro-benchmark of loom's control path, the part of a call that does not scale with bytes:
//  - plan build: buildRingAllReduce for one rank at N = 8, 64, 1024 ranks, then preparePlan
//    (the conflict analysis), i.e. what a plan-cache miss costs;
//  - executor overhead: a prepared plan of K local Copy steps of one element each, run by
//    execute(); ns per step is the executor's bookkeeping (posting, limits, completion), since
//    copying 4 bytes costs next to nothing. No transport is involved, so no peer is needed.
//
//   loom_bench_plan [--benchmark_filter=Build|Execute]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "collectives/builders.h"
#include "collectives/executor.h"
#include "base/clock.h"

namespace loom::collectives {
namespace {

const std::vector<BufferAlias> kIdentity = {{kInput, 0}, {kOutput, 0}, {kScratch, 0}};

void benchBuildRingAllReduce(benchmark::State& state) {
  CollArgs a;
  a.coll = Collective::AllReduce;
  a.nranks = static_cast<int>(state.range(0));
  a.count = uint64_t(1) << 20;  // every chunk non-empty, so the plan has all its steps
  a.lanes = 1;
  size_t steps = 0;
  for (auto _ : state) {
    RankPlan plan = buildRingAllReduce(a, 0);
    PreparedPlan prepared = preparePlan(plan, kIdentity);
    benchmark::DoNotOptimize(prepared);
    steps = 0;
    for (const Lane& lane : plan.lanes) steps += lane.steps.size();
  }
  state.counters["steps"] = double(steps);
}
BENCHMARK(benchBuildRingAllReduce)->Arg(8)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

// A host with no peers: a plan of local steps never asks for a connection.
class LocalHost : public ExecHost {
 public:
  Status connection(int peer, int, transports::Connection**, transports::Transport**) override {
    return errorf(loomInternalError, "local plan asked for a connection to %d", peer);
  }
  Status pollAsyncErrors() override { return Status::ok(); }
};

void benchExecuteCopies(benchmark::State& state) {
  const int kSteps = static_cast<int>(state.range(0));
  // Step i copies element i of Input to element i of Output: no step conflicts with another,
  // so the figure is the per-step cost without dependency tracking in the way.
  RankPlan plan;
  plan.algorithm = "copies";
  plan.lanes.resize(1);
  for (int i = 0; i < kSteps; ++i) {
    plan.lanes[0].steps.push_back(Step{StepKind::Copy, -1, Region{kInput, uint64_t(i), 1},
                                       Region{kOutput, uint64_t(i), 1}});
  }
  const PreparedPlan prepared = preparePlan(plan, kIdentity);
  std::vector<float> in(size_t(kSteps), 1.0f), out(size_t(kSteps), 0.0f);
  LocalHost host;
  ExecWorkspace workspace;  // reused from call to call, as a communicator does
  void* const buffers[] = {in.data(), out.data(), nullptr};
  ExecCall call;
  call.plan = &prepared;
  call.buffers = buffers;
  call.dtype = loomFloat32;
  call.collective = "bench";
  for (auto _ : state) {
    Status st = execute(host, call, -1, workspace);
    if (!st.isOk()) {
      state.SkipWithError(st.message().c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Seconds per step (Google Benchmark prints it with an SI prefix: "25n" is 25 ns).
  state.counters["time_per_step"] = benchmark::Counter(
      double(state.iterations()) * kSteps, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(benchExecuteCopies)->Arg(1)->Arg(16)->Arg(256);

}  // namespace
}  // namespace loom::collectives

BENCHMARK_MAIN();
