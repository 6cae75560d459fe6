/* The interposer's decision by loom's model (docs/MPI.md, "Which sizes run on loom"): with no
 * LOOM_MPI_MIN_BYTES set, an MPI_Allreduce runs on loom where the model prices loom's plan for
 * it at least LOOM_MPI_MODEL_MARGIN percent faster than MPI's own algorithm, and falls through
 * to PMPI where not. Each argument is a size and where it must go:
 *
 *   model_test BYTES:loom|mpi|any ...
 *
 * Each size runs twice (the second call takes the decision the first one made), its result
 * compared bit for bit with PMPI_Allreduce's, and where it went read from loomMpiCounts. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef void (*CountsFn)(long*, long*, int*);

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const CountsFn counts = (CountsFn)dlsym(RTLD_DEFAULT, "loomMpiCounts");
  CHECK(counts != NULL, "not preloaded: no loomMpiCounts");
  CHECK(getenv("LOOM_MPI_MIN_BYTES") == NULL, "LOOM_MPI_MIN_BYTES is set: no model decision");
  CHECK(argc > 1, "no BYTES:loom|mpi|any argument");
  for (int a = 1; a < argc && counts != NULL; ++a) {
    const size_t bytes = (size_t)strtoull(argv[a], NULL, 0);
    const char* want = strchr(argv[a], ':');
    CHECK(bytes >= sizeof(float) && want != NULL &&
              (!strcmp(want, ":loom") || !strcmp(want, ":mpi") || !strcmp(want, ":any")),
          "bad argument '%s'", argv[a]);
    if (want == NULL) continue;
    const int count = (int)(bytes / sizeof(float));
    float* in = malloc((size_t)count * sizeof(float));
    float* out = malloc((size_t)count * sizeof(float));
    float* ref = malloc((size_t)count * sizeof(float));
    for (int i = 0; i < count; ++i) in[i] = (float)((rank * 7 + i * 3) % 11 - 5);
    PMPI_Allreduce(in, ref, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int round = 0; round < 2; ++round) {
      long loom0 = 0, other0 = 0, loom1 = 0, other1 = 0;
      counts(&loom0, &other0, NULL);
      memset(out, 0xff, (size_t)count * sizeof(float));
      CHECK(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS,
            "%zu B: MPI_Allreduce failed", bytes);
      CHECK(memcmp(out, ref, (size_t)count * sizeof(float)) == 0,
            "%zu B (round %d): not PMPI_Allreduce's result", bytes, round);
      counts(&loom1, &other1, NULL);
      const long onLoom = loom1 - loom0, through = other1 - other0;
      CHECK(onLoom + through == 1, "%zu B: %ld calls counted", bytes, onLoom + through);
      if (!strcmp(want, ":loom"))
        CHECK(onLoom == 1, "%zu B (round %d): fell through, expected on loom", bytes, round);
      if (!strcmp(want, ":mpi"))
        CHECK(through == 1, "%zu B (round %d): ran on loom, expected on MPI", bytes, round);
    }
    free(in);
    free(out);
    free(ref);
  }
  const int failed = finishTest("model_test");
  MPI_Finalize();
  return failed;
}
