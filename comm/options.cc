#include "comm/options.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include "base/nccl_env.h"
#include "base/params.h"
#include "topology/discover.h"
#include "transports/shm/shm_arena.h"

namespace loom {
namespace {

using collectives::Collective;

uint64_t nonNegative(int64_t v) { return uint64_t(std::max<int64_t>(0, v)); }

// What the caller may set in its config as well: the deadline, the transport and LOOM_ALGO.
Status readCallerChoices(const loomConfig_t* config, CommOptions* out) {
  out->timeoutMs = params::getInt("LOOM_TIMEOUT_MS");
  out->transport = params::getString("LOOM_TRANSPORT");
  std::string algos = params::getString("LOOM_ALGO");
  // Fields of a config from an older (smaller) struct are absent: read only what it has.
  if (config != nullptr) {
    if (config->size < offsetof(loomConfig_t, timeoutMs) + sizeof(int))
      return errorf(loomInvalidArgument, "config: size %zu is too small (initialise it with "
                                         "LOOM_CONFIG_INITIALIZER)", config->size);
    if (config->timeoutMs >= 0) out->timeoutMs = config->timeoutMs;
    if (config->size >= offsetof(loomConfig_t, algorithms) + sizeof(char*) && config->algorithms)
      algos = config->algorithms;
    if (config->size >= offsetof(loomConfig_t, transport) + sizeof(char*) && config->transport)
      out->transport = config->transport;
  }
  if (out->transport != "auto" && out->transport != "shm" && out->transport != "tcp" &&
      out->transport != "ucx")
    return errorf(loomInvalidArgument, "LOOM_TRANSPORT=\"%s\": expected auto, shm, tcp or ucx",
                  out->transport.c_str());
  return parseAlgorithms(algos, &out->forcedBuilders);
}

// LOOM_FLIGHT_RECORDER, LOOM_FLIGHT_RECORDER_DUMP, LOOM_FLIGHT_RECORDER_DIR.
Status readFlightRecorderOptions(FlightRecorderOptions* out) {
  const int64_t capacity = params::getInt("LOOM_FLIGHT_RECORDER");
  if (capacity < 0 || capacity > (int64_t(1) << 24))
    return errorf(loomInvalidArgument,
                  "LOOM_FLIGHT_RECORDER=%lld: the calls kept must be 0 to 16777216",
                  (long long)capacity);
  out->capacity = uint32_t(capacity);
  std::string error;
  if (parseDumpWhen(params::getString("LOOM_FLIGHT_RECORDER_DUMP"), &out->dumpWhen, &error) !=
      loomSuccess)
    return Status(loomInvalidArgument, error);
  out->dir = params::getString("LOOM_FLIGHT_RECORDER_DIR");
  if (out->dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    out->dir = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  }
  return Status::ok();
}

// How the executor waits and where the ranks run: LOOM_SPIN_COUNT, LOOM_YIELD_USEC, LOOM_BIND.
Status readWaitOptions(CommOptions* out) {
  out->wait = readWaitPolicy();
  const std::string bind = params::getString("LOOM_BIND");
  if (bind != "auto" && bind != "none")
    return errorf(loomInvalidArgument, "LOOM_BIND=\"%s\": expected auto or none", bind.c_str());
  out->bindToCores = bind == "auto";
  return Status::ok();
}

// Discovery's and autotune's settings, each with the cache directory. Detection's are read only
// where there is no LOOM_TOPO_FILE, and autotune's only under LOOM_AUTOTUNE, so that a setting
// that does not apply is not warned about.
void readDiscoveryAndAutotune(CommOptions* out) {
  const std::string cacheDir = readCacheDirectory();
  topology::DiscoveryOptions& d = out->discovery;
  d.file = params::getString("LOOM_TOPO_FILE");
  d.dump = params::getString("LOOM_TOPO_DUMP");
  if (d.file.empty()) {
    d.measureMode = params::getInt("LOOM_TOPO_MEASURE");
    d.measureMs = params::getInt("LOOM_TOPO_MEASURE_MS");
    d.cacheDir = cacheDir;
  }
  out->autotune = params::getBool("LOOM_AUTOTUNE");
  if (!out->autotune) return;
  tuner::AutotuneSettings& a = out->autotuneSettings;
  a.candidates = std::max<int>(1, int(params::getInt("LOOM_AUTOTUNE_CANDIDATES")));
  a.runs = std::max<int>(1, int(params::getInt("LOOM_AUTOTUNE_RUNS")));
  a.maxBytes = nonNegative(params::getInt("LOOM_AUTOTUNE_MAX_BYTES"));
  a.cacheDir = cacheDir;
}

// The parts of readTuning that cannot fail: the simulator's options and callSettings' input.
void readTuningFacts(tuner::TunerConfig* out) {
  out->sim = withTransportFacts(out->sim);
  out->sim.singleCopyBytes = nonNegative(params::getInt("LOOM_SHM_CMA_THRESHOLD"));
  out->sim.fast = params::getBool("LOOM_SIM_FAST");
  out->call.sharedBytes =
      transports::ShmArena::callBytes(nonNegative(params::getInt("LOOM_SHM_DIRECT_BYTES")));
  if (const int64_t lead = params::getInt("LOOM_ALLTOALL_LEAD"); lead >= 0)
    out->call.fanInLeadBytes = lead;
}

// The parts of readTuning that name a bad setting.
Status readTuningChoices(tuner::TunerConfig* out) {
  LOOM_TRY(tuner::TuneTable::fromSetting(params::getString("LOOM_TUNE"), &out->rules));
  const std::string mode = params::getString("LOOM_TUNER");
  if (mode != "model" && mode != "table")
    return errorf(loomInvalidArgument, "LOOM_TUNER=\"%s\": expected model or table", mode.c_str());
  out->useModel = mode == "model";
  tuner::AlgoParams& fixed = out->fixed;
  fixed.lanes = int(nonNegative(params::getInt("LOOM_LANES")));
  fixed.fanIn = int(nonNegative(params::getInt("LOOM_ALLTOALL_FANIN")));
  if (const int64_t lead = params::getInt("LOOM_ALLTOALL_LEAD"); lead < -1)
    return errorf(loomInvalidArgument,
                  "LOOM_ALLTOALL_LEAD=%lld: expected bytes (0 or more), or -1 for the model's",
                  (long long)lead);
  const std::string dims = params::getString("LOOM_TORUS_DIMS");
  fixed.torusX = fixed.torusY = 0;
  if (!dims.empty() && (sscanf(dims.c_str(), "%dx%d", &fixed.torusX, &fixed.torusY) != 2 ||
                        fixed.torusX < 1 || fixed.torusY < 1)) {
    return errorf(loomInvalidArgument, "LOOM_TORUS_DIMS=\"%s\": expected XxY, e.g. 4x2",
                  dims.c_str());
  }
  return Status::ok();
}

}  // namespace

Status parseAlgorithms(const std::string& text, ForcedBuilders* out) {
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                     : comma - start);
    start = comma == std::string::npos ? text.size() : comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return errorf(loomInvalidArgument,
                    "LOOM_ALGO: \"%s\" is not collective=algorithm (e.g. allreduce=ring)",
                    item.c_str());
    std::string coll = item.substr(0, eq), algo = item.substr(eq + 1);
    bool knownColl = false;
    for (int c = 0; c <= int(Collective::SendRecv); ++c)
      if (coll == collectives::collectiveName(Collective(c))) {
        knownColl = true;
        (*out)[size_t(c)] = collectives::findBuilder(Collective(c), algo);
        if ((*out)[size_t(c)] == nullptr) {
          std::string known;
          for (auto n : collectives::builderNames(Collective(c)))
            known += (known.empty() ? "" : ", ") + std::string(n);
          return errorf(loomInvalidArgument, "LOOM_ALGO: %s has no algorithm \"%s\" (known: %s)",
                        coll.c_str(), algo.c_str(), known.c_str());
        }
      }
    if (!knownColl)
      return errorf(loomInvalidArgument, "LOOM_ALGO: unknown collective \"%s\"", coll.c_str());
  }
  return Status::ok();
}

Status readCommOptions(const loomConfig_t* config, CommOptions* out) {
  // NCCL's variables stand in for unset LOOM_* ones: one loom cannot read fails here, as in NCCL.
  LOOM_TRY(params::checkNccl());
  ncclenv::reportOnce();
  LOOM_TRY(readCallerChoices(config, out));
  LOOM_TRY(readTuning(&out->tuning));
  // LOOM_TRANSPORT=tcp or ucx means no shared memory of loom's own, so no direct (arena)
  // algorithms either.
  if (out->transport == "tcp" || out->transport == "ucx") out->tuning.call.sharedBytes = 0;
  out->shm = readShmOptions();
  out->tcp = readTcpOptions();
  out->ucx = readUcxOptions();
  out->directBytes = nonNegative(params::getInt("LOOM_SHM_DIRECT_BYTES"));
  LOOM_TRY(readWaitOptions(out));
  out->checkCalls = params::getBool("LOOM_CHECK");
  LOOM_TRY(readFlightRecorderOptions(&out->flightRecorder));
  readDiscoveryAndAutotune(out);
  return Status::ok();
}

transports::ShmOptions readShmOptions() {
  transports::ShmOptions o;
  o.slotBytes = size_t(nonNegative(params::getInt("LOOM_SHM_SLOT_BYTES")));
  o.slots = int(std::clamp<int64_t>(params::getInt("LOOM_SHM_SLOTS"), 0, INT_MAX));
  o.cmaThreshold = size_t(nonNegative(params::getInt("LOOM_SHM_CMA_THRESHOLD")));
  return o;
}

transports::tcp::TcpOptions readTcpOptions() { return transports::tcp::tcpOptionsFromParams(); }

transports::ucx::UcxOptions readUcxOptions() {
  transports::ucx::UcxOptions o;
  o.chunkBytes = size_t(nonNegative(params::getInt("LOOM_UCX_CHUNK_BYTES")));
  o.peerErrors = params::getBool("LOOM_UCX_PEER_ERRORS");
  return o;
}

Status readTuning(tuner::TunerConfig* out) {
  readTuningFacts(out);
  return readTuningChoices(out);
}

tuner::TunerConfig communicatorTuning() {
  tuner::TunerConfig config;
  (void)readTuning(&config);
  return config;
}

collectives::CallSettings communicatorSettings(const topology::Topology& topo) {
  const tuner::TunerConfig config = communicatorTuning();
  return tuner::callSettings(config.fixed, config.call, topo);
}

tuner::SimOptions withTransportFacts(tuner::SimOptions sim) {
  sim.singleCopyPieceBytes = transports::kCmaPieceBytes;
  sim.nonTemporalBytes = transports::kNonTemporalBytes;
  return sim;
}

std::string readCacheDirectory() {
  return topology::cacheDirectory(params::getString("LOOM_CACHE_DIR"));
}

WaitPolicy readWaitPolicy() {
  WaitPolicy w;
  w.spinCount = params::getInt("LOOM_SPIN_COUNT");
  w.yieldNs = nonNegative(params::getInt("LOOM_YIELD_USEC")) * 1000;
  return w;
}

}  // namespace loom
