// The communicator's options: every LOOM_* parameter that shapes a communicator (base/params.cc
// lists them), read once, when it is created, and only here. The layers below take what they
// need as arguments: each transport its options struct, the tuner its configuration, topology
// discovery the cache directory. Tools and benchmarks that decide, simulate or connect as a
// communicator would read their settings through the same functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "collectives/builders.h"
#include "comm/cpu_binding.h"
#include "comm/flight_recorder.h"
#include "loom/loom.h"
#include "topology/comm_discovery.h"
#include "topology/topology.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/ucx/ucx_transport.h"
#include "tuner/autotuner.h"
#include "tuner/simulator.h"
#include "tuner/tuner.h"

namespace loom {

// LOOM_ALGO: the builder forced for each collective (null: the tuner chooses).
using ForcedBuilders =
    std::array<const collectives::Builder*, size_t(collectives::Collective::SendRecv) + 1>;

struct CommOptions {
  int64_t timeoutMs = -1;           // LOOM_TIMEOUT_MS, or the config's
  std::string transport;            // LOOM_TRANSPORT, or the config's: auto, shm, tcp or ucx
  ForcedBuilders forcedBuilders{};  // LOOM_ALGO, or the config's
  tuner::TunerConfig tuning;        // readTuning; no arena under LOOM_TRANSPORT=tcp or ucx
  transports::ShmOptions shm;       // readShmOptions
  transports::tcp::TcpOptions tcp;  // readTcpOptions
  transports::ucx::UcxOptions ucx;  // readUcxOptions
  uint64_t directBytes = 0;         // LOOM_SHM_DIRECT_BYTES: the direct arena's data
  WaitPolicy wait;                  // readWaitPolicy
  bool bindToCores = true;  // LOOM_BIND=auto (else none)
  bool checkCalls = false;  // LOOM_CHECK: the ranks agree on every call before it runs
  FlightRecorderOptions flightRecorder;  // LOOM_FLIGHT_RECORDER*
  // Topology discovery's settings (LOOM_TOPO_*; those of detection only without a file) and
  // autotune's (LOOM_AUTOTUNE_*, read only under LOOM_AUTOTUNE), both with the cache directory.
  topology::DiscoveryOptions discovery;
  bool autotune = false;
  tuner::AutotuneSettings autotuneSettings;
};

// LOOM_ALGO's grammar: "allreduce=ring,allgather=ring" as the builder forced per collective
// (entries it does not name are left as they are). An unknown collective or algorithm is an error
// that names it and lists the known ones.
Status parseAlgorithms(const std::string& text, ForcedBuilders* out);
// All of them; `config` (loomCommInitRankConfig's, may be null) overrides what it sets. A bad
// setting fails here, before any rank connects, with an error that names it.
Status readCommOptions(const loomConfig_t* config, CommOptions* out);
// How the executor waits: LOOM_SPIN_COUNT (negative: chooseSpin decides by the machine's cores)
// and LOOM_YIELD_USEC.
WaitPolicy readWaitPolicy();

// The parts a tool or benchmark reads alone.
// LOOM_SHM_SLOT_BYTES, LOOM_SHM_SLOTS, LOOM_SHM_CMA_THRESHOLD.
transports::ShmOptions readShmOptions();
// LOOM_TCP_SOCKETS, LOOM_TCP_CHUNK_BYTES, LOOM_TCP_PACING.
transports::tcp::TcpOptions readTcpOptions();
// LOOM_UCX_CHUNK_BYTES, LOOM_UCX_PEER_ERRORS.
transports::ucx::UcxOptions readUcxOptions();
// LOOM_TUNE's rules, LOOM_TUNER's mode, as `fixed` the parameters the user set (LOOM_LANES,
// LOOM_TORUS_DIMS, LOOM_ALLTOALL_FANIN; 0 = the tuner's to choose), what callSettings takes
// (LOOM_ALLTOALL_LEAD, the bytes a call may use of LOOM_SHM_DIRECT_BYTES' arena), and the
// simulator's options: the single-copy path of LOOM_SHM_CMA_THRESHOLD with the transport's
// facts (withTransportFacts). Every reader (the communicator, loom-perf --sim, loom-tune,
// loom-calibrate) goes through here, so they all decide alike.
Status readTuning(tuner::TunerConfig* out);
// readTuning's, what parsed before a bad setting kept: for the tools that simulate without a
// communicator, which would refuse to start with such a setting (so no run was measured with
// one). A prediction must cost a plan as the communicator's tuner does, or a fit would
// describe another simulator than the one that chooses.
tuner::TunerConfig communicatorTuning();
// The call settings of a communicator on `topo` (tuner::callSettings of communicatorTuning):
// a prediction has to simulate the plan the measured run executed.
collectives::CallSettings communicatorSettings(const topology::Topology& topo);
// `sim` with what the simulator prices of the shm transport: the single-copy receive's pieces
// (transports::kCmaPieceBytes) and the slot path's non-temporal stores
// (transports::kNonTemporalBytes).
tuner::SimOptions withTransportFacts(tuner::SimOptions sim);
// topology::cacheDirectory of LOOM_CACHE_DIR.
std::string readCacheDirectory();

}  // namespace loom
