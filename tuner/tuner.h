// The tuner (docs/TUNING.md): for each call, the algorithm and parameters
// to run. Precedence, highest first:
//   1. LOOM_ALGO / loomConfig_t.algorithms (the communicator applies it before asking here);
//   2. the user's rules (LOOM_TUNE);
//   3. LOOM_AUTOTUNE's measured decisions (tuner/autotune.h; the communicator applies them over
//      a model or built-in decision, since measuring runs collectives);
//   4. the cost model: every builder that accepts the call, over a few parameter candidates,
//      simulated on the communicator's topology; the lowest predicted time wins;
//   5. the built-in table (kBuiltinTable), when there is no topology or LOOM_TUNER=table.
// Parameters set explicitly (LOOM_LANES, LOOM_TORUS_DIMS, LOOM_ALLTOALL_FANIN) are fixed: the
// model tries only them and they override a rule's.
//
// Every rank must choose the same plan, so a decision depends only on what every rank shares:
// the collective, the size, the rank and host layout, the element size and the topology (the
// same on every rank), never on the root or on timing. The simulator is deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "collectives/builders.h"
#include "topology/topology.h"
#include "tuner/plan_bound.h"
#include "tuner/simulator.h"
#include "tuner/tune_table.h"

namespace loom::tuner {

// Where a decision came from. Forced is the communicator's (LOOM_ALGO), never the tuner's.
enum class Source : uint8_t { Forced, Rule, Autotune, Model, Builtin };

// One algorithm with its parameters, and what the model predicts for it (seconds).
struct Candidate {
  const collectives::Builder* builder = nullptr;
  AlgoParams params;
  double time = 0;
};

struct Decision {
  Candidate choice;  // choice.time: the model's prediction, or autotune's measured seconds
  Source source = Source::Builtin;
  int rule = 0;  // Rule and Builtin: the rule's number in its table
  // Model decisions for a call whose buffers are not known to be mapped: the choice if every
  // rank's buffers are from loomMemAlloc (Tuner::decide's buffersMapped), where that differs
  // from `choice` and saves more than asking the ranks costs (builder null otherwise: the
  // communicator then does not ask).
  Candidate whenMapped;
};

// What callSettings takes from a communicator's options besides the fixed parameters
// (loom::readTuning, comm/options.h, reads them).
struct CallSettingsInput {
  int64_t fanInLeadBytes = -1;  // LOOM_ALLTOALL_LEAD; -1: defaultFanInLead of the topology
  uint64_t sharedBytes = 0;     // what one call may use of the direct arena; 0: no arena
};

// The tuning a communicator reads (loom::readTuning, comm/options.h): every reader (the
// communicator, loom-perf --sim, loom-tune, loom-calibrate) gets it there, so they all decide
// alike.
struct TunerConfig {
  TuneTable rules;       // LOOM_TUNE
  bool useModel = true;  // LOOM_TUNER=model (else table)
  AlgoParams fixed;      // parameters the user set; 0 = the tuner may choose
  SimOptions sim;        // how the model simulates (slices, memory bandwidth)
  CallSettingsInput call;  // what callSettings takes (LOOM_ALLTOALL_LEAD, the arena's bytes)
};

// The call settings every builder sees on a communicator whose cost model is `topo`, before a
// decision applies its parameters: the fixed ones (else 1 lane, derived torus dims, fan-in 1),
// the bytes of the direct arena a call may use and the incast lead (by default
// defaultFanInLead of `topo`).
collectives::CallSettings callSettings(const AlgoParams& fixed, const CallSettingsInput& input,
                                       const topology::Topology& topo);

// What a host's network link is taken to queue before it drops, the models having no figure of
// their own for it: a Linux interface's default queue of 1000 packets holds 1.5 MB at MTU 1500,
// and datacenter switches give a port 0.5-2 MB. A shallower network is described by setting
// LOOM_ALLTOALL_LEAD (docs/TUNING.md).
constexpr uint64_t kLinkQueueBytes = 1 << 20;

// More lanes of one algorithm must earn their keep: each lane's messages cost what the model
// does not price (kernel work on cores the ranks share, one more TCP flow into a shallow queue
// that drops), so a variant on more lanes than its algorithm is offered on (its other
// parameters the same) counts this fraction slower than it is predicted. On 2
// network-namespace hosts x 2 ranks at 1 Gbit/s the communicator's own model put hierarchical
// allgather on 4 lanes 1.2% ahead of one lane at 512 KiB, and it measured 45% slower; torus
// allreduce on 2 lanes 0.3% ahead at 8 KiB, measured 70% slower. (On the corpus models at 16
// ranks the model never predicted extra lanes faster at all.)
constexpr double kLaneMargin = 0.05;
// Predictions this close (a fraction of the faster) are a tie, which the earlier candidate
// wins: no model is that exact, and it lets decide() stop at a plan that meets its lower bound
// all but a rounding (a ring at 64 MiB is predicted 0.1 ns above its byte bound, which rhd and
// torus share: without it each of them would be simulated to learn it is slower).
constexpr double kTieFraction = 1e-6;
// The simulator's fast path (SimOptions::fast) predicts within 5% of the full simulation, so
// a candidate it predicts more than kFastWindow slower than the fastest cannot be the full
// simulation's fastest: the model simulates the others in full again (up to kRefinedRanks
// ranks, where that takes milliseconds), and decides as the full simulation would. Beyond,
// the fast path decides alone (a full simulation of ring at 1024 ranks takes seconds).
constexpr double kFastWindow = 1.11;
constexpr int kRefinedRanks = 64;
// Below this many ranks the model simulates in full even with the fast path on: there the fast
// path folds 2 or 4 hosts, and simulating the closest candidates again in full costs more than
// folding saved (a new bucket of 2 x 4 or 4 x 2 ranks: 15-70% more CPU than the full
// simulation; from 16 ranks on the two are level or the fast path saves, docs/TUNING.md).
constexpr int kFoldRanks = 16;
// Up to this many ranks decide() bounds each candidate (building every rank's plan); beyond, it
// simulates them all.
constexpr int kBoundRanks = 64;
// A candidate's plans of at most this many steps, all ranks' lanes together, are kept across
// size buckets with what was compiled for them (Tuner::compiledSteps_, scaledLatencyBound): a
// handful of ranks' plans (a ring allreduce has about 4 steps a rank, lane and peer: 8 ranks on
// 4 lanes about 900, 16 ranks about 3 800), at most about a MB each with what was compiled;
// larger ones (64 ranks' ring, 16 000 a lane) are compiled afresh every bucket.
constexpr size_t kKeptSteps = 8192;
// The index to take among `candidates`: the fastest, a candidate on more lanes than another of
// its algorithm (the same parameters but the lanes) counted kLaneMargin slower; of those within
// kTieFraction of the fastest, the first in the given order (the model lists its candidates in
// registry order, fewer lanes first). So extra lanes win only by the margin, and a fewer-lanes
// variant is never taken over another algorithm predicted faster than it. The model's choice
// takes it over predictions, autotune's over measurements (on the netns testbed autotune
// measured hierarchical allgather at 512 KiB on 2 lanes 1.6% ahead of one, and in a loop it
// ran 36% slower).
size_t chooseWithLaneMargin(const std::vector<Candidate>& candidates);
// c's time as chooseWithLaneMargin counts it among `candidates`: kLaneMargin more where another
// candidate is c on fewer lanes.
double chargedTime(const std::vector<Candidate>& candidates, const Candidate& c);
// The incast lead by default: how many bytes before the end of a sender's message its
// receiver lets the next sender start. At least what one round trip holds
// (topology::roundTripBytes), so that the link does not idle between turns; and as much as
// the receiver's share of its link's queue, kLinkQueueBytes / (2 x the most ranks a host has:
// each receiver may have two leads in flight, the end of one message and the start of the
// next), since holding back what the queue can take only adds a token's round trip per turn
// — ~100 us of wake-ups with 8 ranks on 2 cores (4 hosts x 2 ranks at 1 Gbit/s, 1 MB queue:
// 8 KiB calls 2.3-4.4x slower than the plain exchange with a 3.4 KB lead, level with 256 KB).
uint64_t defaultFanInLead(const topology::Topology& topo);

class Tuner {
 public:
  // No topology (no ranks) means no model: the rules, then the built-in table.
  Tuner(topology::Topology topo, TunerConfig config);
  Tuner() : Tuner(topology::Topology{}, TunerConfig{}) {}

  // Why the model is off ("" when it is on): no topology, LOOM_TUNER=table, ...
  const std::string& modelOff() const { return modelOff_; }
  const topology::Topology& topology() const { return topo_; }
  const TunerConfig& config() const { return config_; }

  // The decision for a call. Reads a.coll, nranks, count, elemSize and hostOf; a.lanes,
  // torusX/Y and fanIn hold the communicator's values (fixed ones included). `buffersMapped`:
  // every rank's Input and Output of the call are from loomMemAlloc, as the ranks of the host
  // agreed (Comm::agreeBuffersMapped), so the model costs a read of a peer's buffer as a plain
  // copy (builders do not read it: it is the tuner's input, not CollArgs'). The model's
  // decisions are cached per (collective, power-of-two size bucket, element size,
  // buffersMapped), so after the first call of a bucket this is a hash lookup (plus the user's
  // rules, when any). A new bucket simulates its candidates in order of their lower bound
  // (tuner/plan_bound.h) and stops where no candidate left can change the decision: the same
  // decision as candidates() makes simulating them all. Errors only when no rule of the
  // built-in table serves the call (a bug).
  Status decide(const collectives::CollArgs& a, Decision* out, bool buffersMapped = false);

  // Every candidate of the model for the size bucket of `a`, fastest first (ties keep registry
  // order, then fewer lanes); empty without a model or for alltoallv (no shared size).
  std::vector<Candidate> candidates(const collectives::CollArgs& a, bool buffersMapped = false);
  // The lower bound (tuner/plan_bound.h) decide() orders that choice by at a's size bucket: 0
  // beyond kBoundRanks ranks; negative when the builder refuses the call.
  double lowerBound(const collectives::CollArgs& a, const collectives::Builder& b,
                    const AlgoParams& params) const;
  // The model's prediction for one choice at a's size bucket; negative when it cannot simulate.
  double predict(const collectives::CollArgs& a, const collectives::Builder& b,
                 const AlgoParams& params, bool buffersMapped = false) const;

  // Bucket of a size: 0 for 0 and 1 byte, else k with 2^(k-1) < bytes ≤ 2^k. The model
  // simulates a bucket at 2^k bytes, so nccl-tests' power-of-two sizes are simulated exactly.
  static int sizeBucket(uint64_t bytes);

  // What asking the host's ranks whether every buffer is mapped costs a call
  // (Comm::agreeBuffersMapped: one barrier and its step).
  double agreementSeconds() const;

 private:
  // predict with or without the fast path; *folded (when not null): whether it folded.
  // stopAfter > 0: where the call takes longer, the simulation stops there and a time past it
  // comes back (SimOptions::stopAfter).
  double predictWith(const collectives::CollArgs& a, const collectives::Builder& b,
                     const AlgoParams& params, bool buffersMapped, bool fast, bool* folded,
                     double stopAfter = 0) const;
  // The options a prediction of `params` simulates with.
  SimOptions simOptions(const AlgoParams& params, bool buffersMapped, bool fast) const;
  // The byte bound alone (planByteBound), keeping the plans it built in *plans (none beyond
  // kBoundRanks ranks: then 0); negative when the builder refuses the call.
  double byteBoundWithPlans(const collectives::CollArgs& a, const collectives::Builder& b,
                            const AlgoParams& params,
                            std::vector<collectives::RankPlan>* plans) const;
  // The latency bound (planLatencyBound) of built plans: lowerBound is the larger of it and
  // the byte bound.
  double latencyBound(const AlgoParams& params,
                      const std::vector<collectives::RankPlan>& plans) const;
  static constexpr size_t kNone = SIZE_MAX;
  // One candidate as the model lists it: whether its plans read peers' buffers, its bound (the
  // byte bound until decide() draws the whole, `bounded`), and (with bounds) an earlier
  // candidate whose plans are the same (the simulator then predicts the same for both; kNone
  // where none is) or else its plans.
  struct Listed {
    Candidate candidate;
    bool readByPeers = false;
    double bound = 0;
    bool bounded = false;
    size_t sameAs = kNone;
    std::vector<collectives::RankPlan> plans;
  };
  // Every candidate for a's bucket in registry order, its time not yet simulated (with
  // `withBounds`: its plans and byte bound).
  std::vector<Listed> listCandidates(const collectives::CollArgs& a, bool withBounds) const;
  // The times of `listed` that the model decides by, in their order, dropping those whose
  // simulation failed: each candidate's fast-path time (fast[i]; full where the fast path is
  // off), or where the fast path folded it (folded[i]) and put it within kFastWindow of the
  // fastest, up to kRefinedRanks ranks, its full simulation's (full(i)).
  std::vector<Candidate> refinedTimes(const std::vector<Listed>& listed,
                                      const std::vector<double>& fast,
                                      const std::vector<char>& folded, int nranks,
                                      const std::function<double(size_t)>& full) const;
  // Whether refinedTimes simulates candidates again in full at nranks: with the fast path on,
  // from kFoldRanks (below, nothing is folded) up to kRefinedRanks ranks.
  bool refines(int nranks) const;
  // The model's decision over `times` (refinedTimes), whenMapped left empty.
  static Decision decisionOver(const std::vector<Candidate>& times);
  // Whether simulating the candidates `left` (indices of listed, not simulated yet: +inf in
  // fast) can no longer change the decision over the others, each taking at least its bound.
  bool settled(const std::vector<Listed>& listed, const std::vector<double>& fast,
               const std::vector<char>& folded, int nranks,
               const std::function<double(size_t)>& full, const std::vector<size_t>& left) const;
  // The prediction for a listed candidate, from its plans where it kept them, with what the
  // simulator compiled for the candidate's plans at an earlier bucket (compiledSteps_).
  double predictListed(const collectives::CollArgs& a, const Listed& l, bool buffersMapped,
                       bool fast, bool* folded, double stopAfter = 0);
  // latencyBound of a candidate's plans, taken from its last plans where these are those scaled
  // and those cut into their slices evenly: the bound compares only region boundaries, which
  // then scale alike, and latencies.
  double scaledLatencyBound(const Candidate& c, const std::vector<collectives::RankPlan>& plans);
  // decide()'s model decision for a new bucket: the candidate of the least bound next, its
  // latency bound drawn first (planLatencyBound, over the byte bound it was listed with).
  std::optional<Decision> decideByBounds(const collectives::CollArgs& a, bool buffersMapped);
  // Decision::whenMapped for `choice` over the candidates that read peers (mapped(i): the
  // prediction of listed[i] with every rank's buffers mapped), in order of their bounds when
  // `byBounds`, simulating only those that can matter.
  Candidate fastestMapped(const std::vector<Listed>& listed, const Candidate& choice,
                          bool byBounds, const std::function<double(size_t)>& mapped) const;
  // The call the model simulates for a's bucket: count for 2^bucket bytes, root 0.
  collectives::CollArgs modelCall(const collectives::CollArgs& a) const;
  bool modelApplies(const collectives::CollArgs& a) const;
  // The model cache's key: (collective, size bucket, element size, buffersMapped); the root
  // does not matter.
  static uint64_t cacheKey(const collectives::CollArgs& a, bool buffersMapped);

  topology::Topology topo_;
  TunerConfig config_;
  std::optional<NodeLinks> nodeLinks_;  // up to kBoundRanks ranks
  std::string modelOff_;
  std::unordered_map<uint64_t, Decision> modelCache_;
  // Per candidate (its builder and parameters) and buffersMapped.
  using CandidateKey = std::tuple<const collectives::Builder*, int, int, int, int, int, bool>;
  static CandidateKey keyOf(const Candidate& c, bool buffersMapped);
  // What the simulator compiled for a candidate's plans last (CompiledSteps), for its full
  // simulation (the fast path compiles its folded view afresh): a new bucket of the same
  // collective takes its steps' dependencies from it where its plans are those scaled.
  std::map<CandidateKey, CompiledSteps> compiledSteps_;
  struct KeptBound {
    std::vector<collectives::RankPlan> plans;  // evenly sliced; empty: none
    double bound = 0;
  };
  std::map<CandidateKey, KeptBound> latencyBounds_;
  // The entry the last lookup found, kept beside the map: a loop of like calls skips the hash.
  const Decision* cached(uint64_t key);
  uint64_t lastKey_ = 0;
  std::optional<Decision> lastCached_;  // reset whenever the map changes
};

// One row of a decision table: a call size and what the tuner picks for it.
struct TableRow {
  collectives::Collective coll;
  uint64_t bytes = 0;
  Decision decision;
};
// The collectives a decision table covers, in the order it lists them: every one with plan
// builders whose calls have one size on every rank (all but alltoallv and send/receive groups).
const std::vector<collectives::Collective>& tabledCollectives();
// Decisions for `colls` at every power of two from minBytes to maxBytes (nccl-tests sizes),
// for calls shaped like `base` (nranks, hostOf, element size, the communicator's parameters).
std::vector<TableRow> decisionTable(Tuner& tuner, const collectives::CollArgs& base,
                                    const std::vector<collectives::Collective>& colls,
                                    uint64_t minBytes, uint64_t maxBytes);
// The CollArgs::count of a call of `bytes` (nccl-tests' size) shaped like `base`.
uint64_t countForBytes(const collectives::CollArgs& base, uint64_t bytes);
// "ring lanes=2", an algorithm with its parameters.
std::string describe(const Candidate& c);
// "model", "rule 2" (of LOOM_TUNE), "built-in 5" (rule 5 of kBuiltinTable), "autotune" or
// "LOOM_ALGO".
std::string sourceText(const Decision& d);
// Compact lines for the log: one per collective, runs of equal decisions merged, e.g.
//   allreduce: 8-16K rd (model); 32K-1G ring lanes=2 (model)
std::vector<std::string> summarize(const std::vector<TableRow>& rows);

}  // namespace loom::tuner
