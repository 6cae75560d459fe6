// loom-perf --api nccl: runSweep's sweep with every call made through NCCL's API on loom's
// libnccl.so.2 (perf/nccl_api.h): the communicator from ncclGetUniqueId and ncclCommInitRank,
// the collectives, send and receive in a group, the results exchanged with ncclAllGather,
// --mem shared's buffers from ncclMemAlloc.
#pragma once

#include <string>

#include "perf/options.h"

namespace loom::perf {

/** Opens loom's libnccl.so.2 (exit 2, saying why, when it is absent or not loom's), forks
 *  options.nranks ranks and runs the sweep on each through NCCL's API; -A becomes LOOM_ALGO,
 *  which loom under the library reads. Returns loom-perf's exit code. */
int runNcclSweep(const Options& options, const std::string& gitCommit);

}  // namespace loom::perf
