// loom-perf under mpirun without LOOM_ROOT or MASTER_ADDR: the ranks meet through MPI (rank 0
// makes the unique id and broadcasts it). Compiled only when CMake finds MPI, so that loom-perf
// builds without it; LOOM_PERF_WITH_MPI says whether it is there.
#pragma once

#include <string>

#include "loom/loom.h"

namespace loom::perf {

/** Whether an MPI launcher started this process and left loom no rendezvous of its own
 *  (no LOOM_ROOT, no MASTER_ADDR): then mpiInitComm() is the way to build the communicator. */
bool needsMpiBootstrap();
/** MPI_Init, then loomCommInitRankConfig with rank 0's id broadcast through MPI_COMM_WORLD. */
loomResult_t mpiInitComm(loomComm_t* comm, const loomConfig_t* config, std::string* error);
/** MPI_Finalize, after the communicator is gone. */
void mpiFinalize();

}  // namespace loom::perf
