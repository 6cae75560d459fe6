// The topology graph: node kinds, hop-count routing over a cached CSR adjacency, validation.
#include "topology/topology.h"

#include <cmath>
#include <unordered_map>

namespace loom::topology {

namespace {

constexpr const char* kKindNames[] = {"host", "cpu", "numa", "gpu", "nic", "switch"};

}  // namespace

const char* nodeKindName(NodeKind k) {
  size_t i = size_t(k);
  return i < std::size(kKindNames) ? kKindNames[i] : "invalid";
}

std::optional<NodeKind> parseNodeKind(std::string_view name) {
  for (size_t i = 0; i < std::size(kKindNames); ++i)
    if (name == kKindNames[i]) return NodeKind(i);
  return std::nullopt;
}

int Topology::hostCount() const {
  int n = 0;
  for (const Node& node : nodes) n += node.kind == NodeKind::Host;
  return n;
}

std::vector<int32_t> Topology::hostNodes() const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].kind == NodeKind::Host) out.push_back(int32_t(i));
  return out;
}

std::vector<int32_t> Topology::hostMachines() const {
  std::vector<int32_t> out;
  std::unordered_map<std::string_view, int32_t> firstHost;  // machine -> its first host
  for (int32_t n : hostNodes()) {
    const std::string& machine = nodes[size_t(n)].cpu.machine;
    const int32_t h = int32_t(out.size());
    out.push_back(machine.empty() ? h : firstHost.emplace(machine, h).first->second);
  }
  return out;
}

int32_t Topology::findNode(std::string_view nodeName) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == nodeName) return int32_t(i);
  return -1;
}

// Compressed sparse rows: the links leaving (and entering) node v are linkIds[begin[v] ..
// begin[v + 1]), with the node at the other end beside each, so a BFS step reads two
// contiguous arrays instead of chasing Link structs (which hold a std::string each).
struct RouteCache::Graph {
  struct Side {
    std::vector<int32_t> begin, linkIds, peers;
  };
  size_t nodeCount = 0, linkCount = 0;
  Side out, in;
};

namespace {

void buildSide(const Topology& t, bool outgoing, RouteCache::Graph::Side* side) {
  size_t n = t.nodes.size();
  side->begin.assign(n + 2, 0);
  auto inRange = [n](int32_t v) { return v >= 0 && size_t(v) < n; };
  for (const Link& l : t.links)  // links with bad indices are skipped: validate() names them
    if (inRange(l.from) && inRange(l.to)) ++side->begin[size_t(outgoing ? l.from : l.to) + 2];
  for (size_t v = 2; v < n + 2; ++v) side->begin[v] += side->begin[v - 1];
  side->linkIds.resize(size_t(side->begin[n + 1]));
  side->peers.resize(side->linkIds.size());
  for (size_t i = 0; i < t.links.size(); ++i) {  // ascending link order within each node
    const Link& l = t.links[i];
    if (!inRange(l.from) || !inRange(l.to)) continue;
    int32_t slot = side->begin[size_t(outgoing ? l.from : l.to) + 1]++;
    side->linkIds[size_t(slot)] = int32_t(i);
    side->peers[size_t(slot)] = outgoing ? l.to : l.from;
  }
  side->begin.pop_back();
}

// Per-thread BFS scratch: distances stamped with a generation so a search never clears an
// array the size of the graph (a 1024-node model has ~20k nodes; most routes touch far fewer).
struct BfsScratch {
  std::vector<uint32_t> stamp;
  std::vector<int32_t> dist, queue;
  uint32_t generation = 0;

  void start(size_t n) {
    if (stamp.size() != n || ++generation == 0) {
      stamp.assign(n, 0);
      dist.resize(n);
      generation = 1;
    }
    queue.clear();
  }
  bool seen(int32_t v) const { return stamp[size_t(v)] == generation; }
  void visit(int32_t v, int32_t d) {
    stamp[size_t(v)] = generation;
    dist[size_t(v)] = d;
    queue.push_back(v);
  }
};

BfsScratch& scratch() {
  thread_local BfsScratch s;
  return s;
}

// Breadth-first search from `source` along `side`, stopping once `target` is reached (or
// exhausting the component when target < 0). Leaves distances in the scratch.
void bfs(const RouteCache::Graph::Side& side, size_t nodeCount, int32_t source, int32_t target,
         BfsScratch* s) {
  s->start(nodeCount);
  s->visit(source, 0);
  for (size_t head = 0; head < s->queue.size(); ++head) {
    int32_t v = s->queue[head];
    for (int32_t e = side.begin[size_t(v)]; e < side.begin[size_t(v) + 1]; ++e) {
      int32_t w = side.peers[size_t(e)];
      if (s->seen(w)) continue;
      s->visit(w, s->dist[size_t(v)] + 1);
      if (w == target) return;
    }
  }
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: cheap, well spread
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void RouteCache::invalidate() {
  std::lock_guard<std::mutex> lock(mutex_);
  graph_.reset();
}

std::shared_ptr<const RouteCache::Graph> RouteCache::get(const Topology& t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (graph_ && graph_->nodeCount == t.nodes.size() && graph_->linkCount == t.links.size())
    return graph_;
  auto g = std::make_shared<Graph>();
  g->nodeCount = t.nodes.size();
  g->linkCount = t.links.size();
  buildSide(t, true, &g->out);
  buildSide(t, false, &g->in);
  graph_ = g;
  return graph_;
}

double slowestNetworkLink(const Topology& t, int from, int to) {
  const int n = int(t.ranks.size());
  if (from < 0 || to < 0 || from >= n || to >= n) return 0;
  double slowest = 0;
  for (int32_t l : t.route(t.ranks[size_t(from)].endpoint, t.ranks[size_t(to)].endpoint)) {
    const Link& link = t.links[size_t(l)];
    if (isNetworkLinkKind(link.kind) && (slowest == 0 || link.bandwidth < slowest))
      slowest = link.bandwidth;
  }
  return slowest;
}

std::vector<int32_t> Topology::route(int32_t fromNode, int32_t toNode) const {
  std::vector<int32_t> path;
  int32_t n = int32_t(nodes.size());
  if (fromNode == toNode || fromNode < 0 || toNode < 0 || fromNode >= n || toNode >= n)
    return path;
  auto g = routeCache_.get(*this);
  BfsScratch& s = scratch();
  bfs(g->out, g->nodeCount, fromNode, toNode, &s);
  if (!s.seen(toNode)) return path;
  // Walk back from the target. Every node at distance d - 1 was discovered before the search
  // stopped, so the predecessors on shortest paths are exactly the in-neighbours at d - 1.
  path.resize(size_t(s.dist[size_t(toNode)]));
  uint64_t pairHash = mix(uint64_t(uint32_t(fromNode)) << 32 | uint32_t(toNode));
  for (int32_t v = toNode; v != fromNode;) {
    int32_t want = s.dist[size_t(v)] - 1;
    int32_t begin = g->in.begin[size_t(v)], end = g->in.begin[size_t(v) + 1], count = 0;
    for (int32_t e = begin; e < end; ++e) {
      int32_t u = g->in.peers[size_t(e)];
      count += s.seen(u) && s.dist[size_t(u)] == want;
    }
    int32_t pick = int32_t(mix(pairHash ^ uint64_t(v)) % uint64_t(count));
    for (int32_t e = begin;; ++e) {
      int32_t u = g->in.peers[size_t(e)];
      if (!s.seen(u) || s.dist[size_t(u)] != want || pick-- > 0) continue;
      path[size_t(want)] = g->in.linkIds[size_t(e)];
      v = u;
      break;
    }
  }
  return path;
}

Status Topology::validate() const {
  auto bad = [this](const std::string& what) {
    return Status(loomInvalidArgument, "topology '" + name + "': " + what);
  };
  int32_t n = int32_t(nodes.size());
  int hosts = hostCount();
  std::unordered_map<std::string_view, int32_t> byName;
  int hostIndex = 0;
  for (int32_t i = 0; i < n; ++i) {
    const Node& node = nodes[size_t(i)];
    if (node.name.empty()) return bad(strprintf("node %d has no name", i));
    auto [it, fresh] = byName.emplace(node.name, i);
    if (!fresh)
      return bad(strprintf("nodes %d and %d are both named '%s'", it->second, i,
                           node.name.c_str()));
    if (node.kind == NodeKind::Host) {
      if (node.host != hostIndex)
        return bad(strprintf("host node '%s' is host %d (its order among the hosts) but says "
                             "host %d", node.name.c_str(), hostIndex, node.host));
      ++hostIndex;
    } else if (node.host < -1 || node.host >= hosts) {
      return bad(strprintf("node '%s' names host %d; there are %d hosts", node.name.c_str(),
                           node.host, hosts));
    }
  }
  const std::vector<int32_t> hostNode = hostNodes(), machine = hostMachines();
  for (size_t h = 0; h < hostNode.size(); ++h) {
    const Node& host = nodes[size_t(hostNode[h])];
    const Node& first = nodes[size_t(hostNode[size_t(machine[h])])];
    if (first.cpu.cores != host.cpu.cores)
      return bad(strprintf("hosts '%s' and '%s' share machine '%s' but give it %d and %d cores",
                           first.name.c_str(), host.name.c_str(), host.cpu.machine.c_str(),
                           first.cpu.cores, host.cpu.cores));
  }
  for (size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    if (l.from < 0 || l.from >= n || l.to < 0 || l.to >= n)
      return bad(strprintf("link %zu goes from node %d to node %d; valid indices are 0..%d", i,
                           l.from, l.to, n - 1));
    std::string where = strprintf("link %zu (%s -> %s)", i, nodes[size_t(l.from)].name.c_str(),
                                  nodes[size_t(l.to)].name.c_str());
    if (l.from == l.to) return bad(where + " loops back to its own node");
    if (!(l.bandwidth > 0) || !std::isfinite(l.bandwidth))
      return bad(where + strprintf(" has bandwidth %g; it must be positive", l.bandwidth));
    if (!(l.latency >= 0) || !std::isfinite(l.latency))
      return bad(where + strprintf(" has latency %g; it must be zero or more", l.latency));
  }
  if (ranks.empty()) return Status::ok();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const Rank& rank = ranks[r];
    if (rank.host < 0 || rank.host >= hosts)
      return bad(strprintf("rank %zu is on host %d; there are %d hosts", r, rank.host, hosts));
    if (rank.endpoint < 0 || rank.endpoint >= n)
      return bad(strprintf("rank %zu has endpoint node %d; valid indices are 0..%d", r,
                           rank.endpoint, n - 1));
    const Node& ep = nodes[size_t(rank.endpoint)];
    if (ep.host != -1 && ep.host != rank.host)
      return bad(strprintf("rank %zu is on host %d but its endpoint '%s' belongs to host %d", r,
                           rank.host, ep.name.c_str(), ep.host));
  }
  // Every rank reaches rank 0 and rank 0 reaches every rank, so every pair is connected.
  auto g = routeCache_.get(*this);
  BfsScratch& s = scratch();
  const char* direction[] = {"cannot be reached from", "cannot reach"};
  for (int pass = 0; pass < 2; ++pass) {
    bfs(pass == 0 ? g->out : g->in, g->nodeCount, ranks[0].endpoint, -1, &s);
    for (size_t r = 1; r < ranks.size(); ++r)
      if (!s.seen(ranks[r].endpoint))
        return bad(strprintf("rank %zu (endpoint '%s') %s rank 0 (endpoint '%s'): the ranks "
                             "are disconnected", r, nodes[size_t(ranks[r].endpoint)].name.c_str(),
                             direction[pass], nodes[size_t(ranks[0].endpoint)].name.c_str()));
  }
  return Status::ok();
}

}  // namespace loom::topology
