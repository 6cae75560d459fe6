/* What the MPI binding tests share: a failure count, and a check that names its case. */
#ifndef LOOM_BINDINGS_MPI_TESTS_CHECK_H_
#define LOOM_BINDINGS_MPI_TESTS_CHECK_H_

#include <mpi.h>
#include <stdio.h>

static int gFailures = 0;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      int rank_ = 0;                                                          \
      PMPI_Comm_rank(MPI_COMM_WORLD, &rank_);                                 \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", rank_, __FILE__, \
              __LINE__, #cond);                                               \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      ++gFailures;                                                            \
    }                                                                         \
  } while (0)

/* Every rank's failures summed: the exit status of every rank (0 or 1). */
static int finishTest(const char* name) {
  int all = 0, rank = 0;
  PMPI_Allreduce(&gFailures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) printf("%s: %s (%d failed checks)\n", name, all ? "FAILED" : "passed", all);
  return all != 0;
}

#endif /* LOOM_BINDINGS_MPI_TESTS_CHECK_H_ */
