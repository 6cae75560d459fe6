// loomCommInitFromMpi: the ranks of an MPI communicator meet through it (rank 0's unique id,
// broadcast over the communicator) and join a loom communicator of the same ranks.
#include <cstdio>

#include "loom/loom_mpi.h"

namespace {

loomResult_t refuse(loomResult_t code, const char* why) {
  char line[256];
  std::snprintf(line, sizeof(line), "loomCommInitFromMpi: %s", why);
  loomLogInfo("INIT", line);
  return code;
}

}  // namespace

extern "C" loomResult_t loomCommInitFromMpi(loomComm_t* comm, MPI_Comm mpiComm,
                                            const loomConfig_t* config) {
  if (comm == nullptr) return refuse(loomInvalidArgument, "comm is NULL");
  *comm = nullptr;
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return refuse(loomInvalidUsage, "MPI is not initialised (or already finalised)");
  }
  if (mpiComm == MPI_COMM_NULL) return refuse(loomInvalidArgument, "mpiComm is MPI_COMM_NULL");
  int inter = 0, rank = 0, size = 0;
  if (PMPI_Comm_test_inter(mpiComm, &inter) != MPI_SUCCESS || inter) {
    return refuse(loomInvalidArgument, "mpiComm is an intercommunicator");
  }
  PMPI_Comm_rank(mpiComm, &rank);
  PMPI_Comm_size(mpiComm, &size);
  // The id travels with rank 0's result, so that a failure there ends every rank's call
  // alike instead of leaving the others to wait for a rendezvous that nobody serves. PMPI_:
  // the interposer (libloom-mpi-preload.so) calls this from inside its own MPI_Bcast.
  struct {
    int result;
    loomUniqueId id;
  } root{};
  if (rank == 0) root.result = loomGetUniqueId(&root.id);
  if (PMPI_Bcast(&root, sizeof(root), MPI_BYTE, 0, mpiComm) != MPI_SUCCESS) {
    return refuse(loomSystemError, "broadcasting the unique id over mpiComm failed");
  }
  if (root.result != loomSuccess) {
    return refuse(static_cast<loomResult_t>(root.result), "loomGetUniqueId failed on rank 0");
  }
  return loomCommInitRankConfig(comm, size, root.id, rank, config);
}
