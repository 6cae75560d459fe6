/* Groups: nested, holding several communicators, holding inits; ncclCommInitAll's ranks in one
 * process driven from one thread and from one thread each; non-blocking communicators. */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "subtests.h"
#include "values.h"

/* The sum of r + 1 over the ranks below n with r's parity. */
static int paritySum(int n, int r) {
  int total = 0;
  for (int q = r % 2; q < n; q += 2) total += q + 1;
  return total;
}

/* An empty group; an allreduce, all-pairs send/recv and a broadcast in groups three deep, run
 * at the outermost ncclGroupEnd. */
int testGroupNested(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclComm_t comm = NULL;
  Buffers b;
  if (openSweep(ctx, &comm, &b)) return 1;
  NCCL_OK(ctx, ncclGroupStart());
  NCCL_OK(ctx, ncclGroupEnd());
  Case pairs = {"sendrecv", ncclFloat64, ncclNumOps, 1031, 0, -1, 0, 0, "all pairs, nested"};
  int32_t x[17], sum[17];
  unsigned char bcast[100];
  for (int i = 0; i < 17; ++i) x[i] = (r + 1) * (i + 1), sum[i] = -1;
  memset(bcast, 0, sizeof bcast);
  if (r == n - 1) fillMoved(bcast, r, 0, sizeof bcast);
  NCCL_OK(ctx, ncclGroupStart());
  NCCL_OK(ctx, ncclAllReduce(x, sum, 17, ncclInt32, ncclSum, comm, NULL));
  NCCL_OK(ctx, ncclGroupStart());
  if (postAllPairs(ctx, comm, &b, &pairs)) return 1;
  NCCL_OK(ctx, ncclGroupStart());
  NCCL_OK(ctx, ncclBroadcast(bcast, bcast, sizeof bcast, ncclUint8, n - 1, comm, NULL));
  NCCL_OK(ctx, ncclGroupEnd());
  NCCL_OK(ctx, ncclGroupEnd());
  NCCL_OK(ctx, ncclGroupEnd());
  for (int i = 0; i < 17; ++i)
    CHECK(ctx, sum[i] == total * (i + 1), "allreduce index %d: expected %d got %d", i,
          total * (i + 1), (int)sum[i]);
  if (checkAllPairs(ctx, &b, &pairs)) return 1;
  for (size_t k = 0; k < sizeof bcast; ++k)
    CHECK(ctx, bcast[k] == movedByte(n - 1, k), "broadcast byte %zu: expected 0x%02x got 0x%02x",
          k, movedByte(n - 1, k), bcast[k]);
  return closeSweep(ctx, comm, &b);
}

/* Two communicators split from the world (by parity; all ranks in reverse order) in one group:
 * an allreduce on each and a ring exchange on the reversed one. */
int testGroupComms(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclComm_t world = NULL, half = NULL, reversed = NULL;
  if (initWorld(ctx, &world)) return 1;
  NCCL_OK(ctx, ncclCommSplit(world, r % 2, r, &half, NULL));
  NCCL_OK(ctx, ncclCommSplit(world, 0, n - r, &reversed, NULL));
  const int rr = n - 1 - r, next = (rr + 1) % n, prev = (rr + n - 1) % n;
  int32_t hx[17], hs[17], rx[17], rs[17];
  unsigned char out[64], in[64];
  for (int i = 0; i < 17; ++i) hx[i] = rx[i] = (r + 1) * (i + 1), hs[i] = rs[i] = -1;
  fillMoved(out, r, 0, sizeof out);
  memset(in, 0, sizeof in);
  NCCL_OK(ctx, ncclGroupStart());
  NCCL_OK(ctx, ncclAllReduce(hx, hs, 17, ncclInt32, ncclSum, half, NULL));
  NCCL_OK(ctx, ncclAllReduce(rx, rs, 17, ncclInt32, ncclSum, reversed, NULL));
  NCCL_OK(ctx, ncclSend(out, sizeof out, ncclInt8, next, reversed, NULL));
  NCCL_OK(ctx, ncclRecv(in, sizeof in, ncclInt8, prev, reversed, NULL));
  NCCL_OK(ctx, ncclGroupEnd());
  for (int i = 0; i < 17; ++i) {
    CHECK(ctx, hs[i] == paritySum(n, r) * (i + 1), "parity allreduce index %d: expected %d got %d",
          i, paritySum(n, r) * (i + 1), (int)hs[i]);
    CHECK(ctx, rs[i] == total * (i + 1), "reversed allreduce index %d: expected %d got %d", i,
          total * (i + 1), (int)rs[i]);
  }
  const int from = n - 1 - prev; /* the world rank of the reversed ring's previous rank */
  for (size_t k = 0; k < sizeof in; ++k)
    CHECK(ctx, in[k] == movedByte(from, k), "ring byte %zu from world rank %d: got 0x%02x", k,
          from, in[k]);
  NCCL_OK(ctx, ncclCommDestroy(half));
  NCCL_OK(ctx, ncclCommDestroy(reversed));
  NCCL_OK(ctx, ncclCommDestroy(world));
  return 0;
}

/* Two communicators initialised in one group by one thread per rank. */
int testGroupInit(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclComm_t a = NULL, b = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  NCCL_OK(ctx, ncclGroupStart());
  NCCL_OK(ctx, ncclCommInitRank(&a, n, ctx->ids[0], r));
  NCCL_OK(ctx, ncclCommInitRankConfig(&b, n, ctx->ids[1], r, &config));
  NCCL_OK(ctx, ncclGroupEnd());
  if (expectSum(ctx, a, r + 1, total, "first") || expectSum(ctx, b, r + 1, total, "second"))
    return 1;
  NCCL_OK(ctx, ncclCommDestroy(a));
  NCCL_OK(ctx, ncclCommDestroy(b));
  return 0;
}

typedef struct {
  Rank ctx; /* its rank: the communicator's */
  ncclComm_t comm;
  int failed;
} CommThread;

/* An allreduce and a broadcast from rank 0 on one communicator of ncclCommInitAll. */
static void* driveOne(void* arg) {
  CommThread* t = arg;
  const int r = t->ctx.rank;
  t->failed = expectWorldSum(&t->ctx, t->comm, "own thread");
  unsigned char data[300];
  memset(data, 0, sizeof data);
  if (r == 0) fillMoved(data, 0, 0, sizeof data);
  const ncclResult_t rc = ncclBroadcast(data, data, sizeof data, ncclUint8, 0, t->comm, NULL);
  if (!t->failed && rc != ncclSuccess)
    t->failed = FAIL(&t->ctx, "broadcast returned %d (%s): %s", (int)rc, ncclGetErrorString(rc),
                     ncclGetLastError(NULL));
  for (size_t k = 0; k < sizeof data && !t->failed; ++k)
    if (data[k] != movedByte(0, k))
      t->failed = FAIL(&t->ctx, "broadcast byte %zu: got 0x%02x", k, data[k]);
  return NULL;
}

/* From one thread, all the ranks' allreduces in one group. */
static int driveInOneGroup(const Rank* ctx, ncclComm_t* comms) {
  const int n = ctx->nranks, total = worldTotal(ctx);
  int32_t send[NCCL_TEST_MAX_RANKS][17], recv[NCCL_TEST_MAX_RANKS][17];
  for (int c = 0; c < n; ++c)
    for (int i = 0; i < 17; ++i) send[c][i] = (c + 1) * (i + 1), recv[c][i] = -1;
  NCCL_OK(ctx, ncclGroupStart());
  for (int c = 0; c < n; ++c)
    NCCL_OK(ctx, ncclAllReduce(send[c], recv[c], 17, ncclInt32, ncclSum, comms[c], NULL));
  NCCL_OK(ctx, ncclGroupEnd());
  for (int c = 0; c < n; ++c)
    for (int i = 0; i < 17; ++i)
      CHECK(ctx, recv[c][i] == total * (i + 1), "rank %d's allreduce index %d: expected %d got %d",
            c, i, total * (i + 1), (int)recv[c][i]);
  return 0;
}

/* ncclCommInitAll: n ranks in this process, driven from one thread in a group, then from a
 * thread each, then destroyed one after another from one thread. */
int testInitAll(Rank* ctx) {
  const int n = ctx->nranks;
  ncclComm_t comms[NCCL_TEST_MAX_RANKS];
  noteStep(ctx, "ncclCommInitAll");
  NCCL_OK(ctx, ncclCommInitAll(comms, n, NULL));
  for (int c = 0; c < n; ++c) {
    int count = -1, rank = -1;
    NCCL_OK(ctx, ncclCommCount(comms[c], &count));
    NCCL_OK(ctx, ncclCommUserRank(comms[c], &rank));
    CHECK(ctx, count == n && rank == c, "communicator %d: count %d, rank %d", c, count, rank);
  }
  noteStep(ctx, "one thread, one group of every rank's allreduce");
  if (driveInOneGroup(ctx, comms)) return 1;
  noteStep(ctx, "a thread per rank");
  CommThread threads[NCCL_TEST_MAX_RANKS];
  pthread_t ids[NCCL_TEST_MAX_RANKS];
  for (int c = 0; c < n; ++c) {
    threads[c].ctx = *ctx;
    threads[c].ctx.rank = c;
    threads[c].comm = comms[c];
    threads[c].failed = 0;
    CHECK(ctx, pthread_create(&ids[c], NULL, driveOne, &threads[c]) == 0, "pthread_create");
  }
  int failed = 0;
  for (int c = 0; c < n; ++c) {
    pthread_join(ids[c], NULL);
    failed |= threads[c].failed;
  }
  if (failed) return 1;
  noteStep(ctx, "ncclCommDestroy of each rank, one after another");
  const double start = nowSeconds();
  for (int c = 0; c < n; ++c) NCCL_OK(ctx, ncclCommDestroy(comms[c]));
  CHECK(ctx, nowSeconds() - start < 10, "destroying the communicators one by one took %.1f s",
        nowSeconds() - start);
  return 0;
}

/* A non-blocking call's end: ncclSuccess, or ncclInProgress and then the communicator's state
 * turning ncclSuccess. */
static int settle(const Rank* ctx, ncclComm_t comm, ncclResult_t rc, const char* what) {
  CHECK(ctx, rc == ncclSuccess || rc == ncclInProgress, "%s returned %d (%s): %s", what, (int)rc,
        ncclGetErrorString(rc), ncclGetLastError(NULL));
  CHECK(ctx, comm != NULL, "%s gave no communicator", what);
  const ncclResult_t state = waitNotInProgress(comm, 60);
  CHECK(ctx, state == ncclSuccess, "%s: the communicator's state became %d (%s): %s", what,
        (int)state, ncclGetErrorString(state), ncclGetLastError(comm));
  return 0;
}

static int settledSum(const Rank* ctx, ncclComm_t comm, int total, const char* what) {
  int32_t x[17], y[17];
  for (int i = 0; i < 17; ++i) x[i] = (ctx->rank + 1) * (i + 1), y[i] = -1;
  if (settle(ctx, comm, ncclAllReduce(x, y, 17, ncclInt32, ncclSum, comm, NULL), what)) return 1;
  for (int i = 0; i < 17; ++i)
    CHECK(ctx, y[i] == total * (i + 1), "%s index %d: expected %d got %d", what, i,
          total * (i + 1), (int)y[i]);
  return 0;
}

/* config.blocking = 0: init, a collective, a split (which inherits the config), finalize; each
 * may return ncclInProgress, and ncclCommGetAsyncError then turns ncclSuccess. */
int testNonBlocking(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL, half = NULL;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, n, ctx->ids[0], r, &config);
  if (settle(ctx, comm, rc, "ncclCommInitRankConfig") ||
      settledSum(ctx, comm, worldTotal(ctx), "allreduce"))
    return 1;
  rc = ncclCommSplit(comm, r % 2, r, &half, NULL);
  if (settle(ctx, half, rc, "ncclCommSplit") ||
      settledSum(ctx, half, paritySum(n, r), "allreduce on the split"))
    return 1;
  rc = ncclCommFinalize(half);
  if (settle(ctx, half, rc, "ncclCommFinalize of the split")) return 1;
  rc = ncclCommFinalize(comm);
  if (settle(ctx, comm, rc, "ncclCommFinalize")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(half));
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}
