/* The interposer's decision with no LOOM_MPI_MIN_BYTES set (docs/MPI.md, "Which sizes run on
 * loom"): loom's model sends an MPI_Allreduce to loom where it prices loom's plan at least
 * LOOM_MPI_MODEL_MARGIN percent faster than MPI's own algorithm, else to PMPI; and a size the
 * model sends to loom takes turns on loom and MPI for its first 2 * (LOOM_MPI_TRIALS + 1)
 * calls, after which every call takes the verdict the ranks agreed on from the times. Each
 * argument is a size and where its calls go in the end (tried-mpi: to MPI, after the model
 * sent them to loom and the trial calls found MPI faster):
 *
 *   model_test BYTES:loom|mpi|any|tried-mpi ...
 *
 * Each size runs 2 * (LOOM_MPI_TRIALS + 1) + 3 times (LOOM_MPI_TRIALS must be set; with 0 the
 * calls after the first take the decision it made), two calls out of place and two in place
 * by turns (so that each side of the trials gets both), each result compared bit for bit with
 * PMPI_Allreduce's, and where each call went read from loomMpiCounts: every rank's the same on
 * every call; where the first went to loom, the trial calls take turns; after them, one
 * route, as the argument says. Then one MPI_Iallreduce of the size (under MPI_THREAD_MULTIPLE,
 * which the non-blocking calls need to run on loom), which is never timed itself and must go
 * where its blocking counterpart's calls ended. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

typedef void (*CountsFn)(long*, long*, int*);

/* Where the one call since counts gave loom0 and other0 went: 1 loom, 0 fell through, -1 where
 * the counts say neither. */
static int routeSince(CountsFn counts, long loom0, long other0, size_t bytes) {
  long loom1 = 0, other1 = 0;
  counts(&loom1, &other1, NULL);
  const long onLoom = loom1 - loom0, through = other1 - other0;
  CHECK(onLoom + through == 1, "%zu B: %ld calls counted", bytes, onLoom + through);
  return onLoom + through == 1 ? (int)onLoom : -1;
}

/* One MPI_Allreduce of `count` floats (in place or not) checked against ref; where it went
 * (routeSince). */
static int allreduce(CountsFn counts, const float* in, float* out, const float* ref, int count,
                     int inPlace, int round) {
  long loom0 = 0, other0 = 0;
  const size_t bytes = (size_t)count * sizeof(float);
  counts(&loom0, &other0, NULL);
  if (inPlace) memcpy(out, in, bytes);
  else memset(out, 0xff, bytes);
  CHECK(MPI_Allreduce(inPlace ? MPI_IN_PLACE : in, out, count, MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD) == MPI_SUCCESS,
        "%zu B (round %d): MPI_Allreduce failed", bytes, round);
  CHECK(memcmp(out, ref, bytes) == 0, "%zu B (round %d, in place %d): not PMPI_Allreduce's result",
        bytes, round, inPlace);
  return routeSince(counts, loom0, other0, bytes);
}

/* One MPI_Iallreduce of `count` floats, waited for and checked against ref; where it went. */
static int iallreduce(CountsFn counts, const float* in, float* out, const float* ref, int count) {
  long loom0 = 0, other0 = 0;
  const size_t bytes = (size_t)count * sizeof(float);
  counts(&loom0, &other0, NULL);
  memset(out, 0xff, bytes);
  MPI_Request request = MPI_REQUEST_NULL;
  CHECK(MPI_Iallreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request) ==
            MPI_SUCCESS && MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS,
        "%zu B: MPI_Iallreduce failed", bytes);
  CHECK(memcmp(out, ref, bytes) == 0, "%zu B: MPI_Iallreduce's is not PMPI_Allreduce's result",
        bytes);
  return routeSince(counts, loom0, other0, bytes);
}

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE was not provided");
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const CountsFn counts = (CountsFn)dlsym(RTLD_DEFAULT, "loomMpiCounts");
  CHECK(counts != NULL, "not preloaded: no loomMpiCounts");
  CHECK(getenv("LOOM_MPI_MIN_BYTES") == NULL, "LOOM_MPI_MIN_BYTES is set: no model decision");
  const char* trialsText = getenv("LOOM_MPI_TRIALS");
  CHECK(trialsText != NULL, "LOOM_MPI_TRIALS is not set");
  const int trials = trialsText == NULL ? 0 : atoi(trialsText);
  const int trialCalls = 2 * (trials + 1); /* the last of them decides */
  const int rounds = trialCalls + 3;
  CHECK(argc > 1, "no BYTES:loom|mpi|any|tried-mpi argument");
  for (int a = 1; a < argc && counts != NULL; ++a) {
    const size_t bytes = (size_t)strtoull(argv[a], NULL, 0);
    const char* want = strchr(argv[a], ':');
    CHECK(bytes >= sizeof(float) && want != NULL &&
              (!strcmp(want, ":loom") || !strcmp(want, ":mpi") || !strcmp(want, ":any") ||
               !strcmp(want, ":tried-mpi")),
          "bad argument '%s'", argv[a]);
    if (want == NULL) continue;
    const int count = (int)(bytes / sizeof(float));
    float* in = malloc((size_t)count * sizeof(float));
    float* out = malloc((size_t)count * sizeof(float));
    float* ref = malloc((size_t)count * sizeof(float));
    for (int i = 0; i < count; ++i) in[i] = (float)((rank * 7 + i * 3) % 11 - 5);
    PMPI_Allreduce(in, ref, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int first = -1, tried = 0, verdict = -1;
    for (int round = 0; round < rounds; ++round) {
      const int onLoom = allreduce(counts, in, out, ref, count, round / 2 % 2, round);
      int lowest = 0, highest = 0;
      PMPI_Allreduce(&onLoom, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      PMPI_Allreduce(&onLoom, &highest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      CHECK(lowest == highest, "%zu B (round %d): the ranks took different routes", bytes, round);
      /* The model's MPI is final; its loom is tried in turns (loom, MPI, loom, MPI...), and
       * the call after the last trial call shows the verdict. */
      if (round == 0) {
        first = onLoom;
        tried = trials > 0 && first == 1;
      }
      if (!tried) {
        CHECK(onLoom == first, "%zu B (round %d): not the first call's route", bytes, round);
      } else if (round < trialCalls) {
        CHECK(onLoom == (round % 2 == 0), "%zu B (round %d): not the trial's turn", bytes, round);
      } else {
        if (round == trialCalls) verdict = onLoom;
        CHECK(onLoom == verdict, "%zu B (round %d): left the verdict", bytes, round);
      }
    }
    const int final = tried ? verdict : first;
    if (!strcmp(want, ":loom")) CHECK(final == 1, "%zu B: ends on MPI, expected loom", bytes);
    if (!strcmp(want, ":mpi")) CHECK(final == 0, "%zu B: ends on loom, expected MPI", bytes);
    if (!strcmp(want, ":tried-mpi"))
      CHECK(tried && final == 0,
            "%zu B: not tried on loom and then sent to MPI (first call on %s, last on %s)", bytes,
            first == 1 ? "loom" : "MPI", final == 1 ? "loom" : "MPI");
    const int nonBlocking = iallreduce(counts, in, out, ref, count);
    CHECK(nonBlocking == final, "%zu B: MPI_Iallreduce went to %s, its blocking calls to %s",
          bytes, nonBlocking == 1 ? "loom" : "MPI", final == 1 ? "loom" : "MPI");
    free(in);
    free(out);
    free(ref);
  }
  const int failed = finishTest("model_test");
  MPI_Finalize();
  return failed;
}
