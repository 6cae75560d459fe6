/* C99 use of the installed header and library: a one-rank allreduce. */
#include <loom/loom.h>
#include <stdio.h>

int main(void) {
  loomUniqueId id;
  loomComm_t comm;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  int version = 0;
  if (loomGetVersion(&version) != loomSuccess || version != LOOM_VERSION_CODE) return 1;
  if (loomGetUniqueId(&id) != loomSuccess) return 2;
  if (loomCommInitRank(&comm, 1, id, 0) != loomSuccess) return 3;
  if (loomAllReduce(x, y, 3, loomFloat32, loomSum, comm, NULL) != loomSuccess) return 4;
  if (y[0] != 1 || y[1] != 2 || y[2] != 3) return 5;
  if (loomCommDestroy(comm) != loomSuccess) return 6;
  printf("consumer ok (loom %d)\n", version);
  return 0;
}
