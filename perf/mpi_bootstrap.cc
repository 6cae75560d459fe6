#include "perf/mpi_bootstrap.h"

#include <mpi.h>

#include <cstdlib>

namespace loom::perf {

bool needsMpiBootstrap() {
  const auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
  };
  if (set("LOOM_ROOT") || set("MASTER_ADDR")) return false;
  return set("OMPI_COMM_WORLD_SIZE") || set("PMI_SIZE") || set("PMIX_RANK");
}

loomResult_t mpiInitComm(loomComm_t* comm, const loomConfig_t* config, std::string* error) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  loomUniqueId id{};
  // Rank 0's failure must reach the others through the broadcast, not leave them waiting.
  int ok = 1;
  if (rank == 0) ok = loomGetUniqueId(&id) == loomSuccess;
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!ok) {
    *error = "loomGetUniqueId failed on rank 0";
    return loomSystemError;
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  const loomResult_t r = loomCommInitRankConfig(comm, size, id, rank, config);
  if (r != loomSuccess) *error = "loomCommInitRankConfig failed";
  return r;
}

void mpiFinalize() { MPI_Finalize(); }

}  // namespace loom::perf
