// The communicator's side of LOOM_AUTOTUNE (tuner/autotuner.h): its settings, the bootstrap for
// the ranks' agreement on the table, and the runner that runs autotune's trials as calls of the
// communicator.
#include <algorithm>
#include <memory>

#include "comm/comm.h"
#include "topology/analysis.h"
#include "topology/discover.h"

namespace loom {

// The trials of one measurement, each a copy of the call with the trial's arguments and
// buffers, run through runDecided.
class Comm::AutotuneTrials final : public tuner::AutotuneRunner {
 public:
  AutotuneTrials(Comm& comm, const CallDesc& call) : comm_(comm), call_(call) {}

  void prepare(const std::vector<tuner::AutotuneTrial>& trials) override {
    for (const tuner::AutotuneTrial& t : trials) {
      CallDesc& run = runs_.emplace_back(call_);
      run.args = t.args;
      run.input = t.input;
      run.output = t.output;
      run.inputBytes = t.inputBytes;
      run.outputBytes = t.outputBytes;
      run.buffersMapped = t.buffersMapped;
      decisions_.push_back(t.decision);
    }
  }
  Status run(size_t i, int times) override {
    for (int n = 0; n < times; ++n) LOOM_TRY(comm_.runDecided(runs_[i], decisions_[i]));
    return Status::ok();
  }
  Status syncRanks() override { return comm_.syncRanks(); }
  Status allgather(const std::string& mine, std::vector<std::string>* all) override {
    Status st = comm_.boot_.allgather(mine, all, Deadline(comm_.timeoutMs()));
    if (!st.isOk()) comm_.fail(st);
    return st;
  }

 private:
  Comm& comm_;
  const CallDesc& call_;
  std::vector<CallDesc> runs_;
  std::vector<tuner::Decision> decisions_;
};

Status Comm::initAutotune(const CommOptions& options, const Deadline& deadline) {
  if (!options.autotune) return Status::ok();
  const bool firstOfHost =
      std::find(hostOf_.begin(), hostOf_.end(), hostOf_[size_t(rank())]) - hostOf_.begin() ==
      rank();
  autotune_ = std::make_unique<tuner::Autotuner>();
  return autotune_->init(options.autotuneSettings, topology::topologySignature(topo_), ctx_, firstOfHost, boot_,
                         deadline);
}

Status Comm::autotuneDecision(const CallDesc& call, tuner::Decision* out) {
  if (!autotune_->applies(call.args)) return Status::ok();
  AutotuneTrials trials(*this, call);
  const tuner::AutotuneCall measured{
      .args = &call.args,
      .input = call.input,
      .output = call.output,
      .inputBytes = call.inputBytes,
      .outputBytes = call.outputBytes,
      .buffersOverlap =
          rangesOverlap(call.input, call.inputBytes, call.output, call.outputBytes)};
  return autotune_->decide(tuner_, measured, trials, out);
}

Status Comm::syncRanks() {
  uint8_t in = 0, result = 0;
  CallDesc sync;
  sync.args.coll = collectives::Collective::AllReduce;
  sync.args.nranks = nranks();
  sync.args.count = 1;
  sync.input = &in;
  sync.output = &result;
  sync.dtype = loomUint8;
  sync.inputBytes = sync.outputBytes = 1;
  completeArgs(&sync);
  tuner::Decision d;
  LOOM_TRY(tuner_.decide(sync.args, &d));
  tuner::applyParams(d.choice.params, &sync.args);
  return runDecided(sync, d);
}

}  // namespace loom
