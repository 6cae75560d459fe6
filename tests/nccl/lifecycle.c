/* A communicator's life: split (colors, keys, NCCL_SPLIT_NOCOLOR), shrink (of a healthy
 * communicator, and after a rank died), revoke and abort ending calls in flight. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "subtests.h"

/* Each member's world rank, gathered over comm, is members[0..m-1] in order: the new
 * communicator numbers its ranks as NCCL says. */
static int expectMembers(const Rank* ctx, ncclComm_t comm, const int* members, int m,
                         const char* what) {
  int count = -1, rank = -1;
  NCCL_OK(ctx, ncclCommCount(comm, &count));
  NCCL_OK(ctx, ncclCommUserRank(comm, &rank));
  CHECK(ctx, count == m, "%s: ncclCommCount %d, expected %d", what, count, m);
  CHECK(ctx, rank >= 0 && rank < m && members[rank] == ctx->rank,
        "%s: ncclCommUserRank %d, but this is world rank %d", what, rank, ctx->rank);
  int32_t mine = ctx->rank, all[NCCL_TEST_MAX_RANKS];
  NCCL_OK(ctx, ncclAllGather(&mine, all, 1, ncclInt32, comm, NULL));
  for (int i = 0; i < m; ++i)
    CHECK(ctx, all[i] == members[i], "%s: rank %d is world rank %d, expected %d", what, i,
          (int)all[i], members[i]);
  int total = 0;
  for (int i = 0; i < m; ++i) total += members[i] + 1;
  return expectSum(ctx, comm, ctx->rank + 1, total, what);
}

/* Colors by parity with keys that reverse the order; then rank 0 with NCCL_SPLIT_NOCOLOR and
 * the others with equal keys (ordered by their old rank) and a config. */
int testSplit(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank;
  ncclComm_t world = NULL, half = NULL, rest = NULL;
  if (initWorld(ctx, &world)) return 1;
  NCCL_OK(ctx, ncclCommSplit(world, r % 2, n - r, &half, NULL));
  int members[NCCL_TEST_MAX_RANKS], m = 0;
  for (int q = n - 1; q >= 0; --q)
    if (q % 2 == r % 2) members[m++] = q;
  if (expectMembers(ctx, half, members, m, "split by parity, reversed")) return 1;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  rest = world; /* must become NULL on the rank without a color */
  NCCL_OK(ctx, ncclCommSplit(world, r == 0 ? NCCL_SPLIT_NOCOLOR : 3, 0, &rest, &config));
  if (r == 0) {
    CHECK(ctx, rest == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    for (m = 0; m < n - 1; ++m) members[m] = m + 1;
    if (expectMembers(ctx, rest, members, m, "split without rank 0")) return 1;
    NCCL_OK(ctx, ncclCommDestroy(rest));
  }
  NCCL_OK(ctx, ncclCommDestroy(half));
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* ncclCommShrink of a healthy communicator without rank 1, which does not call it; the others
 * keep their order. */
int testShrink(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, excluded = 1;
  ncclComm_t world = NULL, small = NULL;
  if (initWorld(ctx, &world) || expectWorldSum(ctx, world, "world"))
    return 1;
  if (r != excluded) {
    int list[1] = {excluded}, members[NCCL_TEST_MAX_RANKS], m = 0;
    NCCL_OK(ctx, ncclCommShrink(world, list, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
    for (int q = 0; q < n; ++q)
      if (q != excluded) members[m++] = q;
    if (expectMembers(ctx, small, members, m, "shrunk")) return 1;
    NCCL_OK(ctx, ncclCommDestroy(small));
  }
  if (oobBarrier(ctx)) return 1; /* the excluded rank keeps world until the others are done */
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* Makes this rank's process die by SIGKILL, as the test means (the supervisor expects it). */
static void killSelf(const Rank* ctx) {
  atomic_store(&ctx->shared->expectKilled[ctx->rank], 1);
  raise(SIGKILL);
}

/* The last rank dies; the others' next allreduce fails, and ncclCommShrink with
 * NCCL_SHRINK_ABORT gives them a working communicator without it. */
int testShrinkAbort(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, victim = n - 1;
  ncclComm_t world = NULL, small = NULL;
  if (initWorld(ctx, &world) || expectWorldSum(ctx, world, "world") ||
      oobBarrier(ctx))
    return 1;
  if (r == victim) killSelf(ctx);
  const double start = nowSeconds();
  int32_t x[17], y[17];
  memset(x, 0, sizeof x);
  const ncclResult_t rc = ncclAllReduce(x, y, 17, ncclInt32, ncclSum, world, NULL);
  CHECK(ctx, rc != ncclSuccess && rc != ncclInProgress,
        "an allreduce with rank %d dead returned %d (%s)", victim, (int)rc, ncclGetErrorString(rc));
  CHECK(ctx, nowSeconds() - start < 10, "the dead rank's error took %.1f s", nowSeconds() - start);
  int list[1] = {victim}, members[NCCL_TEST_MAX_RANKS];
  NCCL_OK(ctx, ncclCommShrink(world, list, 1, &small, NULL, NCCL_SHRINK_ABORT));
  for (int q = 0; q < n - 1; ++q) members[q] = q;
  if (expectMembers(ctx, small, members, n - 1, "shrunk after a death")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(small));
  NCCL_OK(ctx, ncclCommAbort(world));
  return 0;
}

typedef struct {
  ncclComm_t comm;
  int abort; /* 1: ncclCommAbort, 0: ncclCommRevoke */
  ncclResult_t rc;
  char message[512]; /* the calling thread's last error, where rc is one */
} LaterCall;

static void* endLater(void* arg) {
  LaterCall* call = arg;
  sleepMs(300);
  call->rc = call->abort ? ncclCommAbort(call->comm)
                         : ncclCommRevoke(call->comm, NCCL_REVOKE_DEFAULT);
  if (call->rc != ncclSuccess)
    snprintf(call->message, sizeof call->message, "%s", ncclGetLastError(NULL));
  return NULL;
}

/* An allreduce that cannot complete (the last rank never joins it) on every other rank, which
 * rank 0's second thread ends with ncclCommRevoke or ncclCommAbort: every rank's call returns
 * an error within seconds. */
static int endInFlight(const Rank* ctx, ncclComm_t comm, int abort) {
  const char* what = abort ? "ncclCommAbort" : "ncclCommRevoke";
  const size_t count = (size_t)1 << 16;
  float* send = calloc(count, sizeof(float));
  float* recv = calloc(count, sizeof(float));
  CHECK(ctx, send && recv, "no memory");
  LaterCall call = {comm, abort, ncclInternalError, ""};
  pthread_t thread;
  if (ctx->rank == 0)
    CHECK(ctx, pthread_create(&thread, NULL, endLater, &call) == 0, "pthread_create");
  const double start = nowSeconds();
  const ncclResult_t rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL);
  const double seconds = nowSeconds() - start;
  const char* message = ncclGetLastError(NULL);
  if (ctx->rank == 0) {
    pthread_join(thread, NULL);
    CHECK(ctx, call.rc == ncclSuccess, "%s returned %d (%s): %s", what, (int)call.rc,
          ncclGetErrorString(call.rc), call.message);
  }
  CHECK(ctx, rc != ncclSuccess && rc != ncclInProgress,
        "an allreduce in flight during %s returned %d (%s)", what, (int)rc, ncclGetErrorString(rc));
  CHECK(ctx, seconds < 10, "the allreduce in flight took %.1f s to end after %s", seconds, what);
  CHECK(ctx, message && message[0], "no message after %s", what);
  free(send);
  free(recv);
  return 0;
}

/* A later call on comm fails within seconds instead of waiting for ranks that left. */
static int laterCallFails(const Rank* ctx, ncclComm_t comm, const char* after) {
  const double start = nowSeconds();
  int32_t x[17], y[17];
  memset(x, 0, sizeof x);
  const ncclResult_t rc = ncclAllReduce(x, y, 17, ncclInt32, ncclSum, comm, NULL);
  CHECK(ctx, rc != ncclSuccess && rc != ncclInProgress, "an allreduce after %s returned %d (%s)",
        after, (int)rc, ncclGetErrorString(rc));
  CHECK(ctx, nowSeconds() - start < 10, "an allreduce after %s took %.1f s to fail", after,
        nowSeconds() - start);
  return 0;
}

/* ncclCommRevoke from another thread ends the calls in flight on every rank; the revoking
 * rank's state settles to ncclSuccess (quiescent), later calls fail on every rank, and the
 * revoked communicator can be shrunk (NCCL_SHRINK_ABORT, no rank excluded) into a working one. */
int testRevoke(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclComm_t world = NULL, fresh = NULL;
  if (initWorld(ctx, &world) || expectSum(ctx, world, r + 1, total, "world") || oobBarrier(ctx))
    return 1;
  if (r != n - 1 && endInFlight(ctx, world, 0)) return 1;
  if (oobBarrier(ctx)) return 1;
  if (r == 0) {
    const ncclResult_t state = waitNotInProgress(world, 10);
    CHECK(ctx, state == ncclSuccess, "after ncclCommRevoke the state settled to %d (%s), not "
          "ncclSuccess", (int)state, ncclGetErrorString(state));
  }
  if (laterCallFails(ctx, world, "ncclCommRevoke")) return 1;
  NCCL_OK(ctx, ncclCommShrink(world, NULL, 0, &fresh, NULL, NCCL_SHRINK_ABORT));
  if (expectSum(ctx, fresh, r + 1, total, "shrunk after revoke")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(fresh));
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* ncclCommAbort from another thread ends the calls in flight on every rank; the last rank's
 * later call fails; every rank but 0 (whose communicator is gone) aborts its own. */
int testAbort(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank;
  ncclComm_t world = NULL;
  if (initWorld(ctx, &world) || expectWorldSum(ctx, world, "world") ||
      oobBarrier(ctx))
    return 1;
  if (r != n - 1 && endInFlight(ctx, world, 1)) return 1;
  if (oobBarrier(ctx)) return 1;
  if (r == n - 1 && laterCallFails(ctx, world, "rank 0's ncclCommAbort")) return 1;
  if (r == 0) return 0;
  const double start = nowSeconds();
  NCCL_OK(ctx, ncclCommAbort(world));
  CHECK(ctx, nowSeconds() - start < 10, "ncclCommAbort took %.1f s", nowSeconds() - start);
  return 0;
}
