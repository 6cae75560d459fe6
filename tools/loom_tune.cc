// loom-tune: the tuner's decision table for a topology (docs/TUNING.md). For each collective
// and size: the algorithm and parameters a communicator on that topology would run, its
// predicted time and busbw, the fastest other algorithm and its margin, and where the choice
// came from (the cost model, a LOOM_TUNE rule, the built-in table).
#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/params.h"
#include "comm/options.h"
#include "toolkit/names.h"
#include "toolkit/units.h"
#include "tools/model_args.h"
#include "tuner/tuner.h"

namespace {

using loom::collectives::CollArgs;
using loom::collectives::Collective;
namespace toolkit = loom::toolkit;
namespace tuner = loom::tuner;

const char kUsage[] =
    "usage: loom-tune (--topo FILE | --uniform HxR) [options]\n"
    "  --topo FILE         a JSON model, or the name of a corpus model built in code\n"
    "                      (e.g. dgx-rail-1024)\n"
    "  --uniform HxR       H hosts of R ranks (tuner/uniform_topology.h)\n"
    "  --tune RULES        LOOM_TUNE rules to apply first (\"@FILE\" reads a file; default:\n"
    "                      the LOOM_TUNE environment variable)\n"
    "  --table             the built-in table only, no cost model (LOOM_TUNER=table)\n"
    "  --collective NAME   only this one: allreduce, allgather, reducescatter, alltoall,\n"
    "                      broadcast, reduce, gather, scatter (default: all)\n"
    "  --sizes MIN:MAX:F   sizes in bytes as nccl-tests counts them (default 8:1G:2)\n"
    "  --ranks N           the first N ranks of the topology (default: all)\n"
    "  --elem-size B       bytes per element (default 4)\n"
    "Parameters a communicator fixes (LOOM_LANES, LOOM_TORUS_DIMS, LOOM_ALLTOALL_FANIN) are\n"
    "read from the environment, as loom would.\n";

struct Args {
  loom::tools::ModelChoice model;
  std::string tune;
  bool tableOnly = false;
  std::vector<Collective> collectives = tuner::tabledCollectives();
  size_t minBytes = 8, maxBytes = size_t(1) << 30;
  int factor = 2;
  int ranks = 0;
  uint32_t elemSize = 4;
};

bool fail(const std::string& message) {
  fprintf(stderr, "loom-tune: %s\n%s", message.c_str(), kUsage);
  return false;
}

bool parseArgs(int argc, char** argv, Args* a) {
  enum { kTopo = 1, kUniform, kTune, kTable, kColl, kSizes, kRanks, kElem, kHelp };
  static const option kOptions[] = {{"topo", required_argument, nullptr, kTopo},
                                    {"uniform", required_argument, nullptr, kUniform},
                                    {"tune", required_argument, nullptr, kTune},
                                    {"table", no_argument, nullptr, kTable},
                                    {"collective", required_argument, nullptr, kColl},
                                    {"sizes", required_argument, nullptr, kSizes},
                                    {"ranks", required_argument, nullptr, kRanks},
                                    {"elem-size", required_argument, nullptr, kElem},
                                    {"help", no_argument, nullptr, kHelp},
                                    {nullptr, 0, nullptr, 0}};
  a->tune = loom::params::getString("LOOM_TUNE");
  for (int opt; (opt = getopt_long(argc, argv, "", kOptions, nullptr)) != -1;) {
    const std::string v = optarg ? optarg : "";
    switch (opt) {
      case kTopo:
        a->model.topoFile = v;
        break;
      case kUniform:
        if (std::string error; !loom::tools::chooseUniform(v, &a->model, &error))
          return fail(error);
        break;
      case kTune:
        a->tune = v;
        break;
      case kTable:
        a->tableOnly = true;
        break;
      case kColl: {
        auto c = toolkit::parseCollective(v);
        if (!c || !toolkit::hasPlanBuilders(*c))
          return fail("unknown collective '" + v + "'");
        a->collectives = {*c};
        break;
      }
      case kSizes:
        if (!loom::tools::parseSizeSweep(v, &a->minBytes, &a->maxBytes, &a->factor))
          return fail("--sizes wants MIN:MAX:FACTOR, not '" + v + "'");
        break;
      case kRanks:
        a->ranks = atoi(optarg);
        break;
      case kElem:
        a->elemSize = uint32_t(atoi(optarg));
        break;
      case kHelp:
        printf("%s", kUsage);
        exit(0);
      default:
        return fail("unknown option");
    }
  }
  if (optind < argc) return fail(std::string("unexpected argument '") + argv[optind] + "'");
  if (std::string error = loom::tools::modelChoiceError(a->model); !error.empty())
    return fail(error);
  if (a->elemSize == 0 || a->elemSize > 8) return fail("--elem-size must be 1 to 8");
  return true;
}

// The call a communicator on `topo` would make: its host layout, fixed parameters, arena.
CollArgs baseCall(const loom::topology::Topology& topo, uint32_t elemSize,
                  const tuner::AlgoParams& fixed) {
  CollArgs a;
  a.settings() = tuner::callSettings(fixed, loom::communicatorTuning().call, topo);
  a.nranks = int(topo.ranks.size());
  a.hostOf = loom::tools::hostsByFirstAppearance(topo);
  a.elemSize = elemSize;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parseArgs(argc, argv, &a)) return 2;
  loom::topology::Topology topo;
  std::string error;
  if (!loom::tools::loadModel(a.model, a.ranks, &topo, &error)) {
    fprintf(stderr, "loom-tune: %s\n", error.c_str());
    return 1;
  }
  tuner::TunerConfig config;
  loom::Status st = loom::readTuning(&config);
  if (st.isOk()) st = tuner::TuneTable::fromSetting(a.tune, &config.rules);  // --tune
  if (!st.isOk()) {
    fprintf(stderr, "loom-tune: %s\n", st.message().c_str());
    return 2;
  }
  config.useModel = config.useModel && !a.tableOnly;
  const CollArgs base = baseCall(topo, a.elemSize, config.fixed);
  const size_t ruleCount = config.rules.rules().size();
  tuner::Tuner tuner(topo, std::move(config));

  const int nranks = base.nranks;
  printf("# loom-tune: %s, %d ranks on %d hosts, %u-byte elements; %s; %zu LOOM_TUNE rule(s)\n",
         topo.name.c_str(), nranks, tuner::hostCount(base), a.elemSize,
         tuner.modelOff().empty() ? "cost model" : ("model off: " + tuner.modelOff()).c_str(),
         ruleCount);
  printf("# from: model, rule N (LOOM_TUNE), built-in N (the built-in table's rule N)\n");
  printf(
      "# runner-up: the fastest other algorithm; margin: its predicted time against the "
      "choice's\n#   (negative: a rule's choice is predicted slower than the model's)\n");
  printf("#%-13s %12s  %-24s %-12s %11s %11s  %-24s %8s\n", "collective", "size(B)", "choice",
         "from", "time(us)", "busbw(GB/s)", "runner-up", "margin");
  for (Collective pc : a.collectives) {
    CollArgs call = base;
    call.coll = pc;
    const double busFactor = toolkit::busBwFactor(pc, nranks);
    uint64_t previous = 0;
    for (size_t size : toolkit::sizeSweep(a.minBytes, a.maxBytes, a.factor, 0)) {
      call.count = tuner::countForBytes(call, size);
      const uint64_t bytes = tuner::callBytes(call);
      if (bytes == previous) continue;  // below one element per rank: the same call again
      previous = bytes;
      // The model's view of this size first (decide() then finds its choice cached): the
      // choice's predicted time, and the fastest candidate of another algorithm.
      const std::vector<tuner::Candidate> ranked = tuner.candidates(call);
      tuner::Decision d;
      if (!tuner.decide(call, &d).isOk()) continue;
      double time = d.choice.time;
      if (d.source != tuner::Source::Model && !ranked.empty())
        time = tuner.predict(call, *d.choice.builder, d.choice.params);
      const tuner::Candidate* other = nullptr;
      for (const auto& c : ranked) {
        if (c.builder != d.choice.builder) {
          other = &c;
          break;
        }
      }
      std::string timeText = "-", busText = "-", margin = "-";
      if (time > 0) {
        timeText = loom::strprintf("%.2f", time * 1e6);
        busText = loom::strprintf("%.3f", double(bytes) / time / 1e9 * busFactor);
        if (other) margin = loom::strprintf("%+.1f%%", (other->time / time - 1) * 100);
      }
      printf("%-14s %12llu  %-24s %-12s %11s %11s  %-24s %8s\n",
             loom::collectives::collectiveName(call.coll), (unsigned long long)bytes,
             tuner::describe(d.choice).c_str(), tuner::sourceText(d).c_str(), timeText.c_str(),
             busText.c_str(), other ? tuner::describe(*other).c_str() : "-", margin.c_str());
    }
  }
  return 0;
}
