// Fitting topology figures to measurements (tuner/calibrate.h, docs/CALIBRATION.md).
#include "tuner/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "collectives/builders.h"
#include "tuner/tuner.h"

namespace loom::tuner {

using collectives::Collective;
using collectives::RankPlan;

collectives::CollArgs callOf(const MeasuredPoint& p, const topology::Topology& topo,
                             const collectives::CallSettings& settings) {
  collectives::CollArgs a;
  a.settings() = settings;
  a.coll = p.coll;
  a.nranks = p.nranks;
  a.count = p.count;
  a.elemSize = p.elemSize;
  if (p.lanes > 0) a.lanes = p.lanes;
  // Hosts numbered by first appearance, as the communicator numbers them; one host: empty.
  std::vector<int32_t> seen;
  for (int r = 0; r < p.nranks && size_t(r) < topo.ranks.size(); ++r) {
    const int32_t h = topo.ranks[size_t(r)].host;
    auto it = std::find(seen.begin(), seen.end(), h);
    a.hostOf.push_back(int32_t(it - seen.begin()));
    if (it == seen.end()) seen.push_back(h);
  }
  if (seen.size() <= 1) a.hostOf.clear();
  return a;
}

std::string variantName(const MeasuredPoint& p) {
  return p.lanes > 1 ? strprintf("%s lanes=%d", p.algorithm.c_str(), p.lanes) : p.algorithm;
}

namespace {

// Each CPU knob: the HostCpu figure it sets, which is also its name.
struct CpuFigure {
  Knob::What what;
  const char* name;
  double topology::HostCpu::*field;
};
constexpr CpuFigure kCpuFigures[] = {
    {Knob::What::MemBandwidth, "memBandwidth", &topology::HostCpu::memBandwidth},
    {Knob::What::StepOverhead, "stepOverhead", &topology::HostCpu::stepOverhead},
    {Knob::What::CacheBandwidth, "cacheBandwidth", &topology::HostCpu::cacheBandwidth},
    {Knob::What::MessageCopies, "messageCopies", &topology::HostCpu::messageCopies},
    {Knob::What::NetMessageOverhead, "netMessageOverhead", &topology::HostCpu::netMessageOverhead},
    {Knob::What::PeerReadCopies, "peerReadCopies", &topology::HostCpu::peerReadCopies},
    {Knob::What::SingleCopyOverhead, "singleCopyOverhead", &topology::HostCpu::singleCopyOverhead},
    {Knob::What::DirtyReadCopies, "dirtyReadCopies", &topology::HostCpu::dirtyReadCopies},
    {Knob::What::BarrierLatency, "barrierLatency", &topology::HostCpu::barrierLatency},
    {Knob::What::SharedCoreLatency, "sharedCoreLatency", &topology::HostCpu::sharedCoreLatency}};

const CpuFigure& cpuFigure(Knob::What what) {
  for (const CpuFigure& f : kCpuFigures)
    if (f.what == what) return f;
  return kCpuFigures[0];  // not reached: every CPU knob is listed
}

double topology::HostCpu::*hostField(Knob::What what) { return cpuFigure(what).field; }

}  // namespace

std::string knobName(const Knob& k) {
  if (k.what == Knob::What::LinkLatency) return k.linkKind + " latency factor";
  if (k.what == Knob::What::LinkBandwidth) return k.linkKind + " bandwidth factor";
  return cpuFigure(k.what).name;
}

topology::Topology applyKnobs(const topology::Topology& base, const std::vector<Knob>& knobs) {
  topology::Topology t = base;
  for (const Knob& k : knobs) {
    switch (k.what) {
      case Knob::What::LinkLatency:
      case Knob::What::LinkBandwidth:
        for (topology::Link& l : t.links) {
          if (l.kind != k.linkKind) continue;
          (k.what == Knob::What::LinkLatency ? l.latency : l.bandwidth) *= k.value;
        }
        break;
      default:
        for (topology::Node& n : t.nodes)
          if (n.kind == topology::NodeKind::Host) n.cpu.*hostField(k.what) = k.value;
        break;
    }
  }
  return t;
}

namespace {

// A point's plans, built once: the fit simulates them hundreds of times.
struct Prepared {
  std::vector<RankPlan> plans;
  std::string failure;
};

Prepared prepare(const MeasuredPoint& p, const topology::Topology& topo,
                 const collectives::CallSettings& settings) {
  Prepared out;
  if (p.nranks < 1 || size_t(p.nranks) > topo.ranks.size()) {
    out.failure = strprintf("%d ranks measured, the topology has %zu", p.nranks, topo.ranks.size());
    return out;
  }
  const collectives::Builder* b = collectives::findBuilder(p.coll, p.algorithm);
  if (!b || !b->build) {
    out.failure = "no " + p.algorithm + " builder for " + collectives::collectiveName(p.coll);
    return out;
  }
  const collectives::CollArgs a = callOf(p, topo, settings);
  out.failure = b->refuse ? b->refuse(a) : std::string();
  if (!out.failure.empty()) return out;
  for (int r = 0; r < p.nranks; ++r) out.plans.push_back(b->build(a, r));
  return out;
}

std::vector<Prepared> prepareAll(const std::vector<MeasuredPoint>& points,
                                 const topology::Topology& topo,
                                 const collectives::CallSettings& settings) {
  std::vector<Prepared> out;
  for (const MeasuredPoint& p : points) out.push_back(prepare(p, topo, settings));
  return out;
}

std::vector<double> predictPrepared(const std::vector<Prepared>& prepared,
                                    const topology::Topology& topo, const SimOptions& sim,
                                    std::vector<std::string>* failures) {
  std::vector<double> out(prepared.size(), 0.0);
  if (failures) failures->assign(prepared.size(), std::string());
  for (size_t i = 0; i < prepared.size(); ++i) {
    std::string failure = prepared[i].failure;
    if (failure.empty()) {
      SimResult r = simulate(prepared[i].plans, topo, sim);
      if (r.ok) {
        out[i] = r.time;
      } else {
        failure = "simulation failed: " + r.message;
      }
    }
    if (failures) (*failures)[i] = failure;
  }
  return out;
}

// The fit's loss over the points both predicted and measured: of each log error e, the
// pseudo-Huber sqrt(1 + (e/δ)²) − 1 with δ = 0.1, quadratic within ~10% and linear beyond, so
// that a few measurements disturbed by other load (10× and more on a shared machine) cannot
// drag every other prediction off.
double loss(const std::vector<MeasuredPoint>& points, const std::vector<double>& predicted) {
  constexpr double kDelta = 0.1;
  double sum = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (predicted[i] <= 0 || points[i].time <= 0) continue;
    const double e = std::log(predicted[i] / points[i].time) / kDelta;
    sum += std::sqrt(1 + e * e) - 1;
  }
  return sum;
}

// Nelder–Mead over x (standard coefficients), restarted from the best vertex while that still
// improves, within maxEvaluations calls of f. Returns the best x; *evaluations counts calls,
// *bestValue (if given) gets f at the returned x.
std::vector<double> nelderMead(const std::function<double(const std::vector<double>&)>& f,
                               std::vector<double> x, double step, int maxEvaluations,
                               int* evaluations, double* bestValue = nullptr) {
  const size_t n = x.size();
  double best = f(x);
  *evaluations = 1;
  if (bestValue) *bestValue = best;
  if (n == 0) return x;
  for (bool improved = true; improved && *evaluations < maxEvaluations;) {
    std::vector<std::vector<double>> simplex(n + 1, x);
    std::vector<double> value(n + 1, best);
    for (size_t i = 0; i < n && *evaluations < maxEvaluations; ++i) {
      simplex[i + 1][i] += step;
      value[i + 1] = f(simplex[i + 1]);
      ++*evaluations;
    }
    while (*evaluations < maxEvaluations) {
      std::vector<size_t> order(n + 1);
      for (size_t i = 0; i <= n; ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return value[a] < value[b]; });
      const size_t lo = order[0], hi = order[n], second = order[n - 1];
      if (value[hi] - value[lo] <= 1e-12 * (1 + std::abs(value[lo]))) break;
      std::vector<double> centroid(n, 0.0);
      for (size_t i = 0; i <= n; ++i)
        if (i != hi)
          for (size_t d = 0; d < n; ++d) centroid[d] += simplex[i][d] / double(n);
      auto along = [&](double t) {  // centroid + t · (centroid − worst)
        std::vector<double> p(n);
        for (size_t d = 0; d < n; ++d) p[d] = centroid[d] + t * (centroid[d] - simplex[hi][d]);
        return p;
      };
      auto evaluate = [&](const std::vector<double>& p) {
        ++*evaluations;
        return f(p);
      };
      std::vector<double> r = along(1.0);
      const double fr = evaluate(r);
      if (fr < value[lo]) {
        std::vector<double> e = along(2.0);
        const double fe = evaluate(e);
        simplex[hi] = fe < fr ? e : r;
        value[hi] = std::min(fe, fr);
      } else if (fr < value[second]) {
        simplex[hi] = r;
        value[hi] = fr;
      } else {
        std::vector<double> c = along(fr < value[hi] ? 0.5 : -0.5);
        const double fc = evaluate(c);
        if (fc < std::min(fr, value[hi])) {
          simplex[hi] = c;
          value[hi] = fc;
        } else {  // shrink towards the best vertex
          for (size_t i = 0; i <= n && *evaluations < maxEvaluations; ++i) {
            if (i == lo) continue;
            for (size_t d = 0; d < n; ++d)
              simplex[i][d] = simplex[lo][d] + 0.5 * (simplex[i][d] - simplex[lo][d]);
            value[i] = evaluate(simplex[i]);
          }
        }
      }
    }
    const size_t lo = size_t(std::min_element(value.begin(), value.end()) - value.begin());
    improved = value[lo] < best * (1 - 1e-6);
    if (value[lo] < best) {
      best = value[lo];
      x = simplex[lo];
    }
  }
  if (bestValue) *bestValue = best;
  return x;
}

// The link kinds that some route between two of the first n ranks crosses.
std::vector<std::string> linkKindsUsed(const topology::Topology& t, int n) {
  std::set<std::string> kinds;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      for (int32_t l : t.route(t.ranks[size_t(a)].endpoint, t.ranks[size_t(b)].endpoint))
        kinds.insert(t.links[size_t(l)].kind);
    }
  return {kinds.begin(), kinds.end()};
}

double threeDigits(double v) {
  if (!(v > 0)) return v;
  const double scale = std::pow(10.0, std::floor(std::log10(v)) - 2);
  return std::round(v / scale) * scale;
}

// The hosts' current figure (the first host that has one), or fallback.
double hostFigure(const topology::Topology& t, double topology::HostCpu::*field, double fallback) {
  for (const topology::Node& n : t.nodes)
    if (n.kind == topology::NodeKind::Host && n.cpu.*field > 0) return n.cpu.*field;
  return fallback;
}

// The measurements' checks: positive times, on no more ranks than the topology has. *nranks:
// the most ranks any of them ran on.
Status checkPoints(const std::vector<MeasuredPoint>& points, const topology::Topology& base,
                   int* nranks) {
  if (points.empty()) return Status(loomInvalidArgument, "no measurements to calibrate with");
  *nranks = 0;
  for (const MeasuredPoint& p : points) {
    if (!(p.time > 0))
      return errorf(loomInvalidArgument, "%s %s at %llu bytes: measured time %g s is not positive",
                    collectives::collectiveName(p.coll), p.algorithm.c_str(),
                    (unsigned long long)p.bytes, p.time);
    if (p.nranks > int(base.ranks.size()))
      return errorf(loomInvalidArgument,
                    "the measurements ran on %d ranks, but the topology '%s' has %zu", p.nranks,
                    base.name.c_str(), base.ranks.size());
    *nranks = std::max(*nranks, p.nranks);
  }
  return Status::ok();
}

// Which CPU figures the measurements can show. The cache's bandwidth only where a host says
// how large its cache is, the cost of messages only where hosts say their core count (else
// messages do not touch the CPU), that of network messages only where the measured ranks span
// hosts, that of reading peers' buffers only where a peer algorithm was measured, that of reads
// through the kernel (as messages) only where hosts say their core count, that of reading what
// another core just wrote only where hosts say how large a core's private cache is, a barrier's
// latency only where a measured plan has a Barrier, and that of a message between ranks that
// share a core only where a machine (a host, or the hosts that name one HostCpu::machine) has
// more ranks than cores.
struct Shows {
  bool cached = false, cores = false, hosts = false, peer = false, privateCache = false;
  bool barriers = false, sharedCores = false;
};

Shows whatTheyShow(const std::vector<MeasuredPoint>& points,
                   const std::vector<Prepared>& prepared, const topology::Topology& base,
                   int nranks) {
  Shows s;
  for (const MeasuredPoint& p : points) s.peer = s.peer || p.algorithm == "peer";
  for (const Prepared& p : prepared)
    for (const RankPlan& plan : p.plans)
      for (const collectives::Lane& lane : plan.lanes)
        for (const collectives::Step& step : lane.steps)
          s.barriers = s.barriers || step.kind == collectives::StepKind::Barrier;
  for (const topology::Node& n : base.nodes) {
    s.cached = s.cached || n.cpu.cacheBytes > 0;
    s.cores = s.cores || n.cpu.cores > 0;
    s.privateCache = s.privateCache || n.cpu.privateCacheBytes > 0;
  }
  for (int r = 1; r < nranks; ++r)
    s.hosts = s.hosts || base.ranks[size_t(r)].host != base.ranks[0].host;
  const std::vector<int32_t> hostNode = base.hostNodes();
  const std::vector<int32_t> machineOf = base.hostMachines();
  std::vector<int> machineRanks(hostNode.size(), 0);  // at each machine's first host
  for (int r = 0; r < nranks; ++r) {
    const int32_t host = base.ranks[size_t(r)].host;
    if (host < 0 || size_t(host) >= hostNode.size()) continue;
    const int cores = base.nodes[size_t(hostNode[size_t(host)])].cpu.cores;
    s.sharedCores =
        s.sharedCores || (cores > 0 && ++machineRanks[size_t(machineOf[size_t(host)])] > cores);
  }
  return s;
}

// The knobs a calibration turns, and *start, the topology they scale: link factors 1, the
// hosts' CPU figures or the simulator's default. Fitting needs something to scale: links of a
// fitted kind without a latency get 1 us, and a missing step overhead starts at 1 us. A CPU
// figure is fitted from the base's value, or from its start when the base has none; it is only
// validated (not fitted) when the base has it. *neutral: per knob, for the figures the older
// models lack, its neutral value in the staged fit (0: none; the link knobs have none).
std::vector<Knob> knobsToTurn(const topology::Topology& base, int nranks, const Shows& shows,
                              const CalibrationOptions& options, topology::Topology* start,
                              std::vector<double>* neutral) {
  *start = base;
  std::vector<Knob> knobs;
  for (const std::string& kind : linkKindsUsed(base, nranks)) {
    if (options.fit)
      for (topology::Link& l : start->links)
        if (l.kind == kind && l.latency <= 0) l.latency = 1e-6;
    knobs.push_back({Knob::What::LinkLatency, kind, 1.0});
    knobs.push_back({Knob::What::LinkBandwidth, kind, 1.0});
  }
  const double memBandwidth =
      hostFigure(base, &topology::HostCpu::memBandwidth, options.sim.memBandwidth);
  const double memStart = memBandwidth > 0 ? memBandwidth : 10e9;
  // Per CPU figure: its start, whether the measurements can show it, and its neutral value.
  struct CpuKnob {
    Knob::What what;
    double start;
    bool shows;
    double neutral;
  };
  const CpuKnob cpuKnobs[] = {
      {Knob::What::MemBandwidth, memStart, true, 0},
      {Knob::What::StepOverhead, 1e-6, true, 0},
      {Knob::What::CacheBandwidth, 2 * memStart, shows.cached, 0},
      {Knob::What::MessageCopies, 2, shows.cores, 0},
      {Knob::What::NetMessageOverhead, 1e-6, shows.hosts, 0},
      {Knob::What::PeerReadCopies, 1, shows.peer, 1},             // a plain copy
      {Knob::What::SingleCopyOverhead, 1e-6, shows.cores, 1e-9},  // a nanosecond per kernel read
      {Knob::What::DirtyReadCopies, 1, shows.cores && shows.privateCache,
       1e-3},  // a thousandth of a copy
      {Knob::What::BarrierLatency, options.sim.barrierLatency, shows.barriers,
       options.sim.barrierLatency},  // what the simulator charged before
      {Knob::What::SharedCoreLatency, 1e-6, shows.sharedCores, 1e-9}};  // a nanosecond
  neutral->assign(knobs.size(), 0);
  for (const CpuKnob& k : cpuKnobs) {
    if (!k.shows) continue;
    const double value =
        k.what == Knob::What::MemBandwidth ? memBandwidth : hostFigure(base, hostField(k.what), 0);
    if (!options.fit && value <= 0) continue;
    knobs.push_back({k.what, "", value > 0 ? value : k.start});
    neutral->push_back(k.neutral);
  }
  return knobs;
}

// The fit, in log space from x0: all figures at once from the start, and (where there are
// figures the older models lack: the costs of peer reads and of reading what another core just
// wrote) also in two stages: first the older figures with the new ones at their neutral start,
// then all from there, which ends at least as well as a fit without the new figures
// (Nelder-Mead never gives up its best point). The lower loss wins; neither alone is best on
// every sweep.
std::vector<double> fitKnobs(const std::function<double(const std::vector<double>&)>& objective,
                             const std::vector<double>& x0, const std::vector<double>& neutral,
                             int maxEvaluations, int* evaluations) {
  double bestLoss = 0, stagedLoss = 0;
  std::vector<double> x =
      nelderMead(objective, x0, std::log(2.0), maxEvaluations, evaluations, &bestLoss);
  std::vector<size_t> first;
  std::vector<double> staged = x0, y;
  for (size_t i = 0; i < x0.size(); ++i) {
    if (neutral[i] > 0) {
      staged[i] = std::log(neutral[i]);
    } else {
      first.push_back(i);
    }
  }
  if (first.size() == x0.size()) return x;
  for (size_t i : first) y.push_back(x0[i]);
  auto sub = [&](const std::vector<double>& v) {
    std::vector<double> z = staged;
    for (size_t j = 0; j < first.size(); ++j) z[first[j]] = v[j];
    return objective(z);
  };
  int firstStage = 0, more = 0;
  y = nelderMead(sub, y, std::log(2.0), maxEvaluations / 2, &firstStage);
  for (size_t j = 0; j < first.size(); ++j) staged[first[j]] = y[j];
  staged = nelderMead(objective, staged, std::log(2.0), maxEvaluations - firstStage, &more,
                      &stagedLoss);
  *evaluations += firstStage + more;
  return stagedLoss < bestLoss ? staged : x;
}

// Three significant digits: the measurements do not pin the figures down any closer, and the
// model file then reads "3.67us" rather than 17 digits of fitting noise.
void roundFigures(const topology::Topology& start, Calibration* out) {
  for (Knob& k : out->knobs) k.value = threeDigits(k.value);
  out->topo = applyKnobs(start, out->knobs);
  for (topology::Link& l : out->topo.links) {
    l.latency = threeDigits(l.latency);
    l.bandwidth = threeDigits(l.bandwidth);
  }
}

// Each point's prediction on the calibrated model, and the errors over them.
Status scorePredictions(const std::vector<MeasuredPoint>& points,
                        const std::vector<Prepared>& prepared, const CalibrationOptions& options,
                        Calibration* out) {
  std::vector<std::string> failures;
  const std::vector<double> predicted =
      predictPrepared(prepared, out->topo, options.sim, &failures);
  out->points.clear();
  std::vector<double> errors;
  out->maxRatio = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    out->points.push_back({points[i], predicted[i], failures[i]});
    if (predicted[i] <= 0) continue;
    const double ratio = predicted[i] / points[i].time;
    errors.push_back(std::abs(ratio - 1));
    out->maxRatio = std::max(out->maxRatio, std::max(ratio, 1 / ratio));
  }
  if (errors.empty())
    return Status(loomInvalidArgument, "no measurement could be predicted: " + failures[0]);
  std::sort(errors.begin(), errors.end());
  const size_t m = errors.size();
  out->medianAbsError = m % 2 ? errors[m / 2] : (errors[m / 2 - 1] + errors[m / 2]) / 2;
  out->objective = loss(points, predicted);
  return Status::ok();
}

}  // namespace

std::vector<double> predictPoints(const std::vector<MeasuredPoint>& points,
                                  const topology::Topology& topo, const CalibrationOptions& options,
                                  std::vector<std::string>* failures) {
  return predictPrepared(prepareAll(points, topo, options.settings), topo, options.sim, failures);
}

Status calibrate(const std::vector<MeasuredPoint>& points, const topology::Topology& base,
                 const CalibrationOptions& options, Calibration* out) {
  LOOM_TRY(base.validate());
  int nranks = 0;
  LOOM_TRY(checkPoints(points, base, &nranks));
  const std::vector<Prepared> prepared = prepareAll(points, base, options.settings);
  topology::Topology start;
  std::vector<double> neutral;
  const std::vector<Knob> knobs = knobsToTurn(
      base, nranks, whatTheyShow(points, prepared, base, nranks), options, &start, &neutral);
  auto withX = [&](const std::vector<double>& x) {
    std::vector<Knob> k = knobs;
    for (size_t i = 0; i < k.size(); ++i) k[i].value = std::exp(x[i]);
    return k;
  };
  auto objective = [&](const std::vector<double>& x) {
    const topology::Topology t = applyKnobs(start, withX(x));
    return loss(points, predictPrepared(prepared, t, options.sim, nullptr));
  };
  std::vector<double> x;
  for (const Knob& k : knobs) x.push_back(std::log(k.value));
  out->evaluations = 0;
  if (options.fit) x = fitKnobs(objective, x, neutral, options.maxEvaluations, &out->evaluations);
  out->knobs = withX(x);
  out->topo = applyKnobs(start, out->knobs);
  if (options.fit) roundFigures(start, out);
  return scorePredictions(points, prepared, options, out);
}

std::vector<Regret> regrets(const std::vector<PointResult>& points) {
  // Algorithms compete only on the same call: a 2-rank point is no rival of a 4-rank one.
  std::map<std::tuple<Collective, int, uint64_t>, std::vector<const PointResult*>> groups;
  for (const PointResult& p : points)
    if (p.predicted > 0) groups[{p.point.coll, p.point.nranks, p.point.bytes}].push_back(&p);
  std::vector<Regret> out;
  for (const auto& [key, group] : groups) {
    const PointResult* best = group[0];
    const PointResult* chosen = group[0];
    for (const PointResult* p : group) {
      if (p->point.time < best->point.time) best = p;
      if (p->predicted < chosen->predicted) chosen = p;
    }
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), variantName(best->point),
                   variantName(chosen->point), chosen->point.time / best->point.time - 1,
                   best->point.time, chosen->point.time, "", 0, 0});
  }
  return out;
}

namespace {

// The variantName of what a run says it ran ("ring lanes=4 " → "ring lanes=4", "direct
// lanes=1" → "direct"); "" where it names a parameter besides lanes, which no forced run of
// the sweeps sets.
std::string ranVariant(const std::string& ran) {
  std::istringstream words(ran);
  MeasuredPoint p;
  words >> p.algorithm;
  for (std::string w; words >> w;) {
    char* end = nullptr;
    const long lanes = w.rfind("lanes=", 0) == 0 ? std::strtol(w.c_str() + 6, &end, 10) : 0;
    if (lanes < 1 || lanes > 1 << 20 || *end != '\0') return "";
    p.lanes = int(lanes);
  }
  return variantName(p);
}

}  // namespace

std::vector<Regret> measuredRegrets(const std::vector<MeasuredPoint>& forced,
                                    const std::vector<MeasuredPoint>& chosen) {
  std::map<std::tuple<Collective, int, uint64_t>, const MeasuredPoint*> best;
  std::map<std::tuple<Collective, int, uint64_t, std::string>, const MeasuredPoint*> byVariant;
  for (const MeasuredPoint& p : forced) {
    const MeasuredPoint*& b = best[{p.coll, p.nranks, p.bytes}];
    if (b == nullptr || p.time < b->time) b = &p;
    byVariant[{p.coll, p.nranks, p.bytes, variantName(p)}] = &p;
  }
  std::vector<Regret> out;
  for (const MeasuredPoint& c : chosen) {
    const auto it = best.find({c.coll, c.nranks, c.bytes});
    if (it == best.end()) continue;
    Regret r{c.coll, c.nranks, c.bytes, variantName(*it->second), variantName(c),
             c.time / it->second->time - 1, it->second->time, c.time, c.ran, 0, 0};
    const std::string variant = ranVariant(c.ran);
    if (const auto same = byVariant.find({c.coll, c.nranks, c.bytes, variant});
        !variant.empty() && same != byVariant.end()) {
      r.ranTime = same->second->time;
      r.ranRegret = r.ranTime / r.bestTime - 1;
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace loom::tuner
