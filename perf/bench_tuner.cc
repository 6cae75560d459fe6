// What a new size bucket's decision costs the tuner (docs/TUNING.md "Decision cost"): the model
// simulates every candidate of the bucket once, then the decision is cached. For each model and
// collective, every power-of-two bucket from 8 B to 1 GiB is decided once by a fresh tuner, with
// the simulator's fast path (LOOM_SIM_FAST=1, the default) and without it, and the wall time per
// decision is printed (mean and worst), with how many decisions differ between the two. At 1024
// ranks five buckets (8 B to 128 MiB) of allreduce are decided, each printed.
//
//   loom_bench_tuner [--full-1024]   (the full simulation at 1024 ranks takes over a minute a
//                                     bucket: only with the flag)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/status.h"
#include "collectives/builders.h"
#include "topology/builders.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"

namespace {

using loom::collectives::CollArgs;
using loom::collectives::Collective;
using loom::tuner::Decision;
using loom::tuner::Tuner;

struct Timing {
  double mean = 0, worst = 0;  // ms per new bucket
  std::vector<double> each;   // ms per bucket, in order
  std::vector<Decision> decisions;
};

Timing decideAll(const loom::topology::Topology& topo, Collective coll, bool fast,
                 const std::vector<uint64_t>& sizes) {
  loom::tuner::TunerConfig config;
  config.sim.fast = fast;
  Tuner tuner(topo, config);
  CollArgs a;
  a.settings() = loom::tuner::callSettings({}, {}, topo);
  a.coll = coll;
  a.nranks = int(topo.ranks.size());
  a.elemSize = 4;
  for (const auto& r : topo.ranks) a.hostOf.push_back(r.host);
  Timing t;
  for (uint64_t bytes : sizes) {
    a.count = loom::tuner::countForBytes(a, bytes);
    Decision d;
    const auto start = std::chrono::steady_clock::now();
    if (!tuner.decide(a, &d).isOk()) continue;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    t.mean += ms / double(sizes.size());
    t.worst = std::max(t.worst, ms);
    t.each.push_back(ms);
    t.decisions.push_back(d);
  }
  return t;
}

int differing(const Timing& a, const Timing& b) {
  int n = 0;
  for (size_t i = 0; i < std::min(a.decisions.size(), b.decisions.size()); ++i)
    n += a.decisions[i].choice.builder != b.decisions[i].choice.builder ||
         !(a.decisions[i].choice.params == b.decisions[i].choice.params);
  return n;
}

loom::topology::Topology corpus(const std::string& name) {
  for (auto& m : loom::topology::corpusModels(false))
    if (m.name == name) return m;
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  const bool full1024 = argc > 1 && strcmp(argv[1], "--full-1024") == 0;
  std::vector<uint64_t> all;
  for (uint64_t b = 8; b <= (uint64_t(1) << 30); b *= 2) all.push_back(b);
  struct Model {
    std::string name;
    loom::topology::Topology topo;
  };
  std::vector<Model> models = {
      {"uniform 1x8", loom::tuner::uniformTopology({1, 8})},
      {"uniform 2x4", loom::tuner::uniformTopology({2, 4})},
      {"local-1host-2core-shm (4)", corpus("local-1host-2core-shm")},
      {"dgx-rail-128", corpus("dgx-rail-128")},
  };
  printf("# ms per new size bucket's decision, buckets 8 B .. 1 GiB (1024 ranks: five, %s)\n",
         full1024 ? "every collective, full too" : "allreduce, fast path only");
  printf("# %-26s %-14s %6s %10s %10s %10s %10s %s\n", "model", "collective", "ranks",
         "fast mean", "fast worst", "full mean", "full worst", "decisions that differ");
  for (const Model& m : models) {
    const int n = int(m.topo.ranks.size());
    // At 1024 ranks every sixth bucket: the candidates the fast path does not fold (tree,
    // rhd) take the full simulation's seconds.
    std::vector<uint64_t> sizes = all;
    if (n >= 1024) sizes = {8, 512, 32 << 10, 2 << 20, 128 << 20};
    const std::vector<uint64_t> fullSizes = n >= 1024 && !full1024 ? std::vector<uint64_t>{} : sizes;
    for (Collective coll : {Collective::AllReduce, Collective::AllGather,
                            Collective::ReduceScatter, Collective::AlltoAll}) {
      const Timing fast = decideAll(m.topo, coll, true, sizes);
      if (n >= 1024) {
        std::string each;
        for (size_t i = 0; i < fast.each.size(); ++i)
          each += loom::strprintf(" %llu B: %.0f ms", (unsigned long long)sizes[i], fast.each[i]);
        printf("  %-26s %-14s %6d %10.3f %10.3f %10s %10s -%s\n", m.name.c_str(),
               loom::collectives::collectiveName(coll), n, fast.mean, fast.worst, "-", "-",
               each.c_str());
        if (!full1024) break;  // allreduce only
      }
      if (fullSizes.empty()) continue;
      const Timing fastSome = fullSizes == sizes ? fast
                                                             : decideAll(m.topo, coll, true, fullSizes);
      const Timing full = decideAll(m.topo, coll, false, fullSizes);
      printf("  %-26s %-14s %6d %10.3f %10.3f %10.3f %10.3f %d of %zu\n", m.name.c_str(),
             loom::collectives::collectiveName(coll), n, fast.mean, fast.worst, full.mean,
             full.worst, differing(fastSome, full), full.decisions.size());
      fflush(stdout);
    }
  }
  return 0;
}
