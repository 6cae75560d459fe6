/* loomCommInitFromMpi on MPI_COMM_WORLD, a duplicate and a reordered split: the loom
 * communicator has the MPI communicator's ranks, in its order, and reduces as MPI does; and
 * what it refuses (no comm pointer, MPI_COMM_NULL, an intercommunicator, LOOM_ROOT set)
 * every rank refuses.
 *
 *   mpirun -np 4 loom_mpi_init_test */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "loom/loom_mpi.h"

#define COUNT 10000

/* comm's loom communicator: same size and rank, an allreduce equal to PMPI's. */
static void checkComm(MPI_Comm mpiComm, const char* name) {
  int mpiRank = 0, mpiSize = 0, rank = -1, size = -1;
  PMPI_Comm_rank(mpiComm, &mpiRank);
  PMPI_Comm_size(mpiComm, &mpiSize);
  loomComm_t comm = NULL;
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = 60000;
  const loomResult_t r = loomCommInitFromMpi(&comm, mpiComm, &config);
  CHECK(r == loomSuccess && comm != NULL, "%s: loomCommInitFromMpi: %s", name,
        loomGetErrorString(r));
  if (comm == NULL) return;
  loomCommCount(comm, &size);
  loomCommUserRank(comm, &rank);
  CHECK(size == mpiSize && rank == mpiRank, "%s: loom rank %d of %d, MPI rank %d of %d", name,
        rank, size, mpiRank, mpiSize);
  static int in[COUNT], out[COUNT], ref[COUNT];
  for (int i = 0; i < COUNT; ++i) in[i] = mpiRank * 1000 + i;
  PMPI_Allreduce(in, ref, COUNT, MPI_INT, MPI_SUM, mpiComm);
  CHECK(loomAllReduce(in, out, COUNT, loomInt32, loomSum, comm, NULL) == loomSuccess,
        "%s: loomAllReduce: %s", name, loomGetLastError(comm));
  CHECK(memcmp(out, ref, sizeof(out)) == 0, "%s: loom's sum differs from MPI's", name);
  CHECK(loomCommDestroy(comm) == loomSuccess, "%s: loomCommDestroy", name);
}

static void checkRefused(MPI_Comm split) {
  loomComm_t comm = NULL;
  CHECK(loomCommInitFromMpi(NULL, MPI_COMM_WORLD, NULL) == loomInvalidArgument,
        "a NULL comm pointer is refused");
  CHECK(loomCommInitFromMpi(&comm, MPI_COMM_NULL, NULL) == loomInvalidArgument && comm == NULL,
        "MPI_COMM_NULL is refused");
  /* One fixed rendezvous address would be every communicator's: refused on every rank. */
  setenv("LOOM_ROOT", "127.0.0.1:1", 1);
  CHECK(loomCommInitFromMpi(&comm, MPI_COMM_WORLD, NULL) == loomInvalidUsage && comm == NULL,
        "LOOM_ROOT set is refused");
  unsetenv("LOOM_ROOT");
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return;
  /* The split's leaders are the highest world rank of each parity (its key is reversed). */
  const int other = 1 - rank % 2;
  const int remoteLeader = (size - 1) % 2 == other ? size - 1 : size - 2;
  MPI_Comm inter;
  PMPI_Intercomm_create(split, 0, MPI_COMM_WORLD, remoteLeader, 7, &inter);
  CHECK(loomCommInitFromMpi(&comm, inter, NULL) == loomInvalidArgument && comm == NULL,
        "an intercommunicator is refused");
  PMPI_Comm_free(&inter);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup, split;
  PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
  PMPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &split);
  checkComm(MPI_COMM_WORLD, "MPI_COMM_WORLD");
  checkComm(dup, "a duplicate");
  checkComm(split, "a reordered split");
  checkRefused(split);
  PMPI_Comm_free(&dup);
  PMPI_Comm_free(&split);
  const int rc = finishTest("loom_mpi_init_test");
  MPI_Finalize();
  return rc;
}
