// The driver: a program supplies a Backend (how to run one collective and how to exchange a few
// bytes between ranks); runSweep() runs nccl-tests' sweep on it and prints the table, and
// runRace() runs several backends interleaved (--race).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "perf/options.h"
#include "perf/output.h"

namespace loom::perf {

/** Iterations for one size: `iters`, scaled down so that iters * bytes stays under
 *  budgetBytes (0: no cap), but at least 1 (0 stays 0, for warm-up). Every rank computes
 *  the same number from the same inputs, so they stay in step. */
int itersForSize(int iters, size_t bytes, size_t budgetBytes);
/** Combines the ranks' times (one per rank, in rank order) as -a asks. */
double aggregateTimes(Aggregate a, const std::vector<double>& timesUs);

/** One call, with buffers already laid out for its placement. */
struct CollCall {
  Collective collective;
  loomDataType_t dtype;
  loomRedOp_t op;
  int root;
  const void* send;
  void* recv;
  size_t count;  // CollSizes::paramCount
  bool inPlace;
  void* stream = nullptr;  // --mem device: the stream the call is enqueued on
};

/** What a benchmarked library supplies. Calls on every rank in the same order. */
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  /** One line for the header: library, version, transport, algorithm. */
  virtual std::string describe() const = 0;
  /** Empty when the backend runs this combination, else why not. */
  virtual std::string unsupported(Collective c, loomDataType_t dtype, loomRedOp_t op) const = 0;
  /** Called before each timed batch (outside the clock): a place to build per-size state. */
  virtual bool prepare(const CollCall& call) {
    (void)call;
    return true;
  }
  /** Runs the call once, synchronously. False on error, after printing why to stderr. */
  virtual bool run(const CollCall& call) = 0;
  /** Every rank contributes `bytes` at mine; all receives nranks * bytes, by rank. */
  virtual bool allGather(const void* mine, void* all, size_t bytes) = 0;
  virtual bool barrier();
  /** For --json: "loom", "mpi", "gloo"; the library's version; the algorithm it uses for
   *  collective c ("auto" when the library picks by size). */
  virtual std::string library() const = 0;
  virtual std::string version() const = 0;
  virtual std::string algorithm(Collective c) const {
    (void)c;
    return "auto";
  }
  /** For --json: the algorithm (and parameters) the library ran its last call with, where it
   *  says (loom); "" where it does not. */
  virtual std::string lastAlgorithm() const { return ""; }
  /** --sim, on rank 0, once before the sweep: sets up the backend's model of the run, whose
   *  rank r sits on host hostOfRank[r] (0..hosts-1), and returns a line that names the model
   *  or says why there is none. */
  virtual std::string setUpPrediction(const Options& options, const std::vector<int>& hostOfRank) {
    (void)options;
    (void)hostOfRank;
    return "no performance model for this library";
  }
  /** --sim: the predicted out-of-place time of the call; false (with the reason in
   *  out->algorithm) when there is none. */
  virtual bool predict(const CollCall& call, Prediction* out) {
    (void)call;
    (void)out;
    return false;
  }
  /** Where an in-place call leaves this rank's output, in elements from the start of the
   *  shared buffer: nccl-tests' layout by default; MPI's in-place reduce-scatter differs. */
  virtual size_t inPlaceOutputOffset(Collective c, const CollSizes& sizes) const;
  /** --mem shared: `bytes` (a multiple of the page size) of the library's shareable memory,
   *  zero-filled, released with releaseShared; null on failure. By default plain memory: a
   *  library without such an allocator runs on what it would get anyway. */
  virtual void* allocateShared(size_t bytes);
  virtual void releaseShared(void* p);
};

/** The whole benchmark on one rank: header, sweep, footer (printed by rank 0). Returns the
 *  process exit code (non-zero on errors or wrong results). */
int runSweep(Backend& backend, const Options& options, const std::string& program,
             const std::string& gitCommit = "unknown");

/** One entry of --race: a backend set up to run one algorithm (or to choose its own). */
struct Contestant {
  Backend* backend = nullptr;
  std::string label;  // the --race entry as given ("ring", "pairwise:2", "auto")
  // Variables this entry set for its communicator (LOOM_LANES=2, LOOM_AUTOTUNE=1): its --json
  // file records them in "env", as a separate run under them would.
  std::vector<std::pair<std::string, std::string>> env;
};

/** --race: the sweep of runSweep with several contestants in one run. Every size runs
 *  options.repeats rounds; each round gives every contestant one turn (warm-up and timed
 *  batch, out of place and in place), starting one further along each round, so that a noisy
 *  spell and the caches' state fall on all alike. A row per contestant and size shows the
 *  median over rounds; the report ends with the regret of each contestant that chose its own
 *  algorithm (Backend::algorithm "auto") against the fastest forced one of the same size.
 *  --json FILE writes one file per contestant, FILE with "-LABEL" before its extension. */
int runRace(const std::vector<Contestant>& contestants, const Options& options,
            const std::string& program, const std::string& gitCommit = "unknown");

}  // namespace loom::perf
