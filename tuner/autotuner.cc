// A communicator's LOOM_AUTOTUNE (tuner/autotuner.h).
#include "tuner/autotuner.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "base/log.h"
#include "transports/shm/user_memory.h"

namespace loom::tuner {
namespace {

using collectives::CollArgs;

// On one host, the model's fastest for buffers from loomMemAlloc that then read their peers'
// are measured on such buffers too (after autotuneCandidates' list): a decision for the call's
// own buffers then asks the ranks whether they are (autotunedDecision).
std::vector<Candidate> mappedCandidates(Tuner& tuner, const CollArgs& args, int limit) {
  std::vector<Candidate> mapped;
  if (!args.hostOf.empty()) return mapped;  // several hosts
  for (const Candidate& c : autotuneCandidates(tuner, args, limit, /*buffersMapped=*/true)) {
    CollArgs a = args;
    applyParams(c.params, &a);
    if (c.builder->build(a, 0).readByPeers) mapped.push_back(c);
  }
  return mapped;
}

// Scratch buffers of the call's size, laid out like the user's (in place or not) so that the
// plans measured are those the call runs; the user's buffers are never touched. And at the
// user's place in a page: copies run at the alignment they will have (a vector's 16-byte
// aligned scratch is not what page-aligned buffers such as loom-perf's run with).
class ScratchBuffers {
 public:
  // `withMapped`: loomMemAlloc scratch as well, for the candidates measured on mapped buffers.
  Status allocate(const AutotuneCall& call, int rank, bool withMapped) {
    const CollArgs& args = *call.args;
    const size_t es = args.elemSize;
    inBytes_ = collectives::inputCount(args, rank) * es;
    outBytes_ = collectives::outputCount(args, rank) * es;
    outAt_ = (inBytes_ + 63) / 64 * 64;
    if (call.buffersOverlap) {
      const auto in = reinterpret_cast<uintptr_t>(call.input);
      const auto out = reinterpret_cast<uintptr_t>(call.output);
      inAt_ = in > out ? in - out : 0;
      outAt_ = out > in ? out - in : 0;
    }
    phase_ = (reinterpret_cast<uintptr_t>(call.input) - inAt_) % kPage;
    const size_t bytes = std::max(inAt_ + inBytes_, outAt_ + outBytes_) + kPage;
    heap_.resize(bytes);
    if (!withMapped) return Status::ok();
    void* mapped = nullptr;
    LOOM_TRY(transports::allocUserMemory(bytes, &mapped));
    mapped_.reset(mapped);
    return Status::ok();
  }

  // The candidate's trial on the heap scratch, or on the mapped one.
  AutotuneTrial trial(const CollArgs& args, const Candidate& c, bool onMapped) {
    AutotuneTrial t;
    char* base = placed(onMapped ? mapped_.get() : heap_.data());
    t.args = args;
    t.input = base + inAt_;
    t.output = base + outAt_;
    t.inputBytes = inBytes_;
    t.outputBytes = outBytes_;
    t.buffersMapped = onMapped;
    applyParams(c.params, &t.args);
    t.decision = {c, Source::Autotune, 0, {}};
    return t;
  }

 private:
  static constexpr size_t kPage = 4096;
  char* placed(void* p) const {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<char*>(at + (phase_ + kPage - at % kPage) % kPage);
  }

  size_t inBytes_ = 0, outBytes_ = 0;
  size_t inAt_ = 0, outAt_ = 0;  // the buffers' offsets in the scratch, past the phase
  size_t phase_ = 0;             // of the user's input (less inAt_) in its page
  std::vector<char> heap_;
  std::unique_ptr<void, Status (*)(void*)> mapped_{nullptr, transports::freeUserMemory};
};

// Warm-up: connections, the plan, page faults. Two calls: consecutive calls of a plan use the
// two halves of the shared arena and of the slots in turn, and the second call of a few MiB
// still took ~7x a settled one (docs/TUNING.md).
Status warmUp(AutotuneRunner& runner, size_t trials) {
  for (size_t i = 0; i < trials; ++i) LOOM_TRY(runner.run(i, 2));
  return Status::ok();
}

// Rounds of every trial in turn, a batch of calls each (autotuneSchedule says why); *mine:
// each trial's time per call on this rank, its median round.
Status timeRounds(AutotuneRunner& runner, size_t trials, const AutotuneSchedule& schedule,
                  std::vector<double>* mine) {
  std::vector<std::vector<double>> roundTimes(trials);
  for (int r = 0; r < schedule.rounds; ++r)
    for (size_t i = 0; i < trials; ++i) {
      LOOM_TRY(runner.run(i, 1));  // the lead call, untimed
      // A short batch (the large calls' pair) starts with the ranks together: the lead call
      // leaves them apart, and a call that started on an early rank would count its wait for
      // the late ones — a `direct` plan's ranks end their copy-out one after another on shared
      // cores, and 4 ranks on 2 cores timed its 8 MiB allreduce at 3179 us, where loops, and
      // single calls after a barrier, take 1800. The barrier is a call of the communicator's
      // own: a bootstrap allgather's replies left the ranks so far apart that `direct` 512 KiB
      // allgathers (48 us in a loop) timed 109 us.
      if (schedule.batch < kAutotuneMinBatch) LOOM_TRY(runner.syncRanks());
      const auto start = Clock::now();
      LOOM_TRY(runner.run(i, schedule.batch));
      roundTimes[i].push_back(secondsSince(start) / schedule.batch);
    }
  for (std::vector<double>& t : roundTimes) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    mine->push_back(t[t.size() / 2]);
  }
  return Status::ok();
}

// Every rank's times per call: (*times)[r][i] is rank r's for trial i.
Status gatherTimes(AutotuneRunner& runner, const std::vector<double>& mine,
                   std::vector<std::vector<double>>* times) {
  std::vector<std::string> all;
  LOOM_TRY(runner.allgather(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(double)),
      &all));
  for (const std::string& blob : all) {
    std::vector<double>& t = times->emplace_back(blob.size() / sizeof(double));
    memcpy(t.data(), blob.data(), t.size() * sizeof(double));
  }
  return Status::ok();
}

// The entry of a measurement: `tried` (with the agreed times) is autotuneCandidates' list
// (`candidates`, with the model's times) followed by the mapped buffers' candidates.
AutotuneEntry entryOf(const CollArgs& args, const std::vector<Candidate>& candidates,
                      const std::vector<Candidate>& tried) {
  AutotuneEntry entry;
  std::vector<Candidate> measured(tried.begin(), tried.begin() + long(candidates.size()));
  const size_t winner = autotuneWinner(candidates, measured);
  entry.bytes = callBytes(args);
  for (size_t i = 0; i < measured.size(); ++i) {
    if (i == winner)
      entry.winner = measured[i];
    else
      entry.others.push_back(measured[i]);
  }
  entry.mapped.assign(tried.begin() + long(candidates.size()), tried.end());
  return entry;
}

}  // namespace

Status Autotuner::init(const AutotuneSettings& settings, const std::string& signature,
                       const transports::CommContext& comm, bool filesTable, RankExchange& ranks,
                       const Deadline& deadline) {
  settings_ = settings;
  signature_ = signature;
  rank_ = comm.rank;
  filesTable_ = filesTable;
  if (!settings.cacheDir.empty()) path_ = autotuneCachePath(settings.cacheDir, signature);
  if (!path_.empty()) {
    std::vector<std::string> skipped;
    const Status st = table_.load(path_, signature, &skipped);
    if (st.code() == loomSystemError)
      LOOM_WARN("TUNE", "autotune: ignoring the cache file %s", st.message().c_str());
    for (const std::string& why : skipped)
      LOOM_WARN("TUNE", "autotune: %s: ignoring %s", path_.c_str(), why.c_str());
  }
  // Ranks on different hosts read different files (each host has its own cache directory), yet
  // every rank must decide alike: the loaded decisions count only when every rank has the same.
  const uint64_t digest = table_.digest();
  std::vector<std::string> all;
  LOOM_TRY(ranks.allgather(std::string(reinterpret_cast<const char*>(&digest), sizeof(digest)),
                           &all, deadline));
  for (int r = 0; r < comm.nranks; ++r) {
    if (all[size_t(r)] == all[0]) continue;
    if (rank_ == 0)
      LOOM_WARN("TUNE",
                "autotune: rank %d (host %s) read other measurements than rank 0 (%s); every "
                "rank ignores its cache file and measures afresh",
                r, comm.peers[size_t(r)].hostname, path_.c_str());
    table_.clear();
    filesDiffered_ = true;
    break;
  }
  bucketsRead_ = table_.size();
  if (rank_ == 0 && table_.size() > 0)
    LOOM_INFO("TUNE", "autotune: %zu measured bucket(s) read from %s", table_.size(),
              path_.c_str());
  return Status::ok();
}

Status Autotuner::decide(Tuner& tuner, const AutotuneCall& call, AutotuneRunner& runner,
                         Decision* out) {
  const AutotuneKey key = autotuneKey(*call.args);
  const AutotuneEntry* entry = table_.find(key);
  if (entry == nullptr) {
    AutotuneEntry measured;
    LOOM_TRY(measureBucket(tuner, call, runner, &measured));
    if (rank_ == 0)
      LOOM_INFO("TUNE", "autotune: measured %s", describeEntry(key, measured).c_str());
    table_.insert(key, std::move(measured));
    ++bucketsMeasured_;
    entry = table_.find(key);
    // One rank per host files the table (all hold the same one); a failure costs only the
    // next run's measurement.
    if (filesTable_ && !path_.empty()) {
      const Status st = table_.save(path_, signature_);
      if (!st.isOk()) LOOM_WARN("TUNE", "autotune: cannot save: %s", st.message().c_str());
    }
  }
  *out = autotunedDecision(*entry, tuner.agreementSeconds());
  return Status::ok();
}

Status Autotuner::measureBucket(Tuner& tuner, const AutotuneCall& call, AutotuneRunner& runner,
                                AutotuneEntry* out) const {
  const CollArgs& args = *call.args;
  const std::vector<Candidate> candidates = autotuneCandidates(tuner, args, settings_.candidates);
  const std::vector<Candidate> mapped = mappedCandidates(tuner, args, settings_.candidates);
  std::vector<Candidate> tried = candidates;
  tried.insert(tried.end(), mapped.begin(), mapped.end());

  ScratchBuffers scratch;
  LOOM_TRY(scratch.allocate(call, rank_, !mapped.empty()));
  std::vector<AutotuneTrial> trials;
  for (size_t i = 0; i < tried.size(); ++i)
    trials.push_back(scratch.trial(args, tried[i], i >= candidates.size()));
  runner.prepare(trials);

  LOOM_TRY(warmUp(runner, trials.size()));
  std::vector<double> mine;  // seconds per call of each candidate, on this rank
  LOOM_TRY(timeRounds(runner, trials.size(), autotuneSchedule(tried, settings_.runs), &mine));
  std::vector<std::vector<double>> times;
  LOOM_TRY(gatherTimes(runner, mine, &times));
  std::vector<double> agreed;
  if (agreedWinner(times, &agreed) < 0)
    return errorf(loomInternalError, "autotune: the ranks measured different candidates for %s",
                  collectives::collectiveName(args.coll));
  for (size_t i = 0; i < tried.size(); ++i) tried[i].time = agreed[i];
  *out = entryOf(args, candidates, tried);
  return Status::ok();
}

}  // namespace loom::tuner
