// The simulator's fast path (tuner/symmetry.h, docs/SIMULATOR.md "The fast path") against the
// full simulation: every builder of allreduce, allgather, reduce-scatter and alltoall, on
// uniform, CPU-modelled, fat-tree and rail-optimised models of 16 to 1024 ranks, at several
// sizes, within 5%; and where it cannot apply, the full simulation with the reason.
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "base/status.h"
#include "collectives/builders.h"
#include "topology/builders.h"
#include "tuner/simulator.h"
#include "tuner/symmetry.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"

namespace loom::tuner {
namespace {

using collectives::Builder;
using collectives::CollArgs;
using collectives::Collective;

constexpr double kTolerance = 0.05;
constexpr double kGB = 1e9, kGbit = 1e9 / 8;

const Collective kCollectives[] = {Collective::AllReduce, Collective::AllGather,
                                   Collective::ReduceScatter, Collective::AlltoAll};

CollArgs callOn(const topology::Topology& topo, Collective coll, uint64_t bytes) {
  CollArgs a;
  a.settings() = callSettings({}, {}, topo);
  a.coll = coll;
  a.nranks = int(topo.ranks.size());
  a.elemSize = 4;
  for (const topology::Rank& r : topo.ranks) a.hostOf.push_back(r.host);
  a.count = countForBytes(a, bytes);
  return a;
}

SimResult run(const Builder& b, const CollArgs& a, const topology::Topology& topo, bool fast) {
  SimOptions o;
  o.fast = fast;
  return simulateBuilt(a.nranks, [&](int r) { return b.build(a, r); }, topo, o);
}

// What one model's sweep found.
struct Sweep {
  int compared = 0, folded = 0;
  double worst = 0;  // the largest |fast - full| / full
  std::string worstCase;
};

// Every builder of the collectives (or only `algos` of `colls`, when given) at every size, fast against
// full; the fast path must agree within kTolerance wherever it ran, and the full simulation
// must have run unchanged wherever it did not.
Sweep compareAll(const topology::Topology& topo, const std::vector<uint64_t>& sizes,
                 const std::vector<std::string>& algos = {},
                 const std::vector<Collective>& colls = {std::begin(kCollectives),
                                                         std::end(kCollectives)}) {
  Sweep s;
  for (Collective coll : colls) {
    for (const Builder& b : collectives::allBuilders()) {
      if (b.coll != coll || b.build == nullptr) continue;
      if (!algos.empty() && std::find(algos.begin(), algos.end(), b.name) == algos.end())
        continue;
      for (uint64_t bytes : sizes) {
        const CollArgs a = callOn(topo, coll, bytes);
        if (b.refuse && !b.refuse(a).empty()) continue;
        const SimResult full = run(b, a, topo, false);
        const SimResult fast = run(b, a, topo, true);
        const std::string what = strprintf("%s %s %s %llu B", topo.name.c_str(),
                                           collectives::collectiveName(coll), b.name,
                                           (unsigned long long)bytes);
        EXPECT_TRUE(full.ok && fast.ok) << what << ": " << full.message << fast.message;
        EXPECT_FALSE(full.fast) << what;
        EXPECT_NE(fast.fast, !fast.fastRefusal.empty()) << what;
        if (!fast.fast) {
          EXPECT_EQ(fast.time, full.time) << what << " (" << fast.fastRefusal << ")";
          continue;
        }
        const double error = std::abs(fast.time - full.time) / full.time;
        EXPECT_LE(error, kTolerance) << what << ": fast " << fast.time * 1e6 << " us, full "
                                     << full.time * 1e6 << " us";
        EXPECT_EQ(fast.messages, full.messages) << what;
        ++s.folded;
        if (error >= s.worst) s.worst = error, s.worstCase = what;
      }
      ++s.compared;
    }
  }
  printf("%s: %d builders, %d calls folded, worst %.3f%% (%s)\n", topo.name.c_str(), s.compared,
         s.folded, s.worst * 100, s.worstCase.c_str());
  return s;
}

const std::vector<uint64_t> kSizes = {8, 32 << 10, 2 << 20};

TEST(SimulatorFast, AgreesWithTheFullSimulationOnUniformClusters) {
  for (auto [hosts, ranks] : {std::pair{2, 8}, {4, 4}, {16, 4}}) {
    topology::Topology topo = uniformTopology({hosts, ranks});
    topo.name = strprintf("uniform-%dx%d", hosts, ranks);
    const Sweep s = compareAll(topo, kSizes);
    EXPECT_GT(s.folded, 0) << topo.name;
  }
}

// Hosts with a CPU model (cores fewer than ranks, per-step costs, shm copies on the cores) and
// two sockets: the CPU resources are each host's own, and fold with it.
TEST(SimulatorFast, AgreesWithTheFullSimulationOnCpuModelledHosts) {
  topology::CpuHostSpec host;
  host.sockets = 2;
  host.ranksPerSocket = 4;
  host.memory = {10 * kGB, 1e-6, "shm"};
  host.interSocket = {40 * kGB, 0.2e-6, "upi"};
  host.pcie = {32 * kGB, 0.5e-6, "pcie"};
  topology::Topology topo = topology::uniformHosts("cpu-4x8-cores", 4, host,
                                                   {100 * kGbit, 5e-6, "eth"});
  for (topology::Node& n : topo.nodes)
    if (n.kind == topology::NodeKind::Host)
      n.cpu = {.cores = 4, .memBandwidth = 8e9, .stepOverhead = 2e-6, .netMessageOverhead = 3e-6};
  const Sweep s = compareAll(topo, kSizes);
  EXPECT_GT(s.folded, 0);
}

// A 2:1 fat-tree of `hosts` hosts of `ranks` ranks, `perLeaf` a leaf, 2 spines.
topology::Topology fatTreeOf(const std::string& name, int hosts, int ranks, int perLeaf) {
  topology::FabricSpec fabric;
  fabric.hostsPerLeaf = perLeaf;
  fabric.spines = 2;
  fabric.oversubscription = 2;
  fabric.hostLink = {200 * kGbit, 1e-6, "ib"};
  fabric.spineLatency = 0.5e-6;
  topology::CpuHostSpec host;
  host.ranksPerSocket = ranks;
  host.memory = {10 * kGB, 1e-6, "shm"};
  host.pcie = {32 * kGB, 0.5e-6, "pcie"};
  return topology::fatTree(name, hosts, host, fabric);
}

// Links between switches (spines) carry every host's traffic: the fast path counts what an
// orbit puts on each, and moves whole leaves.
TEST(SimulatorFast, AgreesWithTheFullSimulationOnFabricsWithSpines) {
  const Sweep fat = compareAll(fatTreeOf("fattree-16x4", 16, 4, 4), {8, 2 << 20});
  EXPECT_GT(fat.folded, 0);
}

// The corpus model of that name (topology/builders.h; dgx-rail-1024 with `huge`).
topology::Topology corpusModel(const std::string& name, bool huge = false) {
  for (topology::Topology& m : topology::corpusModels(huge))
    if (m.name == name) return std::move(m);
  return {};
}

// The hop between hosts of a ring takes one of three routes of six hops (through the spines,
// or through the NVSwitch and another GPU's NIC on either side), ECMP picking among them pair
// by pair: at 64 MiB the averaged route must not let the pair outrun one route's NIC.
TEST(SimulatorFast, AgreesWithTheFullSimulationOnARailOptimisedModel) {
  const topology::Topology rail = corpusModel("dgx-rail-16");
  ASSERT_EQ(rail.ranks.size(), 128u);
  const Sweep dgx = compareAll(rail, {8, 2 << 20, 64 << 20}, {"ring", "hierarchical", "rd"});
  EXPECT_GT(dgx.folded, 0);
}

// 1024 ranks, where the full simulation takes seconds (of alltoall's hierarchical plan, 47):
// allreduce's hierarchical and rd plans on dgx-rail-128.
TEST(SimulatorFast, AgreesWithTheFullSimulationAt1024Ranks) {
  const topology::Topology rail = corpusModel("dgx-rail-128");
  ASSERT_EQ(rail.ranks.size(), 1024u);
  const Sweep s = compareAll(rail, {1 << 20}, {"hierarchical", "rd"}, {Collective::AllReduce});
  EXPECT_GT(s.folded, 0);
}

// Plans on several lanes rotate each lane's chunks within the lane's part of the buffer, which
// folds exactly (one view); a torus whose rows span two hosts is alike only under shifts by
// whole rows, and folds with blocks of two hosts. Both within the tolerance of the full
// simulation.
TEST(SimulatorFast, FoldsLanesExactlyAndTorusRowsOfSeveralHosts) {
  const topology::Topology rail = corpusModel("dgx-rail-16");
  ASSERT_EQ(rail.ranks.size(), 128u);
  const Builder* ring = collectives::findBuilder(Collective::AllReduce, "ring");
  const Builder* torus = collectives::findBuilder(Collective::AllReduce, "torus");
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(torus, nullptr);
  struct Case {
    const Builder* builder;
    int lanes, torusX, torusY;
    bool exact;
    int period;
  };
  for (const Case& c : {Case{ring, 2, 0, 0, true, 8}, Case{ring, 4, 0, 0, true, 8},
                        Case{torus, 1, 16, 8, false, 16}, Case{torus, 2, 16, 8, false, 16}}) {
    for (uint64_t bytes : {uint64_t(32) << 10, uint64_t(2) << 20, uint64_t(64) << 20}) {
      CollArgs a = callOn(rail, Collective::AllReduce, bytes);
      a.lanes = c.lanes;
      if (c.torusX > 0) a.torusX = c.torusX, a.torusY = c.torusY;
      const std::string what = strprintf("%s lanes=%d %dx%d %llu B", c.builder->name, c.lanes,
                                         c.torusX, c.torusY, (unsigned long long)bytes);
      Folding folding;
      ASSERT_EQ(findFolding(a.nranks, [&](int r) { return c.builder->build(a, r); }, rail,
                            &folding),
                "")
          << what;
      EXPECT_EQ(folding.exact, c.exact) << what;
      EXPECT_EQ(folding.symmetry.period, c.period) << what;
      EXPECT_EQ(folding.views.size(), c.exact ? 1u : 4u) << what;
      const SimResult full = run(*c.builder, a, rail, false);
      const SimResult fast = run(*c.builder, a, rail, true);
      ASSERT_TRUE(full.ok && fast.ok) << what << ": " << full.message << fast.message;
      EXPECT_TRUE(fast.fast) << what << ": " << fast.fastRefusal;
      EXPECT_LE(std::abs(fast.time - full.time) / full.time, kTolerance)
          << what << ": fast " << fast.time * 1e6 << " us, full " << full.time * 1e6 << " us";
    }
  }
  // Recursive halving is alike to its sizes under the shift of two blocks of 8 nodes, which is
  // an xor: its partners' halves mirror, which no view stands for, so it runs in full.
  const Builder* rhd = collectives::findBuilder(Collective::AllReduce, "rhd");
  ASSERT_NE(rhd, nullptr);
  const CollArgs a = callOn(rail, Collective::AllReduce, 64 << 20);
  const SimResult fast = run(*rhd, a, rail, true);
  EXPECT_FALSE(fast.fast);
  EXPECT_EQ(fast.time, run(*rhd, a, rail, false).time);
}

// A topology whose hosts differ, or a plan that is not symmetric (a tree has one root): the
// full simulation runs and the result says why.
TEST(SimulatorFast, FallsBackToTheFullSimulationAndSaysWhy) {
  topology::Topology topo = uniformTopology({4, 4});
  const Builder* ring = collectives::findBuilder(Collective::AllReduce, "ring");
  const Builder* tree = collectives::findBuilder(Collective::AllReduce, "tree");
  ASSERT_NE(ring, nullptr);
  ASSERT_NE(tree, nullptr);
  const CollArgs a = callOn(topo, Collective::AllReduce, 1 << 20);
  const SimResult treeFast = run(*tree, a, topo, true);
  EXPECT_FALSE(treeFast.fast);
  EXPECT_EQ(treeFast.fastRefusal,
            "the plans differ between hosts beyond a shift or an xor of the hosts");
  EXPECT_EQ(treeFast.time, run(*tree, a, topo, false).time);
  EXPECT_TRUE(run(*ring, a, topo, true).fast);
  // Host 2's network link at half speed.
  for (topology::Link& l : topo.links)
    if (topo.nodes[size_t(l.from)].host == 2 && topo.nodes[size_t(l.to)].host < 0)
      l.bandwidth /= 2;
  const SimResult slow = run(*ring, a, topo, true);
  EXPECT_FALSE(slow.fast);
  EXPECT_EQ(slow.fastRefusal, "host 2 differs from host 0");
  EXPECT_EQ(slow.time, run(*ring, a, topo, false).time);
  // Part of the topology's ranks.
  const topology::Topology one = uniformTopology({1, 8});
  EXPECT_EQ(run(*ring, callOn(one, Collective::AllReduce, 1 << 20), one, true).fastRefusal,
            "one host: nothing to fold");
}

// The figure of docs/SIMULATOR.md "The fast path": every builder that folds, at 8192 ranks on
// dgx-rail-1024, in under a second per size. Logged: wall times are not asserted.
TEST(SimulatorFast, PredictsPlansOf8192RanksOnDgxRail1024) {
  const topology::Topology rail = corpusModel("dgx-rail-1024", /*huge=*/true);
  ASSERT_EQ(rail.ranks.size(), 8192u);
  for (const char* algo : {"ring", "hierarchical", "torus"}) {
    const Builder* b = collectives::findBuilder(Collective::AllReduce, algo);
    ASSERT_NE(b, nullptr);
    const CollArgs a = callOn(rail, Collective::AllReduce, uint64_t(1) << 30);
    const auto start = std::chrono::steady_clock::now();
    const SimResult r = run(*b, a, rail, true);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(r.ok) << r.message;
    EXPECT_TRUE(r.fast) << algo << ": " << r.fastRefusal;
    printf("%s allreduce of 1 GiB, 8192 ranks: %.1f us predicted in %.3f s\n", algo,
           r.time * 1e6, wall);
  }
}

}  // namespace
}  // namespace loom::tuner

namespace loom::tuner {
namespace {

// Models of 2 to 64 ranks for the tuner's tests, with the factor between the sizes of a sweep
// from 8 B to 64 MiB.
struct TunerModel {
  topology::Topology topo;
  uint64_t factor;
};
std::vector<TunerModel> tunerModels() {
  topology::Topology cores = uniformTopology({4, 4});
  for (topology::Node& n : cores.nodes)
    if (n.kind == topology::NodeKind::Host) n.cpu = {.cores = 2, .stepOverhead = 1e-6};
  return {
      {uniformTopology({2, 1}), 8},          {uniformTopology({1, 4}), 8},
      {uniformTopology({2, 4}), 8},          {cores, 8},
      {fatTreeOf("fattree-8x2", 8, 2, 2), 8}, {uniformTopology({8, 2}), 8},
      {uniformTopology({16, 4}), 64},
  };
}

// Whether a sweep of `ranks` ranks covers the collective: at 64 ranks, where the full
// simulation takes long, the two busiest only.
bool sweeps(size_t ranks, Collective coll) {
  return ranks <= 16 || coll == Collective::AllReduce || coll == Collective::AllGather;
}

// The tuner with the fast path decides as with the full simulation (it simulates the
// candidates the fast path puts within kFastWindow of the fastest again in full): every tabled
// collective, sizes 8 B to 64 MiB, on models of 2 to 64 ranks (below kFoldRanks the tuner
// simulates in full either way; the three models of 16 ranks and the one of 64 fold).
TEST(TunerFast, ChoosesAsTheFullSimulationDoes) {
  int decisions = 0;
  for (const TunerModel& m : tunerModels()) {
    TunerConfig fast, full;
    fast.sim.fast = true;
    full.sim.fast = false;
    Tuner withFast(m.topo, fast), withFull(m.topo, full);
    const CollArgs base = callOn(m.topo, Collective::AllReduce, 8);
    for (Collective coll : tabledCollectives()) {
      if (!sweeps(m.topo.ranks.size(), coll)) continue;
      for (uint64_t bytes = 8; bytes <= (64 << 20); bytes *= m.factor) {
        const std::vector<TableRow> a = decisionTable(withFast, base, {coll}, bytes, bytes);
        const std::vector<TableRow> b = decisionTable(withFull, base, {coll}, bytes, bytes);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(describe(a[i].decision.choice), describe(b[i].decision.choice))
              << m.topo.name << " " << m.topo.ranks.size() << " ranks "
              << collectives::collectiveName(coll) << " " << bytes << " B";
          ++decisions;
        }
      }
    }
  }
  printf("%d decisions compared\n", decisions);
}

void expectSameCandidate(const Candidate& x, const Candidate& y, const std::string& what) {
  EXPECT_EQ(describe(x), describe(y)) << what;
  EXPECT_EQ(x.time, y.time) << what << " " << describe(x);
}

// decide() simulates the candidates in order of their lower bounds and stops where none left
// can change the decision: it decides exactly as simulating every candidate does (choice, the
// choice for mapped buffers, their predicted times), and no candidate's bound is
// above its predicted time, with the fast path or without. The tuner's models, one whose
// network links are shaped (a burst takes off the call's time all but its busiest link's), and
// one host of 4 ranks on 2 cores where reading a peer's buffer costs more unless it is mapped
// (whenMapped).
TEST(TunerBound, DecidesAsSimulatingEveryCandidateDoes) {
  std::vector<TunerModel> models = tunerModels();
  models.push_back({uniformTopology({.hosts = 2, .ranksPerHost = 2, .netBandwidth = 1e9 / 8,
                                     .netLatency = 50e-6, .netBurstBytes = 18000}),
                    8});
  topology::Topology peerReads = uniformTopology({1, 4});
  topology::HostCpu& cpu = peerReads.nodes[size_t(peerReads.hostNodes()[0])].cpu;
  cpu = {2, 8e9, 1e-7};
  cpu.peerReadCopies = 3;  // reading an unmapped peer's buffer costs more
  cpu.singleCopyOverhead = 2e-6;
  cpu.streamingCopies = 0.67;
  models.push_back({peerReads, 8});
  int mapped = 0;
  int decisions = 0, bounds = 0, tight = 0;
  for (const TunerModel& m : models) {
    for (bool fastPath : {true, false}) {
      TunerConfig config;
      config.sim.fast = fastPath;
      config.sim.singleCopyBytes = 64 << 10;  // the shm transport's single-copy messages
      Tuner searched(m.topo, config), every(m.topo, config);
      for (Collective coll : tabledCollectives()) {
        if (!sweeps(m.topo.ranks.size(), coll) || (!fastPath && m.topo.ranks.size() > 8))
          continue;
        for (uint64_t bytes = 8; bytes <= (64 << 20); bytes *= m.factor) {
          CollArgs a = callOn(m.topo, coll, bytes);
          a.sharedBytes = 1 << 20;  // the arena, which the peer builders need on one host
          const std::string what = m.topo.name + (fastPath ? " fast " : " full ") +
                                   collectives::collectiveName(coll) + " " +
                                   std::to_string(bytes) + " B";
          Decision d, all;
          ASSERT_TRUE(searched.decide(a, &d).isOk()) << what;
          const std::vector<Candidate> times = every.candidates(a);
          ASSERT_TRUE(every.decide(a, &all).isOk()) << what;
          ASSERT_EQ(all.source, Source::Model) << what;
          EXPECT_EQ(d.source, Source::Model) << what;
          expectSameCandidate(d.choice, all.choice, what + " choice");
          expectSameCandidate(d.whenMapped, all.whenMapped, what + " when mapped");
          ++decisions;
          mapped += d.whenMapped.builder != nullptr;
          for (const Candidate& c : times) {
            const double bound = searched.lowerBound(a, *c.builder, c.params);
            const double fastTime = searched.predict(a, *c.builder, c.params);
            EXPECT_GE(bound, 0) << what << " " << describe(c);
            EXPECT_LE(bound, c.time) << what << " " << describe(c);
            EXPECT_LE(bound, fastTime) << what << " " << describe(c);
            ++bounds;
            tight += bound >= 0.9 * c.time;
          }
        }
      }
    }
  }
  printf("%d decisions compared (%d with a choice for mapped buffers), %d bounds checked, %d "
         "within 10%% of the time\n",
         decisions, mapped, bounds, tight);
  EXPECT_GT(mapped, 0);
  EXPECT_GT(tight, bounds / 4);  // a bound of 0 would hold everywhere and prune nothing
}

}  // namespace
}  // namespace loom::tuner
