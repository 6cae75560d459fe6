/* Error paths, asserted on every rank: bad communicators, bad arguments, a config with a wrong
 * magic, a count mismatch between ranks, a rank killed during a collective. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "subtests.h"

/* rc is the refusal `want` (or `alsoFine`, where not ncclSuccess), with a message. */
static int refusedAs(const Rank* ctx, ncclResult_t rc, ncclResult_t want, ncclResult_t alsoFine,
                     const char* what) {
  CHECK(ctx, rc == want || (alsoFine != ncclSuccess && rc == alsoFine),
        "%s returned %d (%s), expected %d (%s)", what, (int)rc, ncclGetErrorString(rc), (int)want,
        ncclGetErrorString(want));
  const char* message = ncclGetLastError(NULL);
  CHECK(ctx, message && message[0], "%s: ncclGetLastError is empty", what);
  if (ctx->rank == 0) fprintf(stderr, "rank 0: %s: %s\n", what, message);
  return 0;
}

static int refused(const Rank* ctx, ncclResult_t rc, ncclResult_t want, const char* what) {
  return refusedAs(ctx, rc, want, ncclSuccess, what);
}

/* A NULL communicator, memory that is no communicator, a destroyed one: each refused with
 * ncclInvalidUsage or ncclInvalidArgument (NCCL uses both), and the world communicator
 * unharmed. */
int testBadComm(Rank* ctx) {
  const int r = ctx->rank;
  ncclComm_t world = NULL, gone = NULL;
  if (initWorld(ctx, &world)) return 1;
  NCCL_OK(ctx, ncclCommSplit(world, 0, r, &gone, NULL));
  NCCL_OK(ctx, ncclCommDestroy(gone));
  static long long notAComm[512]; /* zeroed memory where a communicator is expected */
  const ncclComm_t bad[3] = {NULL, (ncclComm_t)notAComm, gone};
  static const char* const names[3] = {"a NULL comm", "memory that is no comm", "a destroyed comm"};
  float x = 1, y = 0;
  int count = 0;
  char what[96];
  for (int i = 0; i < 3; ++i) {
    snprintf(what, sizeof what, "ncclAllReduce on %s", names[i]);
    if (refusedAs(ctx, ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, bad[i], NULL),
                  ncclInvalidUsage, ncclInvalidArgument, what))
      return 1;
    snprintf(what, sizeof what, "ncclCommCount on %s", names[i]);
    if (refusedAs(ctx, ncclCommCount(bad[i], &count), ncclInvalidUsage, ncclInvalidArgument, what))
      return 1;
  }
  if (expectWorldSum(ctx, world, "world afterwards")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* Arguments refused locally, each with ncclInvalidArgument (ncclGroupEnd outside a group:
 * ncclInvalidUsage), leaving the communicator working. */
int testBadArgs(Rank* ctx) {
  const int n = ctx->nranks;
  ncclComm_t world = NULL, none = NULL;
  if (initWorld(ctx, &world)) return 1;
  float x[4] = {0}, y[4] = {0};
#define REFUSED(call, what) \
  if (refused(ctx, (call), ncclInvalidArgument, (what))) return 1
  REFUSED(ncclAllReduce(x, y, 4, ncclNumTypes, ncclSum, world, NULL), "dtype ncclNumTypes");
  REFUSED(ncclAllReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)99, world, NULL), "op 99 (never made)");
  REFUSED(ncclAllReduce(x, NULL, 4, ncclFloat32, ncclSum, world, NULL), "recvbuff NULL");
  REFUSED(ncclAllReduce(NULL, y, 4, ncclFloat32, ncclSum, world, NULL), "sendbuff NULL");
  REFUSED(ncclReduce(x, y, 4, ncclFloat32, ncclSum, n, world, NULL), "reduce root = nranks");
  REFUSED(ncclBroadcast(x, y, 4, ncclFloat32, -1, world, NULL), "broadcast root -1");
  REFUSED(ncclSend(x, 4, ncclFloat32, n, world, NULL), "send to peer nranks");
  REFUSED(ncclCommInitRank(&none, n, ctx->ids[1], n), "init with rank = nranks");
  REFUSED(ncclCommInitRank(&none, 0, ctx->ids[1], 0), "init with nranks 0");
  REFUSED(ncclGetVersion(NULL), "ncclGetVersion(NULL)");
  REFUSED(ncclGetUniqueId(NULL), "ncclGetUniqueId(NULL)");
  REFUSED(ncclCommCount(world, NULL), "ncclCommCount(comm, NULL)");
  REFUSED(ncclCommRevoke(world, 1), "ncclCommRevoke with flags 1");
#undef REFUSED
  if (refused(ctx, ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd outside a group")) return 1;
  if (expectWorldSum(ctx, world, "world afterwards")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* A config whose magic is not NCCL_CONFIG_INITIALIZER's, and one with blocking = 2, refused by
 * init and split with ncclInvalidArgument on every rank; then a good config works. */
int testConfigMagic(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank;
  ncclConfig_t wrongMagic = NCCL_CONFIG_INITIALIZER;
  wrongMagic.magic = 0x12345678;
  ncclConfig_t wrongBlocking = NCCL_CONFIG_INITIALIZER;
  wrongBlocking.blocking = 2;
  ncclComm_t comm = NULL, split = NULL;
  if (refused(ctx, ncclCommInitRankConfig(&comm, n, ctx->ids[0], r, &wrongMagic),
              ncclInvalidArgument, "init with a wrong magic") ||
      refused(ctx, ncclCommInitRankConfig(&comm, n, ctx->ids[0], r, &wrongBlocking),
              ncclInvalidArgument, "init with blocking = 2"))
    return 1;
  ncclConfig_t good = NCCL_CONFIG_INITIALIZER;
  NCCL_OK(ctx, ncclCommInitRankConfig(&comm, n, ctx->ids[1], r, &good));
  if (refused(ctx, ncclCommSplit(comm, 0, r, &split, &wrongMagic), ncclInvalidArgument,
              "split with a wrong magic"))
    return 1;
  if (expectWorldSum(ctx, comm, "good config")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

/* The last rank passes twice the others' count. With LOOM_TIMEOUT_MS=2000 (main.c's table),
 * every rank returns an error within seconds: none hangs, none reports success. */
int testCountMismatch(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclComm_t world = NULL;
  if (initWorld(ctx, &world) || expectSum(ctx, world, r + 1, total, "world")) return 1;
  const size_t count = (size_t)4096 * (r == n - 1 ? 2 : 1);
  float* send = calloc(2 * 4096, sizeof(float));
  float* recv = calloc(2 * 4096, sizeof(float));
  CHECK(ctx, send && recv, "no memory");
  for (size_t i = 0; i < count; ++i) send[i] = (float)(r + 1);
  noteStep(ctx, "the allreduce with mismatched counts");
  const double start = nowSeconds();
  const ncclResult_t rc = ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, world, NULL);
  const double seconds = nowSeconds() - start;
  size_t summed = 0;
  for (size_t i = 0; i < count; ++i) summed += recv[i] == (float)total;
  CHECK(ctx, rc != ncclSuccess && rc != ncclInProgress,
        "an allreduce of %zu elements here (%d on the last rank) returned %d (%s); %zu of its "
        "elements hold the sum of all ranks", count, 2 * 4096, (int)rc, ncclGetErrorString(rc),
        summed);
  CHECK(ctx, seconds < 10, "the mismatch took %.1f s to fail (timeout 2 s)", seconds);
  const char* message = ncclGetLastError(world);
  CHECK(ctx, message && message[0], "no message");
  fprintf(stderr, "rank %d after %.2f s: %s\n", r, seconds, message);
  free(send);
  free(recv);
  NCCL_OK(ctx, ncclCommAbort(world));
  return 0;
}

static void* killLater(void* arg) {
  const Rank* ctx = arg;
  sleepMs(300);
  atomic_store(&ctx->shared->expectKilled[ctx->rank], 1);
  raise(SIGKILL);
  return NULL;
}

/* Rank n/2 is killed (SIGKILL) 300 ms into a loop of 4 MiB allreduces: every other rank's
 * allreduce returns an error naming it within seconds, its state is an error, and a later
 * call fails instead of hanging. */
int testKilledRank(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, victim = n / 2;
  ncclComm_t world = NULL;
  if (initWorld(ctx, &world) || expectWorldSum(ctx, world, "world") ||
      oobBarrier(ctx))
    return 1;
  const size_t count = (size_t)1 << 20;
  float* buf = calloc(count, sizeof(float));
  CHECK(ctx, buf != NULL, "no memory");
  pthread_t thread;
  if (r == victim)
    CHECK(ctx, pthread_create(&thread, NULL, killLater, ctx) == 0, "pthread_create");
  const double start = nowSeconds();
  ncclResult_t rc = ncclSuccess;
  while (rc == ncclSuccess && nowSeconds() - start < 30)
    rc = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, world, NULL);
  const double seconds = nowSeconds() - start - 0.3;
  const char* message = ncclGetLastError(world);
  CHECK(ctx, rc != ncclSuccess && rc != ncclInProgress, "no error 30 s after rank %d was killed",
        victim);
  CHECK(ctx, seconds < 10, "the error took %.1f s after the kill", seconds);
  CHECK(ctx, namesRank(message, victim), "the error does not name rank %d: %s", victim, message);
  fprintf(stderr, "rank %d after %.2f s: %s\n", r, seconds, message);
  ncclResult_t state = ncclSuccess;
  NCCL_OK(ctx, ncclCommGetAsyncError(world, &state));
  CHECK(ctx, state != ncclSuccess && state != ncclInProgress, "the async state is %d (%s)",
        (int)state, ncclGetErrorString(state));
  rc = ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, world, NULL);
  CHECK(ctx, rc != ncclSuccess, "a failed communicator accepted another allreduce");
  free(buf);
  NCCL_OK(ctx, ncclCommAbort(world));
  return 0;
}
