// The parts of loom-perf that its peer baselines (loom-mpi-perf, loom-gloo-perf) share, so that
// all three measure and print in exactly the same units: nccl-tests' size/count conventions,
// algbw/busbw, the expected-value check and the table. A program only supplies a Backend (how
// to run one collective and how to exchange a few bytes between ranks); runSweep() does the
// rest.
//
// Uses only the enums of loom/loom.h, never the library, so the peers build without libloom.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/loom.h"

namespace loom::perf {

enum class Collective {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kReduce,
  kSendRecv,
};
inline constexpr int kNumCollectives = 7;

/** nccl-tests' name of the collective ("all_reduce", "alltoall", "sendrecv", ...). */
const char* collectiveName(Collective c);
std::optional<Collective> parseCollective(std::string_view name);
/** Whether the collective takes a reduction op / a root. */
bool collectiveHasOp(Collective c);
bool collectiveHasRoot(Collective c);

/** busbw = algbw * factor, as nccl-tests defines it (allreduce 2(n-1)/n; allgather,
 *  reduce-scatter, alltoall (n-1)/n; broadcast, reduce, sendrecv 1). */
double busBwFactor(Collective c, int nranks);

/** Element counts of one call, as nccl-tests' getCollByteCount derives them from a size. */
struct CollSizes {
  size_t sendCount = 0;   // elements in each rank's send buffer
  size_t recvCount = 0;   // elements in each rank's receive buffer
  size_t paramCount = 0;  // the count argument of the call (the table's "count")
  // In-place layout: the send / receive buffer is the shared buffer plus rank * offset
  // (allgather: send at rank * sendcount; reduce-scatter: receive at rank * recvcount).
  size_t sendInPlaceOffset = 0;
  size_t recvInPlaceOffset = 0;
  /** The table's "size" column: max(send, receive) bytes per rank. */
  size_t bytes(size_t elemSize) const {
    return (sendCount > recvCount ? sendCount : recvCount) * elemSize;
  }
};
/** sizeBytes is the sweep's size; counts round down to whole elements per rank. */
CollSizes collSizes(Collective c, size_t sizeBytes, size_t elemSize, int nranks);

size_t dtypeBytes(loomDataType_t d);
/** nccl-tests' spelling ("float", "half", "bfloat16", "f8e4m3"...). */
const char* dtypeName(loomDataType_t d);
std::optional<loomDataType_t> parseDtype(std::string_view name);
const char* opName(loomRedOp_t op);
std::optional<loomRedOp_t> parseOp(std::string_view name);

/** "8", "64K", "256M", "1G" (powers of 1024, either case); nullopt when malformed. */
std::optional<size_t> parseSize(std::string_view text);
/** nccl-tests' sweep: min, then *factor when factor > 1, else +step, while <= max. */
std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, int factor, size_t stepBytes);
/** Iterations for one size: `iters`, scaled down so that iters * bytes stays under
 *  budgetBytes (0: no cap), but at least 1 (0 stays 0, for warm-up). Every rank computes
 *  the same number from the same inputs, so they stay in step. */
int itersForSize(int iters, size_t bytes, size_t budgetBytes);

/** nccl-tests' -a: which rank's time a row shows, or the average, minimum or maximum. */
enum class Aggregate { kRank0 = 0, kAvg = 1, kMin = 2, kMax = 3 };
/** The median of v (the mean of the middle two when even); -1 when empty. */
double medianOf(std::vector<double> v);
/** Two --race entries' times of the same rounds (ResultRow::roundsUs): the median over rounds
 *  of a's over b's in the same round, -1 where they have no rounds in common. A round gives
 *  every entry its turn in close succession, so the machine's drift between rounds, which can
 *  move both medians by 20%, cancels. */
double pairedRatio(const std::vector<double>& a, const std::vector<double>& b);
/** Combines the ranks' times (one per rank, in rank order) as -a asks. */
double aggregateTimes(Aggregate a, const std::vector<double>& timesUs);

struct Options {
  Collective collective = Collective::kAllReduce;
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
  std::vector<std::string> compare;     // --compare mpi,gloo (loom-perf only)
  int repeats = 1;                      // -R: runs per library under --compare, rounds under
                                        // --race (medians)
  // --race A,B,...: algorithms to run interleaved in one run (the backend says what an entry
  // means: loom-perf takes NAME, NAME:LANES, auto and autotune).
  std::vector<std::string> race;
  bool sim = false;                     // --sim: the tuner's predictions beside the numbers
  // --topo FILE: --sim's topology model (default LOOM_TOPO_FILE, else a uniform model of the
  // run's hosts and ranks).
  std::string topoFile;
  // --inject_error: flips one output element before the check, so that tests can prove
  // end to end that -c catches a wrong result.
  bool injectError = false;
};

/** Renders the sweep options back into a command line (collective first), for running the
 *  same sweep with another program; -N, -A, --json/--csv, --compare and -R are left out. */
std::vector<std::string> sweepArgs(const Options& options);

/** Parses "COLLECTIVE [flags]" (argv[1] is the collective). On failure returns false with
 *  a message in *error; "-h" returns false with an empty error. */
bool parseOptions(int argc, char** argv, Options* options, std::string* error);
std::string usage(const char* program);

// ---- Data: inputs chosen so that every reduction is exact in any order ----------------

/** Fills rank `rank`'s input (sendCount elements) for the call. */
void fillInput(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank, int root,
               const CollSizes& sizes, void* send);
/** Writes the output the call must produce on `rank` (for tests and self-checks). */
void writeExpected(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                   int root, const CollSizes& sizes, void* recv);
/** Elements of rank `rank`'s output (recvCount elements at recv) that differ from the
 *  expected result. Ranks without output (non-root of reduce) always count 0. */
size_t countWrong(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                  int root, const CollSizes& sizes, const void* recv);

// ---- The table --------------------------------------------------------------------------

/** One placement's measurement (time already the max over ranks, wrong the sum). */
struct Measurement {
  double timeUs = 0;
  double algBw = 0;  // GB/s (1e9 bytes)
  double busBw = 0;
  int64_t wrong = -1;  // -1: not checked ("N/A")
};
Measurement makeMeasurement(Collective c, size_t bytes, int nranks, double timeUs, int64_t wrong);

/** "# loom-perf all_reduce: nranks 4 minBytes ..." plus one line per rank and the column
 *  headers; `ranks` lines come from rankLine(). */
std::string formatHeader(const std::string& program, const Options& options, int nranks,
                         const std::string& backend, const std::vector<std::string>& ranks);
std::string rankLine(int rank, int pid, const char* host);
/** --sim: what the backend's model predicts for one call (out of place). */
struct Prediction {
  Measurement time;  // timeUs 0 when there is no prediction
  // The algorithm simulated (the forced one, or the library's choice), or why there is no
  // prediction.
  std::string algorithm;
};

/** The --sim columns come after the measured ones when `simulated` is given. */
std::string formatRow(Collective c, const CollSizes& sizes, loomDataType_t dtype, loomRedOp_t op,
                      int root, const Measurement& outOfPlace, const Measurement& inPlace,
                      const Prediction* simulated = nullptr);
std::string formatFooter(int64_t wrongTotal, double avgBusBw, bool checked);

// ---- Machine-readable results (--json, --csv) -------------------------------------------

/** One line of the table, as --json and --csv record it. */
struct ResultRow {
  size_t bytes = 0;
  size_t count = 0;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int root = -1;
  std::string algorithm;  // the forced algorithm, or "auto" when the library picks
  std::string ran;        // what the library says it ran (Backend::lastAlgorithm), or ""
  Measurement outOfPlace, inPlace;
  std::vector<double> roundsUs;  // with --race: the out-of-place time of each round, in the
                                 // order they ran (JSON only; outOfPlace has their median)
  std::optional<Prediction> simulated;  // with --sim (JSON only)
};

/** What a run records besides its rows. */
struct RunMetadata {
  std::string program;  // "loom-perf"
  std::string library;  // "loom", "mpi", "gloo"
  std::string version;
  std::string gitCommit;
  std::string backend;  // Backend::describe()
  Collective collective = Collective::kAllReduce;
  int ranks = 0;
  int hosts = 0;
  std::vector<std::pair<std::string, std::string>> env;  // LOOM_* variables that are set
  std::string race;  // --race: the run's name, the same in every entry's file ("" otherwise)
};

/** The LOOM_* variables of this process's environment, sorted by name. */
std::vector<std::pair<std::string, std::string>> loomEnvironment();
std::string formatJson(const RunMetadata& meta, const Options& options,
                       const std::vector<ResultRow>& rows, int64_t wrongTotal, double avgBusBw);
std::string formatCsv(const RunMetadata& meta, const std::vector<ResultRow>& rows);

/** A parsed JSON value: enough of JSON to read back what formatJson writes. */
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;
  /** The member called key, or null when absent (or not an object). */
  const JsonValue* find(std::string_view key) const;
};
/** Parses text; nullopt (with *error) when it is not one well-formed JSON value. */
std::optional<JsonValue> parseJson(std::string_view text, std::string* error);

// ---- The driver -------------------------------------------------------------------------

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

// ---- Forked ranks (-N) ------------------------------------------------------------------

/** A rank made by forkRanks(), with a pipe from rank 0 to hand out a bootstrap id. */
class ForkedRank {
 public:
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  /** Rank 0 sends `bytes` at data to every other rank; the others receive into data. */
  bool shareFromRank0(void* data, size_t bytes);

 private:
  friend int forkRanks(int, bool, const std::function<int(ForkedRank&)>&);
  int rank_ = 0;
  int nranks_ = 1;
  std::vector<int> fds_;  // rank 0: write ends to ranks 1..n-1; others: their read end
};

/** Forks n rank processes, runs body in each and waits for them. Forking comes before any
 *  library call, so no rank inherits another's threads or sockets. When a rank fails the
 *  others are killed rather than left hanging in a collective. bindCores pins rank r to the
 *  (r mod count)-th CPU this process may use. Returns 0 when all exit 0. */
int forkRanks(int n, bool bindCores, const std::function<int(ForkedRank&)>& body);

}  // namespace loom::perf
