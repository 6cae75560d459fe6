// What a new size bucket's decision costs the tuner (docs/TUNING.md "Decision cost"): the model
// simulates every candidate of the bucket once, then the decision is cached. For each model and
// collective, every power-of-two bucket from 8 B to 1 GiB is decided once by a fresh tuner:
// by decide() (candidates in order of their lower bounds), by simulating every candidate
// (Tuner::candidates), and by decide() without the simulator's fast path (LOOM_SIM_FAST=0). The
// CPU time per decision is printed (mean and worst), with how many decisions differ: decide()'s
// from every candidate's (choice, whenMapped and their times), and the fast path's
// choice from the full simulation's. At 1024 ranks five buckets (8 B to 128 MiB) of allreduce
// are decided by decide(), each printed (--full-1024: every collective, and the others too).
//
//   loom_bench_tuner [--full-1024] [--only MODEL]   (the full simulation at 1024 ranks takes
//       over a minute a bucket: only with the flag; --only: the models whose name contains MODEL)
#include <ctime>
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

// The deciding thread's CPU time, in ms: what a decision costs, which on a quiet machine is its
// wall time, and which builds running beside it on a loaded one do not inflate.
double threadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

struct Timing {
  double mean = 0, worst = 0;  // ms per new bucket
  std::vector<double> each;   // ms per bucket, in order
  std::vector<Decision> decisions;
};

// `exhaustive`: every candidate simulated (Tuner::candidates, which caches the decision) instead
// of decide()'s search in order of the candidates' bounds.
Timing decideAll(const loom::topology::Topology& topo, Collective coll, bool fast,
                 const std::vector<uint64_t>& sizes, bool exhaustive = false) {
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
    const double start = threadCpuMs();
    if (exhaustive) tuner.candidates(a);
    if (!tuner.decide(a, &d).isOk()) continue;
    const double ms = threadCpuMs() - start;
    t.mean += ms / double(sizes.size());
    t.worst = std::max(t.worst, ms);
    t.each.push_back(ms);
    t.decisions.push_back(d);
  }
  return t;
}

bool same(const loom::tuner::Candidate& x, const loom::tuner::Candidate& y) {
  return x.builder == y.builder && x.params == y.params && x.time == y.time;
}

// Decisions whose choice differs; with `whole`, whose choice or whenMapped does, or
// any of their predicted times.
int differing(const Timing& a, const Timing& b, bool whole) {
  int n = 0;
  for (size_t i = 0; i < std::min(a.decisions.size(), b.decisions.size()); ++i) {
    const Decision &x = a.decisions[i], &y = b.decisions[i];
    n += whole ? !same(x.choice, y.choice) || !same(x.whenMapped, y.whenMapped)
               : x.choice.builder != y.choice.builder || !(x.choice.params == y.choice.params);
  }
  return n;
}

loom::topology::Topology corpus(const std::string& name) {
  for (auto& m : loom::topology::corpusModels(false))
    if (m.name == name) return m;
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  bool full1024 = false;
  std::string only;  // --only SUBSTR: the models whose name contains it
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--full-1024") == 0) {
      full1024 = true;
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      fprintf(stderr, "usage: loom_bench_tuner [--full-1024] [--only MODEL-SUBSTRING]\n");
      return 2;
    }
  }
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
  printf("# ms of CPU per new size bucket's decision, buckets 8 B .. 1 GiB (1024 ranks: five, "
         "%s)\n# decide: in order of the candidates' bounds; all: every candidate simulated; "
         "full: LOOM_SIM_FAST=0\n",
         full1024 ? "every collective, full too" : "allreduce, fast path only");
  printf("# %-26s %-14s %5s %9s %9s %9s %9s %9s %9s %s\n", "model", "collective", "ranks",
         "decide", "(worst)", "all", "(worst)", "full", "(worst)",
         "decisions that differ: decide vs all, fast vs full");
  for (const Model& m : models) {
    if (m.name.find(only) == std::string::npos) continue;
    const int n = int(m.topo.ranks.size());
    // At 1024 ranks every sixth bucket: the candidates the fast path does not fold (tree,
    // rhd) take the full simulation's seconds.
    std::vector<uint64_t> sizes = all;
    if (n >= 1024) sizes = {8, 512, 32 << 10, 2 << 20, 128 << 20};
    for (Collective coll : {Collective::AllReduce, Collective::AllGather,
                            Collective::ReduceScatter, Collective::AlltoAll}) {
      const Timing fast = decideAll(m.topo, coll, true, sizes);
      if (n >= 1024) {
        std::string each;
        for (size_t i = 0; i < fast.each.size(); ++i)
          each += loom::strprintf(" %llu B: %.0f ms", (unsigned long long)sizes[i], fast.each[i]);
        printf("  %-26s %-14s %5d %9.3f %9.3f %9s %9s %9s %9s -%s\n", m.name.c_str(),
               loom::collectives::collectiveName(coll), n, fast.mean, fast.worst, "-", "-", "-",
               "-", each.c_str());
        if (!full1024) break;  // allreduce only
      }
      const Timing all = decideAll(m.topo, coll, true, sizes, /*exhaustive=*/true);
      const Timing full = decideAll(m.topo, coll, false, sizes);
      printf("  %-26s %-14s %5d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %d of %zu, %d of %zu\n",
             m.name.c_str(), loom::collectives::collectiveName(coll), n, fast.mean, fast.worst,
             all.mean, all.worst, full.mean, full.worst, differing(fast, all, true),
             all.decisions.size(), differing(fast, full, false), full.decisions.size());
      fflush(stdout);
    }
  }
  return 0;
}
