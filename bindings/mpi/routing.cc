// The interposer's knobs, its record of where calls went, and loom's errors as MPI's.
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

// The decisions made, by communicator, call and size; a communicator's go before it is
// destroyed (forgetDecisions), so that one made later at its address decides afresh, as its
// peers, whose addresses differ, do.
std::mutex gDecidedMutex;
std::unordered_map<DecisionKey, bool, DecisionHash>& gDecided =
    *new std::unordered_map<DecisionKey, bool, DecisionHash>;

}  // namespace

bool modelPrefersLoom(loomComm_t comm, Call call, size_t bytes, const Issue& issue) {
  const DecisionKey key{comm, call, bytes};
  {
    std::lock_guard<std::mutex> lock(gDecidedMutex);
    const auto it = gDecided.find(key);
    if (it != gDecided.end()) return it->second;
  }
  // The model is the communicator's, which its queued non-blocking calls may be using now.
  awaitQueue(comm);
  const bool onLoom = decide(comm, call, bytes, issue);
  std::lock_guard<std::mutex> lock(gDecidedMutex);
  gDecided.emplace(key, onLoom);
  return onLoom;
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
