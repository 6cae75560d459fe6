#include "tuner/tuner.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cmath>
#include <limits>
#include <map>

#include "topology/analysis.h"

namespace loom::tuner {

using collectives::Builder;
using collectives::CallSettings;
using collectives::CollArgs;
using collectives::Collective;

namespace {

// The least of the candidates' charged times (chargedTime): chooseWithLaneMargin takes the
// first within kTieFraction of it.
double leastChargedTime(const std::vector<Candidate>& candidates) {
  double least = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates) least = std::min(least, chargedTime(candidates, c));
  return least;
}

// A fixed parameter (set by the user) overrides what a rule or the model says.
AlgoParams withFixed(AlgoParams p, const AlgoParams& fixed) {
  if (fixed.lanes > 0) p.lanes = fixed.lanes;
  if (fixed.torusX > 0) p.torusX = fixed.torusX, p.torusY = fixed.torusY;
  if (fixed.fanIn > 0) p.fanIn = fixed.fanIn;
  return p;
}

// Candidate values of one parameter: the fixed one, or `tries` (deduplicated, in order).
std::vector<int> choices(int fixed, std::vector<int> tries) {
  if (fixed > 0) return {fixed};
  std::vector<int> out;
  for (int t : tries)
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  return out;
}

// Torus shapes worth trying for N ranks: derived (0x0: rows are hosts when they are equal,
// else the most square grid) and the two orientations of the most square factorization.
std::vector<std::pair<int, int>> torusShapes(int n, const AlgoParams& fixed) {
  if (fixed.torusX > 0) return {{fixed.torusX, fixed.torusY}};
  std::vector<std::pair<int, int>> shapes = {{0, 0}};
  int x = 1;
  for (int d = 1; d * d <= n; ++d)
    if (n % d == 0) x = d;
  if (x > 1) {
    shapes.push_back({x, n / x});
    if (x != n / x) shapes.push_back({n / x, x});
  }
  return shapes;
}

}  // namespace

std::string sourceText(const Decision& d) {
  switch (d.source) {
    case Source::Forced:
      return "LOOM_ALGO";
    case Source::Rule:
      return "rule " + std::to_string(d.rule);
    case Source::Autotune:
      return "autotune";
    case Source::Model:
      return "model";
    case Source::Builtin:
      return "built-in " + std::to_string(d.rule);
  }
  return "?";
}

Tuner::Tuner(topology::Topology topo, TunerConfig config)
    : topo_(std::move(topo)), config_(std::move(config)) {
  if (!topo_.ranks.empty() && topo_.ranks.size() <= size_t(kBoundRanks)) nodeLinks_.emplace(topo_);
  if (!config_.useModel)
    modelOff_ = "LOOM_TUNER=table";
  else if (topo_.ranks.empty())
    modelOff_ = "no topology";
}

int Tuner::sizeBucket(uint64_t bytes) { return bytes <= 1 ? 0 : int(std::bit_width(bytes - 1)); }

uint64_t Tuner::cacheKey(const CollArgs& a, bool buffersMapped) {
  return (uint64_t(buffersMapped) << 48) | (uint64_t(a.coll) << 40) |
         (uint64_t(a.elemSize) << 8) | uint64_t(sizeBucket(callBytes(a)));
}

bool Tuner::modelApplies(const CollArgs& a) const {
  return modelOff_.empty() && size_t(a.nranks) == topo_.ranks.size() &&
         a.coll != Collective::AlltoAllv && a.coll != Collective::SendRecv && callBytes(a) > 0;
}

CollArgs Tuner::modelCall(const CollArgs& a) const {
  CollArgs s = a;
  s.root = 0;
  const int bucket = sizeBucket(callBytes(a));
  s.count = countForBytes(a, bucket >= 63 ? callBytes(a) : uint64_t(1) << bucket);
  return s;
}

double Tuner::predict(const CollArgs& a, const Builder& b, const AlgoParams& params,
                      bool buffersMapped) const {
  return predictWith(a, b, params, buffersMapped, config_.sim.fast, nullptr);
}

SimOptions Tuner::simOptions(const AlgoParams& params, bool buffersMapped, bool fast) const {
  SimOptions sim = config_.sim;
  if (params.slices > 0) sim.slices = params.slices;
  sim.peersMapped = buffersMapped;
  sim.fast = fast && topo_.ranks.size() >= size_t(kFoldRanks);
  return sim;
}

double Tuner::predictWith(const CollArgs& a, const Builder& b, const AlgoParams& params,
                          bool buffersMapped, bool fast, bool* folded, double stopAfter) const {
  if (!modelApplies(a) || b.build == nullptr) return -1;
  CollArgs s = modelCall(a);
  applyParams(params, &s);
  if (!refusal(b, s, params).empty()) return -1;
  SimOptions options = simOptions(params, buffersMapped, fast);
  options.stopAfter = stopAfter;
  SimResult r = simulateBuilt(
      s.nranks, [&](int rank) { return b.build(s, rank); }, topo_, options);
  if (folded != nullptr) *folded = r.fast;
  return r.ok ? r.time : -1;
}

double Tuner::lowerBound(const CollArgs& a, const Builder& b, const AlgoParams& params) const {
  std::vector<collectives::RankPlan> plans;
  const double bytes = byteBoundWithPlans(a, b, params, &plans);
  return plans.empty() ? bytes : std::max(bytes, latencyBound(params, plans));
}

double Tuner::byteBoundWithPlans(const CollArgs& a, const Builder& b, const AlgoParams& params,
                                 std::vector<collectives::RankPlan>* plans) const {
  if (!modelApplies(a) || b.build == nullptr) return -1;
  CollArgs s = modelCall(a);
  applyParams(params, &s);
  if (!refusal(b, s, params).empty()) return -1;
  if (s.nranks > kBoundRanks || !nodeLinks_) return 0;
  for (int r = 0; r < s.nranks; ++r) plans->push_back(b.build(s, r));
  return planByteBound(*plans, topo_, *nodeLinks_, simOptions(params, false, false).elemSize);
}

double Tuner::latencyBound(const AlgoParams& params,
                           const std::vector<collectives::RankPlan>& plans) const {
  return planLatencyBound(plans, topo_, *nodeLinks_, simOptions(params, false, false).slices);
}

namespace {

// Whether two candidates' plans are the same to the simulator (it reads their lanes only), so
// that it predicts the same for them: on one host `hierarchical` is `ring`, and the derived
// torus shape one of the tried ones.
bool sameLanes(const std::vector<collectives::RankPlan>& x,
               const std::vector<collectives::RankPlan>& y) {
  if (x.empty() || x.size() != y.size()) return false;
  for (size_t r = 0; r < x.size(); ++r) {
    const auto &lx = x[r].lanes, &ly = y[r].lanes;
    if (lx.size() != ly.size()) return false;
    for (size_t l = 0; l < lx.size(); ++l) {
      const auto &sx = lx[l].steps, &sy = ly[l].steps;
      if (sx.size() != sy.size()) return false;
      for (size_t i = 0; i < sx.size(); ++i)
        if (sx[i].kind != sy[i].kind || sx[i].peer != sy[i].peer || !(sx[i].src == sy[i].src) ||
            !(sx[i].dst == sy[i].dst))
          return false;
    }
  }
  return true;
}

}  // namespace

std::vector<Tuner::Listed> Tuner::listCandidates(const CollArgs& a, bool withBounds) const {
  std::vector<Listed> out;
  if (!modelApplies(a)) return out;
  const CollArgs s = modelCall(a);
  const AlgoParams& fixed = config_.fixed;
  const int n = s.nranks;
  for (const Builder& b : collectives::allBuilders()) {
    if (b.coll != s.coll || b.build == nullptr) continue;
    const auto shapes =
        readsTorusDims(b) ? torusShapes(n, fixed) : std::vector<std::pair<int, int>>{{0, 0}};
    const auto fanIns =
        readsFanIn(b) ? choices(fixed.fanIn, {1, 2, 4, std::max(1, n - 1)}) : std::vector<int>{0};
    for (auto [x, y] : shapes) {
      for (int k : fanIns) {
        // Lanes the builder really uses: a hint of 4 may give 1 lane (too little data, or a
        // one-lane algorithm); simulating it again would only repeat a candidate.
        std::vector<size_t> laneCounts;
        for (int lanes : choices(fixed.lanes, {1, 2, 4})) {
          AlgoParams p{lanes, x, y, k, config_.sim.slices};
          CollArgs c = s;
          applyParams(p, &c);
          if (!refusal(b, c, p).empty()) continue;
          const collectives::RankPlan first = b.build(c, 0);
          const size_t used = first.lanes.size();
          if (std::find(laneCounts.begin(), laneCounts.end(), used) != laneCounts.end()) continue;
          laneCounts.push_back(used);
          Listed l;
          l.candidate = {&b, p, 0};
          l.readByPeers = first.readByPeers;
          if (withBounds) {
            std::vector<collectives::RankPlan> plans;
            l.bound = byteBoundWithPlans(a, b, p, &plans);
            for (size_t j = 0; j < out.size() && l.sameAs == kNone; ++j)
              if (out[j].sameAs == kNone && out[j].candidate.params.slices == p.slices &&
                  sameLanes(out[j].plans, plans))
                l.sameAs = j;
            if (l.sameAs == kNone) l.plans = std::move(plans);
          }
          out.push_back(std::move(l));
        }
      }
    }
  }
  return out;
}

std::vector<Candidate> Tuner::refinedTimes(const std::vector<Listed>& listed,
                                           const std::vector<double>& fast,
                                           const std::vector<char>& folded, int nranks,
                                           const std::function<double(size_t)>& full) const {
  double best = -1;
  for (double t : fast)
    if (t >= 0 && (best < 0 || t < best)) best = t;
  const bool refine = refines(nranks);
  std::vector<Candidate> out;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (fast[i] < 0) continue;
    Candidate c = listed[i].candidate;
    c.time = refine && folded[i] && fast[i] <= best * kFastWindow ? full(i) : fast[i];
    if (c.time >= 0) out.push_back(c);
  }
  return out;
}

bool Tuner::refines(int nranks) const {
  return config_.sim.fast && nranks >= kFoldRanks && nranks <= kRefinedRanks;
}

Decision Tuner::decisionOver(const std::vector<Candidate>& times) {
  // In registry order, fewer lanes first: of a tie the earlier wins, the same on every rank.
  Decision d;
  d.choice = times[chooseWithLaneMargin(times)];
  d.source = Source::Model;
  return d;
}

Candidate Tuner::fastestMapped(const std::vector<Listed>& listed, const Candidate& choice,
                               bool byBounds, const std::function<double(size_t)>& mapped) const {
  // The fastest plan that reads its peers' buffers, simulated as if every rank's buffers were
  // mapped (they then cost less): only such a plan gains from the answer. Another plan would
  // run the same either way, and asking would map the arena for nothing (under
  // LOOM_TRANSPORT=tcp, where no plan reads peers, it must not be mapped at all).
  std::vector<size_t> order;
  for (size_t i = 0; i < listed.size(); ++i)
    if (listed[i].readByPeers) order.push_back(i);
  if (byBounds)
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return listed[x].bound < listed[y].bound; });
  Candidate best;
  size_t bestIndex = 0;
  const double agree = agreementSeconds();
  for (size_t i : order) {
    // Not one left can be faster than the best (ties go to the earlier in registry order), or
    // save the asking (its time can be no less than its bound).
    const double bound = listed[i].bound;
    if (byBounds && ((best.builder != nullptr && bound > best.time) ||
                     bound + agree >= choice.time))
      break;
    const double t = mapped(i);
    if (t < 0) continue;
    if (best.builder == nullptr || t < best.time || (t == best.time && i < bestIndex))
      best = {listed[i].candidate.builder, listed[i].candidate.params, t}, bestIndex = i;
  }
  // Asking costs every call a barrier, so it is worth it only where mapped buffers would save
  // more than that (for a small call, the barrier is a large share of its time).
  if (best.builder != nullptr &&
      (best.builder != choice.builder || !(best.params == choice.params)) &&
      best.time + agree < choice.time)
    return best;
  return {};
}

std::vector<Candidate> Tuner::candidates(const CollArgs& a, bool buffersMapped) {
  const std::vector<Listed> listed = listCandidates(a, /*withBounds=*/false);
  std::vector<double> fast(listed.size());
  std::vector<char> folded(listed.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    bool wasFolded = false;
    const Candidate& c = listed[i].candidate;
    fast[i] = predictWith(a, *c.builder, c.params, buffersMapped, config_.sim.fast, &wasFolded);
    folded[i] = wasFolded;
  }
  std::vector<Candidate> out =
      refinedTimes(listed, fast, folded, a.nranks, [&](size_t i) {
        const Candidate& c = listed[i].candidate;
        return predictWith(a, *c.builder, c.params, buffersMapped, /*fast=*/false, nullptr);
      });
  if (out.empty()) return out;
  Decision d = decisionOver(out);
  if (!buffersMapped)
    d.whenMapped = fastestMapped(listed, d.choice, /*byBounds=*/false, [&](size_t i) {
      return predict(a, *listed[i].candidate.builder, listed[i].candidate.params, true);
    });
  modelCache_[cacheKey(a, buffersMapped)] = d;
  lastCached_.reset();
  // Stable: equal times keep registry order and fewer lanes first, the same on every rank.
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& x, const Candidate& y) { return x.time < y.time; });
  return out;
}

bool Tuner::settled(const std::vector<Listed>& listed, const std::vector<double>& fast,
                    const std::vector<char>& folded, int nranks,
                    const std::function<double(size_t)>& full,
                    const std::vector<size_t>& left) const {
  // First, where the model refines, whether a candidate left could lower the fastest fast-path
  // time, which decides what is simulated again in full: until none can, a full simulation
  // might be one refinedTimes need not have run.
  if (refines(nranks)) {
    double fastest = std::numeric_limits<double>::infinity();
    for (double t : fast)
      if (t >= 0) fastest = std::min(fastest, t);
    for (size_t i : left)
      if (listed[i].bound < fastest) return false;
  }
  const std::vector<Candidate> times = refinedTimes(listed, fast, folded, nranks, full);
  if (times.empty()) return false;
  const Decision d = decisionOver(times);
  if (std::isinf(d.choice.time)) return false;
  // Where in the registry's order a candidate comes: of a tie the earlier wins.
  auto place = [&](const Candidate& c) {
    for (size_t i = 0; i < listed.size(); ++i)
      if (listed[i].candidate.builder == c.builder && listed[i].candidate.params == c.params)
        return i;
    return listed.size();
  };
  const double leastCharged = leastChargedTime(times);
  const double choiceCharged = chargedTime(times, d.choice);
  const size_t choicePlace = place(d.choice);
  for (size_t i : left) {
    // Each candidate left takes at least its bound. One listed before the choice must not come
    // within a tie of the fastest; one after must not be so fast that the choice is no longer
    // within a tie of it (chooseWithLaneMargin).
    Candidate atBound = listed[i].candidate;
    atBound.time = listed[i].bound;
    const double charged = chargedTime(times, atBound);
    if (i < choicePlace ? !(charged > leastCharged * (1 + kTieFraction))
                        : !(choiceCharged <= charged * (1 + kTieFraction)))
      return false;
  }
  return true;
}

Tuner::CandidateKey Tuner::keyOf(const Candidate& c, bool buffersMapped) {
  const AlgoParams& p = c.params;
  return {c.builder, p.lanes, p.torusX, p.torusY, p.fanIn, p.slices, buffersMapped};
}

namespace {

// Whether plans are small enough to keep across buckets (kKeptSteps).
bool keptAcrossBuckets(const std::vector<collectives::RankPlan>& plans) {
  size_t steps = 0;
  for (const collectives::RankPlan& p : plans)
    for (const collectives::Lane& lane : p.lanes) steps += lane.steps.size();
  return steps <= kKeptSteps;
}

}  // namespace

double Tuner::scaledLatencyBound(const Candidate& c,
                                 const std::vector<collectives::RankPlan>& plans) {
  KeptBound& kept = latencyBounds_[keyOf(c, false)];
  if (!kept.plans.empty() && planScale(kept.plans, plans) > 0) return kept.bound;
  kept.bound = latencyBound(c.params, plans);
  kept.plans.clear();
  if (keptAcrossBuckets(plans) && slicesEvenly(plans, simOptions(c.params, false, false).slices))
    kept.plans = plans;
  return kept.bound;
}

double Tuner::predictListed(const CollArgs& a, const Listed& l, bool buffersMapped, bool fast,
                            bool* folded, double stopAfter) {
  if (l.plans.empty())
    return predictWith(a, *l.candidate.builder, l.candidate.params, buffersMapped, fast, folded,
                       stopAfter);
  // Keyed without `fast`: below kFoldRanks a fast request simulates in full, as the other does.
  SimOptions options = simOptions(l.candidate.params, buffersMapped, fast);
  options.stopAfter = stopAfter;
  const SimResult r =
      simulate(l.plans, topo_, options,
               !options.fast && keptAcrossBuckets(l.plans)
                   ? &compiledSteps_[keyOf(l.candidate, buffersMapped)]
                   : nullptr);
  if (folded != nullptr) *folded = r.fast;
  return r.ok ? r.time : -1;
}

std::optional<Decision> Tuner::decideByBounds(const CollArgs& a, bool buffersMapped) {
  std::vector<Listed> listed = listCandidates(a, /*withBounds=*/true);
  const size_t n = listed.size();
  // Not simulated yet: +inf, which keeps the candidate listed (a variant on more lanes is
  // charged kLaneMargin for it) and never chosen. A candidate whose plans an earlier one has
  // takes that one's bound and predictions.
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  std::vector<double> fast(n, kUnknown), full(n, kUnknown), mapped(n, kUnknown);
  std::vector<char> folded(n, 0), fullDone(n, 0), mappedDone(n, 0);
  auto root = [&](size_t i) { return listed[i].sameAs == kNone ? i : listed[i].sameAs; };
  auto memo = [&](std::vector<double>& value, std::vector<char>& done, size_t i, bool mappedBuf,
                  bool fastPath) {
    const size_t r = root(i);
    if (!done[r]) {
      value[r] = predictListed(a, listed[r], mappedBuf, fastPath, nullptr);
      done[r] = 1;
    }
    return value[r];
  };
  auto fullOf = [&](size_t i) { return memo(full, fullDone, i, buffersMapped, false); };
  // Where the model does not refine, a candidate is simulated only until it is past the least
  // charged time so far, its tie and lane margin counted: from there on it cannot be chosen
  // (1024 ranks: a ring of 2 MiB stops after rhd's 73 us, not at its own 2.8 ms).
  auto stopAfter = [&](size_t i) {
    if (refines(a.nranks)) return 0.0;
    const std::vector<Candidate> times = refinedTimes(listed, fast, folded, a.nranks, fullOf);
    const double least = leastChargedTime(times);
    if (std::isinf(least)) return 0.0;
    Candidate unit = listed[i].candidate;
    unit.time = 1;
    return least * (1 + kTieFraction) / chargedTime(times, unit);
  };
  std::vector<size_t> left(n);  // not simulated yet
  for (size_t i = 0; i < n; ++i) left[i] = i;
  bool simulated = false;
  // Beyond kBoundRanks, where every bound is 0, the fewest lanes first: a variant on more
  // lanes, charged its margin, then stops at the fastest algorithm's time instead of its own
  // on fewer lanes (1024 ranks, 2 MiB: ring on 2 and 4 lanes after rhd's 73 us, not after
  // ring's 2.8 ms).
  const bool lanesFirst = a.nranks > kBoundRanks;
  while (!left.empty()) {
    // Before each step, bound or simulation: a bound drawn may have settled the decision, and
    // the candidates not bounded yet take at least their byte bound, which may settle it too.
    if (simulated && settled(listed, fast, folded, a.nranks, fullOf, left)) break;
    // The least bound next (the first of equals in registry order, or with lanesFirst the
    // fewest lanes).
    auto next = std::min_element(left.begin(), left.end(), [&](size_t x, size_t y) {
      const Listed &lx = listed[x], &ly = listed[y];
      return lx.bound < ly.bound ||
             (lanesFirst && lx.bound == ly.bound &&
              lx.candidate.params.lanes < ly.candidate.params.lanes);
    });
    const size_t i = *next, r = root(i);
    if (!listed[i].bounded) {
      if (!listed[r].bounded && !listed[r].plans.empty())
        listed[r].bound = std::max(listed[r].bound,
                                   scaledLatencyBound(listed[r].candidate, listed[r].plans));
      listed[r].bounded = true;
      for (size_t j = 0; j < n; ++j)
        if (root(j) == r) listed[j].bound = listed[r].bound, listed[j].bounded = true;
      continue;
    }
    left.erase(next);
    if (r == i || std::isinf(fast[r])) {
      bool wasFolded = false;
      fast[i] =
          predictListed(a, listed[r], buffersMapped, config_.sim.fast, &wasFolded, stopAfter(i));
      folded[i] = wasFolded;
    } else {
      fast[i] = fast[r], folded[i] = folded[r];
    }
    simulated = true;
  }
  const std::vector<Candidate> times = refinedTimes(listed, fast, folded, a.nranks, fullOf);
  if (times.empty() || std::isinf(decisionOver(times).choice.time)) return std::nullopt;
  Decision d = decisionOver(times);
  if (!buffersMapped)
    d.whenMapped = fastestMapped(listed, d.choice, /*byBounds=*/true, [&](size_t i) {
      return memo(mapped, mappedDone, i, true, config_.sim.fast);
    });
  return d;
}

double Tuner::agreementSeconds() const {
  const std::vector<int32_t> hosts = topo_.hostNodes();
  const topology::HostCpu cpu =
      hosts.empty() ? topology::HostCpu{} : topo_.nodes[size_t(hosts[0])].cpu;
  return barrierSeconds(cpu, config_.sim) + cpu.stepOverhead;
}

uint64_t defaultFanInLead(const topology::Topology& topo) {
  std::map<int32_t, uint64_t> ranksOf;
  uint64_t perHost = 1;
  for (const topology::Rank& r : topo.ranks) perHost = std::max(perHost, ++ranksOf[r.host]);
  return std::max(topology::roundTripBytes(topo), kLinkQueueBytes / (2 * perHost));
}

CallSettings callSettings(const AlgoParams& fixed, const CallSettingsInput& input,
                          const topology::Topology& topo) {
  CallSettings a;
  a.fanInLeadBytes =
      input.fanInLeadBytes >= 0 ? uint64_t(input.fanInLeadBytes) : defaultFanInLead(topo);
  a.lanes = std::max(1, fixed.lanes);
  a.torusX = fixed.torusX;
  a.torusY = fixed.torusY;
  a.fanIn = std::max(1, fixed.fanIn);
  a.sharedBytes = input.sharedBytes;
  return a;
}

const Decision* Tuner::cached(uint64_t key) {
  if (lastCached_ && lastKey_ == key) return &*lastCached_;
  auto it = modelCache_.find(key);
  if (it == modelCache_.end()) return nullptr;
  lastKey_ = key;
  lastCached_ = it->second;
  return &*lastCached_;
}

double chargedTime(const std::vector<Candidate>& candidates, const Candidate& c) {
  for (const Candidate& o : candidates) {
    AlgoParams same = o.params;
    same.lanes = c.params.lanes;
    if (o.builder == c.builder && same == c.params && o.params.lanes < c.params.lanes)
      return c.time * (1 + kLaneMargin);
  }
  return c.time;
}

size_t chooseWithLaneMargin(const std::vector<Candidate>& candidates) {
  const double least = leastChargedTime(candidates);
  for (size_t i = 0; i < candidates.size(); ++i)
    if (chargedTime(candidates, candidates[i]) <= least * (1 + kTieFraction)) return i;
  return 0;
}

Status Tuner::decide(const CollArgs& a, Decision* out, bool buffersMapped) {
  const CallShape shape = callShape(a);
  if (const TuneRule* rule = config_.rules.match(a, shape)) {
    *out = Decision{
        {rule->builder, withFixed(rule->params, config_.fixed), 0}, Source::Rule, rule->number, {}};
    return Status::ok();
  }
  // LOOM_AUTOTUNE's measured decisions beat what follows but not the user's rules; the
  // communicator applies them to this decision (Comm::chooseBuilder).
  if (modelApplies(a)) {
    const uint64_t key = cacheKey(a, buffersMapped);
    const Decision* d = cached(key);
    if (d == nullptr) {
      if (std::optional<Decision> fresh = decideByBounds(a, buffersMapped)) {
        modelCache_[key] = *fresh;
        lastCached_.reset();
      }
      d = cached(key);
    }
    if (d != nullptr) {
      *out = *d;
      return Status::ok();
    }
  }
  const TuneRule* rule = builtinTable().match(a, shape);
  if (rule == nullptr) {
    return errorf(loomInternalError, "no rule of the built-in table serves %s on %d ranks",
                  collectiveName(a.coll), a.nranks);
  }
  *out = Decision{{rule->builder, withFixed(rule->params, config_.fixed), 0},
                  Source::Builtin,
                  rule->number,
                  {}};
  return Status::ok();
}

uint64_t countForBytes(const CollArgs& base, uint64_t bytes) {
  const uint64_t perCall = std::max<uint64_t>(1, base.elemSize);
  const uint64_t blocks =
      collectives::countsBlocks(base.coll) ? uint64_t(std::max(1, base.nranks)) : 1;
  return std::max<uint64_t>(1, bytes / (perCall * blocks));
}

const std::vector<Collective>& tabledCollectives() {
  static const std::vector<Collective> kTabled = {
      Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
      Collective::AlltoAll,  Collective::Broadcast, Collective::Reduce,
      Collective::Gather,    Collective::Scatter};
  return kTabled;
}

std::vector<TableRow> decisionTable(Tuner& tuner, const CollArgs& base,
                                    const std::vector<Collective>& colls, uint64_t minBytes,
                                    uint64_t maxBytes) {
  std::vector<TableRow> rows;
  for (Collective c : colls) {
    for (uint64_t bytes = std::max<uint64_t>(1, minBytes); bytes <= maxBytes; bytes *= 2) {
      CollArgs a = base;
      a.coll = c;
      a.count = countForBytes(a, bytes);
      TableRow row{c, callBytes(a), {}};
      if (tuner.decide(a, &row.decision).isOk()) rows.push_back(row);
    }
  }
  return rows;
}

std::string describe(const Candidate& c) {
  if (c.builder == nullptr) return "-";
  AlgoParams shown = c.params;
  shown.slices = 0;  // the simulator's detail, not part of the choice
  const std::string params = formatParams(shown);
  return std::string(c.builder->name) + (params.empty() ? "" : " " + params);
}

std::vector<std::string> summarize(const std::vector<TableRow>& rows) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < rows.size();) {
    const Collective coll = rows[i].coll;
    std::string line = std::string(collectiveName(coll)) + ":";
    const char* sep = " ";
    while (i < rows.size() && rows[i].coll == coll) {
      const Decision& d = rows[i].decision;
      size_t j = i;
      while (j + 1 < rows.size() && rows[j + 1].coll == coll &&
             rows[j + 1].decision.choice.builder == d.choice.builder &&
             rows[j + 1].decision.choice.params == d.choice.params &&
             sourceText(rows[j + 1].decision) == sourceText(d))
        ++j;
      line += sep + formatBytes(rows[i].bytes) + "-" + formatBytes(rows[j].bytes) + " " +
              describe(d.choice) + " (" + sourceText(d) + ")";
      sep = "; ";
      i = j + 1;
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace loom::tuner
