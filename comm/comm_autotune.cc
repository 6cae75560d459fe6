// LOOM_AUTOTUNE inside the communicator (docs/TUNING.md, "Autotune"; the table and its file
// are tuner/autotune.h): at init the ranks agree on the cache file they read, and the first
// call of a size bucket without an entry measures the candidates on scratch buffers, agrees
// on the winner through the bootstrap and files it.
#include <algorithm>
#include <cstring>
#include <memory>

#include "comm/comm.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"
#include "topology/analysis.h"
#include "topology/discover.h"
#include "transports/shm/user_memory.h"

namespace loom {

Status Comm::initAutotune(const Deadline& deadline) {
  if (!params::getBool("LOOM_AUTOTUNE")) return Status::ok();
  autotuneCandidates_ = std::max<int>(1, int(params::getInt("LOOM_AUTOTUNE_CANDIDATES")));
  autotuneRuns_ = std::max<int>(1, int(params::getInt("LOOM_AUTOTUNE_RUNS")));
  autotuneMaxBytes_ = uint64_t(std::max<int64_t>(0, params::getInt("LOOM_AUTOTUNE_MAX_BYTES")));
  autotune_ = std::make_unique<tuner::AutotuneCache>();
  const std::string signature = topology::topologySignature(topo_);
  if (const std::string& dir = cacheDir_; !dir.empty())
    autotunePath_ = tuner::autotuneCachePath(dir, signature);
  if (!autotunePath_.empty()) {
    std::vector<std::string> skipped;
    const Status st = autotune_->load(autotunePath_, signature, &skipped);
    if (st.code() == loomSystemError)
      LOOM_WARN("TUNE", "autotune: ignoring the cache file %s", st.message().c_str());
    for (const std::string& why : skipped)
      LOOM_WARN("TUNE", "autotune: %s: ignoring %s", autotunePath_.c_str(), why.c_str());
  }
  // Ranks on different hosts read different files (each host has its own cache directory), yet
  // every rank must decide alike: the loaded decisions count only when every rank has the same.
  const uint64_t digest = autotune_->digest();
  std::vector<std::string> all;
  LOOM_TRY(boot_.allgather(std::string(reinterpret_cast<const char*>(&digest), sizeof(digest)),
                           &all, deadline));
  for (int r = 0; r < nranks(); ++r) {
    if (all[size_t(r)] == all[0]) continue;
    if (rank() == 0)
      LOOM_WARN("TUNE",
                "autotune: rank %d (host %s) read other measurements than rank 0 (%s); every "
                "rank ignores its cache file and measures afresh",
                r, peer(r).hostname, autotunePath_.c_str());
    autotune_->clear();
    break;
  }
  if (rank() == 0 && autotune_->size() > 0)
    LOOM_INFO("TUNE", "autotune: %zu measured bucket(s) read from %s", autotune_->size(),
              autotunePath_.c_str());
  return Status::ok();
}

Status Comm::autotuneDecision(const CallDesc& call, tuner::Decision* out) {
  if (!tuner::autotuneApplies(call.args, autotuneMaxBytes_)) return Status::ok();
  const tuner::AutotuneKey key = tuner::autotuneKey(call.args);
  const tuner::AutotuneEntry* entry = autotune_->find(key);
  if (entry == nullptr) {
    tuner::AutotuneEntry measured;
    LOOM_TRY(measureBucket(call, &measured));
    if (rank() == 0)
      LOOM_INFO("TUNE", "autotune: measured %s", tuner::describeEntry(key, measured).c_str());
    autotune_->insert(key, std::move(measured));
    entry = autotune_->find(key);
    // One rank per host files the table (all hold the same one); a failure costs only the
    // next run's measurement.
    const int firstOfHost =
        int(std::find(hostOf_.begin(), hostOf_.end(), hostOf_[size_t(rank())]) - hostOf_.begin());
    if (firstOfHost == rank() && !autotunePath_.empty()) {
      const Status st = autotune_->save(autotunePath_, topology::topologySignature(topo_));
      if (!st.isOk()) LOOM_WARN("TUNE", "autotune: cannot save: %s", st.message().c_str());
    }
  }
  *out = tuner::autotunedDecision(*entry, tuner_.agreementSeconds());
  return Status::ok();
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

Status Comm::measureBucket(const CallDesc& call, tuner::AutotuneEntry* out) {
  const std::vector<tuner::Candidate> candidates =
      tuner::autotuneCandidates(tuner_, call.args, autotuneCandidates_);
  // On one host, the model's fastest for buffers from loomMemAlloc that then read their peers'
  // are measured on such buffers too (after `candidates`): a decision for the call's own
  // buffers then asks the ranks whether they are (tuner::autotunedDecision).
  collectives::CollArgs mappedArgs = call.args;
  mappedArgs.buffersMapped = true;
  std::vector<tuner::Candidate> mapped;
  if (hostCount_ == 1)
    for (const tuner::Candidate& c :
         tuner::autotuneCandidates(tuner_, mappedArgs, autotuneCandidates_)) {
      collectives::CollArgs a = mappedArgs;
      tuner::applyParams(c.params, &a);
      if (c.builder->build(a, 0).readByPeers) mapped.push_back(c);
    }
  // Scratch buffers of the call's size, laid out like the user's (in place or not) so that the
  // plans measured are those the call runs; the user's buffers are never touched.
  const size_t es = dtypeSize(call.dtype);
  const size_t inBytes = collectives::inputCount(call.args, rank()) * es;
  const size_t outBytes = collectives::outputCount(call.args, rank()) * es;
  size_t inAt = 0, outAt = (inBytes + 63) / 64 * 64;
  if (rangesOverlap(call.input, call.inputBytes, call.output, call.outputBytes)) {
    const auto in = reinterpret_cast<uintptr_t>(call.input);
    const auto outp = reinterpret_cast<uintptr_t>(call.output);
    inAt = in > outp ? in - outp : 0;
    outAt = outp > in ? outp - in : 0;
  }
  // And at the user's place in a page: copies run at the alignment they will have (a
  // vector's 16-byte aligned scratch is not what page-aligned buffers such as loom-perf's run
  // with).
  constexpr size_t kPage = 4096;
  const size_t phase = (reinterpret_cast<uintptr_t>(call.input) - inAt) % kPage;
  auto placed = [&](void* p) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<char*>(at + (phase + kPage - at % kPage) % kPage);
  };
  const size_t scratchBytes = std::max(inAt + inBytes, outAt + outBytes) + kPage;
  std::vector<char> scratch(scratchBytes);
  void* mappedScratch = nullptr;
  if (!mapped.empty()) LOOM_TRY(transports::allocUserMemory(scratchBytes, &mappedScratch));
  const std::unique_ptr<void, Status (*)(void*)> freeMapped(mappedScratch,
                                                            transports::freeUserMemory);
  auto trial = [&](void* scratchBase, bool buffersMapped, const tuner::Candidate& c) {
    CallDesc run = call;
    char* base = placed(scratchBase);
    run.input = base + inAt;
    run.output = base + outAt;
    run.inputBytes = inBytes;
    run.outputBytes = outBytes;
    run.args.buffersMapped = buffersMapped;
    tuner::applyParams(c.params, &run.args);
    return run;
  };

  std::vector<tuner::Candidate> tried = candidates;
  tried.insert(tried.end(), mapped.begin(), mapped.end());
  std::vector<CallDesc> runs;
  std::vector<tuner::Decision> decisions;
  for (size_t i = 0; i < tried.size(); ++i) {
    const bool onMapped = i >= candidates.size();
    runs.push_back(trial(onMapped ? mappedScratch : scratch.data(), onMapped, tried[i]));
    decisions.push_back({tried[i], tuner::Source::Autotune, 0, {}, {}});
    // Warm-up: connections, the plan, page faults. Two calls: consecutive calls of a plan use
    // the two halves of the shared arena and of the slots in turn, and the second call of a
    // few MiB still took ~7x a settled one (docs/TUNING.md).
    for (int w = 0; w < 2; ++w) LOOM_TRY(runDecided(runs.back(), decisions.back()));
  }
  // Rounds of every candidate in turn, a batch of calls each (tuner::autotuneSchedule says
  // why); each candidate's time per call on this rank is its median round.
  const tuner::AutotuneSchedule schedule = tuner::autotuneSchedule(tried, autotuneRuns_);
  std::vector<std::vector<double>> roundTimes(tried.size());
  for (int r = 0; r < schedule.rounds; ++r)
    for (size_t i = 0; i < tried.size(); ++i) {
      LOOM_TRY(runDecided(runs[i], decisions[i]));  // the lead call, untimed
      // A short batch (the large calls' pair) starts with the ranks together: the lead call
      // leaves them apart, and a call that started on an early rank would count its wait for
      // the late ones — a `direct` plan's ranks end their copy-out one after another on shared
      // cores, and 4 ranks on 2 cores timed its 8 MiB allreduce at 3179 us, where loops, and
      // single calls after a barrier, take 1800. The barrier is a call of the communicator's
      // own: a bootstrap allgather's replies left the ranks so far apart that `direct` 512 KiB
      // allgathers (48 us in a loop) timed 109 us.
      if (schedule.batch < tuner::kAutotuneMinBatch) LOOM_TRY(syncRanks());
      const auto start = Clock::now();
      for (int b = 0; b < schedule.batch; ++b) LOOM_TRY(runDecided(runs[i], decisions[i]));
      roundTimes[i].push_back(std::chrono::duration<double>(Clock::now() - start).count() /
                              schedule.batch);
    }
  std::vector<double> mine;  // seconds per call of each candidate, on this rank
  for (std::vector<double>& t : roundTimes) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    mine.push_back(t[t.size() / 2]);
  }
  std::vector<std::string> all;
  Status st = boot_.allgather(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double)), &all,
      Deadline(timeoutMs()));
  if (!st.isOk()) {
    fail(st);
    return st;
  }
  std::vector<std::vector<double>> times;
  for (const std::string& blob : all) {
    std::vector<double>& t = times.emplace_back(blob.size() / sizeof(double));
    memcpy(t.data(), blob.data(), t.size() * sizeof(double));
  }
  std::vector<double> agreed;
  const int fastest = tuner::agreedWinner(times, &agreed);
  if (fastest < 0)
    return errorf(loomInternalError, "autotune: the ranks measured different candidates for %s",
                  collectives::collectiveName(call.args.coll));
  for (size_t i = 0; i < tried.size(); ++i) tried[i].time = agreed[i];
  std::vector<tuner::Candidate> measured(tried.begin(), tried.begin() + candidates.size());
  const int winner = int(tuner::autotuneWinner(candidates, measured));
  out->bytes = tuner::callBytes(call.args);
  for (size_t i = 0; i < measured.size(); ++i) {
    if (int(i) == winner)
      out->winner = measured[i];
    else
      out->others.push_back(measured[i]);
  }
  out->mapped.assign(tried.begin() + candidates.size(), tried.end());
  return Status::ok();
}

}  // namespace loom
