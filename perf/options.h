// loom-perf's command line (nccl-tests' flags and loom-perf's own), shared by the peers.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "perf/perf_common.h"

namespace loom::perf {

/** nccl-tests' -a: which rank's time a row shows, or the average, minimum or maximum. */
enum class Aggregate { kRank0 = 0, kAvg = 1, kMin = 2, kMax = 3 };

/** --api: which of loom's APIs loom-perf calls: its own C API (loom.h), or NCCL's through loom's
 *  drop-in libnccl.so.2 (perf/nccl_api.h). */
enum class Api { kLoom, kNccl };

struct Options {
  Collective collective = Collective::AllReduce;
  size_t minBytes = 32u << 20;  // nccl-tests' defaults
  size_t maxBytes = 32u << 20;
  size_t stepBytes = 1u << 20;
  int stepFactor = 1;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  loomRedOp_t op = loomSum;
  loomDataType_t dtype = loomFloat32;
  int root = 0;
  int nranks = 0;         // -N: ranks to fork; 0: the launcher made them (mpirun, torchrun)
  std::string algorithm;  // -A: backend-specific algorithm name (loom: LOOM_ALGO grammar)
  // --bind core: pin forked rank r to the r-th allowed CPU, as mpirun does for up to 2 ranks;
  // latency on a loaded machine depends on it more than on anything a library does.
  bool bindCores = false;
  // --mem shared: the buffers come from Backend::allocateShared (loom: loomMemAlloc, which
  // lets one host's ranks read them in each other's processes; nccl-tests' -R registers).
  bool sharedBuffers = false;
  // --mem device: the buffers are device memory (loomDeviceMalloc: CUDA, or LOOM_DEVICE's
  // emulated device) and every call is enqueued on one stream, synchronised after each batch.
  bool deviceBuffers = false;
  // Large sizes run fewer iterations so that a full sweep stays short; 0: no cap.
  size_t bytesPerSize = size_t(512) << 20;
  bool allDtypes = false;  // -d all: every dtype the backend runs, one block of rows each
  bool allOps = false;     // -o all
  // -z: nccl-tests' blocking mode. Every call of a host library returns when its work is
  // done, so both modes measure the same thing; the value is accepted and reported.
  int blocking = 0;
  Aggregate average = Aggregate::kAvg;  // -a: how the ranks' times become the row's time
  std::string jsonPath;                 // --json FILE: every row, with run metadata
  std::string csvPath;                  // --csv FILE
  Api api = Api::kLoom;                 // --api loom|nccl (loom-perf only)
  std::vector<std::string> compare;     // --compare mpi,gloo,nccl (loom-perf only; nccl: loom
                                        // through its libnccl.so.2, loom-perf --api nccl)
  int repeats = 1;                      // -R: runs per library under --compare, rounds under
                                        // --race (medians)
  // --race A,B,...: algorithms to run interleaved in one run (the backend says what an entry
  // means: loom-perf takes NAME, NAME:LANES, auto and autotune).
  std::vector<std::string> race;
  bool sim = false;  // --sim: the tuner's predictions beside the numbers
  // --topo FILE: --sim's topology model (default LOOM_TOPO_FILE, else a uniform model of the
  // run's hosts and ranks).
  std::string topoFile;
  // --inject_error: flips one output element before the check, so that tests can prove
  // end to end that -c catches a wrong result.
  bool injectError = false;
};

/** Renders the sweep options back into a command line (collective first), for running the
 *  same sweep with another program; -N, -A, --api, --json/--csv, --compare and -R are left
 *  out. */
std::vector<std::string> sweepArgs(const Options& options);

/** Parses "COLLECTIVE [flags]" (argv[1] is the collective). On failure returns false with
 *  a message in *error; "-h" returns false with an empty error. */
bool parseOptions(int argc, char** argv, Options* options, std::string* error);
std::string usage(const char* program);

/** --compare's names for loom over one transport, as the environment that selects it:
 *  shm, tcp, ucx -> {"LOOM_TRANSPORT=shm"}...; ucx-tcp, ucx-sm -> {"LOOM_TRANSPORT=ucx",
 *  "UCX_TLS=tcp"}...; empty for any other name. The run has no UCX_TLS but this one (ucx:
 *  UCX's default choice). */
std::vector<std::string> loomTransportSetting(const std::string& name);

/** The algorithm setting (LOOM_ALGO's grammar) that -A asks for: "-A ring" means "ring for this
 *  collective" (allreduce=ring for all_reduce); text with '=' is taken as it is; "" without -A. */
std::string algorithmSetting(const Options& options);
/** The algorithm a setting in LOOM_ALGO's grammar forces for c; "auto" when it names none. */
std::string forcedAlgorithm(const std::string& setting, Collective c);

}  // namespace loom::perf
