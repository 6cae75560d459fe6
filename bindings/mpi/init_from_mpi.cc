// loomCommInitFromMpi: the ranks of an MPI communicator meet through it (rank 0's unique id,
// broadcast over the communicator) and join a loom communicator of the same ranks.
#include <cstdio>
#include <cstdlib>

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
  // A fixed rendezvous address (LOOM_ROOT, NCCL_COMM_ID) would be every communicator's: the
  // second one made while the first lives would meet the first's ranks. Rank 0 decides, so
  // that every rank refuses alike.
  const char* fixedRoot = std::getenv("LOOM_ROOT");
  if (fixedRoot == nullptr || *fixedRoot == '\0') fixedRoot = std::getenv("NCCL_COMM_ID");
  const bool fixed = fixedRoot != nullptr && *fixedRoot != '\0';
  if (rank == 0) root.result = fixed ? loomInvalidUsage : loomGetUniqueId(&root.id);
  if (PMPI_Bcast(&root, sizeof(root), MPI_BYTE, 0, mpiComm) != MPI_SUCCESS) {
    return refuse(loomSystemError, "broadcasting the unique id over mpiComm failed");
  }
  if (root.result == loomInvalidUsage) {
    return refuse(loomInvalidUsage,
                  "LOOM_ROOT or NCCL_COMM_ID is set on rank 0 (one rendezvous address for every "
                  "communicator); unset it: the ranks meet through the MPI communicator");
  }
  if (root.result != loomSuccess) {
    return refuse(static_cast<loomResult_t>(root.result), "loomGetUniqueId failed on rank 0");
  }
  return loomCommInitRankConfig(comm, size, root.id, rank, config);
}
