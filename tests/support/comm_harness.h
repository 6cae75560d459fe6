// Creating a communicator inside a forked rank: rank 0 makes the unique id, the harness's
// allgather hands it to the others.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {

// Returns loomSuccess and *comm, or the failing result (with loomGetLastError(NULL) text).
loomResult_t initComm(RankContext& ctx, loomComm_t* comm, const loomConfig_t* config = nullptr);

// Sets loom's log level and subsystems in this rank (LOOM_DEBUG, LOOM_DEBUG_SUBSYS) and has
// the settings and the logger read them again: the parent may have read them before forking.
void logInRank(const char* level, const char* subsystems);
// The lines of `text` that contain `needle`, in order.
std::vector<std::string> linesWith(const std::string& text, const std::string& needle);

// Whether a forced algorithm list names an algorithm of the shared arena (direct, peer) while
// the transport is tcp or ucx, where the communicator has no shared memory of its own and those
// refuse every call.
inline bool directWithoutArena(const char* algorithms, const char* transport) {
  return transport != nullptr && (strcmp(transport, "tcp") == 0 || strcmp(transport, "ucx") == 0) &&
         (strstr(algorithms, "direct") != nullptr || strstr(algorithms, "peer") != nullptr);
}

}  // namespace loom::testing

// Inside a rank: a loom call that must succeed.
#define RANK_LOOM(call)                                                              \
  do {                                                                               \
    loomResult_t rankLoomRc_ = (call);                                               \
    RANK_CHECK(rankLoomRc_ == loomSuccess, "%s -> %s: %s", #call,                    \
               loomGetErrorString(rankLoomRc_), loomGetLastError(nullptr));          \
  } while (0)
