/* A rank that aborts while the others wait for it in a collective that runs on loom: mpirun
 * ends the job with the abort's code, long before loom's own deadline (LOOM_TIMEOUT_MS, set
 * high by the test) could. The others then are in loom, not in MPI.
 *
 *   mpirun -np 4 -x LD_PRELOAD=libloom-mpi-preload.so -x LOOM_MPI_MIN_BYTES=0 \
 *     -x LOOM_TIMEOUT_MS=600000 loom_mpi_abort_test      (exits 3) */
#include <mpi.h>
#include <stdio.h>

#define COUNT 100000

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  static float in[COUNT], out[COUNT];
  MPI_Allreduce(in, out, COUNT, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* makes loom's comm */
  if (rank == 1) MPI_Abort(MPI_COMM_WORLD, 3);
  MPI_Allreduce(in, out, COUNT, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  fprintf(stderr, "rank %d: left an allreduce that rank 1 never entered\n", rank);
  MPI_Finalize();
  return 1;
}
