/* Two ranks sum a vector: the process that makes the id is rank 0, a forked child rank 1. */
#include <loom/loom.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  loomUniqueId id; /* made once, handed to every rank (here: by fork) */
  if (loomGetUniqueId(&id) != loomSuccess) return 1;
  const int rank = fork() == 0 ? 1 : 0;
  loomComm_t comm;
  if (loomCommInitRank(&comm, 2, id, rank) != loomSuccess) return 1;
  float x[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4; ++i) x[i] *= rank + 1; /* rank 0: 1 2 3 4, rank 1: 2 4 6 8 */
  loomResult_t rc = loomAllReduce(x, x, 4, loomFloat32, loomSum, comm, NULL);
  if (rc != loomSuccess) fprintf(stderr, "rank %d: %s\n", rank, loomGetLastError(comm));
  printf("rank %d: %g %g %g %g\n", rank, x[0], x[1], x[2], x[3]); /* 3 6 9 12 */
  loomCommDestroy(comm);
  int child = 0;
  if (rank == 0) wait(&child);
  return rc == loomSuccess && x[3] == 12 && child == 0 ? 0 : 1;
}
