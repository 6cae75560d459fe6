// The interposer's knobs, its record of where calls went, and loom's errors as MPI's.
#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

// Where loom's model cannot price a call (no model, an algorithm loom lacks for it), calls
// below this stay on MPI: below it loom is no faster than Open MPI's shared-memory
// collectives on 2 ranks of one host (docs/MPI.md's measurements).
constexpr size_t kFallbackMinBytes = 4096;
// LOOM_MPI_MODEL_MARGIN's default, in percent: the model's error on the netns testbed is
// ~4% median, and a call that loom's plan saves less on than that is MPI's to run.
constexpr size_t kDefaultMarginPercent = 10;
// LOOM_MPI_MODEL_CALL_NS's default: what a call on loom costs beyond what the model prices
// (the interposer's routing, loom's call entry). On 2 ranks of one host loom's 32-128 B
// allreduce took 0.5-0.7 us where the model priced loom's plan and MPI's alike at ~0.4 us, and
// Open MPI took 0.4 us.
constexpr size_t kDefaultCallNs = 300;
// LOOM_MPI_TRIALS's default: timed calls on each side before a size's verdict. Each side's
// median of three, summed over the ranks, outlasts one descheduled call on a loaded host.
constexpr size_t kDefaultTrials = 3;
// LOOM_MPI_TRIAL_MARGIN's default, in percent: where the two measure within it, MPI keeps the
// call (the model's margin does the same for its prices).
constexpr size_t kDefaultTrialMarginPercent = 5;

const char* const kCallNames[] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Bcast", "MPI_Allgather",
                                  "MPI_Reduce_scatter_block", "MPI_Alltoall", "MPI_Alltoallv",
                                  "MPI_Barrier", "MPI_Iallreduce", "MPI_Ibcast"};
const char* const kRouteReasons[] = {
    "runs on loom",
    "falls through to MPI: LOOM_MPI_INTERPOSE=0",
    "falls through to MPI: a null or inter-communicator",
    "falls through to MPI: a datatype loom does not have (derived with holes, or no loom type)",
    "falls through to MPI: an op loom does not have (user-defined, MAXLOC/MINLOC, logical or "
    "bitwise)",
    "falls through to MPI: below LOOM_MPI_MIN_BYTES (or the call's LOOM_MPI_MIN_BYTES_<CALL>)",
    "falls through to MPI: loom's model prices MPI's own algorithm within "
    "LOOM_MPI_MODEL_MARGIN of loom's plan",
    "falls through to MPI: a trial call, timed against loom's (LOOM_MPI_TRIALS)",
    "falls through to MPI: its size's trial calls (a non-blocking call's: its blocking "
    "counterpart's) were not LOOM_MPI_TRIAL_MARGIN faster on loom",
    "falls through to MPI: an MPI_IN_PLACE form loom does not have",
    "falls through to MPI: send and receive sides of different sizes",
    "falls through to MPI: a negative count or a root out of range",
    "falls through to MPI: no loom communicator could be made for the communicator",
    "falls through to MPI: no blocking call has made the communicator's loom communicator yet",
    "falls through to MPI: a rank of the communicator lacks MPI_THREAD_MULTIPLE"};
static_assert(sizeof(kCallNames) / sizeof(*kCallNames) == size_t(Call::Count));
static_assert(sizeof(kRouteReasons) / sizeof(*kRouteReasons) == size_t(Route::Count));

constexpr int kKinds = int(Call::Count) * int(Route::Count);
std::atomic<long> gCounts[kKinds];

// A knob's value from the environment, or fallback when it is unset; a value that is not a
// number is said once on stderr and ignored rather than taken as 0.
size_t knob(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (errno != 0 || *end != '\0' || *text == '-') {
    std::fprintf(stderr, "loom-mpi: %s=%s is not a non-negative number; using %zu\n", name,
                 text, fallback);
    return fallback;
  }
  return size_t(v);
}

}  // namespace

bool interposing() {
  static const bool on = knob("LOOM_MPI_INTERPOSE", 1) != 0;
  return on;
}

size_t minBytes(Call call) {
  // LOOM_MPI_MIN_BYTES_<CALL> (MPI_Alltoall: LOOM_MPI_MIN_BYTES_ALLTOALL) over the one for all.
  static const auto thresholds = [] {
    std::array<size_t, size_t(Call::Count)> bytes{};
    const size_t all = knob("LOOM_MPI_MIN_BYTES", SIZE_MAX);
    for (size_t c = 0; c < bytes.size(); ++c) {
      std::string name = std::string("LOOM_MPI_MIN_BYTES_") + (kCallNames[c] + 4);
      for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
      bytes[c] = knob(name.c_str(), all);
    }
    return bytes;
  }();
  return thresholds[size_t(call)];
}

const char* mpiAlgorithm(Call call, size_t bytes, int ranks) {
  const bool powerOfTwo = ranks > 0 && (ranks & (ranks - 1)) == 0;
  switch (call) {
    case Call::Allreduce:  // recursive doubling for small buffers, the ring for large ones
    case Call::Iallreduce:
    case Call::Barrier:
      return bytes < 10000 ? "rd" : "ring";
    case Call::Reduce:  // binomial tree, then a pipelined chain
      return bytes < 65536 ? "tree" : "chain";
    case Call::Bcast:  // binomial and split-binary trees, then a pipelined chain
    case Call::Ibcast:
      return bytes < 370728 ? "tree" : "chain";
    case Call::Allgather:  // recursive doubling (Bruck where the ranks are no power of 2)
      return bytes >= 50000 ? "ring" : powerOfTwo ? "rd" : "bruck";
    case Call::ReduceScatterBlock:  // recursive halving, the ring for large ones
      return powerOfTwo && bytes < 65536 ? "rh" : "ring";
    case Call::Alltoall:  // every block at once (linear), pairwise exchanges from 3000 B a block
      return bytes / size_t(ranks > 0 ? ranks : 1) < 3000 ? "incast" : "pairwise";
    default:
      return nullptr;
  }
}

namespace {

struct DecisionKey {
  loomComm_t comm;
  Call call;
  size_t bytes;
  bool operator==(const DecisionKey&) const = default;
};
struct DecisionHash {
  size_t operator()(const DecisionKey& k) const {
    return std::hash<const void*>()(k.comm) ^ (k.bytes * 0x9e3779b97f4a7c15ull) ^ size_t(k.call);
  }
};

// The model's price of issue on comm in microseconds, as loom's tuner runs it (algorithm
// NULL) or as algorithm would; negative where it has none.
double priced(loomComm_t comm, const Issue& issue, const char* algorithm) {
  float us = -1;
  loomGroupStart();
  const loomResult_t queued = issue.fn(issue.context, comm);
  const loomResult_t simulated = loomGroupSimulateEndAs(algorithm, &us);
  return queued == loomSuccess && simulated == loomSuccess ? double(us) : -1.0;
}

bool decide(loomComm_t comm, Call call, size_t bytes, const Issue& issue) {
  static const size_t margin = knob("LOOM_MPI_MODEL_MARGIN", kDefaultMarginPercent);
  static const double callUs = double(knob("LOOM_MPI_MODEL_CALL_NS", kDefaultCallNs)) * 1e-3;
  int ranks = 0;
  loomCommCount(comm, &ranks);
  const char* theirs = mpiAlgorithm(call, bytes, ranks);
  const double loomUs = priced(comm, issue, nullptr);
  const double mpiUs = theirs == nullptr ? -1.0 : priced(comm, issue, theirs);
  const bool priceable = loomUs >= 0 && mpiUs >= 0;
  const bool onLoom = priceable ? mpiUs >= (loomUs + callUs) * (1.0 + double(margin) / 100.0)
                                : bytes >= kFallbackMinBytes;
  char line[256];
  std::snprintf(line, sizeof(line), "%s of %zu B on %d ranks: loom's plan %.1f us, MPI's %s %.1f us "
                "on loom's model: %s", kCallNames[int(call)], bytes, ranks, loomUs,
                theirs == nullptr ? "(none)" : theirs, mpiUs,
                priceable ? (onLoom ? "loom" : "MPI") : "unpriced, by size");
  loomLogInfo("MPI", line);
  return onLoom;
}

}  // namespace

namespace {

// A size's routing on a communicator: the model's decision, and where it sent the size to
// loom, the trial calls so far and their verdict.
struct Decision {
  bool model = false;  // the model's: loom
  int calls = 0;  // calls of this size the model sent to loom, up to the verdict
  std::vector<long long> loomNs, mpiNs;  // the timed trial calls' times
  int verdict = -1;  // -1: trials still running; else 1: loom, 0: MPI
};

// The decisions made, by communicator, call and size; a communicator's go before it is
// destroyed (forgetDecisions), so that one made later at its address decides afresh, as its
// peers, whose addresses differ, do.
std::mutex gDecidedMutex;
std::unordered_map<DecisionKey, Decision, DecisionHash>& gDecided =
    *new std::unordered_map<DecisionKey, Decision, DecisionHash>;

size_t trials() {
  static const size_t n = knob("LOOM_MPI_TRIALS", kDefaultTrials);
  return n;
}

long long median(std::vector<long long> v) {
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

bool modelPrefersLoom(loomComm_t comm, Call call, size_t bytes, const Issue& issue) {
  const DecisionKey key{comm, call, bytes};
  {
    std::lock_guard<std::mutex> lock(gDecidedMutex);
    const auto it = gDecided.find(key);
    if (it != gDecided.end()) return it->second.model;
  }
  // The model is the communicator's, which its queued non-blocking calls may be using now.
  awaitQueue(comm);
  const bool onLoom = decide(comm, call, bytes, issue);
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  Decision decision;
  decision.model = onLoom;
  gDecided.emplace(key, std::move(decision));
  return onLoom;
}

Measured measuredRoute(loomComm_t comm, Call call, size_t bytes) {
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  Decision& d = gDecided.at(DecisionKey{comm, call, bytes});  // modelPrefersLoom made it
  if (trials() == 0) return {true, false, false};
  if (d.verdict >= 0) return {d.verdict == 1, false, false};
  // Turns: loom, MPI, loom, MPI...; the first of each untimed (a size's first call on loom
  // plans it, and either side's may set up connections).
  const int turn = d.calls++;
  return {turn % 2 == 0, true, turn >= 2};
}

int blockingVerdict(loomComm_t comm, Call call, size_t bytes) {
  const Call blocking = call == Call::Iallreduce ? Call::Allreduce
                        : call == Call::Ibcast   ? Call::Bcast
                                                 : Call::Count;
  if (blocking == Call::Count || trials() == 0) return -1;
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  const auto it = gDecided.find(DecisionKey{comm, blocking, bytes});
  return it == gDecided.end() ? -1 : it->second.verdict;
}

void recordTrial(loomComm_t comm, MPI_Comm mpiComm, Call call, size_t bytes, bool onLoom,
                 long long nanoseconds) {
  static const size_t margin = knob("LOOM_MPI_TRIAL_MARGIN", kDefaultTrialMarginPercent);
  long long mine[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lock(gDecidedMutex);
    Decision& d = gDecided.at(DecisionKey{comm, call, bytes});
    (onLoom ? d.loomNs : d.mpiNs).push_back(nanoseconds);
    if (d.mpiNs.size() < trials()) return;
    mine[0] = median(d.loomNs);
    mine[1] = median(d.mpiNs);
  }
  // Every rank reaches here on the same call of this size, so the sum (of integers: the same
  // on every rank, whatever order MPI adds them in) gives every rank the same verdict.
  long long sums[2] = {0, 0};
  const bool agreed =
      PMPI_Allreduce(mine, sums, 2, MPI_LONG_LONG, MPI_SUM, mpiComm) == MPI_SUCCESS;
  const bool loomWins = agreed && sums[1] * 100 >= sums[0] * (100 + (long long)margin);
  int ranks = 1;
  PMPI_Comm_size(mpiComm, &ranks);
  char line[256];
  std::snprintf(line, sizeof(line), "%s of %zu B on %d ranks: measured loom %.1f us, MPI %.1f us "
                "(the ranks' mean of each one's median of %zu calls): %s", kCallNames[int(call)],
                bytes, ranks, double(sums[0]) * 1e-3 / ranks, double(sums[1]) * 1e-3 / ranks,
                trials(), loomWins ? "loom" : "MPI");
  loomLogInfo("MPI", line);
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  gDecided.at(DecisionKey{comm, call, bytes}).verdict = loomWins ? 1 : 0;
}

void forgetDecisions(loomComm_t comm) {
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  for (auto it = gDecided.begin(); it != gDecided.end();)
    it = it->first.comm == comm ? gDecided.erase(it) : std::next(it);
}

void note(Call call, Route route) {
  const int kind = int(call) * int(Route::Count) + int(route);
  if (gCounts[kind].fetch_add(1, std::memory_order_relaxed) != 0) return;
  char line[256];
  std::snprintf(line, sizeof(line), "%s %s", kCallNames[int(call)], kRouteReasons[int(route)]);
  loomLogInfo("MPI", line);
}

int mpiError(Call call, loomComm_t loomComm, loomResult_t result) {
  if (result == loomSuccess) return MPI_SUCCESS;
  std::fprintf(stderr, "loom-mpi: %s on loom failed: %s: %s\n", kCallNames[int(call)],
               loomGetErrorString(result), loomGetLastError(loomComm));
  return result == loomInvalidArgument ? MPI_ERR_ARG : MPI_ERR_OTHER;
}

int finish(Call call, MPI_Comm comm, loomComm_t loomComm, loomResult_t result) {
  const int code = mpiError(call, loomComm, result);
  if (code != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, code);
  return code;
}

}  // namespace loom::mpi

/** For tests and tools (found with dlsym): the calls that ran on loom and those that fell
 *  through since the start, and the loom communicators alive now. */
extern "C" __attribute__((visibility("default"))) void loomMpiCounts(long* onLoom,
                                                                     long* fellThrough,
                                                                     int* liveComms) {
  using namespace loom::mpi;
  long loom = 0, other = 0;
  for (int kind = 0; kind < kKinds; ++kind) {
    const long n = gCounts[kind].load(std::memory_order_relaxed);
    (kind % int(Route::Count) == int(Route::Loom) ? loom : other) += n;
  }
  if (onLoom) *onLoom = loom;
  if (fellThrough) *fellThrough = other;
  if (liveComms) *liveComms = loom::mpi::liveComms();
}
