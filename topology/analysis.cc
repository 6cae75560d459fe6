// Report figures: link classes, max-flow bisection, path labels.
#include "topology/analysis.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

namespace loom::topology {

std::vector<LinkClass> linkClasses(const Topology& t) {
  std::map<std::tuple<std::string, double, double>, int> counts;
  for (const Link& l : t.links) ++counts[{l.kind, l.bandwidth, l.latency}];
  std::vector<LinkClass> out;
  for (const auto& [key, n] : counts)
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), n});
  std::stable_sort(out.begin(), out.end(),
                   [](const LinkClass& a, const LinkClass& b) { return a.count > b.count; });
  return out;
}

namespace {

// Dinic's max-flow over the links plus a super source and sink. Plain and iterative enough for
// a 1024-node model (~20k nodes, ~70k links) in well under a second.
class MaxFlow {
 public:
  explicit MaxFlow(size_t nodes) : first_(nodes, -1), level_(nodes), next_(nodes) {}
  void add(int32_t u, int32_t v, double capacity) {
    edges_.push_back({v, first_[size_t(u)], capacity});
    first_[size_t(u)] = int32_t(edges_.size() - 1);
    edges_.push_back({u, first_[size_t(v)], 0});
    first_[size_t(v)] = int32_t(edges_.size() - 1);
  }
  double run(int32_t s, int32_t t) {
    double total = 0;
    while (levels(s, t)) {
      next_ = first_;
      while (double f = push(s, t, std::numeric_limits<double>::infinity())) total += f;
    }
    return total;
  }

 private:
  struct Edge {
    int32_t to, next;
    double capacity;
  };
  static constexpr double kEpsilon = 1e-9;

  bool levels(int32_t s, int32_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<int32_t> queue{s};
    level_[size_t(s)] = 0;
    for (size_t head = 0; head < queue.size(); ++head)
      for (int32_t e = first_[size_t(queue[head])]; e >= 0; e = edges_[size_t(e)].next) {
        const Edge& edge = edges_[size_t(e)];
        if (edge.capacity > kEpsilon && level_[size_t(edge.to)] < 0) {
          level_[size_t(edge.to)] = level_[size_t(queue[head])] + 1;
          queue.push_back(edge.to);
        }
      }
    return level_[size_t(t)] >= 0;
  }
  // Depth-first augmenting path along increasing levels (depth ≤ the diameter, ~10 here).
  double push(int32_t u, int32_t t, double limit) {
    if (u == t) return limit;
    for (int32_t& e = next_[size_t(u)]; e >= 0; e = edges_[size_t(e)].next) {
      Edge& edge = edges_[size_t(e)];
      if (edge.capacity <= kEpsilon || level_[size_t(edge.to)] != level_[size_t(u)] + 1) continue;
      if (double f = push(edge.to, t, std::min(limit, edge.capacity))) {
        edge.capacity -= f;
        edges_[size_t(e ^ 1)].capacity += f;
        return f;
      }
    }
    return 0;
  }

  std::vector<int32_t> first_, level_, next_;
  std::vector<Edge> edges_;
};

}  // namespace

double bisectionBandwidth(const Topology& t) {
  if (t.ranks.size() < 2) return 0;
  int hosts = t.hostCount();
  int32_t n = int32_t(t.nodes.size()), source = n, sink = n + 1;
  MaxFlow flow(size_t(n) + 2);
  for (const Link& l : t.links) flow.add(l.from, l.to, l.bandwidth);
  constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    bool firstHalf = hosts > 1 ? t.ranks[r].host < hosts / 2 : r < t.ranks.size() / 2;
    if (firstHalf) flow.add(source, t.ranks[r].endpoint, kUnbounded);
    else flow.add(t.ranks[r].endpoint, sink, kUnbounded);
  }
  return flow.run(source, sink);
}

PathFigures pathFigures(const Topology& t, int32_t from, int32_t to) {
  PathFigures f;
  if (from == to) return f;
  std::vector<int32_t> path = t.route(from, to);
  f.hops = path.empty() ? -1 : int(path.size());
  for (int32_t l : path) {
    const Link& link = t.links[size_t(l)];
    f.latency += link.latency;
    if (f.kind.empty() || link.bandwidth < f.bandwidth) {
      f.bandwidth = link.bandwidth;
      f.kind = link.kind;
    }
  }
  return f;
}

uint64_t roundTripBytes(const Topology& t) {
  if (t.ranks.size() < 2) return 0;
  const std::vector<int32_t> hosts = t.hostNodes();
  const int32_t host = t.ranks[0].host;
  const HostCpu cpu =
      size_t(host) < hosts.size() ? t.nodes[size_t(hosts[size_t(host)])].cpu : HostCpu{};
  double narrowest = 0, bytes = 0;
  for (size_t r = 1; r < t.ranks.size(); ++r) {
    const PathFigures f = pathFigures(t, t.ranks[0].endpoint, t.ranks[r].endpoint);
    if (f.hops <= 0 || (narrowest > 0 && f.bandwidth > narrowest)) continue;
    const double perMessage =
        cpu.stepOverhead + (t.ranks[r].host != host ? cpu.netMessageOverhead : 0);
    const double held = f.bandwidth * 2 * (f.latency + perMessage);
    bytes = narrowest > 0 && f.bandwidth == narrowest ? std::max(bytes, held) : held;
    narrowest = f.bandwidth;
  }
  return uint64_t(bytes);
}

std::string pathLabel(const Topology& t, int32_t from, int32_t to) {
  PathFigures f = pathFigures(t, from, to);
  if (f.hops == 0) return "X";
  if (f.hops < 0) return "-";
  return f.kind + std::to_string(f.hops);
}

uint64_t hash64(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

namespace {

// Half-octave buckets: figures within about 20% of each other usually share one.
long bucket(double v) { return v > 0 ? std::lround(std::log2(v) * 2) : -1000; }

}  // namespace

std::string topologySignature(const Topology& t) {
  std::string s;
  for (const Node& n : t.nodes)
    s += strprintf("n%d,%d,%d,%ld,%ld;", int(n.kind), n.host, n.cpu.cores,
                   bucket(n.cpu.memBandwidth), bucket(n.cpu.stepOverhead)) +
         n.cpu.machine;
  for (const Link& l : t.links)
    s += strprintf("l%d,%d,%s,%ld,%ld;", l.from, l.to, l.kind.c_str(), bucket(l.bandwidth),
                   bucket(l.latency));
  for (const Rank& r : t.ranks) s += strprintf("r%d,%d;", r.host, r.endpoint);
  return strprintf("%dh%zur-%016llx", t.hostCount(), t.ranks.size(), (unsigned long long)hash64(s));
}

}  // namespace loom::topology
