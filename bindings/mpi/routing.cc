// The interposer's knobs, its record of where calls went, and loom's errors as MPI's.
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

// Below this, loom is no faster than Open MPI's shared-memory collectives on 2 ranks of one
// host (docs/MPI.md's measurements), and MPI keeps the call: a communicator that sees only
// small calls never pays for a loom communicator. LOOM_MPI_MIN_BYTES overrides it.
constexpr size_t kDefaultMinBytes = 4096;

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
    const size_t all = knob("LOOM_MPI_MIN_BYTES", kDefaultMinBytes);
    for (size_t c = 0; c < bytes.size(); ++c) {
      std::string name = std::string("LOOM_MPI_MIN_BYTES_") + (kCallNames[c] + 4);
      for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
      bytes[c] = knob(name.c_str(), all);
    }
    return bytes;
  }();
  return thresholds[size_t(call)];
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
