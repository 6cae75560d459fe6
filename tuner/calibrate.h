// Calibration (docs/CALIBRATION.md): fits a topology's figures — each link kind's latency α
// and bandwidth, and the hosts' CPU (memory bandwidth of one core, CPU time per plan step) — to
// measured times of forced algorithms, so that the simulator predicts what the machine does;
// then reports how well it predicts (error per point, median, worst ratio) and what choosing
// the lowest prediction would have cost against the best measured algorithm (regret).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "base/status.h"
#include "topology/topology.h"
#include "tuner/simulator.h"

namespace loom::tuner {

// One measured call: a collective run with a forced algorithm, and how long it took.
struct MeasuredPoint {
  collectives::Collective coll = collectives::Collective::AllReduce;
  std::string algorithm;  // a builder name of coll
  int lanes = 0;          // LOOM_LANES of the run (0: not set, the settings' lanes)
  uint64_t count = 0;     // the call's count argument (CollArgs::count)
  uint32_t elemSize = 4;
  int nranks = 0;      // the first nranks ranks of the topology ran it
  uint64_t bytes = 0;  // the size column of the measurement (for reports)
  double time = 0;     // seconds per call
  // A run in which loom chose: what it says it ran (loomCommGetLastAlgorithm, tuner::describe's
  // spelling: "direct lanes=1"), "" where the run did not record it.
  std::string ran;
  // A loom-perf --race entry: the race's name and the seconds of each of its rounds, in order
  // (the entries of one race ran their turns of a round in close succession); else empty.
  std::string race;
  std::vector<double> rounds;
};

// The call a builder gets for a point: `settings` with the point's collective, ranks, count,
// element size and lanes (where the run set them), and the ranks' hosts from the topology.
collectives::CollArgs callOf(const MeasuredPoint& p, const topology::Topology& topo,
                             const collectives::CallSettings& settings);
// What a point ran, as the tuner names a choice: "ring", or "ring lanes=4" where the run set
// more than one lane. Runs of one algorithm on different lanes are rival choices.
std::string variantName(const MeasuredPoint& p);

// One fitted figure. Link figures scale every link of their kind by one factor (so relative
// differences in the base model are kept); CPU figures are set on every host.
struct Knob {
  enum class What {
    LinkLatency,
    LinkBandwidth,
    MemBandwidth,
    StepOverhead,
    CacheBandwidth,
    MessageCopies,
    NetMessageOverhead,
    PeerReadCopies,
    SingleCopyOverhead,
    DirtyReadCopies,
    BarrierLatency,
    SharedCoreLatency
  };
  What what = What::LinkLatency;
  std::string linkKind;  // LinkLatency / LinkBandwidth
  double value = 1;      // the factor for link figures, else bytes/s or seconds
};
std::string knobName(const Knob& k);  // "shm latency ×", "memBandwidth", ...

// The base topology with the knobs applied.
topology::Topology applyKnobs(const topology::Topology& base, const std::vector<Knob>& knobs);

struct CalibrationOptions {
  SimOptions sim;                  // slices and the default memory bandwidth of the simulation
  collectives::CallSettings settings;  // the runs' communicator settings (comm/options.h)
  int maxEvaluations = 3000;       // of the whole prediction set, over the fit
  bool fit = true;                 // false: only validate the base topology
};

struct PointResult {
  MeasuredPoint point;
  double predicted = 0;  // seconds; 0 when it could not be predicted
  std::string failure;   // why not (refused by the builder, simulation failure)
};

struct Calibration {
  topology::Topology topo;  // the base with the fitted knobs applied
  std::vector<Knob> knobs;  // fitted values
  std::vector<PointResult> points;
  double medianAbsError = 0;  // median of |predicted / measured − 1|
  double maxRatio = 0;        // the worst max(predicted / measured, measured / predicted)
  double objective = 0;       // the fit's loss (calibrate())
  int evaluations = 0;
};

// Predicted seconds of each point on topo (0 with a reason in failures[i] when impossible).
std::vector<double> predictPoints(const std::vector<MeasuredPoint>& points,
                                  const topology::Topology& topo, const CalibrationOptions& options,
                                  std::vector<std::string>* failures);

// Fits the knobs (one latency and one bandwidth per link kind that a route between the
// measured ranks crosses, the hosts' memBandwidth and stepOverhead, their cacheBandwidth
// when the base gives cacheBytes, and netMessageOverhead when the measured ranks span hosts) by Nelder–Mead over
// their logarithms, minimising a robust loss of the log errors of predicted against measured
// time (pseudo-Huber: squared within ~10%, linear beyond). Host core counts are taken from the
// base as they are, and so are cache sizes: they are facts, not fitted.
Status calibrate(const std::vector<MeasuredPoint>& points, const topology::Topology& base,
                 const CalibrationOptions& options, Calibration* out);

// Per collective, rank count and size: what choosing the lowest prediction costs, as measured.
struct Regret {
  collectives::Collective coll;
  int nranks = 0;
  uint64_t bytes = 0;
  std::string best;    // the fastest measured algorithm (variantName)
  std::string chosen;  // the lowest predicted one (variantName)
  double regret = 0;   // measured(chosen) / measured(best) − 1
  double bestTime = 0, chosenTime = 0;  // measured seconds per call
  // measuredRegrets: what the chosen run ran (MeasuredPoint::ran), and where a forced run of the
  // same variant was measured, its time and what choosing it costs by that measurement
  // (ranTime / bestTime − 1); ranTime 0 where none was.
  std::string ran;
  double ranTime = 0, ranRegret = 0;
};
std::vector<Regret> regrets(const std::vector<PointResult>& points);
// Per collective, rank count and size of each `chosen` point (a run in which loom picked the
// algorithm itself: by its model, or measured with LOOM_AUTOTUNE): how much slower it measured
// than the fastest of the `forced` points of that call (negative: faster than all of them);
// `chosen` in the result is the chosen point's variantName. Where the run recorded what it ran
// and a forced run of that variant (its algorithm and lanes, no other parameter) was measured,
// also what the choice costs by the forced runs alone (Regret::ranRegret): runs of one variant
// in separate processes differ by the machine's drift, which that comparison leaves out.
// Calls no forced point measured are left out.
std::vector<Regret> measuredRegrets(const std::vector<MeasuredPoint>& forced,
                                    const std::vector<MeasuredPoint>& chosen);

}  // namespace loom::tuner
