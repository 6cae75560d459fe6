#include "tuner/tuner.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <map>

#include "topology/analysis.h"

namespace loom::tuner {

using collectives::Builder;
using collectives::CallSettings;
using collectives::CollArgs;
using collectives::Collective;

namespace {

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

double Tuner::predictWith(const CollArgs& a, const Builder& b, const AlgoParams& params,
                          bool buffersMapped, bool fast, bool* folded) const {
  if (!modelApplies(a) || b.build == nullptr) return -1;
  CollArgs s = modelCall(a);
  applyParams(params, &s);
  if (!refusal(b, s, params).empty()) return -1;
  SimOptions sim = config_.sim;
  if (params.slices > 0) sim.slices = params.slices;
  sim.peersMapped = buffersMapped;
  sim.fast = fast;
  SimResult r = simulateBuilt(
      s.nranks, [&](int rank) { return b.build(s, rank); }, topo_, sim);
  if (folded != nullptr) *folded = r.fast;
  return r.ok ? r.time : -1;
}

std::vector<Candidate> Tuner::candidates(const CollArgs& a, bool buffersMapped) {
  std::vector<Candidate> out;
  if (!modelApplies(a)) return out;
  const CollArgs s = modelCall(a);
  // The fastest plan that reads its peers' buffers, simulated as if every rank's buffers were
  // mapped (they then cost less): only such a plan gains from the answer. Another plan would
  // run the same either way, and asking would map the arena for nothing (under
  // LOOM_TRANSPORT=tcp, where no plan reads peers, it must not be mapped at all).
  Candidate fastestMapped;
  std::vector<char> folded;  // per candidate of out: whether the fast path predicted it
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
          bool wasFolded = false;
          const double t = predictWith(a, b, p, buffersMapped, config_.sim.fast, &wasFolded);
          if (t < 0) continue;
          out.push_back({&b, p, t});
          folded.push_back(wasFolded);
          if (!first.readByPeers || buffersMapped) continue;
          const double tMapped = predict(a, b, p, /*buffersMapped=*/true);
          if (tMapped >= 0 && (fastestMapped.builder == nullptr || tMapped < fastestMapped.time))
            fastestMapped = {&b, p, tMapped};
        }
      }
    }
  }
  refineCloseCandidates(a, buffersMapped, folded, &out);
  // Stable: equal times keep registry order and fewer lanes first, the same on every rank.
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& x, const Candidate& y) { return x.time < y.time; });
  if (!out.empty()) {
    Decision d;
    d.choice = out[chooseWithLaneMargin(out)];
    d.source = Source::Model;
    for (const Candidate& c : out) {
      if (c.builder != d.choice.builder) {
        d.runnerUp = c;
        break;
      }
    }
    // Asking costs every call a barrier, so it is worth it only where mapped buffers would save
    // more than that (for a small call, the barrier is a large share of its time).
    if (fastestMapped.builder != nullptr &&
        (fastestMapped.builder != d.choice.builder ||
         !(fastestMapped.params == d.choice.params)) &&
        fastestMapped.time + agreementSeconds() < d.choice.time)
      d.whenMapped = fastestMapped;
    modelCache_[cacheKey(a, buffersMapped)] = d;
    lastCached_.reset();
  }
  return out;
}

void Tuner::refineCloseCandidates(const CollArgs& a, bool buffersMapped,
                                  const std::vector<char>& folded,
                                  std::vector<Candidate>* out) const {
  if (!config_.sim.fast || out->empty() || a.nranks > kRefinedRanks) return;
  double best = out->front().time;
  for (const Candidate& c : *out) best = std::min(best, c.time);
  for (size_t i = 0; i < out->size(); ++i) {
    Candidate& c = (*out)[i];
    if (folded[i] && c.time <= best * kFastWindow)
      c.time = predictWith(a, *c.builder, c.params, buffersMapped, /*fast=*/false, nullptr);
  }
  std::erase_if(*out, [](const Candidate& c) { return c.time < 0; });
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

size_t chooseWithLaneMargin(const std::vector<Candidate>& candidates) {
  // A candidate's time, kLaneMargin slower when its algorithm is offered on fewer lanes.
  auto charged = [&](const Candidate& c) {
    for (const Candidate& o : candidates) {
      AlgoParams same = o.params;
      same.lanes = c.params.lanes;
      if (o.builder == c.builder && same == c.params && o.params.lanes < c.params.lanes)
        return c.time * (1 + kLaneMargin);
    }
    return c.time;
  };
  size_t chosen = 0;
  for (size_t i = 1; i < candidates.size(); ++i)
    if (charged(candidates[i]) < charged(candidates[chosen])) chosen = i;
  return chosen;
}

Status Tuner::decide(const CollArgs& a, Decision* out, bool buffersMapped) {
  const CallShape shape = callShape(a);
  if (const TuneRule* rule = config_.rules.match(a, shape)) {
    *out = Decision{
        {rule->builder, withFixed(rule->params, config_.fixed), 0}, Source::Rule, rule->number, {},
        {}};
    return Status::ok();
  }
  // LOOM_AUTOTUNE's measured decisions beat what follows but not the user's rules; the
  // communicator applies them to this decision (Comm::chooseBuilder).
  if (modelApplies(a)) {
    const uint64_t key = cacheKey(a, buffersMapped);
    const Decision* d = cached(key);
    if (d == nullptr) {
      candidates(a, buffersMapped);  // fills the cache unless no candidate could be simulated
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
                  {},
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
