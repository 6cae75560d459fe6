#include "harness.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void noteStep(const Rank* ctx, const char* step) {
  if (ctx->rank < 0 || ctx->rank >= NCCL_TEST_MAX_RANKS) return;
  char* slot = ctx->shared->doing[ctx->rank];
  snprintf(slot, sizeof ctx->shared->doing[0], "%s", step);
}

int failAt(const Rank* ctx, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list args;
  va_start(args, fmt);
  vsnprintf(msg, sizeof msg, fmt, args);
  va_end(args);
  const char* base = strrchr(file, '/');
  fprintf(stderr, "FAIL rank %d/%d [%s] %s:%d: %s\n", ctx->rank, ctx->nranks, ctx->test,
          base ? base + 1 : file, line, msg);
  atomic_store(&ctx->shared->failed, 1);
  return 1;
}

double nowSeconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int oobBarrier(const Rank* ctx) {
  Shared* s = ctx->shared;
  const int generation = atomic_load(&s->generation);
  if (atomic_fetch_add(&s->arrived, 1) == ctx->nranks - 1) {
    atomic_store(&s->arrived, 0);
    atomic_fetch_add(&s->generation, 1);
    return 0;
  }
  const double deadline = nowSeconds() + 60;
  while (atomic_load(&s->generation) == generation) {
    if (atomic_load(&s->failed)) return 1; /* that rank said why */
    if (nowSeconds() > deadline) return FAIL(ctx, "out-of-band barrier: a rank never came");
    sleepMs(1);
  }
  return 0;
}

ncclResult_t waitNotInProgress(ncclComm_t comm, double seconds) {
  const double deadline = nowSeconds() + seconds;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress || nowSeconds() > deadline) return state;
    sleepMs(1);
  }
}

int namesRank(const char* text, int r) {
  char needle[32];
  snprintf(needle, sizeof needle, "rank %d", r);
  for (const char* p = strstr(text, needle); p; p = strstr(p + 1, needle)) {
    const char next = p[strlen(needle)];
    if (next < '0' || next > '9') return 1;
  }
  return 0;
}

int initWorld(const Rank* ctx, ncclComm_t* comm) {
  noteStep(ctx, "ncclCommInitRank of the world");
  NCCL_OK(ctx, ncclCommInitRank(comm, ctx->nranks, ctx->ids[0], ctx->rank));
  return 0;
}

/* Waits for the ranks' processes until the deadline (or, once a rank has failed, until the
 * others have had NCCL_TEST_GRACE_S to end), then kills those left; their statuses go to
 * status[] (-1: killed). */
static void reapRanks(Shared* shared, const pid_t* pids, int procs, int* status) {
  double deadline = nowSeconds() + NCCL_TEST_DEADLINE_S;
  int left = procs, graced = 0;
  for (int r = 0; r < procs; ++r) status[r] = -1;
  while (left > 0 && nowSeconds() < deadline) {
    int st = 0;
    const pid_t p = waitpid(-1, &st, WNOHANG);
    for (int r = 0; r < procs && p > 0; ++r) {
      if (pids[r] != p) continue;
      status[r] = st;
      --left;
      const int clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!clean && !atomic_load(&shared->expectKilled[r])) atomic_store(&shared->failed, 1);
    }
    if (!graced && atomic_load(&shared->failed)) {
      graced = 1;
      if (nowSeconds() + NCCL_TEST_GRACE_S < deadline) deadline = nowSeconds() + NCCL_TEST_GRACE_S;
    }
    if (p <= 0) sleepMs(5);
  }
  for (int r = 0; r < procs; ++r) {
    if (status[r] != -1) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], NULL, 0);
  }
}

/* Reports each rank's end; 0 when all passed (or were killed as the test meant). */
static int judgeRanks(const SubTest* test, const Shared* shared, const int* status, int procs) {
  int failed = 0;
  for (int r = 0; r < procs; ++r) {
    const int st = status[r];
    const int killedOnPurpose = atomic_load(&shared->expectKilled[r]);
    if (st == -1 && atomic_load(&shared->failed)) {
      fprintf(stderr, "[%s] rank %d, still at '%s' after another rank failed, was killed\n",
              test->name, r, shared->doing[r]);
    } else if (st == -1) {
      fprintf(stderr, "FAIL [%s] rank %d did not finish within %d s (hung at '%s'); killed\n",
              test->name, r, NCCL_TEST_DEADLINE_S, shared->doing[r]);
    } else if (killedOnPurpose) {
      if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) continue;
      fprintf(stderr, "FAIL [%s] rank %d was to be killed by the test but ended otherwise\n",
              test->name, r);
    } else if (WIFSIGNALED(st)) {
      fprintf(stderr, "FAIL [%s] rank %d died of signal %d (%s)\n", test->name, r,
              WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else if (WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL [%s] rank %d failed (exit status %d; its FAIL line says why)\n",
              test->name, r, WEXITSTATUS(st));
    } else {
      continue;
    }
    failed = 1;
  }
  return failed;
}

int runSubTest(const SubTest* test, int nranks) {
  Shared* shared = mmap(NULL, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
  if (shared == MAP_FAILED) { perror("mmap"); return 1; }
  Rank base;
  memset(&base, 0, sizeof base);
  base.nranks = nranks;
  base.test = test->name;
  base.shared = shared;
  if (test->timeoutMs > 0) {
    char ms[16];
    snprintf(ms, sizeof ms, "%d", test->timeoutMs);
    setenv("LOOM_TIMEOUT_MS", ms, 1);
  }
  for (int i = 0; i < NCCL_TEST_IDS && test->kind == FORKED_RANKS; ++i) {
    if (ncclGetUniqueId(&base.ids[i]) == ncclSuccess) continue;
    fprintf(stderr, "FAIL [%s] ncclGetUniqueId: %s\n", test->name, ncclGetLastError(NULL));
    return 1;
  }
  const int procs = test->kind == FORKED_RANKS ? nranks : 1;
  pid_t pids[NCCL_TEST_MAX_RANKS];
  const double start = nowSeconds();
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < procs; ++r) {
    pids[r] = fork();
    if (pids[r] < 0) { perror("fork"); return 1; }
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphan outlives a killed supervisor */
      base.rank = r;
      exit(test->run(&base) == 0 ? 0 : 1);
    }
  }
  int status[NCCL_TEST_MAX_RANKS];
  reapRanks(shared, pids, procs, status);
  const int failed = judgeRanks(test, shared, status, procs);
  fprintf(stderr, "%s [%s] with %d rank(s) in %.1f s\n", failed ? "FAILED" : "PASSED", test->name,
          nranks, nowSeconds() - start);
  munmap(shared, sizeof(Shared));
  return failed;
}

int checkLibrary(void) {
  Dl_info info;
  void* fn = dlsym(RTLD_DEFAULT, "pncclAllReduce"); /* the program itself uses only nccl* */
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) {
    fprintf(stderr, "FAIL: no library defines pncclAllReduce\n");
    return 1;
  }
  fprintf(stderr, "NCCL's functions come from %s\n", info.dli_fname);
  const char* expected = getenv("NCCL_TEST_EXPECT_LIBRARY");
  char got[PATH_MAX], want[PATH_MAX];
  if (!expected ||
      (realpath(info.dli_fname, got) && realpath(expected, want) && strcmp(got, want) == 0))
    return 0;
  fprintf(stderr, "FAIL: NCCL's functions come from %s, not %s (NCCL_TEST_EXPECT_LIBRARY)\n",
          info.dli_fname, expected);
  return 1;
}
