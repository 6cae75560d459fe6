// Flow-level discrete-event simulation of plans (tuner/simulator.h, docs/SIMULATOR.md).
//
// Plans are first compiled into flat arrays (steps, slice-level dependencies, connections),
// because at thousands of ranks the RankPlans themselves do not fit in memory; the event loop
// then pushes completions along reverse dependency edges, so its cost is per event, never a
// rescan of a lane.
#include "tuner/simulator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <memory_resource>
#include <queue>
#include <unordered_map>

#include "base/status.h"
#include "tuner/symmetry.h"

namespace loom::tuner {
namespace {

using collectives::Lane;
using collectives::RankPlan;
using collectives::Region;
using collectives::Step;
using collectives::StepKind;

constexpr uint32_t kNone = UINT32_MAX;

SimResult failure(std::string message) {
  SimResult r;
  r.ok = false;
  r.message = std::move(message);
  return r;
}

bool isLocal(StepKind k) { return k == StepKind::Copy || k == StepKind::Reduce; }
uint64_t stepElems(const Step& s) { return s.kind == StepKind::Send ? s.src.count : s.dst.count; }

// One step in compact form. Transfers point at their connection; local steps at their rank.
struct SimStep {
  uint64_t count = 0;  // elements
  uint32_t owner = 0;  // connection (Send/Recv/RecvReduce) or rank (Copy/Reduce)
  int32_t peer = -1;
  StepKind kind = StepKind::Copy;
  uint8_t slices = 1;  // pieces this step is cut into: min(options.slices, count), at least 1
  uint8_t ready = 0;   // leading slices whose dependencies are met
  uint8_t issued = 0;  // local steps: slices handed to the rank's CPU
  uint8_t done = 0;    // slices finished
  // A Copy onto itself, which the executor skips, or one it runs in one pass with the Reduce
  // after it (collectives::fusedWithNext), whose cost that Reduce carries.
  bool free = false;
  bool peerRead = false;  // a Copy or Reduce from a peer's buffer (HostCpu::peerReadCopies)
  // System calls it makes to read another process's memory (a peer read, the receive of a
  // single-copy message), each costing HostCpu::singleCopyOverhead: one per piece the executor
  // or the shm transport reads at a time.
  uint32_t kernelReads = 0;
  // A Send that goes by one copy (SimOptions::singleCopyBytes): it starts only when all of it
  // is ready, as the shm transport does.
  bool singleCopy = false;
  bool network = false;     // a Send or receive between ranks of different hosts
  // The part of the data another rank reads in place (a single-copy Send's source, a peer
  // read's) that its owner wrote earlier in the call and still holds in its core's private
  // cache (HostCpu::dirtyReadCopies).
  float dirty = 0;
  // A final Copy of at least kStreamingCopyBytes (collectives::finalCopies) from memory the
  // executor loads itself (its own, or a mapped peer's): it writes with streaming stores
  // (HostCpu::streamingCopies).
  bool streamed = false;
  // Whether the rank's CPU has done the step's bookkeeping (HostCpu::stepOverhead): until then
  // not even its first slice may start.
  uint8_t admission = 0;  // kAdmitted, kNeedsAdmission or kAdmissionQueued
  // A Copy or Reduce that costs bytes: its source's and destination's buffers
  // (Simulator::localBuffers_), whose share of the cache prices it.
  uint32_t buffers = kNone;
};
constexpr uint8_t kAdmitted = 0, kNeedsAdmission = 1, kAdmissionQueued = 2;

// The FIFO channel of one (sender, receiver, lane): its messages in order, the slice being
// transmitted and the slice to be delivered next.
struct Connection {
  int32_t src = 0, dst = 0, lane = 0;
  uint32_t route = 0;
  // The route of its single-copy messages (SimOptions::singleCopyBytes): route, but where the
  // ranks are bound to cores the receiver's core makes all of the copy.
  uint32_t singleRoute = 0;
  double extraLatency = 0;  // beyond its route's: HostCpu::sharedCoreLatency, or 0
  std::vector<uint32_t> sends, recvs;  // step indices, in lane order
  uint32_t headMsg = 0, deliverMsg = 0;
  uint8_t headSlice = 0, deliverSlice = 0;
  bool busy = false;  // a slice is transmitting
};

struct Route {
  std::vector<int32_t> links;
  double latency = 0;
  // The fast path: per link, the links of its class that one crossing of it stands for
  // (RankSymmetry::linkScale, summed where the route crosses two of a class); on a core's CPU
  // resource, the share of the message's copies that core makes; empty: 1 each.
  std::vector<double> weights;
  double cpuWeight = 1;  // CPU bytes per byte, for a message the host's cores copy
  bool cpuCopy = false;  // the host's cores copy it (an shm message)
  // The fast path, where an orbit's routes differ: the most bytes/s the pair's messages could
  // move together on any one route of the orbit (the least of its routes' narrowest links),
  // which the averaged weights do not keep (Simulator::foldedRoute); 0: none. A simulation
  // gives each such route a link of its own of that capacity (Simulator::addPairLink).
  double limit = 0;
};

}  // namespace

// CompiledSteps' connections (their messages in order, their routes) and the routes, the CPU
// routes first, as the compilation left them before the call ran; per step, its owner.
struct CompiledTransfers {
  std::vector<Connection> conns;
  std::vector<Route> routes;
  std::vector<uint32_t> owner;
};

namespace {

// Folded routes by (sender, receiver) rank, kept across the fast path's views of one call:
// each route, and whether its orbit's routes differ (Simulator::foldedRoute).
using FoldedRoutes = std::unordered_map<uint64_t, std::pair<Route, bool>>;

// A message through the shm transport is two copies (into a slot of the ring, out of it; a
// RecvReduce's combine replaces the second), so by default it takes twice its bytes of the
// host's CPU (HostCpu::messageCopies).
constexpr double kDefaultMessageCopies = 2;

// Routes of an orbit that the fast path samples for the route standing for all of them
// (Simulator::foldedRoute).
constexpr int kRouteSamples = 128;
// Beyond kRouteSamples, the routes of an orbit sampled (each a BFS over the topology: rd at
// 8192 ranks has 13 connections a rank).
constexpr int kSampledRoutes = 32;
// Peers a rank may have, on average (its lanes to one peer counted once: they take one route),
// where the fast path averages routes that differ within an orbit (Simulator::run).
constexpr size_t kVaryingConnections = 4;
// A folded connection's key (Simulator::connection) holds its lane in its lowest bits.
constexpr int kFoldedLaneBits = 8;

// Whose access to a range of one buffer the next conflicting step has to wait for: the last
// writer and the readers since. Waiting for these is enough, as they waited for the earlier ones.
struct Accessor {
  uint32_t step;
  uint64_t start;  // where that step's region starts
};
struct Segment {
  uint64_t end = 0;
  Accessor writer{kNone, 0};
  uint32_t lastReader = kNone;  // the newest of its readers in LaneBuffers' list, kNone: none
};
// By start; segments never overlap. Their nodes come from the lane's arena (Simulator::addLane).
using SegmentMap = std::pmr::map<uint64_t, Segment>;
// The segments of each buffer a lane touches: a handful, searched in turn.
class LaneBuffers {
 public:
  explicit LaneBuffers(std::pmr::memory_resource* arena) : arena_(arena) {}
  SegmentMap& operator[](uint32_t buf) {
    for (auto& [b, m] : maps_)
      if (b == buf) return m;
    return maps_.emplace_back(buf, SegmentMap(arena_)).second;
  }
  void addReader(Segment* s, Accessor a) {
    readers_.push_back({a, s->lastReader});
    s->lastReader = uint32_t(readers_.size() - 1);
  }
  // Calls f on each reader of s, the oldest first.
  template <typename F>
  void forEachReader(const Segment& s, F&& f) {
    order_.clear();
    for (uint32_t i = s.lastReader; i != kNone; i = readers_[i].previous) order_.push_back(i);
    for (auto i = order_.rbegin(); i != order_.rend(); ++i) f(readers_[*i].accessor);
  }

 private:
  // A segment's readers are a list through this vector, newest first. Splitting a segment
  // shares its list between the halves: a reader added to one half goes before the shared part
  // of that half's list only.
  struct Reader {
    Accessor accessor;
    uint32_t previous;  // the reader before it, kNone: none
  };
  std::pmr::memory_resource* arena_;
  std::deque<std::pair<uint32_t, SegmentMap>> maps_;  // a deque: references stay valid
  std::pmr::vector<Reader> readers_{arena_};
  std::vector<uint32_t> order_;  // forEachReader's
};

// Makes sure a segment starts at pos, splitting the one that covers it.
void splitAt(SegmentMap& m, uint64_t pos) {
  auto it = m.upper_bound(pos);
  if (it == m.begin()) return;
  --it;
  if (it->first == pos || it->second.end <= pos) return;
  Segment tail = it->second;
  it->second.end = pos;
  m.emplace(pos, std::move(tail));
}

// Segments covering exactly [begin, end), with gaps filled by untouched segments, into *out
// (cleared first: the caller keeps one vector for every call, which allocates once).
void cover(SegmentMap& m, uint64_t begin, uint64_t end, std::vector<SegmentMap::iterator>* out) {
  splitAt(m, begin);
  splitAt(m, end);
  out->clear();
  uint64_t pos = begin;
  auto it = m.lower_bound(begin);
  while (pos < end) {
    if (it == m.end() || it->first > pos) {
      uint64_t gapEnd = it == m.end() ? end : std::min(end, it->first);
      it = m.emplace_hint(it, pos, Segment{gapEnd, {kNone, 0}, kNone});
    }
    out->push_back(it);
    pos = it->second.end;
    ++it;
  }
}

class Simulator {
 public:
  // With fold, only ranks 0..fold->period-1 are added: they stand for their orbits.
  // With steps (not folded), the dependencies are taken from steps, whose plans are these
  // divided by `scale` (CompiledSteps).
  Simulator(int nranks, const topology::Topology& topo, const SimOptions& o,
            const RankSymmetry* fold = nullptr, FoldedRoutes* foldedRoutes = nullptr,
            const CompiledSteps* steps = nullptr, uint64_t scale = 1)
      : nranks_(nranks), simRanks_(fold ? fold->period : nranks), topo_(topo), opt_(o),
        fold_(fold), foldedRoutes_(foldedRoutes), reused_(steps), scale_(scale) {
    opt_.slices = std::clamp(opt_.slices, 1, SimOptions::kMaxSlices);
    rankLaneBegin_.push_back(0);
    depBegin_.push_back(0);
    rankTime_.assign(size_t(nranks), 0.0);
    addCpuResources();
    if (reused_ != nullptr) {  // the same CPU routes first, then the messages'
      conns_ = reused_->transfers->conns;
      routes_ = reused_->transfers->routes;
    }
  }

  Status addRank(int rank, const RankPlan& plan) {
    for (size_t l = 0; l < plan.lanes.size(); ++l) {
      laneBegin_.push_back(uint32_t(steps_.size()));
      LOOM_TRY(addLane(rank, int(l), plan.lanes[l]));
    }
    // The rank's working set: the extent of every buffer its plan touches (a plan names a
    // handful of buffers: a list searched in turn; the sum is of whole bytes, exact in any order).
    std::vector<std::pair<uint32_t, uint64_t>> extent;
    for (const Lane& lane : plan.lanes)
      for (const Step& s : lane.steps)
        for (const Region* r : {&s.src, &s.dst}) {
          if (r->count == 0) continue;
          auto it = std::find_if(extent.begin(), extent.end(),
                                 [&](const auto& e) { return e.first == r->buf; });
          if (it == extent.end()) it = extent.insert(it, {r->buf, 0});
          it->second = std::max(it->second, r->offset + r->count);
        }
    const int32_t host = rankCpu_[size_t(rank)].host;
    for (const auto& [buf, elems] : extent)
      if (host >= 0) hostWorkingSet_[machineOf_[size_t(host)]] += double(elems) * opt_.elemSize;
    if (cacheModelled(rank)) {
      for (const Lane& lane : plan.lanes)
        for (const Step& s : lane.steps)
          for (const Region* r : {&s.src, &s.dst})
            if (r->count > 0) touchBuffer(rank, *r);
    }
    rankLaneBegin_.push_back(uint32_t(laneBegin_.size()));
    return Status::ok();
  }

  SimResult run() {
    SimResult res;
    // Folded, the routes of an orbit that differ (ECMP picks a path through other hosts' links
    // pair by pair) are averaged over the orbit: right for a few connections a rank, whose
    // timelines average their hops (a ring's), not for a plan that talks to many peers at once,
    // whose collisions the average spreads evenly (pairwise alltoall on dgx-rail-16: 11% fast).
    if (fold_ != nullptr && routesVary_ && foldedPeers() > kVaryingConnections * size_t(simRanks_)) {
      res.fastRefusal = "the routes of a connection's orbit differ, and the plan has many peers";
      return res;
    }
    laneBegin_.push_back(uint32_t(steps_.size()));
    Status st = checkMatching();
    if (!st.isOk()) return failure(st.message());
    if (reused_ != nullptr) {
      depBegin_ = reused_->depBegin;
      depStep_ = reused_->depStep;
      depNeed_ = reused_->depNeed;
    }
    sizeCpuResources();
    buildReverseDeps();
    for (uint32_t g = 0; g < steps_.size(); ++g) advanceReady(g);
    for (uint32_t c = 0; c < conns_.size(); ++c) tryStart(c);
    for (const SimStep& st : steps_) slicesLeft_ += st.slices;
    // A shaped link's burst may take up to this much off the call's time (below).
    double burst = 0;
    for (const topology::Link& link : topo_.links)
      burst = std::max(burst, double(link.burstBytes) / link.bandwidth);
    // Events at one instant are handled together, then rates are recomputed once for them.
    for (rebalance(); !events_.empty(); rebalance()) {
      now_ = events_.top().time;
      // A slice still to finish ends the call no sooner than now (the events after the last
      // slice, a sender's flow draining, do not count).
      if (opt_.stopAfter > 0 && slicesLeft_ > 0 && now_ - burst > opt_.stopAfter) {
        res.stopped = true;
        res.time = now_ - burst;
        return res;
      }
      while (!events_.empty() && events_.top().time == now_) {
        Event e = events_.top();
        events_.pop();
        handle(e);
      }
    }
    for (uint32_t g = 0; g < steps_.size(); ++g)
      if (steps_[g].done < steps_[g].slices) return failure(deadlockMessage(g));
    res.rankTime = rankTime_;
    if (fold_ != nullptr) {  // every rank finishes when its representative does
      for (int r = simRanks_; r < nranks_; ++r)
        res.rankTime[size_t(r)] = rankTime_[size_t(fold_->representative(r))];
      messages_ *= uint64_t(fold_->elements);
      bytes_ *= uint64_t(fold_->elements);
    }
    for (double t : res.rankTime) res.time = std::max(res.time, t);
    res.messages = messages_;
    res.bytes = bytes_;
    res.flows = flowsStarted_;
    for (size_t l = 0; l < topo_.links.size(); ++l) {
      const topology::Link& link = topo_.links[l];
      double busy = double(linkBytes_[l]) / link.bandwidth;
      if (linkBytes_[l] > 0 && busy > res.busiestLinkBusy) {
        res.busiestLink = int32_t(l);
        res.busiestLinkBytes = linkBytes_[l];
        res.busiestLinkBusy = busy;
      }
      res.burstSaving = std::max(
          res.burstSaving, double(std::min(link.burstBytes, linkBytes_[l])) / link.bandwidth);
    }
    // A shaped link (Link::burstBytes) refills its bucket while a call waits on latency, and
    // passes the next call's first bytes at once: in a loop of like calls, as loom-perf times
    // them and a training step makes them, a call takes what it takes on plain links less the
    // largest such saving of any link, but no less than its busiest link's transmission time.
    // (2 netns hosts at 1 Gbit/s with an 18 KB htb burst: a 4-rank 8 KiB hierarchical
    // allgather measures 33 us; plain links predict 73, this 40.)
    if (res.burstSaving > 0) res.time = std::max(res.time - res.burstSaving, res.busiestLinkBusy);
    return res;
  }

 private:
  // LocalDone: id is the rank; BarrierDone: id is the barrier's index k (barriers_).
  enum class EventKind : uint8_t { FlowDone, Deliver, LocalDone, BarrierDone };
  // One piece of work for a rank's CPU: a slice of a local step, or a step's bookkeeping.
  static constexpr uint8_t kBookkeeping = UINT8_MAX;
  struct CpuWork {
    uint32_t step;
    uint8_t slice;  // or kBookkeeping
  };
  struct RankCpu {
    int32_t host = -1;
    double bandwidth = 0;     // bytes/s of one core for this call; 0: local work is free
    double memoryBandwidth = 0;  // the same for data that is not in the cache
    topology::HostCpu cpu;    // its host's figures (per-step and per-byte costs); none: 0
    double streamedCopies = 1;  // what a streamed byte costs for this call, per plain byte
    uint32_t route = 0;       // its CPU route (one core, then the host's cores), when bandwidth > 0
    std::deque<CpuWork> queue;
    bool busy = false;  // the queue's front is running
  };
  struct Event {
    double time;
    EventKind kind;
    uint32_t id;
    uint32_t version;
    bool operator>(const Event& o) const { return time > o.time; }
  };
  struct Flow {
    uint32_t route = 0;
    uint32_t owner = 0;    // its connection, or for local work its rank
    bool local = false;    // local work (a slice of a Copy/Reduce, or a step's bookkeeping)
    double cpuWeight = 1;  // CPU bytes per byte it moves, on CPU resources (other links: 1)
    double remaining = 0;  // bytes still to transmit as of `last`
    double rate = 0;       // bytes/s
    double last = 0;
    uint32_t version = 0;
    uint32_t stamp = 0;  // component search epoch
    double newRate = 0;
  };

  // ---- CPU resources ---------------------------------------------------------------------------

  // Local work shares the hosts' CPUs max-min, as messages share links (docs/SIMULATOR.md,
  // "Local work"): every rank has a virtual link of one core's memory bandwidth (a rank's
  // thread runs on one core at a time), and a host whose model gives its core count a virtual
  // link of cores × memBandwidth that all its ranks' local work crosses. The two are appended
  // after the topology's links, so the fair-sharing code serves them unchanged. Their
  // capacities depend on the call's working set (sizeCpuResources), known once every plan is in.
  void addCpuResources() {
    for (const topology::Link& l : topo_.links) capacity_.push_back(l.bandwidth);
    const std::vector<int32_t> hostNode = topo_.hostNodes();
    for (int32_t n : hostNode) hostCpu_.push_back(topo_.nodes[size_t(n)].cpu);
    // Hosts that share a machine (HostCpu::machine) share its cores and its memory: one CPU
    // resource and one working set for all of them, kept at the machine's first host.
    for (int32_t m : topo_.hostMachines()) machineOf_.push_back(size_t(m));
    hostCpuLink_.assign(hostNode.size(), -1);
    hostWorkingSet_.assign(hostNode.size(), 0);
    for (size_t h = 0; h < hostNode.size(); ++h) {
      if (machineOf_[h] != h) {
        hostCpuLink_[h] = hostCpuLink_[machineOf_[h]];
      } else if (hostCpu_[h].cores > 0 && memBandwidth(h, 0) > 0) {
        hostCpuLink_[h] = int32_t(capacity_.size());
        capacity_.push_back(0);
      }
    }
    // Each rank's place among its machine's ranks, for the cores LOOM_BIND gives them.
    std::vector<int> machineRanks(hostCpu_.size(), 0), localIndex(size_t(nranks_), -1);
    for (int r = 0; r < nranks_; ++r) {
      const int32_t host = topo_.ranks[size_t(r)].host;
      if (host >= 0 && size_t(host) < hostCpu_.size())
        localIndex[size_t(r)] = machineRanks[machineOf_[size_t(host)]]++;
    }
    addCoreResources(machineRanks, localIndex);
    rankCpu_.resize(size_t(nranks_));
    for (int r = 0; r < nranks_; ++r) {
      const int32_t host = topo_.ranks[size_t(r)].host;
      RankCpu& rc = rankCpu_[size_t(r)];
      rc.host = host >= 0 && size_t(host) < hostCpu_.size() ? host : -1;
      if (rc.host >= 0) rc.cpu = hostCpu_[size_t(host)];
      if (memBandwidth(size_t(rc.host), 0) <= 0) continue;  // local work is free: no flows
      Route route;
      route.links.push_back(int32_t(capacity_.size()));
      capacity_.push_back(0);
      if (coreLink_[size_t(r)] >= 0) route.links.push_back(coreLink_[size_t(r)]);
      if (rc.host >= 0 && hostCpuLink_[size_t(host)] >= 0)
        route.links.push_back(hostCpuLink_[size_t(host)]);
      rc.route = uint32_t(routes_.size());
      routes_.push_back(std::move(route));
    }
    pairLinksBegin_ = capacity_.size();
    sizeLinkState();
  }

  // Gives every link of capacity_ its flows, counters and rebalancing state, the new ones empty.
  void sizeLinkState() {
    const size_t n = capacity_.size();
    linkFlows_.resize(n);
    linkBytes_.resize(n, 0);
    linkDirty_.resize(n, 0);
    linkStamp_.resize(n, 0);
    capLeft_.resize(n, 0);
    unfixed_.resize(n, 0);
    weightLeft_.resize(n, 0);
  }

  // Where a machine's ranks outnumber its cores, LOOM_BIND binds its i-th rank (its hosts'
  // ranks together, in rank order) to core i mod cores: coreOf_ says which, and where the host's
  // CPU is modelled each core is a CPU resource of its own (coreLink_).
  void addCoreResources(const std::vector<int>& machineRanks, const std::vector<int>& localIndex) {
    coreOf_.assign(size_t(nranks_), -1);
    coreLink_.assign(size_t(nranks_), -1);
    std::vector<int32_t> firstCoreLink(hostCpu_.size(), -1);
    for (int r = 0; r < nranks_; ++r) {
      if (localIndex[size_t(r)] < 0) continue;
      const size_t host = size_t(topo_.ranks[size_t(r)].host), m = machineOf_[host];
      const topology::HostCpu& cpu = hostCpu_[host];
      if (cpu.cores <= 0 || machineRanks[m] <= cpu.cores) continue;
      coreOf_[size_t(r)] = localIndex[size_t(r)] % cpu.cores;
      // Bound ranks share their own core, not the machine's: two busy ranks on core 0 get half
      // of it each while core 1 idles (docs/SIMULATOR.md, "Ranks that share a core").
      if (hostCpuLink_[m] < 0) continue;
      if (firstCoreLink[m] < 0) {
        if (coreMachine_.empty()) coreLinkBegin_ = capacity_.size();
        firstCoreLink[m] = int32_t(capacity_.size());
        coreMachine_.insert(coreMachine_.end(), size_t(cpu.cores), m);
        capacity_.resize(capacity_.size() + size_t(cpu.cores), 0);
      }
      coreLink_[size_t(r)] = firstCoreLink[m] + coreOf_[size_t(r)];
    }
  }

  // Bytes/s of one core of host h (size_t(-1): a rank without a host) for a call whose ranks
  // on that host touch workingSet bytes: the part that fits in the host's cache is copied at
  // cacheBandwidth, the rest at memBandwidth.
  double memBandwidth(size_t h, double workingSet) const {
    const CopyRates r = copyRates(h, workingSet);
    return r.mem <= 0 ? r.mem : 1 / r.secondsPerByte(1);
  }
  // What a byte of a streamed copy costs for such a call, per byte of a plain one: the part
  // that goes to memory costs HostCpu::streamingCopies as much.
  double streamedCopies(size_t h, double workingSet) const {
    const CopyRates r = copyRates(h, workingSet);
    return r.mem <= 0 ? 1 : r.secondsPerByte(r.streaming) / r.secondsPerByte(1);
  }
  struct CopyRates {
    double mem, cache;  // bytes/s from memory and from the cache (any, where cached is 0)
    double cached;      // the working set's fraction in the cache
    double streaming;   // HostCpu::streamingCopies, 1 when not modelled
    // One core's time per byte when the part from memory costs memCopies plain copies.
    double secondsPerByte(double memCopies) const {
      return cached / cache + (1 - cached) * memCopies / mem;
    }
  };
  CopyRates copyRates(size_t h, double workingSet) const {
    const topology::HostCpu cpu = h < hostCpu_.size() ? hostCpu_[h] : topology::HostCpu{};
    CopyRates r{cpu.memBandwidth > 0 ? cpu.memBandwidth : opt_.memBandwidth, 1, 0,
                cpu.streamingCopies > 0 ? cpu.streamingCopies : 1};
    if (cpu.cacheBytes > 0 && cpu.cacheBandwidth > 0) {
      r.cache = cpu.cacheBandwidth;
      r.cached = workingSet > 0 ? std::min(1.0, double(cpu.cacheBytes) / workingSet) : 1;
    }
    return r;
  }

  // ---- What the cache holds --------------------------------------------------------------------

  // Whether rank's host models a cache (HostCpu::cacheBytes and cacheBandwidth): only then do
  // its buffers' cached shares price its work.
  bool cacheModelled(int rank) const {
    const int32_t h = rankCpu_[size_t(rank)].host;
    return h >= 0 && copyRates(size_t(h), 0).cached > 0;
  }

  // The buffer that rank's `buf` names, one per piece of memory: a peer's Input is that peer's,
  // and the host's Shared arena is one for all its ranks.
  uint32_t bufferOf(int rank, uint32_t buf) {
    const int32_t host = rankCpu_[size_t(rank)].host;
    int64_t owner = rank;
    if (collectives::isPeerBuffer(buf)) {
      owner = collectives::peerBufferRank(buf);
      buf = collectives::peerBufferKind(buf);
    } else if (buf == collectives::kShared) {
      owner = -1 - int64_t(host);
    }
    const uint64_t key = (uint64_t(uint32_t(int32_t(owner))) << 32) | buf;
    auto [it, added] = cacheBufferIndex_.try_emplace(key, uint32_t(cacheBuffers_.size()));
    if (added) cacheBuffers_.push_back({host >= 0 ? machineOf_[size_t(host)] : 0});
    return it->second;
  }
  void touchBuffer(int rank, const Region& r) {
    CacheBuffer& b = cacheBuffers_[bufferOf(rank, r.buf)];
    b.extent = std::max(b.extent, double(r.offset + r.count) * opt_.elemSize);
    b.touched += double(r.count) * opt_.elemSize;
  }

  // Which buffers the cache holds: in a loop of like calls, a buffer stays cached when little
  // else passes through the cache between two touches of its bytes, so the cache goes to the
  // buffers touched most per byte first (the direct algorithms' arena, reused chunk after
  // chunk), and what is left to the ones streamed once a call (large Inputs and Outputs).
  // Buffers touched alike share what is left in proportion: one Copy whose Input and Output
  // are twice the cache has half of each cached, as the working-set rule would have it.
  void fillCaches() {
    std::vector<uint32_t> order;
    for (uint32_t i = 0; i < cacheBuffers_.size(); ++i)
      if (cacheBuffers_[i].extent > 0) order.push_back(i);
    auto density = [&](uint32_t i) { return cacheBuffers_[i].touched / cacheBuffers_[i].extent; };
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return density(a) > density(b); });
    std::vector<double> left(hostCpu_.size(), 0);
    for (size_t h = 0; h < hostCpu_.size(); ++h)
      if (machineOf_[h] == h && hostCpu_[h].cacheBandwidth > 0)
        left[h] = double(hostCpu_[h].cacheBytes);
    for (size_t begin = 0, end = 0; begin < order.size(); begin = end) {
      // The buffers of one density (on any machine), and what each machine's of them need.
      std::vector<double> need(left.size(), 0);
      for (end = begin; end < order.size() &&
                        density(order[end]) >= density(order[begin]) * (1 - 1e-9);
           ++end)
        need[cacheBuffers_[order[end]].machine] += cacheBuffers_[order[end]].extent;
      for (size_t k = begin; k < end; ++k) {
        CacheBuffer& b = cacheBuffers_[order[k]];
        b.cached = std::min(1.0, left[b.machine] / need[b.machine]);
      }
      for (size_t m = 0; m < left.size(); ++m) left[m] = std::max(0.0, left[m] - need[m]);
    }
  }

  // What one byte of a Copy or Reduce costs, in bytes of rc's core at this call's rate
  // (RankCpu::bandwidth): a byte copied reads its source and reads and writes its
  // destination, so a third of the time goes with the source's cached share and two thirds with
  // the destination's. A streamed destination is written without being read, so its part from
  // memory costs (3 streamingCopies - 1) / 2 of a plain one: 2/3 of a plain copy in all where
  // nothing is cached.
  double localCopies(const RankCpu& rc, const SimStep& s) const {
    if (s.buffers == kNone || rc.bandwidth <= 0) return s.streamed ? rc.streamedCopies : 1;
    const auto [src, dst] = localBuffers_[s.buffers];
    const double dstMemory = s.streamed ? (3 * bufferRates(rc, src).streaming - 1) / 2 : 1;
    return (bufferRates(rc, src).secondsPerByte(1) +
            2 * bufferRates(rc, dst).secondsPerByte(dstMemory)) /
           3 * rc.bandwidth;
  }
  // rc's copy rates for buffer b: its cached share where the host models a cache.
  CopyRates bufferRates(const RankCpu& rc, uint32_t b) const {
    CopyRates r = copyRates(size_t(rc.host), 0);
    if (r.cached > 0) r.cached = cacheBuffers_[b].cached;
    return r;
  }

  // A Reduce of an unmapped peer's data reads it through the kernel into a bounce buffer
  // (collectives/executor.cc), then combines the bounce, which is in the cache, into its
  // destination: one more pass, priced as localCopies prices one with a cached source.
  double bounceReduce(const RankCpu& rc, const SimStep& s) const {
    if (s.buffers == kNone || rc.bandwidth <= 0) return 1;
    const CopyRates bounce = copyRates(size_t(rc.host), 0);  // all cached, if a cache is modelled
    return (bounce.secondsPerByte(1) +
            2 * bufferRates(rc, localBuffers_[s.buffers][1]).secondsPerByte(1)) /
           3 * rc.bandwidth;
  }

  // The CPU resources' capacities for this call (addCpuResources made them).
  void sizeCpuResources() {
    fillCaches();
    for (size_t h = 0; h < hostCpuLink_.size(); ++h)
      if (hostCpuLink_[h] >= 0 && machineOf_[h] == h)
        capacity_[size_t(hostCpuLink_[h])] =
            hostCpu_[h].cores * memBandwidth(h, hostWorkingSet_[h]);
    for (size_t k = 0; k < coreMachine_.size(); ++k)
      capacity_[coreLinkBegin_ + k] =
          memBandwidth(coreMachine_[k], hostWorkingSet_[coreMachine_[k]]);
    for (RankCpu& rc : rankCpu_) {
      const size_t h = size_t(rc.host);
      const double workingSet = h < hostWorkingSet_.size() ? hostWorkingSet_[machineOf_[h]] : 0;
      rc.bandwidth = memBandwidth(h, workingSet);
      rc.memoryBandwidth = copyRates(h, workingSet).mem;
      rc.streamedCopies = streamedCopies(h, workingSet);
      if (rc.bandwidth > 0) capacity_[size_t(routes_[rc.route].links[0])] = rc.bandwidth;
    }
  }

  // A message between two CPU (or NUMA) endpoints of one host is a memory copy made by the
  // host's cores (the shm transport's memcpy), so besides its route's links it also crosses
  // the host's CPU resource: whichever is tighter limits it — the shm links for one message
  // alone, the cores when the host's ranks copy more at once than its cores can (4 ranks on 2
  // cores). It is not charged to either rank's own core: the transport's copies are made by
  // whichever of the two ranks' threads polls, so they belong to neither alone. GPU endpoints
  // copy with their own engines and never cross it.
  int32_t cpuLinkOfCopy(int32_t from, int32_t to) const {
    const topology::Node& a = topo_.nodes[size_t(from)];
    const topology::Node& b = topo_.nodes[size_t(to)];
    auto onCpu = [](const topology::Node& n) {
      return n.kind == topology::NodeKind::Cpu || n.kind == topology::NodeKind::Numa;
    };
    if (a.host < 0 || a.host != b.host || !onCpu(a) || !onCpu(b) ||
        size_t(a.host) >= hostCpuLink_.size())
      return -1;
    return hostCpuLink_[size_t(a.host)];
  }

  // ---- Compilation ----------------------------------------------------------------------------

  Status addLane(int rank, int lane, const Lane& steps) {
    // Conflicts are per lane (lanes disjoint). The lane's segments are allocated from one
    // arena, dropped with them: a plan's lane makes thousands of them, one at a time.
    std::pmr::monotonic_buffer_resource arena(laneArena_.get(), kLaneArenaBytes);
    LaneBuffers buffers(&arena);
    uint32_t lastBarrier = kNone, barriers = 0;
    const std::vector<uint8_t> finals = collectives::finalCopies(steps.steps);
    for (size_t i = 0; i < steps.steps.size(); ++i) {
      const Step& s = steps.steps[i];
      const uint32_t g = uint32_t(steps_.size());
      uint64_t written = 0;
      SimStep ss;
      ss.kind = s.kind;
      ss.count = stepElems(s);
      ss.slices = uint8_t(std::clamp<uint64_t>(ss.count, 1, uint64_t(opt_.slices)));
      ss.peer = s.peer;
      if (isLocal(s.kind)) {
        ss.owner = uint32_t(rank);
        ss.free = (s.kind == StepKind::Copy && s.src == s.dst) ||
                  (i + 1 < steps.steps.size() && collectives::fusedWithNext(s, steps.steps[i + 1]));
        ss.peerRead = collectives::isPeerBuffer(s.src.buf);
        if (ss.peerRead && !ss.free && !opt_.peersMapped)
          ss.kernelReads = pieces(ss.count, collectives::kLocalChunkBytes);
        // A peer's Output is what it wrote in this call (before the barrier that lets others
        // read it); its Input was written before the call.
        if (ss.peerRead && collectives::peerBufferKind(s.src.buf) == collectives::kOutput)
          ss.dirty = dirtyFraction(collectives::peerBufferRank(s.src.buf), ss.count, ss.count);
        ss.streamed = finals[i] && !ss.free && (!ss.peerRead || opt_.peersMapped) &&
                      ss.count * opt_.elemSize >= collectives::kStreamingCopyBytes;
        if (!ss.free && cacheModelled(rank)) {
          ss.buffers = uint32_t(localBuffers_.size());
          localBuffers_.push_back({bufferOf(rank, s.src.buf), bufferOf(rank, s.dst.buf)});
        }
      } else if (s.kind == StepKind::Barrier) {
        if (lane != 0)
          return errorf(loomInvalidArgument, "rank %d lane %d step %zu: a Barrier off lane 0", rank,
                        lane, size_t(g - laneBegin_.back()));
        ss.owner = uint32_t(rank);
        if (barriers_.size() <= barriers) barriers_.emplace_back();
        barrierOf_[g] = barriers;
        barriers_[barriers++].push_back(g);
      } else {
        if (s.peer < 0 || s.peer >= nranks_ || s.peer == rank)
          return errorf(loomInvalidArgument, "rank %d lane %d step %zu: %s with peer %d", rank,
                        lane, size_t(g - laneBegin_.back()),
                        collectives::stepKindName(s.kind), s.peer);
        const bool send = s.kind == StepKind::Send;
        // Reused, the connections are there already, with their messages.
        Connection& c = reused_ != nullptr ? conns_[reused_->transfers->owner[g]]
                                           : connectionOf(rank, s.peer, send, lane);
        ss.owner = uint32_t(&c - conns_.data());
        ss.network = topo_.ranks[size_t(rank)].host != topo_.ranks[size_t(s.peer)].host;
        const bool oneCopyRoute = routes_[c.route].cpuCopy && opt_.singleCopyBytes > 0;
        const bool oneCopy = oneCopyRoute && ss.count * opt_.elemSize >= opt_.singleCopyBytes;
        ss.singleCopy = send && oneCopy;
        // Kept for every Send that could go by one copy at some size (CompiledSteps::written).
        if (send && oneCopyRoute)
          written = reused_ != nullptr ? reused_->written[g] * scale_
                                       : writtenElems(buffers[s.src.buf], s.src);
        if (ss.singleCopy) ss.dirty = dirtyFraction(rank, ss.count, written);
        // The receiver reads the sender's buffer.
        if (!send && oneCopy) ss.kernelReads = pieces(ss.count, opt_.singleCopyPieceBytes);
        if (reused_ == nullptr) (send ? c.sends : c.recvs).push_back(g);
        if (send) {
          ++messages_;
          bytes_ += ss.count * opt_.elemSize;
        }
      }
      // A free Copy costs no bookkeeping: skipped, or done with its Reduce's.
      ss.admission = bookkeepingTime(rankCpu_[size_t(rank)], ss) > 0 && !ss.free
                         ? kNeedsAdmission
                         : kAdmitted;
      steps_.push_back(ss);
      if (reused_ != nullptr) continue;
      written_.push_back(written);
      addDependencies(g, s, buffers);
      addBarrierDependencies(g, s.kind, &lastBarrier);
      depBegin_.push_back(uint32_t(depStep_.size()));
    }
    return Status::ok();
  }

 public:
  // Copies what the compilation found into *c (CompiledSteps): before run(), which changes the
  // connections' state.
  void keepSteps(CompiledSteps* c) const {
    if (reused_ != nullptr || fold_ != nullptr) return;
    c->depBegin = depBegin_;
    c->depStep = depStep_;
    c->depNeed = depNeed_;
    c->written = written_;
    auto transfers = std::make_shared<CompiledTransfers>();
    transfers->conns = conns_;
    transfers->routes = routes_;
    for (const SimStep& s : steps_) transfers->owner.push_back(s.owner);
    c->transfers = std::move(transfers);
  }

 private:

  // Of count elements that rank wrote `written` of earlier in the call, the part still in its
  // core's private cache: the last privateCacheBytes it wrote.
  float dirtyFraction(int rank, uint64_t count, uint64_t written) const {
    const RankCpu& rc = rankCpu_[size_t(rank)];
    if (rc.cpu.dirtyReadCopies <= 0 || rc.cpu.privateCacheBytes == 0 || count == 0) return 0;
    const double bytes = double(count) * opt_.elemSize;
    return float(std::min(double(written) * opt_.elemSize, double(rc.cpu.privateCacheBytes)) /
                 bytes);
  }

  // Elements of region r that an earlier step of the lane wrote.
  uint64_t writtenElems(SegmentMap& m, const Region& r) {
    uint64_t n = 0;
    if (r.count == 0) return 0;
    cover(m, r.offset, r.offset + r.count, &covered_);
    for (auto it : covered_)
      if (it->second.writer.step != kNone) n += it->second.end - it->first;
    return n;
  }

  // Reads of at most pieceBytes each (0: one read) that count elements take.
  uint32_t pieces(uint64_t count, uint64_t pieceBytes) const {
    const uint64_t bytes = count * opt_.elemSize;
    if (pieceBytes == 0) return 1;
    return uint32_t(std::max<uint64_t>(1, (bytes + pieceBytes - 1) / pieceBytes));
  }

  // The connection of rank's transfer with peer. Folded, a peer off host 0 is its
  // representative, and the connection is told apart by the group element that takes the
  // receiver's representative to the receiver the sender's representative really sends to: the
  // sender and the receiver both name it so.
  Connection& connectionOf(int rank, int peer, bool send, int lane) {
    if (fold_ == nullptr) return send ? connection(rank, peer, lane, 0) : connection(peer, rank, lane, 0);
    const int e = fold_->element(peer), rep = fold_->representative(peer);
    return send ? connection(rank, rep, lane, e) : connection(rep, rank, lane, fold_->inverse(e));
  }

  // Folded: the connections of the representatives, their lanes to one peer counted once.
  size_t foldedPeers() const {
    std::vector<uint64_t> peers;
    peers.reserve(connIndex_.size());
    for (const auto& [key, index] : connIndex_) peers.push_back(key >> kFoldedLaneBits);
    std::sort(peers.begin(), peers.end());
    return size_t(std::unique(peers.begin(), peers.end()) - peers.begin());
  }

  Connection& connection(int src, int dst, int lane, int element) {
    uint64_t key = fold_ == nullptr ? (uint64_t(src) << 40) | (uint64_t(dst) << 16) | uint64_t(lane)
                                    : (uint64_t(src) << 48) | (uint64_t(dst) << 32) |
                                          (uint64_t(element) << kFoldedLaneBits) |
                                          uint64_t(lane);
    auto [it, added] = connIndex_.try_emplace(key, uint32_t(conns_.size()));
    if (added) {
      const int realDst = fold_ == nullptr ? dst : fold_->act(element, dst);
      Connection c;
      c.src = src;
      c.dst = dst;
      c.lane = lane;
      c.route = routeBetween(src, realDst, false);
      c.singleRoute = routeBetween(src, realDst, true);
      c.extraLatency = sharedCoreLatency(src, realDst);
      conns_.push_back(std::move(c));
    }
    return conns_[it->second];
  }

  // HostCpu::sharedCoreLatency for a message from rank a to rank b where the two share a core
  // (coreOf_), else 0.
  double sharedCoreLatency(int a, int b) const {
    const int32_t core = coreOf_[size_t(a)];
    if (core < 0 || core != coreOf_[size_t(b)] ||
        machineOf_[size_t(topo_.ranks[size_t(a)].host)] !=
            machineOf_[size_t(topo_.ranks[size_t(b)].host)])
      return 0;
    return hostCpu_[size_t(topo_.ranks[size_t(a)].host)].sharedCoreLatency;
  }

  // The route from rank a to rank b, made once per pair of endpoints (folded: per pair of
  // ranks, as it stands for the pair's orbit).
  uint32_t routeBetween(int a, int b, bool singleCopy) {
    const int32_t from = topo_.ranks[size_t(a)].endpoint, to = topo_.ranks[size_t(b)].endpoint;
    // By ranks where the route depends on them: folded, or through the ranks' cores.
    const bool cores = coreLink_[size_t(a)] >= 0 || coreLink_[size_t(b)] >= 0;
    const uint64_t key = fold_ != nullptr || cores
                             ? (uint64_t(uint32_t(a)) << 32) | uint32_t(b)
                             : (uint64_t(uint32_t(from)) << 32) | uint32_t(to);
    auto [it, added] = routeIndex_.try_emplace(key | (cores && singleCopy ? 1ull << 63 : 0),
                                               uint32_t(routes_.size()));
    if (added) {
      Route r;
      if (fold_ != nullptr) {
        auto [known, fresh] = foldedRoutes_->try_emplace(key);
        if (fresh) known->second.second = foldedRoute(a, b, &known->second.first);
        r = known->second.first;
        if (r.limit > 0) {
          r.links.push_back(addPairLink(r.limit));
          r.weights.push_back(1);
        }
        routesVary_ = routesVary_ || known->second.second;
      } else if (from != to) {
        r.links = topo_.route(from, to);
        for (int32_t l : r.links) r.latency += topo_.links[size_t(l)].latency;
        if (r.links.empty()) missingRoute_ = {from, to};
      }
      if (int32_t cpu = cpuLinkOfCopy(from, to); cpu >= 0 && !r.links.empty()) {
        addCores(&r, a, b, singleCopy);
        r.links.push_back(cpu);
        if (!r.weights.empty()) r.weights.push_back(1);
        r.cpuCopy = true;
        const double copies = hostCpu_[size_t(topo_.nodes[size_t(from)].host)].messageCopies;
        r.cpuWeight = copies > 0 ? copies : kDefaultMessageCopies;
      }
      routes_.push_back(std::move(r));
    }
    return it->second;
  }

  // Where ranks are bound to cores, a message's copies are made on the cores of the threads
  // that make them: the slot path's copy in by the sender, its copy out by the receiver (half
  // each), a single-copy message's read by the receiver alone.
  void addCores(Route* r, int a, int b, bool singleCopy) const {
    const int32_t mine = coreLink_[size_t(a)], theirs = coreLink_[size_t(b)];
    std::vector<std::pair<int32_t, double>> cores;
    if (singleCopy || mine == theirs) {
      if (theirs >= 0) cores.push_back({theirs, 1});
    } else {
      if (mine >= 0) cores.push_back({mine, 0.5});
      if (theirs >= 0) cores.push_back({theirs, 0.5});
    }
    for (auto [link, share] : cores) {
      if (r->weights.empty() && share != 1) r->weights.assign(r->links.size(), 1);
      r->links.push_back(link);
      if (!r->weights.empty()) r->weights.push_back(share);
    }
  }

  // Folded, the route from a to b stands for the M routes of its orbit, g·a to g·b for every
  // group element g, which need not be alike: a ring's hop from one leaf to the next crosses the
  // spines where its other hops do not, and ECMP picks among equal paths pair by pair. Each
  // host's own link is counted in its class (RankSymmetry::linkClass): the crossings the orbit
  // makes of one of them on average. A link between switches, which the whole orbit shares,
  // is counted as itself, with the orbit's crossings of it: where two routes of the orbit
  // collide there, the flow goes at the collision's share, as the slower of them does in the
  // full simulation (rd on a 2:1 fat-tree: 20% faster by the class average). Beyond
  // kRouteSamples group elements an evenly spread sample of kSampledRoutes stands for all, and
  // the links between switches for their class too. The latency is the mean of the routes'.
  // Returns whether the orbit's routes differ.
  bool foldedRoute(int a, int b, Route* r) {
    bool vary = false;
    const int m = fold_->elements, samples = m <= kRouteSamples ? m : kSampledRoutes;
    const int stride = m / samples;
    std::vector<int32_t> first;  // the first sample's links, mapped
    double limit = std::numeric_limits<double>::infinity();
    for (int k = 0; k < samples; ++k) {
      // Spread over the residues of the stride too: every second host of 16 would never cross
      // a leaf of 4.
      const int g = k * stride + (k % stride);
      const int32_t from = topo_.ranks[size_t(fold_->act(g, a))].endpoint;
      const int32_t to = topo_.ranks[size_t(fold_->act(g, b))].endpoint;
      if (from == to) continue;
      const std::vector<int32_t> links = topo_.route(from, to);
      if (links.empty()) missingRoute_ = {from, to};
      std::vector<int32_t> mapped;
      double narrowest = std::numeric_limits<double>::infinity();
      for (int32_t l : links) {
        mapped.push_back(fold_->linkClass[size_t(l)]);
        narrowest = std::min(narrowest, topo_.links[size_t(l)].bandwidth);
      }
      limit = std::min(limit, narrowest);
      if (k == 0) first = mapped;
      vary = vary || mapped != first;
      for (int32_t l : links) {
        r->latency += topo_.links[size_t(l)].latency / samples;
        const bool own = !fold_->switchLink[size_t(l)] || samples < m;
        const int32_t c = own ? fold_->linkClass[size_t(l)] : l;
        const double w = own ? fold_->linkScale[size_t(l)] / samples : 1;
        auto it = std::find(r->links.begin(), r->links.end(), c);
        if (it == r->links.end()) {
          r->links.push_back(c);
          r->weights.push_back(w);
        } else {
          r->weights[size_t(it - r->links.begin())] += w;
        }
      }
    }
    if (vary && !std::isinf(limit)) r->limit = limit;
    return vary;
  }

  // What flow f takes of link l per byte it moves: its link's weight on its route (folded: the
  // links of a class it stands for; a core: its share of the copies), else 1, times its CPU
  // weight on a CPU resource.
  double weightOn(const Flow& f, int32_t l) const {
    const Route& r = routes_[f.route];
    if (r.weights.empty()) return cpuResource(l) ? f.cpuWeight : 1;
    return weightAt(f, size_t(std::find(r.links.begin(), r.links.end(), l) - r.links.begin()));
  }
  double weightAt(const Flow& f, size_t i) const {
    const Route& r = routes_[f.route];
    const double w = r.weights.empty() ? 1 : r.weights[i];
    return cpuResource(r.links[i]) ? w * f.cpuWeight : w;
  }
  // Links past the topology's: the CPU resources (addCpuResources), then the pairs' links
  // (addPairLink).
  bool cpuResource(int32_t l) const {
    return size_t(l) >= topo_.links.size() && size_t(l) < pairLinksBegin_;
  }
  // A link of `capacity` bytes/s that only one pair of ranks' messages cross, every lane's:
  // where an orbit's routes differ, the pair's flows together may not outrun the narrowest
  // link of a route, which the averaged weights would let them (ring allreduce of 64 MiB on
  // dgx-rail-16, where the hop between hosts takes one of three routes: 6% fast without it).
  int32_t addPairLink(double capacity) {
    capacity_.push_back(capacity);
    sizeLinkState();
    return int32_t(capacity_.size() - 1);
  }

  // Records, for step g, the earlier steps of its lane it conflicts with and, for each of its
  // slices, how many slices of that step must be done first (the executor's prefix rule).
  void addDependencies(uint32_t g, const Step& s, LaneBuffers& bufs) {
    struct Access {
      Region region;
      bool write;
    };
    Access acc[2];
    int n = 0;
    // A Barrier's src is where its flags go (plan.h), not data.
    if (s.kind != StepKind::Recv && s.kind != StepKind::Barrier) acc[n++] = {s.src, false};
    if (s.kind != StepKind::Send && s.kind != StepKind::Barrier) acc[n++] = {s.dst, true};
    const size_t firstDep = depStep_.size();
    auto need = [&](const Accessor& a, uint64_t myStart, uint64_t ob, uint64_t oe) {
      if (a.step == kNone) return;
      const SimStep& me = steps_[g];
      const SimStep& them = steps_[a.step];
      size_t d = firstDep;
      while (d < depStep_.size() && depStep_[d] != a.step) ++d;
      if (d == depStep_.size()) {
        depStep_.push_back(a.step);
        depNeed_.resize(depNeed_.size() + size_t(opt_.slices), 0);
      }
      uint8_t* needs = &depNeed_[d * size_t(opt_.slices)];
      for (int j = 0; j < me.slices; ++j) {
        uint64_t limit = myStart + collectives::partOffset(me.count, me.slices, uint64_t(j) + 1);
        if (ob >= limit) continue;  // this slice does not reach the overlap
        uint64_t target = std::min(oe, limit) - a.start;
        uint8_t m = 0;
        while (collectives::partOffset(them.count, them.slices, m) < target) ++m;
        needs[j] = std::max(needs[j], m);
      }
    };
    for (int i = 0; i < n; ++i) {
      const Region& r = acc[i].region;
      if (r.count == 0) continue;
      cover(bufs[r.buf], r.offset, r.offset + r.count, &covered_);
      for (auto it : covered_) {
        const uint64_t ob = it->first, oe = it->second.end;
        need(it->second.writer, r.offset, ob, oe);
        if (acc[i].write)
          bufs.forEachReader(it->second, [&](const Accessor& a) { need(a, r.offset, ob, oe); });
      }
    }
    for (int i = 0; i < n; ++i) {
      const Region& r = acc[i].region;
      if (r.count == 0) continue;
      SegmentMap& m = bufs[r.buf];
      cover(m, r.offset, r.offset + r.count, &covered_);
      if (acc[i].write) {
        // One writer now owns the whole range: merge it into one segment.
        for (auto it : covered_) m.erase(it);
        m.emplace(r.offset, Segment{r.offset + r.count, {g, r.offset}, kNone});
      } else {
        for (auto it : covered_) bufs.addReader(&it->second, {g, r.offset});
      }
    }
  }

  // A Barrier waits for every earlier step of its lane (whole), every later step for it.
  void addBarrierDependencies(uint32_t g, StepKind kind, uint32_t* lastBarrier) {
    auto wholeOf = [&](uint32_t a) {
      depStep_.push_back(a);
      depNeed_.resize(depNeed_.size() + size_t(opt_.slices), steps_[a].slices);
    };
    if (*lastBarrier != kNone) wholeOf(*lastBarrier);
    if (kind != StepKind::Barrier) return;
    const uint32_t since = *lastBarrier != kNone ? *lastBarrier + 1 : laneBegin_.back();
    for (uint32_t a = since; a < g; ++a) wholeOf(a);
    *lastBarrier = g;
  }

  Status checkMatching() {
    for (size_t k = 0; k < barriers_.size(); ++k)
      if (barriers_[k].size() != size_t(simRanks_))
        return errorf(loomInvalidArgument,
                      "barrier %zu: %zu of %d ranks have it (every rank needs the same barriers)",
                      k, barriers_[k].size(), simRanks_);
    if (missingRoute_.first >= 0)
      return errorf(loomInvalidArgument, "the topology has no route from node %d to node %d",
                    missingRoute_.first, missingRoute_.second);
    for (const Connection& c : conns_) {
      if (c.sends.size() != c.recvs.size())
        return errorf(loomInvalidArgument,
                      "lane %d: rank %d sends %zu messages to rank %d, which receives %zu",
                      c.lane, c.src, c.sends.size(), c.dst, c.recvs.size());
      for (size_t m = 0; m < c.sends.size(); ++m)
        if (steps_[c.sends[m]].count != steps_[c.recvs[m]].count)
          return errorf(loomInvalidArgument,
                        "lane %d: message %zu from rank %d to rank %d: %llu elements sent, "
                        "%llu received",
                        c.lane, m, c.src, c.dst, (unsigned long long)steps_[c.sends[m]].count,
                        (unsigned long long)steps_[c.recvs[m]].count);
    }
    return Status::ok();
  }

  void buildReverseDeps() {
    rdepBegin_.assign(steps_.size() + 1, 0);
    for (uint32_t d : depStep_) ++rdepBegin_[d + 1];
    for (size_t g = 0; g < steps_.size(); ++g) rdepBegin_[g + 1] += rdepBegin_[g];
    rdep_.resize(depStep_.size());
    std::vector<uint32_t> fill(rdepBegin_.begin(), rdepBegin_.end() - 1);
    for (uint32_t g = 0; g < steps_.size(); ++g)
      for (uint32_t d = depBegin_[g]; d < depBegin_[g + 1]; ++d) rdep_[fill[depStep_[d]]++] = g;
  }

  // ---- Execution ------------------------------------------------------------------------------

  uint64_t sliceBytes(const SimStep& s, int j) const {
    return collectives::partCount(s.count, s.slices, uint64_t(j)) * opt_.elemSize;
  }

  void push(double time, EventKind kind, uint32_t id, uint32_t version = 0) {
    events_.push({time, kind, id, version});
  }

  // Moves step g's ready mark past every slice whose dependencies are now done, and starts
  // what that allows.
  bool sliceDepsMet(uint32_t g, uint8_t slice) const {
    for (uint32_t d = depBegin_[g]; d < depBegin_[g + 1]; ++d)
      if (steps_[depStep_[d]].done < depNeed_[size_t(d) * size_t(opt_.slices) + slice])
        return false;
    return true;
  }

  uint32_t rankOf(uint32_t g) const {
    const SimStep& s = steps_[g];
    if (isLocal(s.kind) || s.kind == StepKind::Barrier) return s.owner;
    const Connection& c = conns_[s.owner];
    return uint32_t(s.kind == StepKind::Send ? c.src : c.dst);
  }

  void advanceReady(uint32_t g) {
    SimStep& s = steps_[g];
    if (s.admission != kAdmitted) {
      // The bookkeeping comes when the step could start, in its rank's CPU queue.
      if (s.admission == kNeedsAdmission && sliceDepsMet(g, 0)) {
        s.admission = kAdmissionQueued;
        queueCpu(rankOf(g), {g, kBookkeeping});
      }
      return;
    }
    if (s.kind == StepKind::Barrier) {
      // When the last rank arrives, all leave together a barrier latency later.
      if (s.ready > 0 || !sliceDepsMet(g, 0)) return;
      s.ready = 1;
      const uint32_t k = barrierOf_.at(g);
      barrierArrived_.resize(barriers_.size(), 0);
      if (++barrierArrived_[k] == simRanks_) {
        const topology::HostCpu& last = rankCpu_[s.owner].cpu;  // the last to arrive
        push(now_ + barrierSeconds(last, opt_), EventKind::BarrierDone, k);
      }
      return;
    }
    const uint8_t before = s.ready;
    while (s.ready < s.slices && sliceDepsMet(g, s.ready)) ++s.ready;
    if (s.ready == before) return;
    if (isLocal(s.kind)) {
      for (; s.issued < s.ready; ++s.issued) queueCpu(s.owner, {g, s.issued});
    } else {
      tryStart(s.owner);
    }
  }

  // Seconds of one core that step s costs its rank before it may start: HostCpu::stepOverhead
  // for a transfer or a barrier (posting, polling, doorbells, wake-ups; a Copy or Reduce is a
  // call of a copy loop, which its bytes price), netMessageOverhead for a message to or from
  // another host (the kernel's TCP work), and singleCopyOverhead per read through the kernel.
  static double bookkeepingTime(const RankCpu& rc, const SimStep& s) {
    return (isLocal(s.kind) ? 0 : rc.cpu.stepOverhead) +
           (s.network ? rc.cpu.netMessageOverhead : 0) + s.kernelReads * rc.cpu.singleCopyOverhead;
  }

  // A rank's thread does one thing at a time: its local slices and its steps' bookkeeping run
  // one after another, in the order they became ready, each as a flow over the rank's CPU route.
  void queueCpu(uint32_t rank, CpuWork work) {
    RankCpu& rc = rankCpu_[rank];
    rc.queue.push_back(work);
    if (!rc.busy) startCpu(rank);
  }

  void startCpu(uint32_t rank) {
    RankCpu& rc = rankCpu_[rank];
    if (rc.queue.empty()) return;
    rc.busy = true;
    const CpuWork w = rc.queue.front();
    const SimStep& s = steps_[w.step];
    if (rc.bandwidth <= 0) {  // no CPU model: copies are free, bookkeeping takes its time
      push(now_ + (w.slice == kBookkeeping ? bookkeepingTime(rc, s) : 0), EventKind::LocalDone,
           rank);
      return;
    }
    // A peer read costs peerReadCopies (0, or mapped buffers: a plain copy) and what its dirty
    // part adds.
    const double peerCopies =
        rc.cpu.peerReadCopies > 0 && !opt_.peersMapped ? rc.cpu.peerReadCopies : 1;
    const double bounce =
        s.kernelReads > 0 && s.kind == StepKind::Reduce ? bounceReduce(rc, s) : 0;
    const double copies =
        (s.peerRead ? peerCopies + s.dirty * rc.cpu.dirtyReadCopies : 1) * localCopies(rc, s) +
        bounce;
    const double bytes = w.slice == kBookkeeping ? bookkeepingTime(rc, s) * rc.bandwidth
                         : s.free                ? 0
                                                 : double(sliceBytes(s, w.slice)) * copies;
    if (bytes <= 0) {
      push(now_, EventKind::LocalDone, rank);
      return;
    }
    const uint32_t f = allocFlow();
    Flow& fl = flows_[f];
    fl.route = rc.route;
    fl.owner = rank;
    fl.local = true;
    fl.cpuWeight = 1;
    fl.remaining = bytes;
    fl.rate = 0;
    fl.last = now_;
    for (int32_t l : routes_[rc.route].links) {
      linkFlows_[size_t(l)].push_back(f);
      markDirty(l);
    }
  }

  void finishCpu(uint32_t rank) {
    RankCpu& rc = rankCpu_[rank];
    const CpuWork w = rc.queue.front();
    rc.queue.pop_front();
    rc.busy = false;
    if (w.slice == kBookkeeping) {
      steps_[w.step].admission = kAdmitted;
      advanceReady(w.step);
    } else {
      sliceDone(w.step, rank);
    }
    if (!rc.busy) startCpu(rank);
  }

  void sliceDone(uint32_t g, uint32_t rank) {
    ++steps_[g].done;
    --slicesLeft_;
    rankTime_[rank] = std::max(rankTime_[rank], now_);
    for (uint32_t i = rdepBegin_[g]; i < rdepBegin_[g + 1]; ++i) advanceReady(rdep_[i]);
  }

  // Whether the connection's next slice may transmit: its send and its receive both may touch
  // it, and a single-copy message's first slice waits for all of its send.
  bool headReady(const Connection& c) const {
    if (c.busy || c.headMsg >= c.sends.size()) return false;
    const SimStep& send = steps_[c.sends[c.headMsg]];
    const uint8_t sendNeeds = send.singleCopy ? send.slices : uint8_t(c.headSlice + 1);
    return send.ready >= sendNeeds && steps_[c.recvs[c.headMsg]].ready > c.headSlice;
  }

  // CPU bytes per byte of the connection's next slice (Route::cpuWeight, the slot path's
  // copies and handshakes). A message of at least nonTemporalBytes goes through the slots by
  // way of memory (non-temporal stores), so its copies run at memory speed, however much of
  // the call's working set the cache holds. A single-copy message is instead the receiver's
  // one read of the sender's memory through the kernel, which costs what a peer read does
  // (peerReadCopies, default 1), plus one for a RecvReduce's combine over it, whatever the
  // slots' figure. One of data its sender wrote during the call costs the reader more
  // (HostCpu::dirtyReadCopies).
  double headWeight(const Connection& c) const {
    const SimStep& send = steps_[c.sends[c.headMsg]];
    const bool recv = steps_[c.recvs[c.headMsg]].kind == StepKind::Recv;
    const RankCpu& rc = rankCpu_[size_t(c.dst)];
    const topology::HostCpu& reader = rc.cpu;
    const double kernelRead = reader.peerReadCopies > 0 ? reader.peerReadCopies : 1;
    double slots = routes_[c.route].cpuWeight;
    if (routes_[c.route].cpuCopy && rc.memoryBandwidth > 0 && rc.bandwidth > rc.memoryBandwidth &&
        opt_.nonTemporalBytes > 0 && send.count * opt_.elemSize >= opt_.nonTemporalBytes)
      slots *= rc.bandwidth / rc.memoryBandwidth;
    return (send.singleCopy ? kernelRead + (recv ? 0 : 1) : slots) +
           send.dirty * reader.dirtyReadCopies;
  }

  // The route of the connection's next slice: a single-copy message's, or the slot path's.
  uint32_t headRoute(const Connection& c) const {
    return steps_[c.sends[c.headMsg]].singleCopy ? c.singleRoute : c.route;
  }

  // Starts the connection's next slice when its send and its receive both may touch it.
  void tryStart(uint32_t ci) {
    Connection& c = conns_[ci];
    if (!headReady(c)) return;
    c.busy = true;
    ++flowsStarted_;
    const uint64_t bytes = sliceBytes(steps_[c.sends[c.headMsg]], c.headSlice);
    const uint32_t routeIndex = headRoute(c);
    const Route& route = routes_[routeIndex];
    const double weight = headWeight(c);
    uint32_t f = allocFlow();
    Flow& fl = flows_[f];
    fl.route = routeIndex;
    fl.owner = ci;
    fl.local = false;
    fl.cpuWeight = weight;
    fl.remaining = double(bytes);
    fl.rate = 0;
    fl.last = now_;
    if (route.links.empty() || bytes == 0) {
      const double bw = rankCpu_[size_t(c.src)].bandwidth;
      double t = bytes == 0 || bw <= 0 ? 0 : double(bytes) / bw;
      push(now_ + t, EventKind::FlowDone, f, fl.version);
      return;
    }
    for (size_t i = 0; i < route.links.size(); ++i) {
      const int32_t l = route.links[i];
      linkFlows_[size_t(l)].push_back(f);
      linkBytes_[size_t(l)] += uint64_t(double(bytes) * weightAt(fl, i));
      markDirty(l);
    }
  }

  // When the connection's next slice may transmit now, it takes the place of the flow f that
  // just finished: same route, same weight, so every link keeps the same set of flows and the
  // max-min rates stay as they are — no rebalancing. The slices of one message, and messages
  // whose data is ready (rhd's, tree's), follow each other this way at the cost of an event,
  // not of recomputing every flow their links connect them to.
  bool continueOnConnection(uint32_t f) {
    Flow& fl = flows_[f];
    Connection& c = conns_[fl.owner];
    if (!headReady(c) || routes_[fl.route].links.empty() || fl.rate <= 0) return false;
    const uint64_t bytes = sliceBytes(steps_[c.sends[c.headMsg]], c.headSlice);
    if (bytes == 0 || headWeight(c) != fl.cpuWeight || headRoute(c) != fl.route) return false;
    c.busy = true;
    ++flowsStarted_;
    for (size_t i = 0; i < routes_[fl.route].links.size(); ++i)
      linkBytes_[size_t(routes_[fl.route].links[i])] += uint64_t(double(bytes) * weightAt(fl, i));
    fl.remaining = double(bytes);
    fl.last = now_;
    push(now_ + fl.remaining / fl.rate, EventKind::FlowDone, f, fl.version);
    return true;
  }

  uint32_t allocFlow() {
    if (!freeFlows_.empty()) {
      uint32_t f = freeFlows_.back();
      freeFlows_.pop_back();
      return f;
    }
    flows_.emplace_back();
    return uint32_t(flows_.size() - 1);
  }

  void markDirty(int32_t l) {
    if (linkDirty_[size_t(l)]) return;
    linkDirty_[size_t(l)] = true;
    dirty_.push_back(l);
  }

  void handle(const Event& e) {
    switch (e.kind) {
      case EventKind::FlowDone: {
        Flow& fl = flows_[e.id];
        if (fl.version != e.version) return;  // its rate changed since; a newer event stands
        ++fl.version;
        const Route& route = routes_[fl.route];
        if (!fl.local) {
          Connection& c = conns_[fl.owner];
          c.busy = false;
          push(now_ + route.latency + c.extraLatency, EventKind::Deliver, fl.owner);
          if (++c.headSlice == steps_[c.sends[c.headMsg]].slices) {
            c.headSlice = 0;
            ++c.headMsg;
          }
          if (continueOnConnection(e.id)) return;
        }
        for (int32_t l : route.links) {
          auto& v = linkFlows_[size_t(l)];
          *std::find(v.begin(), v.end(), e.id) = v.back();
          v.pop_back();
          markDirty(l);
        }
        freeFlows_.push_back(e.id);
        if (fl.local) {
          finishCpu(fl.owner);
        } else {
          tryStart(fl.owner);
        }
        return;
      }
      case EventKind::Deliver: {
        Connection& c = conns_[e.id];
        const uint32_t snd = c.sends[c.deliverMsg], rcv = c.recvs[c.deliverMsg];
        if (++c.deliverSlice == steps_[snd].slices) {
          c.deliverSlice = 0;
          ++c.deliverMsg;
        }
        sliceDone(snd, uint32_t(c.src));
        sliceDone(rcv, uint32_t(c.dst));
        return;
      }
      case EventKind::LocalDone:  // local work that needed no flow
        finishCpu(e.id);
        return;
      case EventKind::BarrierDone:
        for (uint32_t m : barriers_[e.id]) sliceDone(m, steps_[m].owner);
        return;
    }
  }

  // Max-min fair rates (progressive filling) over the flows that share links, transitively,
  // with the links whose flow set changed; flows elsewhere keep their rates and events.
  void rebalance() {
    if (dirty_.empty()) return;
    ++epoch_;
    compLinks_.clear();
    compFlows_.clear();
    for (int32_t l : dirty_) {
      linkDirty_[size_t(l)] = false;
      visitLink(l);
    }
    dirty_.clear();
    for (size_t i = 0; i < compLinks_.size(); ++i)
      for (uint32_t f : linkFlows_[size_t(compLinks_[i])]) {
        if (flows_[f].stamp == epoch_) continue;
        flows_[f].stamp = epoch_;
        compFlows_.push_back(f);
        for (int32_t l : routes_[flows_[f].route].links) visitLink(l);
      }
    // Progressive filling: the link with the smallest fair share fixes its flows at that
    // share; their bandwidth leaves every other link they cross. On a CPU resource a flow
    // uses its cpuWeight per byte, so the share there is the capacity over the flows' weights.
    std::vector<Share>& heap = shares_;  // a min-heap, kept with its capacity across calls
    heap.clear();
    auto pushShare = [&](Share s) {
      heap.push_back(s);
      std::push_heap(heap.begin(), heap.end(), std::greater<Share>());
    };
    for (int32_t l : compLinks_) {
      capLeft_[size_t(l)] = capacity_[size_t(l)];
      unfixed_[size_t(l)] = uint32_t(linkFlows_[size_t(l)].size());
      weightLeft_[size_t(l)] = unfixed_[size_t(l)];
      if (size_t(l) >= topo_.links.size() || fold_ != nullptr) {
        weightLeft_[size_t(l)] = 0;
        for (uint32_t f : linkFlows_[size_t(l)]) weightLeft_[size_t(l)] += weightOn(flows_[f], l);
      }
      if (unfixed_[size_t(l)]) pushShare({capLeft_[size_t(l)] / weightLeft_[size_t(l)], l});
    }
    for (uint32_t f : compFlows_) flows_[f].newRate = -1;
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<Share>());
      const auto [share, l] = heap.back();
      heap.pop_back();
      if (unfixed_[size_t(l)] == 0 ||
          share != std::max(0.0, capLeft_[size_t(l)]) / weightLeft_[size_t(l)])
        continue;  // stale
      for (uint32_t f : linkFlows_[size_t(l)]) {
        if (flows_[f].newRate >= 0) continue;
        flows_[f].newRate = share;
        const std::vector<int32_t>& route = routes_[flows_[f].route].links;
        for (size_t i = 0; i < route.size(); ++i) {
          const int32_t o = route[i];
          const double w = weightAt(flows_[f], i);
          capLeft_[size_t(o)] -= share * w;
          weightLeft_[size_t(o)] -= w;
          if (--unfixed_[size_t(o)] && o != l)
            pushShare({std::max(0.0, capLeft_[size_t(o)]) / weightLeft_[size_t(o)], o});
        }
      }
    }
    for (uint32_t f : compFlows_) {
      Flow& fl = flows_[f];
      if (fl.newRate == fl.rate) continue;
      fl.remaining = std::max(0.0, fl.remaining - fl.rate * (now_ - fl.last));
      fl.last = now_;
      fl.rate = fl.newRate;
      ++fl.version;
      if (fl.rate > 0) push(now_ + fl.remaining / fl.rate, EventKind::FlowDone, f, fl.version);
    }
  }

  void visitLink(int32_t l) {
    if (linkStamp_[size_t(l)] == epoch_) return;
    linkStamp_[size_t(l)] = epoch_;
    compLinks_.push_back(l);
  }

  // Names where a stuck plan stops: the first unfinished step and what it waits for.
  std::string deadlockMessage(uint32_t g) const {
    size_t lane = size_t(std::upper_bound(laneBegin_.begin(), laneBegin_.end(), g) -
                         laneBegin_.begin()) - 1;
    int rank = int(std::upper_bound(rankLaneBegin_.begin(), rankLaneBegin_.end(), uint32_t(lane)) -
                   rankLaneBegin_.begin()) - 1;
    const SimStep& s = steps_[g];
    std::string why = s.ready < s.slices              ? "waits for an earlier step of its lane"
                      : s.kind == StepKind::Barrier ? "waits for the other ranks at the barrier"
                                                    : "waits for its peer's matching step";
    const bool peer = !isLocal(s.kind) && s.kind != StepKind::Barrier;
    return strprintf("deadlock: rank %d lane %zu step %u (%s%s%s) cannot finish: it %s; "
                     "%u of %u slices done",
                     rank, lane - rankLaneBegin_[size_t(rank)], g - laneBegin_[lane],
                     collectives::stepKindName(s.kind),
                     !peer ? "" : s.kind == StepKind::Send ? " to rank " : " from rank ",
                     !peer ? "" : std::to_string(s.peer).c_str(), why.c_str(),
                     unsigned(s.done), unsigned(s.slices));
  }

  int nranks_;
  int simRanks_;  // the ranks whose plans are simulated: all, or the representatives
  const topology::Topology& topo_;
  SimOptions opt_;
  const RankSymmetry* fold_;  // the fast path's symmetry, or null
  FoldedRoutes* foldedRoutes_;  // folded: the routes of this call's views
  bool routesVary_ = false;     // folded: the routes of some connection's orbit differ
  const CompiledSteps* reused_;  // where the dependencies come from, or null: compiled here
  uint64_t scale_;               // this call's regions over reused_'s plans'
  std::vector<uint64_t> written_;  // compiled here: CompiledSteps::written per step

  // Compiled plans.
  std::vector<SimStep> steps_;
  std::vector<uint32_t> laneBegin_;      // first step of every lane, all ranks in order
  std::vector<uint32_t> rankLaneBegin_;  // first lane (index into laneBegin_) of every rank
  std::vector<uint32_t> depBegin_, depStep_, rdepBegin_, rdep_;
  std::vector<uint8_t> depNeed_;  // per dependency, per slice of the dependent step
  // Barriers: the k-th Barrier step of every rank's lane 0, each Barrier step's k, and how many
  // ranks have arrived at barrier k.
  std::vector<std::vector<uint32_t>> barriers_;
  std::unordered_map<uint32_t, uint32_t> barrierOf_;
  std::vector<int> barrierArrived_;
  std::vector<Connection> conns_;
  std::unordered_map<uint64_t, uint32_t> connIndex_;
  std::vector<SegmentMap::iterator> covered_;  // cover()'s answer, one vector for every call
  // addLane's first block, left uninitialized (a Simulator is made for every prediction).
  static constexpr size_t kLaneArenaBytes = 64 << 10;
  std::unique_ptr<std::byte[]> laneArena_ =
      std::make_unique_for_overwrite<std::byte[]>(kLaneArenaBytes);
  std::vector<Route> routes_;
  std::unordered_map<uint64_t, uint32_t> routeIndex_;
  std::pair<int32_t, int32_t> missingRoute_{-1, -1};
  uint64_t messages_ = 0, bytes_ = 0, flowsStarted_ = 0;
  uint64_t slicesLeft_ = 0;  // of every step, not done yet

  // Execution state.
  double now_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> freeFlows_;
  std::vector<double> rankTime_;
  std::vector<RankCpu> rankCpu_;
  std::vector<topology::HostCpu> hostCpu_;  // per host
  std::vector<int32_t> hostCpuLink_;        // per host: its CPU resource, -1 when not modelled
  std::vector<int32_t> coreOf_;    // per rank: its core where its machine's ranks outnumber them
  std::vector<int32_t> coreLink_;  // per rank: that core's CPU resource, else -1
  std::vector<size_t> coreMachine_;  // per core resource (in link order): its machine
  size_t coreLinkBegin_ = 0;         // the first core resource's link
  size_t pairLinksBegin_ = 0;        // the first link of addPairLink's
  // The buffers the ranks' plans touch, one per piece of memory (bufferOf), and per Copy or
  // Reduce its source's and destination's.
  struct CacheBuffer {
    size_t machine = 0;
    double extent = 0, touched = 0;  // bytes
    double cached = 0;               // the share of it the cache holds (fillCaches)
  };
  std::vector<CacheBuffer> cacheBuffers_;
  std::unordered_map<uint64_t, uint32_t> cacheBufferIndex_;
  std::vector<std::array<uint32_t, 2>> localBuffers_;
  std::vector<size_t> machineOf_;           // per host: the first host of its machine
  std::vector<double> hostWorkingSet_;      // per machine (its first host): bytes its ranks' plans touch
  // Per link, the topology's links first, then the CPU resources (addCpuResources).
  std::vector<double> capacity_;
  std::vector<std::vector<uint32_t>> linkFlows_;
  std::vector<uint64_t> linkBytes_;
  std::vector<char> linkDirty_;
  std::vector<uint32_t> linkStamp_;
  std::vector<double> capLeft_;
  std::vector<uint32_t> unfixed_;   // flows not yet given a rate
  std::vector<double> weightLeft_;  // their weights (their count, except on CPU resources)
  std::vector<int32_t> dirty_, compLinks_;
  // rebalance's heap of links by their fair share.
  using Share = std::pair<double, int32_t>;
  std::vector<Share> shares_;
  std::vector<uint32_t> compFlows_;
  uint32_t epoch_ = 0;
};

}  // namespace

namespace {

// How much faster a shaped link is when the bound of simulateRanks takes its transmission as
// free.
constexpr double kFreeLinkFactor = 1e6;

// One simulation of ranks 0..count-1 (all of them, or fold's representatives): plan(r) returns
// rank r's plan (a reference or a temporary), which is compiled and then no longer needed.
// With `reuse` (not folded): the dependencies from reuse->from (at reuse->scale) where it is
// not null, else what the compilation found is kept in reuse->keep where it can be.
struct Reuse {
  const CompiledSteps* from = nullptr;
  uint64_t scale = 1;
  CompiledSteps* keep = nullptr;
};
template <typename PlanOf>
SimResult runOnce(int nranks, int count, PlanOf plan, const topology::Topology& topo,
                  const SimOptions& options, const RankSymmetry* fold, FoldedRoutes* routes,
                  const Reuse* reuse = nullptr) {
  Simulator sim(nranks, topo, options, fold, routes, reuse ? reuse->from : nullptr,
                reuse ? reuse->scale : 1);
  for (int r = 0; r < count; ++r) {
    const RankPlan& p = plan(r);
    Status st = sim.addRank(r, p);
    if (!st.isOk()) return failure(st.message());
  }
  if (reuse != nullptr && reuse->keep != nullptr) sim.keepSteps(reuse->keep);
  SimResult res = sim.run();
  if (!res.ok && reuse != nullptr && reuse->keep != nullptr) *reuse->keep = CompiledSteps{};
  return res;
}

// runOnce, bounded where shaped links offered a burst.
template <typename PlanOf>
SimResult runBounded(int nranks, int count, PlanOf plan, const topology::Topology& topo,
                     const SimOptions& options, const RankSymmetry* fold = nullptr,
                     FoldedRoutes* routes = nullptr, const Reuse* reuse = nullptr) {
  SimResult res = runOnce(nranks, count, plan, topo, options, fold, routes, reuse);
  // A burst hides the shaped links' transmission (Simulator::run takes it off the call's time),
  // but no call can be faster than with that transmission free: run() takes the whole of it
  // off where it overlapped other work and was never on the call's critical path (2 netns
  // hosts, 4 ranks: a 2 KiB Bruck allgather came out at 32 us, below its 44 us at 32 B). A call
  // whose shaped links carried nothing was offered no saving and needs no bound.
  if (!res.ok || res.stopped || res.burstSaving <= 0) return res;
  topology::Topology free = topo;
  for (topology::Link& l : free.links)
    if (l.burstBytes > 0) l.bandwidth *= kFreeLinkFactor, l.burstBytes = 0;
  // (Routes and latencies are the same on it: the folded routes stand.)
  const SimResult bound = runOnce(nranks, count, plan, free, options, fold, routes);
  if (!bound.ok) return bound;
  res.time = std::max(res.time, bound.time);
  return res;
}

// Both entry points: the fast path where options ask for it and the call is symmetric
// (tuner/symmetry.h), else every rank.
template <typename PlanOf>
SimResult simulateRanks(int nranks, PlanOf plan, const topology::Topology& topo,
                        const SimOptions& options) {
  if (nranks > int(topo.ranks.size()))
    return failure(strprintf("the plans have %d ranks, the topology %zu", nranks,
                             topo.ranks.size()));
  if (!options.fast) return runBounded(nranks, nranks, plan, topo, options);
  Folding folding;
  const std::string why = findFolding(
      nranks, [&](int r) { return RankPlan(plan(r)); }, topo, &folding);
  if (!why.empty()) {
    SimResult res = runBounded(nranks, nranks, plan, topo, options);
    res.fastRefusal = why;
    return res;
  }
  // Each view is simulated as if every host ran like it; the call takes the longest.
  SimResult res;
  FoldedRoutes routes;  // the views' connections are the same pairs of ranks
  for (const std::vector<RankPlan>& view : folding.views) {
    SimResult one = runBounded(
        nranks, folding.symmetry.period,
        [&](int r) -> const RankPlan& { return view[size_t(r)]; }, topo, options,
        &folding.symmetry, &routes);
    if (!one.fastRefusal.empty()) {
      SimResult res = runBounded(nranks, nranks, plan, topo, options);
      res.fastRefusal = one.fastRefusal;
      return res;
    }
    if (!one.ok) return one;
    if (one.stopped) {  // the call takes at least as long as this view
      one.fast = true;
      return one;
    }
    if (&view == &folding.views.front()) {
      res = std::move(one);
      continue;
    }
    res.time = std::max(res.time, one.time);
    for (size_t r = 0; r < res.rankTime.size(); ++r)
      res.rankTime[r] = std::max(res.rankTime[r], one.rankTime[r]);
  }
  res.fast = true;
  return res;
}

}  // namespace

SimResult simulateBuilt(int nranks, const std::function<RankPlan(int)>& build,
                        const topology::Topology& topo, const SimOptions& options) {
  return simulateRanks(nranks, build, topo, options);
}

SimResult simulate(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                   const SimOptions& options) {
  return simulateRanks(
      int(plans.size()), [&](int r) -> const RankPlan& { return plans[size_t(r)]; }, topo,
      options);
}

uint64_t planScale(const std::vector<RankPlan>& was, const std::vector<RankPlan>& plans) {
  if (was.size() != plans.size()) return 0;
  uint64_t k = 0;  // 0: not fixed yet
  auto scaled = [&](uint64_t a, uint64_t b) {
    if (a == 0) return b == 0;
    if (b % a != 0 || b / a == 0) return false;
    if (k == 0) k = b / a;
    return b / a == k;
  };
  auto same = [&](const Region& a, const Region& b) {
    return a.buf == b.buf && scaled(a.offset, b.offset) && scaled(a.count, b.count);
  };
  for (size_t r = 0; r < plans.size(); ++r) {
    const std::vector<collectives::Lane>&lx = was[r].lanes, &ly = plans[r].lanes;
    if (lx.size() != ly.size()) return 0;
    for (size_t l = 0; l < lx.size(); ++l) {
      const std::vector<Step>&sx = lx[l].steps, &sy = ly[l].steps;
      if (sx.size() != sy.size()) return 0;
      for (size_t i = 0; i < sx.size(); ++i)
        if (sx[i].kind != sy[i].kind || sx[i].peer != sy[i].peer || !same(sx[i].src, sy[i].src) ||
            !same(sx[i].dst, sy[i].dst))
          return 0;
    }
  }
  return k == 0 ? 1 : k;
}

bool slicesEvenly(const std::vector<RankPlan>& plans, int slices) {
  const uint64_t pieces = uint64_t(std::clamp(slices, 1, SimOptions::kMaxSlices));
  for (const RankPlan& p : plans)
    for (const collectives::Lane& lane : p.lanes)
      for (const Step& s : lane.steps)
        if (stepElems(s) % pieces != 0) return false;
  return true;
}

SimResult simulate(const std::vector<RankPlan>& plans, const topology::Topology& topo,
                   const SimOptions& options, CompiledSteps* compiled) {
  const int n = int(plans.size());
  if (compiled == nullptr || options.fast || n > int(topo.ranks.size()))
    return simulate(plans, topo, options);
  auto planOf = [&](int r) -> const RankPlan& { return plans[size_t(r)]; };
  Reuse reuse;
  SimOptions compared = options;  // where the simulation stops does not change what compiles
  compared.stopAfter = compiled->options.stopAfter;
  if (!compiled->plans.empty() && compiled->topo == &topo && compiled->options == compared)
    reuse.scale = planScale(compiled->plans, plans);
  if (reuse.scale == 0 || compiled->plans.empty()) {
    // Compiled afresh; kept where its steps divide evenly.
    *compiled = CompiledSteps{};
    reuse.scale = 1;
    if (slicesEvenly(plans, options.slices)) reuse.keep = compiled;
    SimResult res = runBounded(n, n, planOf, topo, options, nullptr, nullptr, &reuse);
    if (!compiled->depBegin.empty()) {
      compiled->plans = plans;
      compiled->topo = &topo;
      compiled->options = options;
    }
    return res;
  }
  reuse.from = compiled;
  return runBounded(n, n, planOf, topo, options, nullptr, nullptr, &reuse);
}

}  // namespace loom::tuner
