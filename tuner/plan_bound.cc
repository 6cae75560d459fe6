#include "tuner/plan_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

namespace loom::tuner {

using collectives::Region;
using collectives::RankPlan;
using collectives::Step;
using collectives::StepKind;

namespace {

// The least latency of a path from one host's rank endpoint to another host's (Dijkstra from
// each endpoint); 0 with one host.
double leastCrossHostLatency(const topology::Topology& topo) {
  std::vector<std::vector<std::pair<int32_t, double>>> adj(topo.nodes.size());
  for (const topology::Link& l : topo.links) adj[size_t(l.from)].push_back({l.to, l.latency});
  std::vector<int32_t> endpoints;
  for (const topology::Rank& r : topo.ranks) endpoints.push_back(r.endpoint);
  std::sort(endpoints.begin(), endpoints.end());
  endpoints.erase(std::unique(endpoints.begin(), endpoints.end()), endpoints.end());
  double least = -1;
  for (int32_t from : endpoints) {
    const int32_t host = topo.nodes[size_t(from)].host;
    std::vector<double> dist(topo.nodes.size(), std::numeric_limits<double>::infinity());
    using Item = std::pair<double, int32_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
    dist[size_t(from)] = 0;
    queue.push({0, from});
    while (!queue.empty()) {
      const auto [d, v] = queue.top();
      queue.pop();
      if (d > dist[size_t(v)]) continue;
      for (const auto& [to, lat] : adj[size_t(v)])
        if (d + lat < dist[size_t(to)]) dist[size_t(to)] = d + lat, queue.push({d + lat, to});
    }
    for (int32_t to : endpoints)
      if (topo.nodes[size_t(to)].host != host && !std::isinf(dist[size_t(to)]))
        least = least < 0 ? dist[size_t(to)] : std::min(least, dist[size_t(to)]);
  }
  return std::max(0.0, least);
}

}  // namespace

NodeLinks::NodeLinks(const topology::Topology& topo) {
  const size_t n = topo.nodes.size();
  outBandwidth.assign(n, 0);
  inBandwidth.assign(n, 0);
  outLatency.assign(n, -1);
  inLatency.assign(n, -1);
  next.assign(n, {});
  auto least = [](double* have, double l) { *have = *have < 0 ? l : std::min(*have, l); };
  for (const topology::Link& l : topo.links) {
    outBandwidth[size_t(l.from)] += l.bandwidth;
    inBandwidth[size_t(l.to)] += l.bandwidth;
    least(&outLatency[size_t(l.from)], l.latency);
    least(&inLatency[size_t(l.to)], l.latency);
    shaped = shaped || l.burstBytes > 0;
    next[size_t(l.from)].push_back(l.to);
  }
  for (auto& v : next) std::sort(v.begin(), v.end());
  for (double* l : {outLatency.data(), inLatency.data()})
    for (size_t i = 0; i < n; ++i) l[i] = std::max(0.0, l[i]);
  size_t hosts = 0;
  for (const topology::Rank& r : topo.ranks) hosts = std::max(hosts, size_t(r.host) + 1);
  hostOut.assign(hosts, 0);
  hostIn.assign(hosts, 0);
  auto hostOf = [&](int32_t node) { return topo.nodes[size_t(node)].host; };
  for (const topology::Link& l : topo.links) {
    const int32_t a = hostOf(l.from), b = hostOf(l.to);
    if (a == b) continue;
    if (a >= 0 && size_t(a) < hosts) hostOut[size_t(a)] += l.bandwidth;
    if (b >= 0 && size_t(b) < hosts) hostIn[size_t(b)] += l.bandwidth;
  }
  crossHostLatency = leastCrossHostLatency(topo);
}

namespace {

// The least latency of any route from node a to node b: its first link leaves a and its last
// enters b, one link where a links to b directly, else two at least.
double leastLatency(const NodeLinks& nl, int32_t a, int32_t b, bool crossHost) {
  if (a == b) return 0;
  const auto& next = nl.next[size_t(a)];
  const double ends = std::binary_search(next.begin(), next.end(), b)
                          ? std::max(nl.outLatency[size_t(a)], nl.inLatency[size_t(b)])
                          : nl.outLatency[size_t(a)] + nl.inLatency[size_t(b)];
  return crossHost ? std::max(ends, nl.crossHostLatency) : ends;
}

// Seconds the busiest endpoint node's (or host's) links need for the bytes that must cross
// them, plus, on plain links, the least latency of those messages (the last of them arrives that
// much after its last byte went): a shaped link's burst (topology::Link::burstBytes) may take
// off a call's time all but its busiest link's transmission.
double byteBound(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                 const NodeLinks& nl, uint32_t elemSize) {
  struct Load {
    double bytes = 0;
    double latency = std::numeric_limits<double>::infinity();  // the least of its messages'
    void add(double b, double l) { bytes += b, latency = std::min(latency, l); }
  };
  // Into and out of each node, then each host.
  std::vector<Load> out(topo.nodes.size()), in(topo.nodes.size());
  std::vector<Load> hostOut(nl.hostOut.size()), hostIn(nl.hostIn.size());
  for (size_t r = 0; r < plans.size(); ++r) {
    const topology::Rank& me = topo.ranks[r];
    for (const collectives::Lane& lane : plans[r].lanes)
      for (const Step& s : lane.steps) {
        if (s.peer < 0 || size_t(s.peer) >= topo.ranks.size()) continue;
        const topology::Rank& peer = topo.ranks[size_t(s.peer)];
        if (peer.endpoint == me.endpoint) continue;
        const bool send = s.kind == StepKind::Send;
        if (!send && s.kind != StepKind::Recv && s.kind != StepKind::RecvReduce) continue;
        const double bytes = double(send ? s.src.count : s.dst.count) * elemSize;
        const bool cross = peer.host != me.host;
        const double lat = send ? leastLatency(nl, me.endpoint, peer.endpoint, cross)
                                : leastLatency(nl, peer.endpoint, me.endpoint, cross);
        (send ? out : in)[size_t(me.endpoint)].add(bytes, lat);
        if (cross) (send ? hostOut : hostIn)[size_t(me.host)].add(bytes, lat);
      }
  }
  double bound = 0;
  auto worst = [&](const std::vector<Load>& loads, const std::vector<double>& bandwidth) {
    for (size_t v = 0; v < loads.size(); ++v)
      if (loads[v].bytes > 0 && bandwidth[v] > 0)
        bound = std::max(bound, loads[v].bytes / bandwidth[v] + (nl.shaped ? 0 : loads[v].latency));
  };
  worst(out, nl.outBandwidth);
  worst(in, nl.inBandwidth);
  worst(hostOut, nl.hostOut);
  worst(hostIn, nl.hostIn);
  return bound;
}

// A step's data accesses as the simulator's dependencies see them (a Barrier's src holds flags).
struct Access {
  Region region;
  bool write;
};
int accessesOf(const Step& s, Access* acc) {
  int n = 0;
  if (s.kind == StepKind::Barrier) return 0;
  if (s.kind != StepKind::Recv && s.src.count > 0) acc[n++] = {s.src, false};
  if (s.kind != StepKind::Send && s.dst.count > 0) acc[n++] = {s.dst, true};
  return n;
}

// The dependency graph of the latency bound: edges (from, to) where step `to` cannot precede
// step `from` (a receive: the latency its message adds, own[to], comes on top).
struct Graph {
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  std::vector<double> own;
};

// Per buffer, a lane's accesses to it so far, in order: the lists of the first `used` entries,
// the others kept with their capacity for the next lane (a bound adds every rank's lanes).
struct Touch {
  uint32_t step;
  Access access;
};
struct LaneTouches {
  std::vector<std::pair<uint32_t, std::vector<Touch>>> byBuffer;
  size_t used = 0;
  std::vector<Touch>& of(uint32_t buf) {
    for (size_t i = 0; i < used; ++i)
      if (byBuffer[i].first == buf) return byBuffer[i].second;
    if (used == byBuffer.size()) byBuffer.emplace_back();
    auto& [b, list] = byBuffer[used++];
    b = buf;
    list.clear();
    return list;
  }
};

// Adds one lane's steps (global indices from `first`): each waits for the earlier steps that
// touch an element of its first piece, one of the two writing it (scanning back to a writer
// that covers the piece: the steps before it are left out, which only loosens the bound), and
// a Barrier for every earlier step.
void addLane(const collectives::Lane& lane, uint32_t first, int slices, LaneTouches* touched,
             Graph* g) {
  touched->used = 0;
  const auto& steps = lane.steps;
  uint32_t lastBarrier = UINT32_MAX;
  for (size_t i = 0; i < steps.size(); ++i) {
    const uint32_t me = first + uint32_t(i);
    if (lastBarrier != UINT32_MAX) g->edges.push_back({lastBarrier, me});
    if (steps[i].kind == StepKind::Barrier) {
      for (size_t j = 0; j < i; ++j) g->edges.push_back({first + uint32_t(j), me});
      lastBarrier = me;
      continue;
    }
    const Step& s = steps[i];
    Access mine[2];
    const int n = accessesOf(s, mine);
    const uint64_t count = s.kind == StepKind::Send ? s.src.count : s.dst.count;
    const uint64_t pieces = std::clamp<uint64_t>(count, 1, uint64_t(slices));
    const uint64_t firstPiece = collectives::partOffset(count, pieces, 1);
    for (int k = 0; k < n; ++k) {
      Region piece = mine[k].region;
      piece.count = std::min(piece.count, firstPiece);
      const std::vector<Touch>& list = touched->of(piece.buf);
      for (size_t j = list.size(); j-- > 0;) {
        const Access& t = list[j].access;
        if (!(mine[k].write || t.write) || !collectives::overlaps(piece, t.region)) continue;
        g->edges.push_back({list[j].step, me});
        if (t.write && t.region.offset <= piece.offset &&
            t.region.offset + t.region.count >= piece.offset + piece.count)
          break;
      }
    }
    for (int k = 0; k < n; ++k) touched->of(mine[k].region.buf).push_back({me, mine[k]});
  }
}

// The longest chain of the graph (Kahn's order); 0 where it has a cycle.
double longestChain(const Graph& g) {
  const size_t n = g.own.size();
  std::vector<uint32_t> waiting(n, 0), begin(n + 1, 0), succ(g.edges.size()), order;
  for (const auto& [from, to] : g.edges) ++begin[from + 1], ++waiting[to];
  for (size_t v = 0; v < n; ++v) begin[v + 1] += begin[v];
  std::vector<uint32_t> fill(begin.begin(), begin.end() - 1);
  for (const auto& [from, to] : g.edges) succ[fill[from]++] = to;
  order.reserve(n);
  for (size_t v = 0; v < n; ++v)
    if (waiting[v] == 0) order.push_back(uint32_t(v));
  std::vector<double> at(n, 0);
  double longest = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t v = order[k];
    at[v] += g.own[v];
    longest = std::max(longest, at[v]);
    for (uint32_t i = begin[v]; i < begin[v + 1]; ++i) {
      const uint32_t s = succ[i];
      at[s] = std::max(at[s], at[v]);
      if (--waiting[s] == 0) order.push_back(s);
    }
  }
  return order.size() == n ? longest : 0;
}

double latencyBound(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                    const NodeLinks& nl, int slices) {
  Graph g;
  uint32_t total = 0;
  size_t lanes = 1;
  for (const RankPlan& p : plans) {
    lanes = std::max(lanes, p.lanes.size());
    for (const collectives::Lane& lane : p.lanes) {
      if (lane.steps.size() > kBoundLaneSteps) return 0;
      total += uint32_t(lane.steps.size());
    }
  }
  g.own.assign(total, 0);
  // Per message: its connection (sender, receiver, lane), its place in the plans, the step.
  struct End {
    uint64_t conn;
    uint32_t step;
  };
  std::vector<End> sends, recvs;
  const uint64_t n = plans.size();
  uint32_t next = 0;
  LaneTouches touched;
  for (size_t r = 0; r < plans.size(); ++r)
    for (size_t l = 0; l < plans[r].lanes.size(); ++l) {
      const collectives::Lane& lane = plans[r].lanes[l];
      addLane(lane, next, slices, &touched, &g);
      for (const Step& s : lane.steps) {
        const uint32_t v = next++;
        if (s.peer < 0 || uint64_t(s.peer) >= n) continue;
        if (s.kind == StepKind::Send) {
          sends.push_back({(r * n + uint64_t(s.peer)) * lanes + l, v});
        } else if (s.kind == StepKind::Recv || s.kind == StepKind::RecvReduce) {
          recvs.push_back({(uint64_t(s.peer) * n + r) * lanes + l, v});
          const topology::Rank &from = topo.ranks[size_t(s.peer)], &to = topo.ranks[r];
          g.own[v] = leastLatency(nl, from.endpoint, to.endpoint, from.host != to.host);
        }
      }
    }
  if (sends.size() != recvs.size()) return 0;
  // Steps are numbered in lane order, so within a connection the sort keeps message order.
  auto byConn = [](const End& x, const End& y) {
    return x.conn != y.conn ? x.conn < y.conn : x.step < y.step;
  };
  std::sort(sends.begin(), sends.end(), byConn);
  std::sort(recvs.begin(), recvs.end(), byConn);
  for (size_t m = 0; m < sends.size(); ++m) {
    if (sends[m].conn != recvs[m].conn) return 0;
    // The message's first piece transmits after the previous message's first piece did.
    if (m > 0 && sends[m - 1].conn == sends[m].conn)
      g.edges.push_back({sends[m - 1].step, sends[m].step});
    g.edges.push_back({sends[m].step, recvs[m].step});
  }
  return longestChain(g);
}

}  // namespace

namespace {
// A hair below: the simulator sums the same figures in another order, and a bound one rounding
// above the time it predicts would prune what it must not.
constexpr double kRounding = 1 - 1e-9;
}  // namespace

double planByteBound(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                     const NodeLinks& links, uint32_t elemSize) {
  if (plans.size() > topo.ranks.size()) return 0;
  return kRounding * byteBound(plans, topo, links, elemSize);
}

double planLatencyBound(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                        const NodeLinks& links, int slices) {
  if (plans.size() > topo.ranks.size()) return 0;
  return kRounding *
         latencyBound(plans, topo, links, std::clamp(slices, 1, SimOptions::kMaxSlices));
}

}  // namespace loom::tuner
