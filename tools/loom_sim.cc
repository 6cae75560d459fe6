// loom-sim: simulated time and busbw of every algorithm of a collective, over a sweep of sizes,
// on a topology file or a uniform cluster (docs/SIMULATOR.md). Sizes, counts and busbw follow
// nccl-tests, through the toolkit's units, so the numbers read like loom-perf's.
#include <getopt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "comm/options.h"
#include "toolkit/names.h"
#include "toolkit/units.h"
#include "tools/model_args.h"
#include "topology/topology.h"
#include "tuner/simulator.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"

namespace {

using loom::collectives::Builder;
using loom::collectives::CollArgs;
using loom::collectives::Collective;
namespace toolkit = loom::toolkit;

const char kUsage[] =
    "usage: loom-sim (--topo FILE | --uniform HxR) [options]\n"
    "  --topo FILE         a JSON model, or the name of a corpus model built in code\n"
    "                      (topology/builders.h: dgx-rail-1024 has no file)\n"
    "  --collective NAME   allreduce (default), allgather, reducescatter, alltoall,\n"
    "                      broadcast, reduce, gather, scatter\n"
    "  --sizes MIN:MAX:F   sizes in bytes as nccl-tests counts them, from MIN to MAX times F\n"
    "                      (default 8:256M:4; K, M, G suffixes)\n"
    "  --algos A,B,...     only these builders (default: every builder of the collective)\n"
    "  --ranks N           the first N ranks of the topology (default: all)\n"
    "  --elem-size B       bytes per element (default 4)\n"
    "  --lanes L           lanes hint given to the builders (default 1)\n"
    "  --slices K          pipelining pieces per step (default 4; 1 = whole steps)\n"
    "  --mem-bw BYTES/s    local copy/reduce bandwidth (default 20e9)\n"
    "  --fast              the simulator's fast path where the call is symmetric (docs/\n"
    "                      SIMULATOR.md): each row then ends in fast, or full and why not\n"
    "  --no-tuner          do not ask the tuner (its candidates include every algorithm,\n"
    "                      ring too, which takes hours to simulate at thousands of ranks)\n"
    "  --intra-bw, --intra-lat, --net-bw, --net-lat   the --uniform links (bytes/s, s)\n"
    "  --net-burst BYTES   the --uniform host links' shaper burst (Link burstBytes)\n";

struct Args {
  loom::tools::ModelChoice model;
  Collective collective = Collective::AllReduce;
  size_t minBytes = 8, maxBytes = size_t(256) << 20;
  int factor = 4;
  std::vector<std::string> algos;
  int ranks = 0;
  int lanes = 1;
  bool useTuner = true;
  loom::tuner::SimOptions sim;
};

bool fail(const std::string& message) {
  fprintf(stderr, "loom-sim: %s\n%s", message.c_str(), kUsage);
  return false;
}

bool parseNumber(const char* text, double* out) {
  char* end = nullptr;
  *out = strtod(text, &end);
  return *end == 0 && end != text && *out >= 0;
}

bool parseArgs(int argc, char** argv, Args* a) {
  enum { kTopo = 1, kUniform, kColl, kSizes, kAlgos, kRanks, kElem, kLanes, kSlices, kMemBw,
         kIntraBw, kIntraLat, kNetBw, kNetLat, kNetBurst, kNoTuner, kFast, kHelp };
  static const option kOptions[] = {
      {"topo", required_argument, nullptr, kTopo},
      {"uniform", required_argument, nullptr, kUniform},
      {"collective", required_argument, nullptr, kColl},
      {"sizes", required_argument, nullptr, kSizes},
      {"algos", required_argument, nullptr, kAlgos},
      {"ranks", required_argument, nullptr, kRanks},
      {"elem-size", required_argument, nullptr, kElem},
      {"lanes", required_argument, nullptr, kLanes},
      {"slices", required_argument, nullptr, kSlices},
      {"mem-bw", required_argument, nullptr, kMemBw},
      {"intra-bw", required_argument, nullptr, kIntraBw},
      {"intra-lat", required_argument, nullptr, kIntraLat},
      {"net-bw", required_argument, nullptr, kNetBw},
      {"net-lat", required_argument, nullptr, kNetLat},
      {"net-burst", required_argument, nullptr, kNetBurst},
      {"no-tuner", no_argument, nullptr, kNoTuner},
      {"fast", no_argument, nullptr, kFast},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0}};
  loom::tuner::UniformCluster& u = a->model.uniform;
  double* uniformField[] = {&u.intraBandwidth, &u.intraLatency, &u.netBandwidth, &u.netLatency};
  for (int opt; (opt = getopt_long(argc, argv, "", kOptions, nullptr)) != -1;) {
    std::string v = optarg ? optarg : "";
    switch (opt) {
      case kTopo: a->model.topoFile = v; break;
      case kNoTuner: a->useTuner = false; break;
      case kFast: a->sim.fast = true; break;
      case kUniform:
        if (std::string error; !loom::tools::chooseUniform(v, &a->model, &error))
          return fail(error);
        break;
      case kColl: {
        auto c = toolkit::parseCollective(v);
        if (!c || !toolkit::hasPlanBuilders(*c))
          return fail("unknown collective '" + v + "'");
        a->collective = *c;
        break;
      }
      case kSizes:
        if (!loom::tools::parseSizeSweep(v, &a->minBytes, &a->maxBytes, &a->factor))
          return fail("--sizes wants MIN:MAX:FACTOR, not '" + v + "'");
        break;
      case kAlgos:
        for (size_t p = 0; p <= v.size();) {
          size_t q = std::min(v.find(',', p), v.size());
          if (q > p) a->algos.push_back(v.substr(p, q - p));
          p = q + 1;
        }
        break;
      case kRanks: a->ranks = atoi(optarg); break;
      case kElem: a->sim.elemSize = uint32_t(atoi(optarg)); break;
      case kLanes: a->lanes = atoi(optarg); break;
      case kSlices: a->sim.slices = atoi(optarg); break;
      case kMemBw:
        if (!parseNumber(optarg, &a->sim.memBandwidth)) return fail("bad --mem-bw '" + v + "'");
        break;
      case kIntraBw: case kIntraLat: case kNetBw: case kNetLat:
        if (!parseNumber(optarg, uniformField[opt - kIntraBw]))
          return fail(std::string("bad --") + kOptions[opt - 1].name + " '" + v + "'");
        break;
      case kNetBurst: {
        std::string error;
        if (!loom::tools::parseNetBurst(v, &a->model.uniform, &error)) return fail(error);
        break;
      }
      case kHelp: printf("%s", kUsage); exit(0);
      default: return fail("unknown option");
    }
  }
  if (optind < argc) return fail(std::string("unexpected argument '") + argv[optind] + "'");
  if (std::string error = loom::tools::modelChoiceError(a->model); !error.empty())
    return fail(error);
  if (a->sim.elemSize == 0 || a->lanes < 1 || a->sim.slices < 1)
    return fail("--elem-size, --lanes and --slices must be positive");
  return true;
}

bool wanted(const Args& a, const Builder& b) {
  if (a.algos.empty()) return true;
  for (const auto& name : a.algos)
    if (name == b.name) return true;
  return false;
}

// The call every row simulates, but its count: what a communicator on this model gives its
// calls (the incast lead, the shared arena of one host's ranks, LOOM_* parameters), but the
// lanes hint of --lanes.
CollArgs callOnModel(const Args& a, const loom::topology::Topology& topo) {
  CollArgs args;
  args.settings() = loom::tuner::callSettings({}, loom::communicatorTuning().call, topo);
  args.coll = a.collective;
  args.nranks = int(topo.ranks.size());
  args.lanes = a.lanes;
  args.elemSize = a.sim.elemSize;
  args.hostOf = loom::tools::hostsByFirstAppearance(topo);
  return args;
}

void printHeader(const Args& a, const loom::topology::Topology& topo, const CollArgs& args) {
  printf("# loom-sim: %s, %d ranks on %d hosts, %s, %u-byte elements, %d lane(s), %d slice(s)\n",
         topo.name.c_str(), args.nranks, loom::tuner::hostCount(args),
         loom::collectives::collectiveName(args.coll), a.sim.elemSize, a.lanes, a.sim.slices);
  printf("# * fastest at that size; t = the tuner's choice (loom-tune shows its parameters)%s\n",
         a.useTuner ? "" : " -- not asked (--no-tuner)");
  printf("# sim(s): wall seconds this machine took to simulate the row\n");
  printf("#%11s %12s  %-18s %12s %12s %12s %9s\n", "size(B)", "count", "algorithm", "time(us)",
         "algbw(GB/s)", "busbw(GB/s)", "sim(s)");
}

// One builder's simulated call of one size.
struct Row {
  const Builder* builder;
  std::string refusal;
  double time = 0;
  double wall = 0;  // seconds this machine took to simulate it
  std::string path = {};  // with --fast: "fast", or "full (why not)"
};

Row simulateRow(const Builder* b, const CollArgs& args, const loom::topology::Topology& topo,
                const loom::tuner::SimOptions& sim) {
  Row row{b, b->refuse ? b->refuse(args) : std::string()};
  if (!row.refusal.empty()) return row;
  const auto start = std::chrono::steady_clock::now();
  auto result = loom::tuner::simulateBuilt(
      args.nranks, [&](int r) { return b->build(args, r); }, topo, sim);
  row.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (sim.fast) row.path = result.fast ? "fast" : "full (" + result.fastRefusal + ")";
  if (result.ok) {
    row.time = result.time;
  } else {
    row.refusal = "simulation failed: " + result.message;
  }
  return row;
}

// One size's rows: the fastest marked *, the tuner's choice t.
void printRows(const std::vector<Row>& rows, size_t bytes, size_t count, double busBwFactor,
               const Builder* chosen) {
  const Row* best = nullptr;
  for (const Row& row : rows)
    if (row.refusal.empty() && (!best || row.time < best->time)) best = &row;
  for (const Row& row : rows) {
    printf("%12zu %12zu  %-15s %c%c ", bytes, count, row.builder->name,
           &row == best ? '*' : ' ', row.builder == chosen ? 't' : ' ');
    if (!row.refusal.empty()) {
      printf("skipped: %s\n", row.refusal.c_str());
      continue;
    }
    const double algbw = row.time > 0 ? double(bytes) / row.time / 1e9 : 0;
    printf("%12.2f %12.3f %12.3f %9.2f %s\n", row.time * 1e6, algbw, algbw * busBwFactor,
           row.wall, row.path.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.sim = loom::communicatorTuning().sim;  // the options below may change it
  const bool tunerFast = a.sim.fast;        // the tuner's, as a communicator's (LOOM_SIM_FAST)
  a.sim.fast = false;                       // the rows: the full simulation unless --fast
  if (!parseArgs(argc, argv, &a)) return 2;
  loom::topology::Topology topo;
  std::string error;
  if (!loom::tools::loadModel(a.model, a.ranks, &topo, &error)) {
    fprintf(stderr, "loom-sim: %s\n", error.c_str());
    return 1;
  }
  CollArgs args = callOnModel(a, topo);
  std::vector<const Builder*> builders;
  for (const Builder& b : loom::collectives::allBuilders())
    if (b.coll == args.coll && b.build && wanted(a, b)) builders.push_back(&b);
  if (builders.empty()) {
    fprintf(stderr, "loom-sim: no builder of %s matches --algos\n",
            loom::collectives::collectiveName(args.coll));
    return 2;
  }
  printHeader(a, topo, args);
  const double factor = toolkit::busBwFactor(a.collective, args.nranks);
  loom::tuner::TunerConfig tunerConfig;
  tunerConfig.sim = a.sim;
  tunerConfig.sim.fast = tunerFast || a.sim.fast;
  loom::tuner::Tuner tuner(topo, std::move(tunerConfig));
  for (size_t size : toolkit::sizeSweep(a.minBytes, a.maxBytes, a.factor, 0)) {
    const toolkit::CollSizes sizes =
        toolkit::collSizes(a.collective, size, a.sim.elemSize, args.nranks);
    args.count = sizes.paramCount;
    const size_t bytes = sizes.bytes(a.sim.elemSize);
    loom::tuner::Decision decision;
    const Builder* chosen =
        a.useTuner && tuner.decide(args, &decision).isOk() ? decision.choice.builder : nullptr;
    std::vector<Row> rows;
    for (const Builder* b : builders) rows.push_back(simulateRow(b, args, topo, a.sim));
    printRows(rows, bytes, sizes.paramCount, factor, chosen);
    // The rows above run each algorithm as --lanes asks; the tuner also tries other lane
    // counts and torus shapes, so its full choice is shown.
    if (chosen)
      printf("%12zu # the tuner's choice: %s, %.2f us\n", bytes,
             loom::tuner::describe(decision.choice).c_str(), decision.choice.time * 1e6);
  }
  return 0;
}
