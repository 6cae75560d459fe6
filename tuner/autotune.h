// LOOM_AUTOTUNE (docs/TUNING.md, "Autotune"): the communicator measures the best few candidates
// of a size bucket on itself at the bucket's first call, and keeps the winner here. The table
// lives in one JSON file per topology signature in the cache directory, so later runs on the
// same machine shape read it instead of measuring again.
//
// This file holds what is pure: the table, its file format, the candidate list and the rule
// that picks the winner. tuner/autotuner.h runs the measurements and the exchanges, over what
// the communicator provides.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/builders.h"
#include "base/status.h"
#include "tuner/tuner.h"

namespace loom::tuner {

// What a measured decision is for. The host layout is part of the topology signature, which
// names the file, so it is not repeated here.
struct AutotuneKey {
  collectives::Collective coll = collectives::Collective::AllReduce;
  int bucket = 0;  // Tuner::sizeBucket of the call's bytes
  uint32_t elemSize = 4;
  int nranks = 1;
  auto operator<=>(const AutotuneKey&) const = default;
};
AutotuneKey autotuneKey(const collectives::CollArgs& a);

// One measured bucket. Candidate::time holds the measured seconds of one call: the slowest
// rank's median over the timed rounds.
struct AutotuneEntry {
  Candidate winner;
  std::vector<Candidate> others;  // the rest of the candidates tried, in the order tried
  // Candidates that read their peers' buffers (`peer`), measured on buffers from loomMemAlloc,
  // which peers read through a mapping (one host only; empty when none of the model's fastest
  // for mapped buffers reads peers). On heap buffers they read through the kernel instead, which
  // can cost them twice the time: measured on one kind of buffer, they say little of the other.
  std::vector<Candidate> mapped;
  uint64_t bytes = 0;  // the size of the call that was measured
};

// The measured winner among `measured` (autotuneCandidates' list, each with its measured time):
// the fastest, the lane margin taken (chooseWithLaneMargin), unless the one the model chooses
// among them by `predicted` (the same list with the model's times; all 0 without a model)
// measured within kAutotuneModelMargin of it. Short turns on scratch buffers are not the long
// loops a program runs, and where they differ by less than that they are not to be trusted over
// the model: turns can rank two candidates 10% apart the other way round from loops of the
// same calls (docs/TUNING.md, "Every rank picks the same winner").
constexpr double kAutotuneModelMargin = 0.10;
size_t autotuneWinner(const std::vector<Candidate>& predicted,
                      const std::vector<Candidate>& measured);

// What an entry decides: its winner, and as whenMapped the fastest of `mapped` (the lane
// margin taken) where that beats the winner by more than asking the ranks whether their
// buffers are mapped costs (agreementSeconds, Tuner::agreementSeconds).
Decision autotunedDecision(const AutotuneEntry& e, double agreementSeconds);

// Whether LOOM_AUTOTUNE measures a call: not alltoallv (its ranks share no size), not
// sendrecv, not empty or single-rank calls, and not above maxBytes (scratch buffers of the
// call's size would cost too much memory and time).
bool autotuneApplies(const collectives::CollArgs& a, uint64_t maxBytes);

// What to measure for a call: the fastest variant (lanes, dims, fan-in) of each of the model's
// `limit` fastest algorithms and of any further one it predicts within kAutotuneBand of its
// fastest, 2·limit − 1 at most (where fewer algorithms serve the call, their next variants fill
// up), then up to limit − 1 other variants of the model's fastest algorithm; each part in the
// model's order. The band because a model that is 6–12% off in the median cannot rank
// algorithms 25% apart (docs/CALIBRATION.md). Distinct algorithms first because where the model
// is least sure (small calls, a few µs between candidates) its top few are often one algorithm
// on 1, 2 and 4 lanes, and measuring those alone cannot find that another algorithm is faster;
// the top one's other variants too because the variant (lanes above all) is what the model is
// least sure of across hosts (docs/TUNING.md, "Autotune"). When the model is off: every builder
// that does not refuse the call (with the communicator's parameters). `buffersMapped`: the
// model's view of the call's buffers (Tuner::decide).
constexpr double kAutotuneBand = 1.25;
std::vector<Candidate> autotuneCandidates(Tuner& tuner, const collectives::CollArgs& a, int limit,
                                          bool buffersMapped = false);

// How a measurement runs: timed rounds, each running every candidate in turn, so that a slow
// spell of the machine (a rank descheduled, another tenant) falls on all of them alike rather
// than on whichever was being measured; each candidate's time is then its median round. At
// least minRounds, and for small calls more, up to kAutotuneMaxRounds, so that the rounds take
// about kAutotuneBudgetSeconds by the candidates' predicted times: a handful of runs of a 20 µs
// call is one wake-up away from the wrong winner. Where even that many rounds leave budget, a
// candidate's turn is a batch of calls back to back (up to kAutotuneMaxBatch), timed together:
// a call that follows another candidate's starts with the ranks as that one left them, apart,
// and a few-µs call then measures mostly that skew. A batch is at least kAutotuneMinBatch calls
// where the rounds so batched take at most kAutotuneMinBatchSeconds, with fewer rounds if need
// be (not fewer than minRounds), and else as many as fit in that time: turns of one or two
// calls ranked candidates the other way round from loops of them, at a few µs and at several
// MiB alike (docs/TUNING.md, "Rounds, and medians").
// Every batch, even of one call, follows one untimed call of the candidate (the lead call): the
// ranks of a loop of one algorithm fall into a rhythm that its first call after another's does
// not have, and a large call right after another candidate's finds its buffers and arena
// evicted by it. A batch is never less than kAutotuneBackToBack calls, however large they are:
// what a loop of calls does to the next call (a rank that finished starts the next call's sends
// while the others still receive) is part of a candidate's time. The predictions are the same
// on every rank, and so are the counts (candidates without one: minRounds, batches of
// kAutotuneBackToBack).
constexpr int kAutotuneMaxRounds = 64;
constexpr int kAutotuneMaxBatch = 32;
constexpr int kAutotuneMinBatch = 16;
constexpr int kAutotuneBackToBack = 2;
constexpr double kAutotuneBudgetSeconds = 5e-3;
constexpr double kAutotuneMinBatchSeconds = 0.25;
struct AutotuneSchedule {
  int rounds = 1;
  int batch = 1;  // timed calls per candidate per round, after one untimed lead call
};
AutotuneSchedule autotuneSchedule(const std::vector<Candidate>& candidates, int minRounds);

// The winner of a measurement, the same on every rank: times[r][i] is rank r's time for
// candidate i; a candidate costs its slowest rank's time and the cheapest wins (the first on a
// tie). Returns -1 when there is no candidate or the ranks' lists differ in length.
int agreedWinner(const std::vector<std::vector<double>>& times, std::vector<double>* agreed);

// One line for the log: "allreduce 64K bytes, 4-byte elements, 4 ranks: rd 9.8 us beats
// ring 12.3 us, tree 15.0 us" (the winner, then the others in the order they were tried).
std::string describeEntry(const AutotuneKey& key, const AutotuneEntry& e);

class AutotuneCache {
 public:
  const AutotuneEntry* find(const AutotuneKey& key) const;
  void insert(const AutotuneKey& key, AutotuneEntry entry) { entries_[key] = std::move(entry); }
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

  // A hash of the decisions (key, winner and its parameters), equal on ranks that would decide
  // alike: ranks compare it to agree on what they loaded.
  uint64_t digest() const;

  // The file's text: {"signature": ..., "entries": [...]}.
  std::string toJson(const std::string& signature) const;
  // Parses a file written by toJson for `signature`. A malformed file or one of another
  // signature is an error (loomSystemError) and leaves *this empty; an entry that this version
  // cannot use (an algorithm it does not know, bad parameters) is left out, with the reason
  // appended to *skipped.
  Status parse(std::string_view text, const std::string& signature,
               std::vector<std::string>* skipped);
  // parse() of the file at `path`; loomInvalidUsage when it does not exist (a first run).
  Status load(const std::string& path, const std::string& signature,
              std::vector<std::string>* skipped);
  // Written to a temporary file and renamed, so readers never see half a file.
  Status save(const std::string& path, const std::string& signature) const;

 private:
  std::map<AutotuneKey, AutotuneEntry> entries_;
};

// <dir>/autotune-<signature>.json
std::string autotuneCachePath(const std::string& dir, const std::string& signature);

}  // namespace loom::tuner
