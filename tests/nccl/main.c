/* nccl_api_test: an NCCL program, built against the toolkit's nccl.h and linked with -lnccl,
 * that checks every function of nccl.h with host buffers, exactly, on 1 to 8 forked ranks.
 *
 *   nccl_api_test SUBTEST NRANKS   run one sub-test (exit status 0: passed)
 *   nccl_api_test all NRANKS       every sub-test that takes NRANKS ranks
 *   nccl_api_test --list           the sub-tests and the ranks each takes
 *
 * tests/nccl/CMakeLists.txt reads the table below to make one ctest case per sub-test and
 * rank count: keep each row on one line. The last column is LOOM_TIMEOUT_MS (0: default): the
 * fault sub-tests' bounds lie below it, so that detection must not wait for it; the count
 * mismatch fails before it (the messages' stamps; the timeout bounds a rank that only sends). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "subtests.h"

static const SubTest kSubTests[] = {
    {"version", testVersion, 1, 1, ONE_PROCESS, 0},
    {"comm_info", testCommInfo, 1, 8, FORKED_RANKS, 0},
    {"config", testConfig, 1, 8, FORKED_RANKS, 0},
    {"scalable_init", testScalableInit, 1, 8, FORKED_RANKS, 0},
    {"allreduce", testAllReduce, 1, 8, FORKED_RANKS, 0},
    {"reduce", testReduce, 1, 8, FORKED_RANKS, 0},
    {"reducescatter", testReduceScatter, 1, 8, FORKED_RANKS, 0},
    {"premulsum", testPreMulSum, 1, 8, FORKED_RANKS, 0},
    {"broadcast", testBroadcast, 1, 8, FORKED_RANKS, 0},
    {"allgather", testAllGather, 1, 8, FORKED_RANKS, 0},
    {"alltoall", testAlltoAll, 1, 8, FORKED_RANKS, 0},
    {"gather", testGather, 1, 8, FORKED_RANKS, 0},
    {"scatter", testScatter, 1, 8, FORKED_RANKS, 0},
    {"sendrecv_ring", testSendRecv, 1, 8, FORKED_RANKS, 0},
    {"sendrecv_pairs", testSendRecvAllPairs, 1, 8, FORKED_RANKS, 0},
    {"group_nested", testGroupNested, 1, 8, FORKED_RANKS, 0},
    {"group_comms", testGroupComms, 1, 8, FORKED_RANKS, 0},
    {"group_init", testGroupInit, 1, 8, FORKED_RANKS, 0},
    {"init_all", testInitAll, 1, 8, ONE_PROCESS, 0},
    {"nonblocking", testNonBlocking, 1, 8, FORKED_RANKS, 0},
    {"split", testSplit, 1, 8, FORKED_RANKS, 0},
    {"shrink", testShrink, 2, 8, FORKED_RANKS, 0},
    {"shrink_after_death", testShrinkAbort, 2, 8, FORKED_RANKS, 30000},
    {"revoke", testRevoke, 2, 8, FORKED_RANKS, 30000},
    {"abort", testAbort, 2, 8, FORKED_RANKS, 30000},
    {"simulate", testSimulate, 1, 8, FORKED_RANKS, 0},
    {"memalloc", testMemAlloc, 1, 8, FORKED_RANKS, 0},
    {"register", testRegister, 1, 8, FORKED_RANKS, 0},
    {"window", testWindow, 1, 8, FORKED_RANKS, 0},
    {"finalize", testFinalize, 1, 8, FORKED_RANKS, 0},
    {"err_bad_comm", testBadComm, 1, 8, FORKED_RANKS, 0},
    {"err_bad_args", testBadArgs, 1, 8, FORKED_RANKS, 0},
    {"err_config_magic", testConfigMagic, 1, 8, FORKED_RANKS, 0},
    {"err_count_mismatch", testCountMismatch, 2, 8, FORKED_RANKS, 2000},
    {"err_killed_rank", testKilledRank, 2, 8, FORKED_RANKS, 30000},
};
#define NSUBTESTS (sizeof kSubTests / sizeof kSubTests[0])

static int usage(void) {
  fprintf(stderr, "usage: nccl_api_test SUBTEST|all NRANKS (1..%d) | --list\n",
          NCCL_TEST_MAX_RANKS);
  return 2;
}

/* Each sub-test that takes nranks, each in a process of its own: loom reads its parameters
 * once per process, and some sub-tests set their own timeout. */
static int runAll(int nranks) {
  int failed = 0;
  char ranks[8];
  snprintf(ranks, sizeof ranks, "%d", nranks);
  for (size_t i = 0; i < NSUBTESTS; ++i) {
    const SubTest* t = &kSubTests[i];
    if (nranks < t->minRanks || nranks > t->maxRanks) continue;
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", "nccl_api_test", t->name, ranks, (char*)NULL);
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      fprintf(stderr, "FAILED: %s with %d rank(s)\n", t->name, nranks);
      ++failed;
    }
  }
  fprintf(stderr, "%d sub-test(s) failed with %d rank(s)\n", failed, nranks);
  return failed ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < NSUBTESTS; ++i)
      printf("%-20s %d..%d ranks%s\n", kSubTests[i].name, kSubTests[i].minRanks,
             kSubTests[i].maxRanks, kSubTests[i].kind == ONE_PROCESS ? ", in one process" : "");
    return 0;
  }
  if (argc != 3) return usage();
  const int nranks = atoi(argv[2]);
  if (nranks < 1 || nranks > NCCL_TEST_MAX_RANKS) return usage();
  if (getenv("NCCL_TEST_EXPECT_LIBRARY") && checkLibrary()) return 1;
  if (strcmp(argv[1], "all") == 0) return runAll(nranks);
  for (size_t i = 0; i < NSUBTESTS; ++i) {
    const SubTest* t = &kSubTests[i];
    if (strcmp(t->name, argv[1]) != 0) continue;
    if (nranks >= t->minRanks && nranks <= t->maxRanks) return runSubTest(t, nranks);
    fprintf(stderr, "%s takes %d..%d ranks, not %d\n", t->name, t->minRanks, t->maxRanks,
            nranks);
    return 2;
  }
  fprintf(stderr, "no sub-test named '%s' (--list shows them)\n", argv[1]);
  return 2;
}
