/* The fork harness of the NCCL API test: the supervisor makes the unique ids, forks the ranks,
 * waits for them with a deadline and reports each rank's end; each rank runs one sub-test and
 * reports its first failure as "FAIL rank r/n [test] file:line: message". */
#ifndef LOOM_TESTS_NCCL_HARNESS_H_
#define LOOM_TESTS_NCCL_HARNESS_H_

#include <nccl.h>
#include <stdatomic.h>
#include <stddef.h>

#define NCCL_TEST_MAX_RANKS 8
/* A rank that does not finish within this is killed and reported as hung (ctest's TIMEOUT
 * is above it, so the harness, not ctest, names the rank). */
#define NCCL_TEST_DEADLINE_S 100
/* Once a rank has failed, the others get this long to end before they are killed. */
#define NCCL_TEST_GRACE_S 15
#define NCCL_TEST_IDS 4

/* Memory shared by the supervisor and its ranks (mapped before forking). */
typedef struct {
  atomic_int arrived;                          /* out-of-band barrier */
  atomic_int generation;
  atomic_int expectKilled[NCCL_TEST_MAX_RANKS]; /* set by a rank about to be killed on purpose */
  atomic_int failed;                            /* a rank has failed: barriers stop waiting */
  char doing[NCCL_TEST_MAX_RANKS][160];         /* each rank's current step, for a hang report */
} Shared;

typedef struct {
  int rank;   /* this process's rank; 0 in a one-process sub-test */
  int nranks; /* ranks of the sub-test (in a one-process sub-test: communicators to make) */
  const char* test;
  /* Made by the supervisor before forking (the rendezvous lives there): ids[0] for the world
   * communicator, the others for more communicators of all ranks. */
  ncclUniqueId ids[NCCL_TEST_IDS];
  Shared* shared;
} Rank;

/* Records what ctx's rank is doing now: the supervisor names it if the rank hangs. */
void noteStep(const Rank* ctx, const char* step);
/* Prints a failure of ctx's rank with its test and place; returns 1. */
int failAt(const Rank* ctx, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FAIL(ctx, ...) failAt((ctx), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK(ctx, cond, ...) \
  do {                        \
    if (!(cond)) return FAIL((ctx), __VA_ARGS__); \
  } while (0)
/* A call that must return ncclSuccess; otherwise the result and the thread's last error. */
#define NCCL_OK(ctx, call)                                                              \
  do {                                                                                  \
    ncclResult_t rc_ = (call);                                                          \
    if (rc_ != ncclSuccess)                                                             \
      return FAIL((ctx), "%s returned %d (%s): %s", #call, (int)rc_, ncclGetErrorString(rc_), \
                  ncclGetLastError(NULL));                                              \
  } while (0)

double nowSeconds(void);
void sleepMs(int ms);
/* Waits until every rank of ctx has arrived (shared memory, not the library); 1 when a rank
 * has failed, or after the deadline. */
int oobBarrier(const Rank* ctx);
/* Polls ncclCommGetAsyncError until it is no longer ncclInProgress or seconds have passed;
 * the last state (ncclInProgress when the deadline passed). */
ncclResult_t waitNotInProgress(ncclComm_t comm, double seconds);
/* Whether text names rank r ("rank 3", not "rank 31"). */
int namesRank(const char* text, int r);
/* A communicator of every forked rank over ctx->ids[0]. */
int initWorld(const Rank* ctx, ncclComm_t* comm);

/* Prints which file the process's NCCL functions come from; with NCCL_TEST_EXPECT_LIBRARY
 * set, 1 unless it is that file (a program built against another libnccl.so.2 runs on the one
 * named). */
int checkLibrary(void);

typedef enum { FORKED_RANKS, ONE_PROCESS } TestKind;
typedef struct {
  const char* name;
  int (*run)(Rank* ctx);
  int minRanks, maxRanks;
  TestKind kind;
  /* LOOM_TIMEOUT_MS for the sub-test's processes (0: the library's default), set before
   * anything reads loom's parameters, which a process reads once. */
  int timeoutMs;
} SubTest;

/* Runs test with nranks ranks (forked) or in one forked process; 0 when every rank passed. */
int runSubTest(const SubTest* test, int nranks);

#endif /* LOOM_TESTS_NCCL_HARNESS_H_ */
