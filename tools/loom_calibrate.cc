// loom-calibrate: fits a topology model's figures to loom-perf measurements and reports how well
// the simulator then predicts them (docs/CALIBRATION.md).
//
//   loom-perf all_reduce -b 8 -e 64M -f 4 -N 4 -A ring --json ring.json   # one per algorithm
//   loom-calibrate --uniform 1x4 --cores 2 --out model.json --markdown report.md *.json
#include <getopt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "comm/options.h"
#include "toolkit/json.h"
#include "toolkit/names.h"
#include "toolkit/units.h"
#include "tools/model_args.h"
#include "topology/topology.h"
#include "tuner/calibrate.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"

namespace {

namespace toolkit = loom::toolkit;
namespace topology = loom::topology;
using loom::Status;
using loom::strprintf;
using loom::tuner::MeasuredPoint;

const char kUsage[] =
    "usage: loom-calibrate (--topo FILE | --uniform HxR) [options] PERF.json...\n"
    "  PERF.json           loom-perf --json output, one forced algorithm per file (-A NAME);\n"
    "                      rows of count 0 are left out, and the rows of repeated runs\n"
    "                      become their median; a file's LOOM_LANES (its \"env\") sets the\n"
    "                      lanes its plans are simulated on, and each lane count is a\n"
    "                      rival choice of its own. Runs without -A (algorithm \"auto\";\n"
    "                      \"autotune\" with LOOM_AUTOTUNE=1) are not fitted: their times\n"
    "                      are set beside the best forced algorithm measured\n"
    "  --cores N           cores the ranks of each host share (default: the model's)\n"
    "  --machine NAME      every host runs on one machine, NAME (network namespaces of one\n"
    "                      box): --cores and --cache are then the machine's, which all the\n"
    "                      hosts' ranks share\n"
    "  --cache BYTES       last-level cache the ranks of each host share (K, M, G suffixes;\n"
    "                      default: the model's); its bandwidth is fitted\n"
    "  --private-cache BYTES  each core's own cache (L2; default: the model's); what\n"
    "                      reading data another core just wrote costs is fitted\n"
    "  --net-burst BYTES   the --uniform host links pass this many bytes at once after\n"
    "                      idling (a tc htb/tbf burst; topology Link burstBytes)\n"
    "  --slices K          simulator pipelining pieces per step (default 4)\n"
    "  --max-evals N       simulations of the whole set the fit may run (default 3000)\n"
    "  --no-fit            only validate the model as it is\n"
    "  --name NAME         the fitted model's name (default: the base's + \"-calibrated\")\n"
    "  --out FILE          write the fitted model (JSON, docs/TOPOLOGY.md)\n"
    "  --markdown FILE     write the report as Markdown too (it always goes to stdout)\n";

struct Args {
  loom::tools::ModelChoice model;
  std::string name, outFile, markdownFile, machine;
  int cores = 0;
  uint64_t cacheBytes = 0, privateCacheBytes = 0;
  loom::tuner::CalibrationOptions options;
  std::vector<std::string> inputs;
};

bool fail(const std::string& message) {
  fprintf(stderr, "loom-calibrate: %s\n%s", message.c_str(), kUsage);
  return false;
}

bool parseCount(const char* text, int lo, int* out) {
  char* end = nullptr;
  const long v = strtol(text, &end, 10);
  if (end == text || *end || v < lo || v > 1 << 20) return false;
  *out = int(v);
  return true;
}

enum Option {
  kTopo = 1,
  kUniform,
  kCores,
  kMachine,
  kCache,
  kPrivateCache,
  kSlices,
  kMaxEvals,
  kNoFit,
  kName,
  kOut,
  kMarkdown,
  kNetBurst,
  kHelp
};
const option kOptions[] = {{"topo", required_argument, nullptr, kTopo},
                           {"uniform", required_argument, nullptr, kUniform},
                           {"cores", required_argument, nullptr, kCores},
                           {"machine", required_argument, nullptr, kMachine},
                           {"cache", required_argument, nullptr, kCache},
                           {"private-cache", required_argument, nullptr, kPrivateCache},
                           {"slices", required_argument, nullptr, kSlices},
                           {"max-evals", required_argument, nullptr, kMaxEvals},
                           {"no-fit", no_argument, nullptr, kNoFit},
                           {"name", required_argument, nullptr, kName},
                           {"out", required_argument, nullptr, kOut},
                           {"markdown", required_argument, nullptr, kMarkdown},
                           {"net-burst", required_argument, nullptr, kNetBurst},
                           {"help", no_argument, nullptr, kHelp},
                           {nullptr, 0, nullptr, 0}};

// Applies one option (its value v) to *a; false, after saying why, on a bad value.
bool applyOption(int opt, const std::string& v, Args* a) {
  switch (opt) {
    case kTopo:
      a->model.topoFile = v;
      break;
    case kUniform:
      if (std::string error; !loom::tools::chooseUniform(v, &a->model, &error))
        return fail(error);
      break;
    case kCores:
      if (!parseCount(v.c_str(), 1, &a->cores))
        return fail("--cores wants a count >= 1, not '" + v + "'");
      break;
    case kMachine:
      if (v.empty()) return fail("--machine wants the machine's name");
      a->machine = v;
      break;
    case kCache:
    case kPrivateCache: {
      const char* name = opt == kCache ? "--cache" : "--private-cache";
      auto bytes = toolkit::parseSize(v);
      if (!bytes || *bytes == 0)
        return fail(std::string(name) + " wants a size such as 2M, not '" + v + "'");
      (opt == kCache ? a->cacheBytes : a->privateCacheBytes) = *bytes;
      break;
    }
    case kSlices:
      if (!parseCount(v.c_str(), 1, &a->options.sim.slices) ||
          a->options.sim.slices > loom::tuner::SimOptions::kMaxSlices)
        return fail(strprintf("--slices wants 1..%d, not '%s'",
                              loom::tuner::SimOptions::kMaxSlices, v.c_str()));
      break;
    case kMaxEvals:
      if (!parseCount(v.c_str(), 1, &a->options.maxEvaluations))
        return fail("--max-evals wants a count >= 1, not '" + v + "'");
      break;
    case kNoFit:
      a->options.fit = false;
      break;
    case kName:
      a->name = v;
      break;
    case kOut:
      a->outFile = v;
      break;
    case kMarkdown:
      a->markdownFile = v;
      break;
    case kNetBurst: {
      std::string error;
      if (!loom::tools::parseNetBurst(v, &a->model.uniform, &error)) return fail(error);
      break;
    }
    case kHelp:
      printf("%s", kUsage);
      exit(0);
    default:
      return fail("unknown option");
  }
  return true;
}

bool parseArgs(int argc, char** argv, Args* a) {
  for (int opt; (opt = getopt_long(argc, argv, "", kOptions, nullptr)) != -1;) {
    if (!applyOption(opt, optarg ? optarg : "", a)) return false;
  }
  for (int i = optind; i < argc; ++i) a->inputs.push_back(argv[i]);
  if (std::string error = loom::tools::modelChoiceError(a->model); !error.empty())
    return fail(error);
  if (a->inputs.empty()) return fail("no loom-perf --json files given");
  return true;
}

Status readFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return Status(loomSystemError, "cannot open '" + path + "'");
  std::stringstream s;
  s << in.rdbuf();
  *text = s.str();
  return Status::ok();
}

double number(const toolkit::JsonValue* v) {
  return v && v->kind == toolkit::JsonValue::Kind::kNumber ? v->number : -1;
}
std::string text(const toolkit::JsonValue* v) {
  return v && v->kind == toolkit::JsonValue::Kind::kString ? v->text : std::string();
}

// The rows of one loom-perf run (`path` names it in messages): those of a forced algorithm into
// *forced, those where loom picked it into *chosen (algorithm "auto", or "autotune" where the
// run set LOOM_AUTOTUNE=1); *ranks and *hosts get the run's rank and host counts.
Status readRun(const toolkit::JsonValue* doc, const std::string& path,
               std::vector<MeasuredPoint>* forced, std::vector<MeasuredPoint>* chosen, int* ranks,
               int* hosts) {
  if (text(doc->find("schema")) != "loom-perf/1")
    return Status(loomInvalidArgument, path + ": not loom-perf --json output (schema loom-perf/1)");
  const std::string collName = text(doc->find("collective"));
  const auto coll = toolkit::parseCollective(collName);
  if (!coll || !toolkit::hasPlanBuilders(*coll))
    return Status(loomInvalidArgument,
                  path + ": collective '" + collName + "' has no builders to calibrate");
  *ranks = int(number(doc->find("ranks")));
  *hosts = int(number(doc->find("hosts")));
  // The run's lanes shape its plans: the file records the LOOM_* parameters it ran with.
  const toolkit::JsonValue* env = doc->find("env");
  const std::string lanesText = env ? text(env->find("LOOM_LANES")) : std::string();
  int lanes = 0;
  if (!lanesText.empty() && (!parseCount(lanesText.c_str(), 0, &lanes) || lanes > 1024))
    return Status(loomInvalidArgument,
                  path + ": env.LOOM_LANES is \"" + lanesText + "\"; want a lane count");
  const bool autotuned = env && text(env->find("LOOM_AUTOTUNE")) == "1";
  const std::string race = text(doc->find("race"));
  const toolkit::JsonValue* rows = doc->find("rows");
  if (*ranks < 1 || !rows || rows->kind != toolkit::JsonValue::Kind::kArray)
    return Status(loomInvalidArgument, path + ": no 'ranks' or no 'rows'");
  for (size_t i = 0; i < rows->items.size(); ++i) {
    const toolkit::JsonValue& row = rows->items[i];
    const std::string where = strprintf("%s: rows[%zu]", path.c_str(), i);
    MeasuredPoint p;
    p.coll = *coll;
    p.lanes = lanes;
    p.algorithm = text(row.find("algorithm"));
    const bool loomChose = p.algorithm == "auto";
    if (loomChose) p.ran = text(row.find("ran"));  // what loom ran, where the run says
    if (loomChose && autotuned) p.algorithm = "autotune";
    auto dtype = toolkit::parseDtype(text(row.find("type")));
    const toolkit::JsonValue* oop = row.find("out_of_place");
    const double timeUs = number(oop ? oop->find("time_us") : nullptr);
    const double bytes = number(row.find("size")), count = number(row.find("count"));
    if (p.algorithm.empty() || !dtype || timeUs <= 0 || bytes < 0 || count < 0)
      return Status(loomInvalidArgument,
                    where + ": needs algorithm, type, size, count and out_of_place.time_us");
    if (count == 0) continue;  // moves nothing: the API's overhead is not in the model
    p.elemSize = uint32_t(loom::dtypeSize(*dtype));
    p.count = uint64_t(count);
    p.bytes = uint64_t(bytes);
    p.nranks = *ranks;
    p.time = timeUs * 1e-6;
    p.race = race;
    if (const toolkit::JsonValue* rounds = row.find("rounds_us"); rounds && !race.empty())
      for (const toolkit::JsonValue& t : rounds->items) p.rounds.push_back(number(&t) * 1e-6);
    (loomChose ? chosen : forced)->push_back(p);
  }
  return Status::ok();
}

// The rows of one loom-perf --json file: one run, or loom's runs of a --compare document (its
// peers' runs are not loom's to calibrate).
Status readMeasurements(const std::string& path, std::vector<MeasuredPoint>* forced,
                        std::vector<MeasuredPoint>* chosen, int* ranks, int* hosts) {
  std::string body, error;
  LOOM_TRY(readFile(path, &body));
  auto doc = toolkit::parseJson(body, &error);
  if (!doc) return Status(loomInvalidArgument, path + ": not JSON: " + error);
  if (text(doc->find("schema")) != "loom-perf-set/1")
    return readRun(&*doc, path, forced, chosen, ranks, hosts);
  const toolkit::JsonValue* runs = doc->find("runs");
  for (size_t i = 0; runs && i < runs->items.size(); ++i) {
    const toolkit::JsonValue& run = runs->items[i];
    if (text(run.find("library")) != "loom") continue;
    LOOM_TRY(readRun(&run, strprintf("%s: runs[%zu]", path.c_str(), i), forced, chosen, ranks,
                     hosts));
  }
  return Status::ok();
}

// Repeated runs of one algorithm become one point per size: the median of their times, which
// a run disturbed by other load on the machine does not move.
std::vector<MeasuredPoint> medians(const std::vector<MeasuredPoint>& points) {
  std::map<std::tuple<int, std::string, uint64_t, uint32_t, int>, std::vector<MeasuredPoint>> same;
  for (const MeasuredPoint& p : points)
    same[{int(p.coll), loom::tuner::variantName(p), p.bytes, p.elemSize, p.nranks}].push_back(p);
  std::vector<MeasuredPoint> out;
  for (auto& [key, group] : same) {
    std::sort(group.begin(), group.end(),
              [](const MeasuredPoint& x, const MeasuredPoint& y) { return x.time < y.time; });
    MeasuredPoint p = group[group.size() / 2];
    if (group.size() % 2 == 0) p.time = (group[group.size() / 2 - 1].time + p.time) / 2;
    out.push_back(p);
  }
  return out;
}

std::string sizeText(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return strprintf("%llu %s", (unsigned long long)bytes, units[u]);
}

std::string knobValue(const loom::tuner::Knob& k) {
  using What = loom::tuner::Knob::What;
  switch (k.what) {
    case What::MemBandwidth:
    case What::CacheBandwidth:
      return strprintf("%.3g GB/s", k.value / 1e9);
    case What::StepOverhead:
    case What::NetMessageOverhead:
    case What::SingleCopyOverhead:
    case What::BarrierLatency:
    case What::SharedCoreLatency:
      return strprintf("%.3g us", k.value * 1e6);
    default:
      return strprintf("%.4g", k.value);
  }
}

// The fitted figures of each link kind: every distinct (latency, bandwidth) of its links.
std::string linkFigures(const topology::Topology& t) {
  std::map<std::string, std::vector<std::pair<double, double>>> kinds;
  for (const topology::Link& l : t.links) {
    auto& v = kinds[l.kind];
    if (std::find(v.begin(), v.end(), std::make_pair(l.latency, l.bandwidth)) == v.end())
      v.emplace_back(l.latency, l.bandwidth);
  }
  std::string s = "| link kind | latency per link | bandwidth |\n| --- | ---: | ---: |\n";
  for (const auto& [kind, figures] : kinds)
    for (const auto& [latency, bandwidth] : figures)
      s +=
          strprintf("| %s | %.3g us | %.3g GB/s |\n", kind.c_str(), latency * 1e6, bandwidth / 1e9);
  return s;
}

// Round by round (toolkit::pairedRatio): how much `chosen` trails the forced run of its call and
// race that it trails most, in the median over their rounds (negative: it is ahead of them
// all), and *against names that run; "" there where no forced run shares its race's rounds.
double pairedRegret(const MeasuredPoint& chosen, const std::vector<MeasuredPoint>& forced,
                    std::string* against) {
  double most = 0;
  against->clear();
  for (const MeasuredPoint& f : forced) {
    if (chosen.race.empty() || f.race != chosen.race || f.coll != chosen.coll ||
        f.nranks != chosen.nranks || f.bytes != chosen.bytes)
      continue;
    const double ratio = toolkit::pairedRatio(chosen.rounds, f.rounds);
    if (ratio > 0 && (against->empty() || ratio - 1 > most)) {
      most = ratio - 1;
      *against = loom::tuner::variantName(f);
    }
  }
  return most;
}

// A collective in the report's tables: a sweep of one rank count names the collective; one of
// several says how many ranks too.
struct CollLabel {
  bool severalRankCounts = false;
  explicit CollLabel(const loom::tuner::Calibration& c) {
    for (const auto& p : c.points)
      severalRankCounts = severalRankCounts || p.point.nranks != c.points[0].point.nranks;
  }
  std::string operator()(loom::collectives::Collective x, int nranks) const {
    std::string name = loom::collectives::collectiveName(x);
    return severalRankCounts ? strprintf("%s, %d ranks", name.c_str(), nranks) : name;
  }
};

// The model's figures: what was fitted (or given), the hosts' cores and the links.
std::string modelSection(const Args& a, const loom::tuner::Calibration& c, size_t runs) {
  std::string s = strprintf("## Model '%s'\n\n", c.topo.name.c_str());
  s += strprintf(
      "%zu points (medians of %zu measured rows of forced algorithms), %d simulations of the "
      "set, %d slices per step.\n\n",
      c.points.size(), runs, c.evaluations, a.options.sim.slices);
  s += a.options.fit ? "| fitted | value |\n| --- | ---: |\n"
                     : "| as given (--no-fit) | value |\n| --- | ---: |\n";
  for (const auto& k : c.knobs)
    s += "| " + loom::tuner::knobName(k) + " | " + knobValue(k) + " |\n";
  const std::vector<int32_t> hosts = c.topo.hostNodes();
  if (!hosts.empty()) {
    const topology::HostCpu& cpu = c.topo.nodes[size_t(hosts[0])].cpu;
    if (cpu.machine.empty())
      s += strprintf("| cores per host (given) | %d |\n", cpu.cores);
    else
      s += strprintf("| cores of machine '%s', which the hosts share (given) | %d |\n",
                     cpu.machine.c_str(), cpu.cores);
  }
  return s + "\n" + linkFigures(c.topo);
}

// Each point's measured time against the prediction, and the error's summary.
std::string validationSection(const loom::tuner::Calibration& c, const CollLabel& collName) {
  std::string s;
  s += "\n## Validation\n\n| collective | algorithm | size | measured (us) | predicted (us) | "
       "error |\n| --- | --- | ---: | ---: | ---: | ---: |\n";
  size_t within = 0, predicted = 0;
  for (const auto& p : c.points) {
    s += strprintf("| %s | %s | %s | %.1f | ", collName(p.point.coll, p.point.nranks).c_str(),
                   loom::tuner::variantName(p.point).c_str(),
                   sizeText(p.point.bytes).c_str(), p.point.time * 1e6);
    if (p.predicted <= 0) {
      s += "– | " + p.failure + " |\n";
      continue;
    }
    const double err = p.predicted / p.point.time - 1;
    ++predicted;
    within += std::abs(err) <= 0.15;
    s += strprintf("%.1f | %+.0f%% |\n", p.predicted * 1e6, err * 100);
  }
  s += strprintf(
      "\nMedian |error| **%.1f%%** (target ≤ 15%%), worst ratio **%.2f×** (target ≤ "
      "2×), %zu of %zu points within 15%%.\n",
      c.medianAbsError * 100, c.maxRatio, within, predicted);
  return s;
}

// The regret of choosing, per size, the algorithm of the lowest prediction.
std::string predictedRegretSection(const loom::tuner::Calibration& c, const CollLabel& collName) {
  std::string s;
  s += "\n## Regret of choosing the lowest prediction\n\n| collective | size | best measured | "
       "lowest predicted | regret |\n| --- | ---: | --- | --- | ---: |\n";
  double worst = 0;
  size_t fine = 0;
  const auto regrets = loom::tuner::regrets(c.points);
  for (const auto& r : regrets) {
    s += strprintf("| %s | %s | %s | %s | %.0f%% |\n", collName(r.coll, r.nranks).c_str(),
                   sizeText(r.bytes).c_str(), r.best.c_str(), r.chosen.c_str(), r.regret * 100);
    worst = std::max(worst, r.regret);
    fine += r.regret <= 0.10;
  }
  s += strprintf(
      "\n%zu of %zu sizes within 10%% of the best measured algorithm; worst regret "
      "%.0f%%.\n",
      fine, regrets.size(), worst * 100);
  return s;
}

// How loom's own choices (runs without -A) did, per kind of run ("auto", "autotune").
struct ChoiceTally {
  size_t fine = 0, fineByChoice = 0, byChoice = 0, sizes = 0, fineByRound = 0, byRound = 0;
  double worst = -1, worstByChoice = -1, worstByRound = -1;
};

std::string choiceSummary(const std::map<std::string, ChoiceTally>& tallies) {
  std::string s = "\n";
  for (const auto& [run, t] : tallies) {
    s += strprintf("%s: %zu of %zu sizes within 10%% of the best forced algorithm; worst "
                   "%+.0f%%.",
                   run.c_str(), t.fine, t.sizes, t.worst * 100);
    if (t.byChoice > 0)
      s += strprintf(" By choice (the forced run of what it ran, at %zu of them): %zu within "
                     "10%%; worst %+.0f%%.",
                     t.byChoice, t.fineByChoice, t.worstByChoice * 100);
    if (t.byRound > 0)
      s += strprintf(" By round (at the %zu sizes it raced): %zu within 10%%; worst %+.0f%%.",
                     t.byRound, t.fineByRound, t.worstByRound * 100);
    s += "\n";
  }
  return s;
}

// What loom chose in runs of its own, measured: the regret the tuner really has.
std::string measuredChoiceSection(const loom::tuner::Calibration& c,
                                  const std::vector<MeasuredPoint>& chosen,
                                  const CollLabel& collName) {
  std::string s;
  std::vector<MeasuredPoint> forced;
  for (const auto& p : c.points) forced.push_back(p.point);
  const auto measured = loom::tuner::measuredRegrets(forced, chosen);
  std::map<std::tuple<int, int, uint64_t, std::string>, const MeasuredPoint*> chosenOf;
  for (const MeasuredPoint& p : chosen)
    chosenOf[{int(p.coll), p.nranks, p.bytes, loom::tuner::variantName(p)}] = &p;
  s += "\n## Loom's own choice, measured\n\n"
       "\"ran\": what the run says it ran; \"forced\": the same sweep's forced run of that "
       "algorithm (and lanes), where there is one; \"by choice\": what choosing it costs by the "
       "forced runs alone, which leaves out the drift between runs in separate processes; \"by "
       "round\": where it ran in a loom-perf --race, the median over the race's rounds of its "
       "time over a forced run's in the same round, against the forced run it trails most, which "
       "leaves out the machine's drift between rounds.\n\n"
       "| collective | size | run | ran | measured (us) | forced (us) | best forced | "
       "measured (us) | regret | by choice | by round |\n"
       "| --- | ---: | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
  std::map<std::string, ChoiceTally> tallies;  // per kind of run: "auto", "autotune"
  for (const auto& r : measured) {
    const bool known = r.ranTime > 0;
    std::string against;
    const double byRound =
        pairedRegret(*chosenOf.at({int(r.coll), r.nranks, r.bytes, r.chosen}), forced, &against);
    s += strprintf("| %s | %s | %s | %s | %.1f | %s | %s | %.1f | %+.0f%% | %s | %s |\n",
                   collName(r.coll, r.nranks).c_str(), sizeText(r.bytes).c_str(),
                   r.chosen.c_str(), r.ran.empty() ? "-" : r.ran.c_str(), r.chosenTime * 1e6,
                   known ? strprintf("%.1f", r.ranTime * 1e6).c_str() : "-", r.best.c_str(),
                   r.bestTime * 1e6, r.regret * 100,
                   known ? strprintf("%+.0f%%", r.ranRegret * 100).c_str() : "-",
                   against.empty()
                       ? "-"
                       : strprintf("%+.0f%% (%s)", byRound * 100, against.c_str()).c_str());
    ChoiceTally& t = tallies[r.chosen];
    ++t.sizes;
    t.fine += r.regret <= 0.10;
    t.worst = std::max(t.worst, r.regret);
    if (known) {
      ++t.byChoice;
      t.fineByChoice += r.ranRegret <= 0.10;
      t.worstByChoice = std::max(t.worstByChoice, r.ranRegret);
    }
    if (!against.empty()) {
      ++t.byRound;
      t.fineByRound += byRound <= 0.10;
      t.worstByRound = std::max(t.worstByRound, byRound);
    }
  }
  return s + choiceSummary(tallies);
}

std::string report(const Args& a, const loom::tuner::Calibration& c, size_t runs,
                   const std::vector<MeasuredPoint>& chosen) {
  const CollLabel collName(c);
  std::string s = modelSection(a, c, runs) + validationSection(c, collName) +
                  predictedRegretSection(c, collName);
  if (!chosen.empty()) s += measuredChoiceSection(c, chosen, collName);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.options.sim = loom::communicatorTuning().sim;  // --slices may change it
  if (!parseArgs(argc, argv, &a)) return 2;
  topology::Topology base;
  std::string error;
  if (!loom::tools::loadModel(a.model, 0, &base, &error)) {
    fprintf(stderr, "loom-calibrate: %s\n", error.c_str());
    return 1;
  }
  a.options.settings = loom::communicatorSettings(base);
  for (topology::Node& n : base.nodes) {
    if (n.kind != topology::NodeKind::Host) continue;
    if (a.cores > 0) n.cpu.cores = a.cores;
    if (!a.machine.empty()) n.cpu.machine = a.machine;
    if (a.cacheBytes > 0) n.cpu.cacheBytes = a.cacheBytes;
    if (a.privateCacheBytes > 0) n.cpu.privateCacheBytes = a.privateCacheBytes;
  }
  std::vector<MeasuredPoint> points, chosen;
  for (const std::string& path : a.inputs) {
    int nranks = 0, hosts = 0;
    if (Status st = readMeasurements(path, &points, &chosen, &nranks, &hosts); !st.isOk()) {
      fprintf(stderr, "loom-calibrate: %s\n", st.message().c_str());
      return 1;
    }
    if (nranks > int(base.ranks.size())) {
      fprintf(stderr, "loom-calibrate: %s ran on %d ranks; the model '%s' has only %zu\n",
              path.c_str(), nranks, base.name.c_str(), base.ranks.size());
      return 1;
    }
    int modelHosts = 0;
    std::vector<int32_t> seen;
    for (int r = 0; r < nranks; ++r)
      if (std::find(seen.begin(), seen.end(), base.ranks[size_t(r)].host) == seen.end())
        seen.push_back(base.ranks[size_t(r)].host), ++modelHosts;
    if (hosts > 0 && hosts != modelHosts) {
      fprintf(stderr, "loom-calibrate: %s ran on %d hosts; the model puts its %d ranks on %d\n",
              path.c_str(), hosts, nranks, modelHosts);
      return 1;
    }
  }
  const size_t runs = points.size();
  points = medians(points);
  loom::tuner::Calibration c;
  if (Status st = loom::tuner::calibrate(points, base, a.options, &c); !st.isOk()) {
    fprintf(stderr, "loom-calibrate: %s\n", st.message().c_str());
    return 1;
  }
  if (!a.name.empty() || a.options.fit)
    c.topo.name = a.name.empty() ? base.name + "-calibrated" : a.name;
  const std::string text = report(a, c, runs, medians(chosen));
  fputs(text.c_str(), stdout);
  if (!a.markdownFile.empty()) {
    std::ofstream md(a.markdownFile);
    md << text;
    if (!md.flush()) {
      fprintf(stderr, "loom-calibrate: cannot write '%s'\n", a.markdownFile.c_str());
      return 1;
    }
  }
  if (!a.outFile.empty()) {
    if (Status st = topology::saveTopology(c.topo, a.outFile); !st.isOk()) {
      fprintf(stderr, "loom-calibrate: %s\n", st.message().c_str());
      return 1;
    }
  }
  return 0;
}
