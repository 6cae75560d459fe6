// A communicator's LOOM_AUTOTUNE (docs/TUNING.md, "Autotune"): the table its ranks agreed on at
// init, and the measurement of a size bucket at its first call: the candidates, the rounds on
// scratch buffers shaped like the call's, the timing and the winner every rank agrees on. The
// communicator runs the calls, brings the ranks together and exchanges the results
// (AutotuneRunner, comm/autotune_runner.cc); the table, its file and the rules are autotune.h's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/rank_exchange.h"
#include "base/status.h"
#include "collectives/plan.h"
#include "transports/transport.h"
#include "tuner/autotune.h"
#include "tuner/tuner.h"

namespace loom::tuner {

// LOOM_AUTOTUNE's settings (docs/TUNING.md).
struct AutotuneSettings {
  int candidates = 3;     // LOOM_AUTOTUNE_CANDIDATES: autotuneCandidates' limit (at least 1)
  int runs = 3;           // LOOM_AUTOTUNE_RUNS: autotuneSchedule's minimum rounds (at least 1)
  uint64_t maxBytes = 0;  // LOOM_AUTOTUNE_MAX_BYTES: autotuneApplies' limit
  std::string cacheDir;   // where the table's file is kept; "": nowhere
};

// One candidate as a measurement runs it: the call's arguments with the candidate's parameters,
// on scratch buffers laid out like the call's.
struct AutotuneTrial {
  collectives::CollArgs args;
  void* input = nullptr;
  void* output = nullptr;
  size_t inputBytes = 0, outputBytes = 0;
  bool buffersMapped = false;  // the scratch buffers are from loomMemAlloc (Tuner::decide)
  Decision decision;           // the candidate, as Source::Autotune
};

// What a measurement needs of the communicator.
class AutotuneRunner {
 public:
  virtual ~AutotuneRunner() = default;
  // Takes the trials that run() then runs by index, so that a timed call copies nothing.
  virtual void prepare(const std::vector<AutotuneTrial>& trials) = 0;
  // Runs trial `i` `times` times back to back, each as the communicator runs a call (the call's
  // data type and operation).
  virtual Status run(size_t i, int times) = 0;
  // Brings the ranks together before a timed call: a call of the communicator's own, run as the
  // model chooses (not through autotune, which is what is measuring).
  virtual Status syncRanks() = 0;
  // Every rank's blob, in rank order; a failure fails the communicator.
  virtual Status allgather(const std::string& mine, std::vector<std::string>* all) = 0;
};

// The call autotune decides for, as the communicator describes it.
struct AutotuneCall {
  const collectives::CollArgs* args = nullptr;  // the communicator's settings filled in
  const void* input = nullptr;
  const void* output = nullptr;
  size_t inputBytes = 0, outputBytes = 0;
  bool buffersOverlap = false;  // input and output share a byte (an in-place call)
};

class Autotuner {
 public:
  // Reads the table of the topology `signature` from settings.cacheDir and has the ranks agree
  // on it through `ranks`. `filesTable`: this rank saves the table when it measures a bucket
  // (one rank per host: every rank holds the same table).
  Status init(const AutotuneSettings& settings, const std::string& signature,
              const transports::CommContext& comm, bool filesTable, RankExchange& ranks,
              const Deadline& deadline);
  // Whether autotune measures the call (autotuneApplies).
  bool applies(const collectives::CollArgs& a) const {
    return autotuneApplies(a, settings_.maxBytes);
  }
  // The decision for a call it applies to: its bucket's entry, measured first (on every rank,
  // in the same call) where the table has none, then filed.
  Status decide(Tuner& tuner, const AutotuneCall& call, AutotuneRunner& runner, Decision* out);
  // What it has done: the buckets read from the file that every rank agreed on, the buckets
  // measured since, and whether the ranks' files differed (then none was trusted).
  size_t bucketsRead() const { return bucketsRead_; }
  size_t bucketsMeasured() const { return bucketsMeasured_; }
  bool filesDiffered() const { return filesDiffered_; }

 private:
  // Runs each candidate twice, then in rounds (autotuneSchedule: settings_.runs or more for
  // small calls, a batch of calls per turn for the smallest) on scratch buffers shaped like the
  // call's (a bounded cost: candidates x rounds x batch calls of that size, about 5 ms of them
  // where small, each turn after an untimed lead call, a single timed call also after
  // syncRanks; one allgather).
  Status measureBucket(Tuner& tuner, const AutotuneCall& call, AutotuneRunner& runner,
                       AutotuneEntry* out) const;

  AutotuneSettings settings_;
  AutotuneCache table_;
  std::string signature_;
  std::string path_;  // the table's file; "" when there is no cache directory
  int rank_ = 0;
  bool filesTable_ = false;
  size_t bucketsRead_ = 0, bucketsMeasured_ = 0;
  bool filesDiffered_ = false;
};

}  // namespace loom::tuner
