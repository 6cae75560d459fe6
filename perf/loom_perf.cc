// loom-perf: nccl-tests-style sweeps of loom's collectives.
//
//   loom-perf all_reduce -b 8 -e 256M -f 4 -N 4        # forks 4 local ranks
//   mpirun -np 4 loom-perf all_reduce -b 8 -e 256M -f 4 # ranks meet through MPI (or LOOM_ROOT)
//   torchrun --nproc-per-node 4 --no-python loom-perf all_reduce   # RANK, MASTER_ADDR, ...
//   loom-perf all_reduce -N 4 --compare mpi,gloo -R 3   # the peers' busbw beside loom's
//   loom-perf all_reduce -N 4 --api nccl                # through loom's libnccl.so.2
//
// LOOM_TRANSPORT=tcp (or shm, ucx) picks the transport; -A NAME asks for an algorithm (LOOM_ALGO's
// grammar, e.g. -A ring or -A allreduce=ring,allgather=ring).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/builders.h"
#include "comm/options.h"
#include "base/params.h"
#include "loom/loom.h"
#include "perf/compare.h"
#include "perf/launch.h"
#include "perf/nccl_backend.h"
#include "perf/sweep.h"
#include "topology/topology.h"
#include "tuner/calibrate.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"
#ifdef LOOM_PERF_WITH_MPI
#include "perf/mpi_bootstrap.h"
#endif

#ifndef LOOM_GIT_COMMIT
#define LOOM_GIT_COMMIT "unknown"
#endif

namespace loom::perf {
namespace {

class LoomBackend : public Backend {
 public:
  explicit LoomBackend(loomComm_t comm) : comm_(comm) {
    loomCommUserRank(comm_, &rank_);
    loomCommCount(comm_, &nranks_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  void* allocateShared(size_t bytes) override {
    void* p = nullptr;
    if (loomMemAlloc(&p, bytes) != loomSuccess)
      std::fprintf(stderr, "loom-perf: loomMemAlloc: %s\n", loomGetLastError(nullptr));
    return p;
  }
  void releaseShared(void* p) override { loomMemFree(p); }

  std::string describe() const override {
    return "Backend: loom " + version() + " transport " + params::getString("LOOM_TRANSPORT") +
           " algorithms " + algorithmSetting();
  }

  std::string library() const override { return "loom"; }

  std::string version() const override {
    int v = 0;
    loomGetVersion(&v);
    return versionText(v);
  }

  // What --algo (or LOOM_ALGO) forces for this collective; "auto" when loom picks.
  std::string algorithm(Collective c) const override {
    return forcedAlgorithm(algorithmSetting(), c);
  }

  void setAlgorithms(std::string text) { algorithms_ = std::move(text); }

  std::string unsupported(Collective, loomDataType_t, loomRedOp_t) const override { return {}; }

  // --sim's model: --topo, else LOOM_TOPO_FILE, else a uniform model of the run's hosts.
  std::string setUpPrediction(const Options& options, const std::vector<int>& hostOfRank) override {
    std::string file = options.topoFile;
    const char* source = "--topo";
    if (file.empty()) {
      file = params::getString("LOOM_TOPO_FILE");
      source = "LOOM_TOPO_FILE";
    }
    if (file.empty()) {
      model_ = uniformModel(hostOfRank);
    } else if (Status st = topology::loadTopology(file, &model_); !st.isOk()) {
      model_ = {};
      return "no predictions: " + std::string(source) + ": " + st.message();
    } else if (model_.ranks.size() < hostOfRank.size()) {
      const std::string why = strprintf(
          "no predictions: the model '%s' (%s) has %zu ranks, the "
          "run %zu",
          model_.name.c_str(), source, model_.ranks.size(), hostOfRank.size());
      model_ = {};
      return why;
    }
    settings_ = communicatorSettings(model_);
    if (Status st = makeTuner(); !st.isOk()) {
      model_ = {};
      return "no predictions: " + st.message();
    }
    return strprintf("predicted on the model '%s' (%s), %d slices per step", model_.name.c_str(),
                     file.empty() ? "uniform, default figures" : source,
                     tuner::SimOptions().slices);
  }

  // The simulated time of the plans this call runs: the forced algorithm's, else the one the
  // communicator's tuner picks on the same model (the communicator's own topology is the same
  // one when LOOM_TOPO_FILE names it).
  bool predict(const CollCall& call, Prediction* out) override {
    if (model_.ranks.empty() || !toolkit::hasPlanBuilders(call.collective)) {
      out->algorithm = model_.ranks.empty() ? "no model" : "no plan builders";
      return false;
    }
    tuner::MeasuredPoint p;
    p.coll = call.collective;
    p.count = call.count;
    p.elemSize = uint32_t(dtypeSize(call.dtype));
    p.nranks = nranks_;
    p.algorithm = algorithm(call.collective);
    tuner::CalibrationOptions options;
    options.settings = settings_;
    if (p.algorithm == "auto") {
      tuner::Decision d;
      if (Status st = tuner_.decide(tuner::callOf(p, model_, settings_), &d); !st.isOk()) {
        out->algorithm = "no prediction: " + st.message();
        return false;
      }
      p.algorithm = d.choice.builder->name;
      tuner::applyParams(d.choice.params, &options.settings);
    }
    std::vector<std::string> failures;
    const double seconds = tuner::predictPoints({p}, model_, options, &failures)[0];
    out->algorithm = failures[0].empty() ? p.algorithm : "no prediction: " + failures[0];
    out->time.timeUs = seconds * 1e6;
    return failures[0].empty();
  }

  std::string lastAlgorithm() const override {
    const char* name = nullptr;
    return loomCommGetLastAlgorithm(comm_, &name) == loomSuccess ? name : "";
  }

  bool run(const CollCall& call) override {
    const size_t n = call.count;
    const loomDataType_t t = call.dtype;
    loomResult_t r = loomSuccess;
    switch (call.collective) {
      case Collective::AllReduce:
        r = loomAllReduce(call.send, call.recv, n, t, call.op, comm_, call.stream);
        break;
      case Collective::AllGather:
        r = loomAllGather(call.send, call.recv, n, t, comm_, call.stream);
        break;
      case Collective::ReduceScatter:
        r = loomReduceScatter(call.send, call.recv, n, t, call.op, comm_, call.stream);
        break;
      case Collective::AlltoAll:
        r = loomAlltoAll(call.send, call.recv, n, t, comm_, call.stream);
        break;
      case Collective::Broadcast:
        r = loomBroadcast(call.send, call.recv, n, t, call.root, comm_, call.stream);
        break;
      case Collective::Reduce:
        r = loomReduce(call.send, call.recv, n, t, call.op, call.root, comm_, call.stream);
        break;
      case Collective::Gather:
        r = loomGather(call.send, call.recv, n, t, call.root, comm_, call.stream);
        break;
      case Collective::Scatter:
        r = loomScatter(call.send, call.recv, n, t, call.root, comm_, call.stream);
        break;
      case Collective::SendRecv: {
        // The nccl-tests pattern: send to the next rank, receive from the previous one,
        // grouped so that the ring cannot deadlock.
        const int next = (rank_ + 1) % nranks_;
        const int prev = (rank_ + nranks_ - 1) % nranks_;
        r = loomGroupStart();
        const loomResult_t s = loomSend(call.send, n, t, next, comm_, call.stream);
        const loomResult_t v = loomRecv(call.recv, n, t, prev, comm_, call.stream);
        const loomResult_t e = loomGroupEnd();
        r = r != loomSuccess ? r : s != loomSuccess ? s : v != loomSuccess ? v : e;
        break;
      }
      case Collective::AlltoAllv:  // not one of nccl-tests' collectives: never parsed
        r = loomInvalidArgument;
        break;
    }
    if (r == loomSuccess) return true;
    std::fprintf(stderr, "loom-perf: rank %d: %s of %zu elements failed: %s: %s\n", rank_,
                 ncclTestsName(call.collective), n, loomGetErrorString(r),
                 loomGetLastError(comm_));
    return false;
  }

  bool allGather(const void* mine, void* all, size_t bytes) override {
    const loomResult_t r = loomAllGather(mine, all, bytes, loomUint8, comm_, nullptr);
    if (r != loomSuccess) {
      std::fprintf(stderr, "loom-perf: rank %d: exchanging results failed: %s: %s\n", rank_,
                   loomGetErrorString(r), loomGetLastError(comm_));
    }
    return r == loomSuccess;
  }

 private:
  std::string algorithmSetting() const {
    const std::string algo = params::getString("LOOM_ALGO");  // or NCCL_ALGO's
    return algorithms_.empty() ? (algo.empty() ? "auto" : algo) : algorithms_;
  }

  // The tuner as the communicator configures it (Comm::initTuner), over --sim's model.
  Status makeTuner() {
    tuner::TunerConfig config;
    LOOM_TRY(readTuning(&config));
    tuner_ = tuner::Tuner(model_, std::move(config));
    return Status::ok();
  }

  // A uniform model (tuner/uniform_topology.h) with as many hosts and ranks as the run; rank r
  // takes the next rank slot of its host, so any placement of ranks on hosts is modelled.
  static topology::Topology uniformModel(const std::vector<int>& hostOfRank) {
    tuner::UniformCluster shape;
    shape.hosts = 1 + *std::max_element(hostOfRank.begin(), hostOfRank.end());
    std::vector<int> perHost(size_t(shape.hosts), 0);
    for (int h : hostOfRank)
      shape.ranksPerHost = std::max(shape.ranksPerHost, ++perHost[size_t(h)]);
    topology::Topology t = tuner::uniformTopology(shape);
    std::vector<topology::Rank> slots = t.ranks;  // host-major: host h's slots start at h * R
    t.ranks.clear();
    std::fill(perHost.begin(), perHost.end(), 0);
    for (int h : hostOfRank)
      t.ranks.push_back(slots[size_t(h * shape.ranksPerHost + perHost[size_t(h)]++)]);
    return t;
  }

  loomComm_t comm_;
  int rank_ = 0;
  int nranks_ = 1;
  std::string algorithms_;
  topology::Topology model_;  // --sim's model; no ranks: no predictions
  collectives::CallSettings settings_;
  tuner::Tuner tuner_;
};

int initFailed(const char* call, loomResult_t r, int rank) {
  std::fprintf(stderr, "loom-perf: rank %d: %s failed: %s: %s\n", rank, call, loomGetErrorString(r),
               loomGetLastError(nullptr));
  return 3;
}

// What a --race entry asks of its communicator: the algorithms setting ("" lets loom choose)
// and the variables it runs under.
struct RaceEntry {
  std::string algorithms;
  std::vector<std::pair<std::string, std::string>> env;
};

// "auto": loom's model chooses; "autotune": LOOM_AUTOTUNE=1; "NAME:LANES": NAME forced on
// LANES lanes (LOOM_LANES); "NAME": forced.
bool parseRaceEntry(Collective c, const std::string& label, RaceEntry* out, std::string* error) {
  *out = {};
  if (label == "auto") return true;
  if (label == "autotune") {
    out->env = {{"LOOM_AUTOTUNE", "1"}};
    return true;
  }
  const size_t colon = label.find(':');
  out->algorithms = std::string(collectives::collectiveName(c)) + "=" + label.substr(0, colon);
  if (colon == std::string::npos) return true;
  char* end = nullptr;
  const long lanes = std::strtol(label.c_str() + colon + 1, &end, 10);
  if (colon == 0 || *end != '\0' || end == label.c_str() + colon + 1 || lanes < 1 || lanes > 64) {
    *error = "--race entry '" + label + "': expected NAME, NAME:LANES (1-64), auto or autotune";
    return false;
  }
  out->env = {{"LOOM_LANES", std::to_string(lanes)}};
  return true;
}

// Sets (or, with value null, removes) a variable and has loom read its parameters again.
void setParameter(const std::string& name, const char* value) {
  if (value) {
    setenv(name.c_str(), value, 1);
  } else {
    unsetenv(name.c_str());
  }
  params::reloadFromEnvironment();
}

// The --race entries, each read by parseRaceEntry; false (with the reason) on the first bad one.
bool parseRaceEntries(const Options& options, std::vector<RaceEntry>* out, std::string* error) {
  out->assign(options.race.size(), {});
  for (size_t i = 0; i < out->size(); ++i) {
    if (!parseRaceEntry(options.collective, options.race[i], &(*out)[i], error)) return false;
  }
  return true;
}

// --race: one communicator per entry (main() read them from options.race, in order), split
// from comm under the entry's algorithms and variables (set only while it is made: loom reads
// them at init), then the race.
int runRace(loomComm_t comm, const Options& options, const std::vector<RaceEntry>& entries) {
  int rank = 0;
  loomCommUserRank(comm, &rank);
  std::vector<loomComm_t> comms;
  int rc = 0;
  for (const RaceEntry& entry : entries) {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;  // nullopt: unset
    for (const auto& [name, value] : entry.env) {
      const char* old = std::getenv(name.c_str());
      saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      setParameter(name, value.c_str());
    }
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.algorithms = entry.algorithms.c_str();
    loomComm_t sub = nullptr;
    const loomResult_t r = loomCommSplit(comm, 0, rank, &sub, &config);
    for (const auto& [name, old] : saved) setParameter(name, old ? old->c_str() : nullptr);
    if (r != loomSuccess) {
      rc = initFailed("loomCommSplit", r, rank);
      break;
    }
    comms.push_back(sub);
  }
  if (rc == 0) {
    std::vector<std::unique_ptr<LoomBackend>> backends;
    std::vector<Contestant> contestants;
    for (size_t i = 0; i < comms.size(); ++i) {
      backends.push_back(std::make_unique<LoomBackend>(comms[i]));
      // "auto" rather than "": an empty setting would fall back to LOOM_ALGO.
      backends.back()->setAlgorithms(entries[i].algorithms.empty() ? "auto" : entries[i].algorithms);
      contestants.push_back({backends.back().get(), options.race[i], entries[i].env});
    }
    rc = perf::runRace(contestants, options, "loom-perf", LOOM_GIT_COMMIT);
  }
  // After a failure a peer may be gone: abort rather than wait for it in destroy.
  for (loomComm_t sub : comms) {
    const loomResult_t r = rc >= 3 ? loomCommAbort(sub) : loomCommDestroy(sub);
    if (r != loomSuccess && rc == 0) rc = 3;
  }
  return rc;
}

int runRank(loomComm_t comm, const Options& options, const std::string& algorithms,
            const std::vector<RaceEntry>& race) {
  int rc;
  if (!race.empty()) {
    rc = runRace(comm, options, race);
  } else {
    LoomBackend backend(comm);
    backend.setAlgorithms(algorithms);
    rc = runSweep(backend, options, "loom-perf", LOOM_GIT_COMMIT);
  }
  // After a failure a peer may be gone: abort rather than wait for it in destroy.
  const loomResult_t r = rc >= 3 ? loomCommAbort(comm) : loomCommDestroy(comm);
  if (r != loomSuccess && rc == 0) rc = 3;
  return rc;
}

}  // namespace
}  // namespace loom::perf

int main(int argc, char** argv) {
  using namespace loom::perf;
  Options options;
  std::string error;
  if (!parseOptions(argc, argv, &options, &error)) {
    if (!error.empty()) std::fprintf(stderr, "loom-perf: %s\n", error.c_str());
    std::fputs(usage("loom-perf").c_str(), stderr);
    return error.empty() ? 0 : 2;
  }
  const std::string algorithms = algorithmSetting(options);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.algorithms = algorithms.empty() ? nullptr : algorithms.c_str();
  // Bad --race entries are found here, before any rank exists to race another to the exit.
  std::vector<RaceEntry> race;
  if (!parseRaceEntries(options, &race, &error)) {
    std::fprintf(stderr, "loom-perf: %s\n", error.c_str());
    return 2;
  }

  if (!options.compare.empty()) {
    if (options.nranks < 1) {
      std::fprintf(stderr, "loom-perf: --compare needs -N RANKS (every library forks them)\n");
      return 2;
    }
    char self[PATH_MAX] = {};
    if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) {
      std::perror("loom-perf: /proc/self/exe");
      return 3;
    }
    return runComparison(options, self);
  }
  if (options.api == Api::kNccl) return runNcclSweep(options, LOOM_GIT_COMMIT);

  if (options.nranks == 0) {
    loomComm_t comm = nullptr;
#ifdef LOOM_PERF_WITH_MPI
    // Under mpirun without LOOM_ROOT / MASTER_ADDR there is no rendezvous but MPI's own.
    if (needsMpiBootstrap()) {
      std::string why;
      const loomResult_t r = mpiInitComm(&comm, &config, &why);
      const int rc = r != loomSuccess ? initFailed(why.c_str(), r, -1)
                                      : runRank(comm, options, algorithms, race);
      mpiFinalize();
      return rc;
    }
#endif
    const loomResult_t r = loomCommInitFromEnv(&comm, &config);
    if (r != loomSuccess) {
      std::fprintf(stderr,
                   "loom-perf: without -N the ranks come from the environment: LOOM_RANK, "
                   "LOOM_WORLD_SIZE and LOOM_ROOT=host:port, torchrun's RANK, WORLD_SIZE, "
                   "MASTER_ADDR and MASTER_PORT, or mpirun (when loom-perf is built with "
                   "MPI)\n");
      return initFailed("loomCommInitFromEnv", r, -1);
    }
    return runRank(comm, options, algorithms, race);
  }
  // Fork first: loomGetUniqueId starts a bootstrap thread, which a fork would not carry.
  return runForkedRanks(options, [&](loom::toolkit::RankContext& self) {
    loomUniqueId id{};
    if (self.rank() == 0) {
      const loomResult_t r = loomGetUniqueId(&id);
      // On failure rank 0 exits; the others then read end-of-file and exit too.
      if (r != loomSuccess) return initFailed("loomGetUniqueId", r, 0);
    }
    if (!shareFromRank0(self, &id, sizeof(id))) return 3;
    loomComm_t comm = nullptr;
    const loomResult_t r = loomCommInitRankConfig(&comm, self.nranks(), id, self.rank(), &config);
    if (r != loomSuccess) return initFailed("loomCommInitRankConfig", r, self.rank());
    return runRank(comm, options, algorithms, race);
  });
}
