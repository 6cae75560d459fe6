// Finding the host symmetry of a call (tuner/symmetry.h, docs/SIMULATOR.md "The fast path").
#include "tuner/symmetry.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "base/status.h"

namespace loom::tuner {
namespace {

using collectives::RankPlan;
using collectives::Step;
using topology::Link;
using topology::Topology;

// The most ranks the fast path simulates for a block of hosts that moves as a whole (a
// fat-tree's leaf): beyond, each host is its own block and the routes are averaged.
constexpr int kMaxRepresentatives = 64;

// Every host's nodes and links, in index order, so that the j-th of one host can be compared
// with the j-th of another.
struct HostLayout {
  std::vector<std::vector<int32_t>> nodes;  // per host
  std::vector<int32_t> local;               // per node: its index among its host's, or -1
  std::vector<std::vector<int32_t>> links;  // per host: the links with an end on it
  std::vector<int32_t> shared;              // links between switches
  std::vector<int32_t> linkHost, linkLocal;  // per link: its host (-1: none), its index there
};

// Fills the layout; "" or why the hosts cannot be compared.
std::string layOut(const Topology& topo, int hosts, HostLayout* out) {
  out->nodes.assign(size_t(hosts), {});
  out->local.assign(topo.nodes.size(), -1);
  out->links.assign(size_t(hosts), {});
  out->linkHost.assign(topo.links.size(), -1);
  out->linkLocal.assign(topo.links.size(), -1);
  for (size_t n = 0; n < topo.nodes.size(); ++n) {
    const int32_t h = topo.nodes[n].host;
    if (h < 0) continue;
    out->local[n] = int32_t(out->nodes[size_t(h)].size());
    out->nodes[size_t(h)].push_back(int32_t(n));
  }
  for (size_t l = 0; l < topo.links.size(); ++l) {
    const int32_t a = topo.nodes[size_t(topo.links[l].from)].host;
    const int32_t b = topo.nodes[size_t(topo.links[l].to)].host;
    if (a >= 0 && b >= 0 && a != b) return "links join hosts directly";
    if (a < 0 && b < 0) {
      out->shared.push_back(int32_t(l));
    } else {
      const int32_t h = a >= 0 ? a : b;
      out->linkHost[l] = h;
      out->linkLocal[l] = int32_t(out->links[size_t(h)].size());
      out->links[size_t(h)].push_back(int32_t(l));
    }
  }
  return "";
}

// Whether host h has host 0's nodes and links, the j-th like the j-th.
bool sameAsFirstHost(const Topology& topo, const HostLayout& lay, size_t h) {
  if (lay.nodes[h].size() != lay.nodes[0].size() || lay.links[h].size() != lay.links[0].size())
    return false;
  for (size_t j = 0; j < lay.nodes[h].size(); ++j) {
    const topology::Node& a = topo.nodes[size_t(lay.nodes[0][j])];
    const topology::Node& b = topo.nodes[size_t(lay.nodes[h][j])];
    if (a.kind != b.kind || !(a.cpu == b.cpu)) return false;
  }
  for (size_t j = 0; j < lay.links[h].size(); ++j) {
    const Link& a = topo.links[size_t(lay.links[0][j])];
    const Link& b = topo.links[size_t(lay.links[h][j])];
    if (a.bandwidth != b.bandwidth || a.latency != b.latency || a.burstBytes != b.burstBytes ||
        a.kind != b.kind || lay.local[size_t(a.from)] != lay.local[size_t(b.from)] ||
        lay.local[size_t(a.to)] != lay.local[size_t(b.to)])
      return false;
  }
  return true;
}

// Hops from the nearest node of a host, per node (switches: their tier).
std::vector<int32_t> tiers(const Topology& topo) {
  std::vector<std::vector<int32_t>> adjacent(topo.nodes.size());
  for (const Link& l : topo.links) {
    adjacent[size_t(l.from)].push_back(l.to);
    adjacent[size_t(l.to)].push_back(l.from);
  }
  std::vector<int32_t> tier(topo.nodes.size(), -1);
  std::deque<int32_t> queue;
  for (size_t n = 0; n < topo.nodes.size(); ++n)
    if (topo.nodes[n].host >= 0) tier[n] = 0, queue.push_back(int32_t(n));
  for (; !queue.empty(); queue.pop_front())
    for (int32_t m : adjacent[size_t(queue.front())])
      if (tier[size_t(m)] < 0) tier[size_t(m)] = tier[size_t(queue.front())] + 1, queue.push_back(m);
  return tier;
}

// The group elements checked: a shift's first, middle and last; an xor's first, middle and
// last generator (its lowest, middle and highest bit of the block index).
std::vector<int> checkedElements(const RankSymmetry& s) {
  const int bits = std::bit_width(unsigned(s.elements)) - 1;
  const std::initializer_list<int> shift = {1, s.elements / 2, s.elements - 1};
  const std::initializer_list<int> xorBits = {1, 1 << (bits / 2), s.elements / 2};
  std::vector<int> out;
  for (int g : s.kind == RankSymmetry::Kind::Shift ? shift : xorBits)
    if (g > 0 && g < s.elements && std::find(out.begin(), out.end(), g) == out.end())
      out.push_back(g);
  return out;
}

// The links between switches, classed by what they are (figures, kind, the tiers they join):
// per link its class's first link, and per class its size.
void classSharedLinks(const Topology& topo, const HostLayout& lay, std::vector<int32_t>* classOf,
                      std::map<int32_t, int32_t>* size) {
  const std::vector<int32_t> tier = tiers(topo);
  using Key = std::tuple<double, double, uint64_t, std::string, int32_t, int32_t>;
  std::map<Key, std::vector<int32_t>> classes;
  for (int32_t l : lay.shared) {
    const Link& k = topo.links[size_t(l)];
    classes[{k.bandwidth, k.latency, k.burstBytes, k.kind, tier[size_t(k.from)],
             tier[size_t(k.to)]}]
        .push_back(l);
  }
  for (const auto& [key, members] : classes) {
    for (int32_t l : members) (*classOf)[size_t(l)] = members[0];
    (*size)[members[0]] = int32_t(members.size());
  }
}

// What the route from host a's first rank to host b's looks like, link by link: a host's own
// link by its index among its host's links and the side it is on (a's, b's, another's), a link
// between switches by its class.
std::vector<int64_t> signature(const Topology& topo, const HostLayout& lay,
                               const std::vector<int32_t>& linkClass, int perHost, int a, int b) {
  std::vector<int64_t> sig;
  for (int32_t l : topo.route(topo.ranks[size_t(a * perHost)].endpoint,
                              topo.ranks[size_t(b * perHost)].endpoint)) {
    const int32_t h = lay.linkHost[size_t(l)];
    sig.push_back(h < 0 ? int64_t(linkClass[size_t(l)]) << 2 | 3
                        : int64_t(lay.linkLocal[size_t(l)]) << 2 | (h == a ? 0 : h == b ? 1 : 2));
  }
  return sig;
}

// The topology as the fast path sees it: its hosts alike, their links, the classes of the
// links between switches.
struct HostModel {
  HostLayout lay;
  int hosts = 0, perHost = 0;
  std::vector<int32_t> linkClass;                // per link between switches: its class's first
  std::map<int32_t, int32_t> classSize;          // per class (its first link): its links
  std::vector<std::vector<int64_t>> fromHost0;  // per host: the route from host 0, as signature()
  // Per kind (shift, xor) and step, blockSymmetry's answer once found: routing every host
  // again for it costs a BFS per host and group element (10k on dgx-rail-1024 for an xor).
  mutable std::mutex mutex;
  mutable std::map<std::pair<RankSymmetry::Kind, int>, std::pair<bool, RankSymmetry>> blocks;
};

// Whether every host has the same nodes and links, its ranks in the same places; fills *m.
// "" or why not.
std::string hostModel(const Topology& topo, int nranks, HostModel* m) {
  const int hosts = topo.hostCount();
  if (nranks != int(topo.ranks.size())) return "the plans cover only some of the topology's ranks";
  if (hosts < 2) return "one host: nothing to fold";
  if (nranks % hosts != 0) return "hosts with different rank counts";
  m->hosts = hosts;
  m->perHost = nranks / hosts;
  const std::vector<int32_t> machines = topo.hostMachines();
  for (int h = 0; h < hosts; ++h)
    if (machines[size_t(h)] != h) return "hosts share a machine's cores";
  if (std::string why = layOut(topo, hosts, &m->lay); !why.empty()) return why;
  for (int r = 0; r < nranks; ++r) {
    const topology::Rank& rank = topo.ranks[size_t(r)];
    if (rank.host != r / m->perHost) return "ranks not numbered host by host";
    if (m->lay.local[size_t(rank.endpoint)] !=
        m->lay.local[size_t(topo.ranks[size_t(r % m->perHost)].endpoint)])
      return "ranks at different places on their hosts";
  }
  for (size_t h = 1; h < size_t(hosts); ++h)
    if (!sameAsFirstHost(topo, m->lay, h)) return strprintf("host %zu differs from host 0", h);
  m->linkClass.assign(topo.links.size(), -1);
  classSharedLinks(topo, m->lay, &m->linkClass, &m->classSize);
  for (int h = 0; h < hosts; ++h)
    m->fromHost0.push_back(signature(topo, m->lay, m->linkClass, m->perHost, 0, h));
  return "";
}

// Whether moving blocks of k hosts by the group's elements (a few of them: checkedElements)
// leaves every route from host 0 looking the same: a fat-tree's leaves of 4 hosts move as
// wholes under a shift of 4 hosts, not of 1.
bool routesAlike(const Topology& topo, const HostModel& m, const RankSymmetry& blocks) {
  for (int g : checkedElements(blocks)) {
    const int image = blocks.act(g, 0);
    for (int h = 0; h < m.hosts; ++h)
      if (signature(topo, m.lay, m.linkClass, m.perHost, image, blocks.act(g, h)) !=
          m.fromHost0[size_t(h)])
        return false;
  }
  return true;
}

// The group of `kind` on blocks of k hosts, with its link classes.
RankSymmetry onBlocks(const Topology& topo, const HostModel& m, RankSymmetry::Kind kind, int k) {
  RankSymmetry s;
  s.kind = kind;
  s.period = k * m.perHost;
  s.elements = m.hosts / k;
  s.linkClass.assign(topo.links.size(), -1);
  s.linkScale.assign(topo.links.size(), 1);
  s.switchLink.assign(topo.links.size(), 0);
  for (size_t l = 0; l < topo.links.size(); ++l) {
    const int32_t h = m.lay.linkHost[l];
    if (h >= 0) {
      s.linkClass[l] = m.lay.links[size_t(h % k)][size_t(m.lay.linkLocal[l])];
    } else {
      s.linkClass[l] = m.linkClass[l];
      s.linkScale[l] = double(s.elements) / double(m.classSize.at(m.linkClass[l]));
      s.switchLink[l] = 1;
    }
  }
  return s;
}

// Whether the group of `kind` on blocks of k hosts exists: k divides the hosts, and for an
// xor the blocks are a power of two.
bool groupExists(const HostModel& m, RankSymmetry::Kind kind, int k) {
  return m.hosts % k == 0 &&
         (kind == RankSymmetry::Kind::Shift || std::has_single_bit(unsigned(m.hosts / k)));
}

// The group of `kind` on the fewest hosts per block, a multiple of `step` (the plans' own
// period in hosts), that keeps every route alike, as long as the block has at most
// kMaxRepresentatives ranks; else on blocks of `step` hosts, whose orbits' routes the
// simulator then averages (Simulator::foldedRoute). False when the group does not exist (an
// xor of a block count that is no power of two).
bool blockSymmetry(const Topology& topo, const HostModel& m, RankSymmetry::Kind kind, int step,
                   RankSymmetry* s) {
  for (int k = step; k < m.hosts && k * m.perHost <= kMaxRepresentatives; k += step) {
    if (!groupExists(m, kind, k)) continue;
    RankSymmetry hostBlocks;
    hostBlocks.kind = kind;
    hostBlocks.period = k;
    hostBlocks.elements = m.hosts / k;
    if (!routesAlike(topo, m, hostBlocks)) continue;
    *s = onBlocks(topo, m, kind, k);
    return true;
  }
  if (!groupExists(m, kind, step)) return false;
  *s = onBlocks(topo, m, kind, step);
  return true;
}

// Per lane and buffer, the range of elements the lane's steps touch: [first, end).
using LaneBuffer = std::pair<size_t, uint32_t>;
using Extents = std::map<LaneBuffer, std::pair<uint64_t, uint64_t>>;
Extents laneExtents(const RankPlan& p) {
  Extents out;
  for (size_t l = 0; l < p.lanes.size(); ++l)
    for (const Step& s : p.lanes[l].steps)
      for (const collectives::Region* r : {&s.src, &s.dst}) {
        if (r->count == 0) continue;
        auto [it, added] = out.try_emplace({l, r->buf}, r->offset, r->offset + r->count);
        it->second.first = std::min(it->second.first, r->offset);
        it->second.second = std::max(it->second.second, r->offset + r->count);
      }
  return out;
}

// Whether region q (of lane l) is region p rotated within the lane's range of its buffer by
// that lane and buffer's rotation (fixed by the first region of it that is seen): chunk
// indices move with the rank in ring-like plans, each lane's within its own part of the buffer,
// and a rotation keeps which steps of a lane overlap which, and how, the same. Steps of
// different lanes never wait for each other (the simulator's dependencies are per lane).
bool rotated(size_t l, const collectives::Region& p, const collectives::Region& q,
             const Extents& extent, std::map<LaneBuffer, uint64_t>* shift) {
  if (p.buf != q.buf || p.count != q.count) return false;
  if (p.count == 0) return true;
  const auto [first, end] = extent.at({l, p.buf});
  const uint64_t n = end - first;
  const uint64_t d = (q.offset + n - p.offset) % n;
  return shift->emplace(LaneBuffer{l, p.buf}, d).first->second == d && p.offset + p.count <= end &&
         q.offset + q.count <= end;
}

// Counts of chunks that split a buffer as evenly as it divides: a call of fewer elements than
// ranks gives some ranks' chunks one element and others none.
bool nearly(uint64_t a, uint64_t b) { return a + 1 >= b && b + 1 >= a; }

// Whether b is a under group element g: the same steps on the same regions up to a rotation of
// each lane's range of each buffer (exact), or of the same sizes to an element (not exact), with
// every peer moved by g. Offsets matter, not only sizes: which slices of a step wait for which
// of an earlier one follows from where their regions overlap (recursive halving keeps the lower
// half on one rank and the upper on its partner, and the two then pipeline differently).
bool alikeUnder(const RankSymmetry& s, int g, const RankPlan& a, const RankPlan& b, bool exact) {
  if (a.lanes.size() != b.lanes.size()) return false;
  const Extents extent = laneExtents(a);
  if (extent != laneExtents(b)) return false;
  std::map<LaneBuffer, uint64_t> shift;
  for (size_t l = 0; l < a.lanes.size(); ++l) {
    const std::vector<Step>& x = a.lanes[l].steps;
    const std::vector<Step>& y = b.lanes[l].steps;
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      const Step& p = x[i];
      const Step& q = y[i];
      const bool regionsAlike =
          exact ? rotated(l, p.src, q.src, extent, &shift) &&
                        rotated(l, p.dst, q.dst, extent, &shift)
                : p.src.buf == q.src.buf && p.dst.buf == q.dst.buf &&
                      nearly(p.src.count, q.src.count) && nearly(p.dst.count, q.dst.count);
      if (p.kind != q.kind || collectives::isPeerBuffer(p.src.buf) || !regionsAlike ||
          (p.peer < 0) != (q.peer < 0) || (p.peer >= 0 && q.peer != s.act(g, p.peer)))
        return false;
    }
  }
  return true;
}


// Rank act(h, i)'s plan as host 0's rank i would run it: every peer moved back by h.
RankPlan viewFromHost0(const RankSymmetry& s, int h, int i,
                       const std::function<RankPlan(int)>& planOf) {
  RankPlan p = planOf(s.act(h, i));
  for (collectives::Lane& lane : p.lanes)
    for (Step& step : lane.steps)
      if (step.peer >= 0) step.peer = s.act(s.inverse(h), step.peer);
  return p;
}

// The hosts whose views an approximate folding simulates: the first, the second, the middle and
// the last.
std::vector<int> viewedHosts(const RankSymmetry& s) {
  std::vector<int> out;
  for (int h : {0, 1, s.elements / 2, s.elements - 1})
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  return out;
}

// Whether the plans are alike under the group of `kind` on blocks of k hosts: the plans of
// the block's ranks (reps, each built when first reached: most plans differ at the first)
// against their images under a few elements. Alike under the group on single hosts, they are
// alike under it on larger blocks too, whose elements are some of these; a 2D torus whose rows
// span several hosts is alike only under shifts by whole rows.
bool plansAlike(const HostModel& m, RankSymmetry::Kind kind, int k, bool exact,
                std::vector<RankPlan>* reps, const std::function<RankPlan(int)>& planOf) {
  if (!groupExists(m, kind, k)) return false;
  RankSymmetry blocks;
  blocks.kind = kind;
  blocks.period = k * m.perHost;
  blocks.elements = m.hosts / k;
  // Two blocks of several hosts: the shift is an xor, and plans alike under it only to their
  // sizes are recursive halving's, whose mirrored halves no view stands for (rhd on
  // dgx-rail-16 in two blocks of 8 nodes: 3% slow at 64 MiB).
  if (!exact && k > 1 && blocks.elements == 2) return false;
  const std::vector<int> elements = checkedElements(blocks);
  for (int i = 0; i < blocks.period; ++i) {
    if (reps->size() == size_t(i)) reps->push_back(planOf(i));
    for (int g : elements)
      if (!alikeUnder(blocks, g, (*reps)[size_t(i)], planOf(blocks.act(g, i)), exact))
        return false;
  }
  return true;
}

// The topology's host model, kept for the next call on the same topology (the tuner simulates
// a dozen candidates a bucket on one; routing host 0 to every host is a BFS each).
std::string cachedHostModel(const Topology& topo, int nranks, std::shared_ptr<const HostModel>* m) {
  struct Entry {
    Topology topo;
    int nranks = 0;
    std::string why;
    std::shared_ptr<const HostModel> model;
  };
  static std::mutex mutex;
  static std::shared_ptr<const Entry> last;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (last && last->nranks == nranks && last->topo == topo) {
      *m = last->model;
      return last->why;
    }
  }
  auto fresh = std::make_shared<HostModel>();
  auto entry = std::make_shared<Entry>();
  entry->why = hostModel(topo, nranks, fresh.get());
  entry->topo = topo;
  entry->nranks = nranks;
  entry->model = fresh;
  std::lock_guard<std::mutex> lock(mutex);
  last = entry;
  *m = fresh;
  return entry->why;
}

// blockSymmetry, kept in the host model.
bool cachedBlockSymmetry(const Topology& topo, const HostModel& m, RankSymmetry::Kind kind,
                         int step, RankSymmetry* s) {
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (auto it = m.blocks.find({kind, step}); it != m.blocks.end()) {
      *s = it->second.second;
      return it->second.first;
    }
  }
  const bool found = blockSymmetry(topo, m, kind, step, s);
  std::lock_guard<std::mutex> lock(m.mutex);
  m.blocks.emplace(std::pair{kind, step}, std::pair{found, *s});
  return found;
}

}  // namespace

std::string findFolding(int nranks, const std::function<RankPlan(int)>& planOf,
                        const Topology& topo, Folding* out) {
  std::shared_ptr<const HostModel> model;
  if (std::string why = cachedHostModel(topo, nranks, &model); !why.empty()) return why;
  const HostModel& m = *model;
  std::vector<RankPlan> reps;  // ranks 0, 1, ...'s plans, as far as they were needed
  for (bool exact : {true, false}) {
    for (auto kind : {RankSymmetry::Kind::Shift, RankSymmetry::Kind::Xor}) {
      // An xor pairs each rank with partners whose halves mirror its own, which no view of
      // hosts all alike stands for (rhd of 2 MiB on 16 hosts x 4: 18% fast).
      if (kind == RankSymmetry::Kind::Xor && !exact) continue;
      // Where the hosts' cores are modelled, the order in which a rank's local work and
      // bookkeeping queue for them follows its own pattern, which a view of hosts all alike
      // does not keep (torus allreduce of 32 KiB, 4 hosts x 8 ranks on 4 cores: 6% slow).
      if (!exact && topo.nodes[size_t(topo.hostNodes()[0])].cpu.cores > 0) continue;
      // The fewest hosts a block of the plans' symmetry takes, then a block that routes alike.
      int k = 1;
      while (k < m.hosts && k * m.perHost <= kMaxRepresentatives &&
             !plansAlike(m, kind, k, exact, &reps, planOf))
        ++k;
      if (k == m.hosts || k * m.perHost > kMaxRepresentatives) continue;
      RankSymmetry s;
      if (!cachedBlockSymmetry(topo, m, kind, k, &s)) continue;
      for (int i = int(reps.size()); i < s.period; ++i) reps.push_back(planOf(i));
      reps.resize(size_t(s.period));  // larger blocks may have been tried
      out->exact = exact;
      out->views.clear();
      out->views.push_back(std::move(reps));
      for (int h : exact ? std::vector<int>{} : viewedHosts(s)) {
        if (h == 0) continue;
        out->views.emplace_back();
        for (int i = 0; i < s.period; ++i)
          out->views.back().push_back(viewFromHost0(s, h, i, planOf));
      }
      out->symmetry = std::move(s);
      return "";
    }
  }
  return "the plans differ between hosts beyond a shift or an xor of the hosts";
}

}  // namespace loom::tuner
