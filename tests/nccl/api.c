/* The API around the collectives: version and error texts, a communicator's facts, configs,
 * scalable init, NCCL's memory, buffer and window registration, finalize, simulated groups. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "subtests.h"

int testVersion(Rank* ctx) {
  if (checkLibrary()) return 1;
  int version = 0;
  NCCL_OK(ctx, ncclGetVersion(&version));
  CHECK(ctx, version == NCCL_VERSION_CODE, "ncclGetVersion gave %d; nccl.h is %d", version,
        NCCL_VERSION_CODE);
  /* Every code has a text of its own; unknown codes (ncclNumResults and beyond) have one too. */
  const char* texts[ncclNumResults + 1];
  for (int r = 0; r <= ncclNumResults; ++r) {
    texts[r] = ncclGetErrorString((ncclResult_t)r);
    CHECK(ctx, texts[r] && texts[r][0], "ncclGetErrorString(%d) is empty", r);
    for (int q = 0; q < r; ++q)
      CHECK(ctx, strcmp(texts[q], texts[r]) != 0, "codes %d and %d have the same text '%s'", q,
            r, texts[r]);
  }
  const char* unknown = ncclGetErrorString((ncclResult_t)1000);
  CHECK(ctx, unknown && unknown[0], "ncclGetErrorString(1000) is empty");
  CHECK(ctx, ncclGetLastError(NULL) != NULL, "ncclGetLastError(NULL) is NULL");
  ncclUniqueId a, b;
  NCCL_OK(ctx, ncclGetUniqueId(&a));
  NCCL_OK(ctx, ncclGetUniqueId(&b));
  CHECK(ctx, memcmp(&a, &b, sizeof a) != 0, "two ncclGetUniqueId calls gave the same id");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit(); /* deprecated, still exported: it must exist and return */
#pragma GCC diagnostic pop
  return 0;
}

/* Count, rank, the async state of a healthy communicator, and ncclCommCuDevice, which a host
 * communicator may answer or refuse (ncclInvalidUsage with a reason), not crash on. */
int testCommInfo(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  int count = -1, rank = -1, device = -2;
  NCCL_OK(ctx, ncclCommCount(comm, &count));
  NCCL_OK(ctx, ncclCommUserRank(comm, &rank));
  CHECK(ctx, count == ctx->nranks && rank == ctx->rank, "ncclCommCount %d, ncclCommUserRank %d",
        count, rank);
  ncclResult_t state = ncclInternalError;
  NCCL_OK(ctx, ncclCommGetAsyncError(comm, &state));
  CHECK(ctx, state == ncclSuccess, "a new communicator's async state is %d", (int)state);
  const ncclResult_t rc = ncclCommCuDevice(comm, &device);
  const char* why = ncclGetLastError(comm);
  CHECK(ctx, rc == ncclSuccess || (rc == ncclInvalidUsage && why && why[0]),
        "ncclCommCuDevice returned %d (%s): '%s'", (int)rc, ncclGetErrorString(rc),
        why ? why : "(null)");
  if (expectWorldSum(ctx, comm, "world"))
    return 1;
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

/* NCCL_CONFIG_INITIALIZER as it is; with every field a host library may ignore set; as a
 * caller built against NCCL 2.27's header passes it (shorter, older version); and NULL. */
int testConfig(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclConfig_t plain = NCCL_CONFIG_INITIALIZER;
  ncclConfig_t tuned = NCCL_CONFIG_INITIALIZER;
  tuned.blocking = 1;
  tuned.cgaClusterSize = 2;
  tuned.minCTAs = 1;
  tuned.maxCTAs = 16;
  tuned.splitShare = 1;
  tuned.trafficClass = 0;
  tuned.commName = "nccltest";
  tuned.collnetEnable = 0;
  tuned.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  tuned.shrinkShare = 0;
  tuned.nvlsCTAs = 4;
  tuned.nChannelsPerNetPeer = 2;
  tuned.nvlinkCentricSched = 1;
  ncclConfig_t older = NCCL_CONFIG_INITIALIZER;
  older.size = offsetof(ncclConfig_t, nChannelsPerNetPeer);
  older.version = NCCL_VERSION(2, 27, 0);
  ncclConfig_t* configs[4] = {&plain, &tuned, &older, NULL};
  static const char* const names[4] = {"initializer", "every field", "2.27 caller", "NULL"};
  ncclComm_t comms[4];
  for (int i = 0; i < 4; ++i) {
    const ncclResult_t rc = ncclCommInitRankConfig(&comms[i], n, ctx->ids[i], r, configs[i]);
    CHECK(ctx, rc == ncclSuccess, "ncclCommInitRankConfig with the %s config returned %d (%s): %s",
          names[i], (int)rc, ncclGetErrorString(rc), ncclGetLastError(NULL));
  }
  for (int i = 0; i < 4; ++i)
    if (expectSum(ctx, comms[i], r + 1, total, names[i])) return 1;
  for (int i = 0; i < 4; ++i) NCCL_OK(ctx, ncclCommDestroy(comms[i]));
  return 0;
}

/* ncclCommInitRankScalable with one id and with two (the same list on every rank). */
int testScalableInit(Rank* ctx) {
  const int n = ctx->nranks, r = ctx->rank, total = worldTotal(ctx);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t one = NULL, two = NULL;
  NCCL_OK(ctx, ncclCommInitRankScalable(&one, n, r, 1, &ctx->ids[0], &config));
  NCCL_OK(ctx, ncclCommInitRankScalable(&two, n, r, 2, &ctx->ids[1], NULL));
  int rank = -1;
  NCCL_OK(ctx, ncclCommUserRank(two, &rank));
  CHECK(ctx, rank == r, "the two-id communicator numbers this rank %d", rank);
  if (expectSum(ctx, one, r + 1, total, "one id") || expectSum(ctx, two, r + 1, total, "two ids"))
    return 1;
  NCCL_OK(ctx, ncclCommDestroy(one));
  NCCL_OK(ctx, ncclCommDestroy(two));
  return 0;
}

#define MEMORY_COUNT 1031

/* ncclMemAlloc's buffers in a collective, then ncclMemFree. */
int testMemAlloc(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  void *send = NULL, *recv = NULL;
  NCCL_OK(ctx, ncclMemAlloc(&send, MEMORY_COUNT * sizeof(int32_t)));
  NCCL_OK(ctx, ncclMemAlloc(&recv, MEMORY_COUNT * sizeof(int32_t)));
  CHECK(ctx, send && recv, "ncclMemAlloc returned NULL");
  const int total = worldTotal(ctx);
  if (expectSumIn(ctx, comm, send, recv, MEMORY_COUNT, ctx->rank + 1, total, "ncclMemAlloc"))
    return 1;
  NCCL_OK(ctx, ncclMemFree(send));
  NCCL_OK(ctx, ncclMemFree(recv));
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

/* ncclCommRegister on malloc'd and ncclMemAlloc'd buffers, used, then deregistered. */
int testRegister(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  const size_t bytes = MEMORY_COUNT * sizeof(int32_t);
  int32_t* send = malloc(bytes);
  void* recv = NULL;
  NCCL_OK(ctx, ncclMemAlloc(&recv, bytes));
  CHECK(ctx, send && recv, "no memory");
  void *sendHandle = NULL, *recvHandle = NULL;
  NCCL_OK(ctx, ncclCommRegister(comm, send, bytes, &sendHandle));
  NCCL_OK(ctx, ncclCommRegister(comm, recv, bytes, &recvHandle));
  const int total = worldTotal(ctx);
  if (expectSumIn(ctx, comm, send, recv, MEMORY_COUNT, ctx->rank + 1, total, "registered"))
    return 1;
  NCCL_OK(ctx, ncclCommDeregister(comm, sendHandle));
  NCCL_OK(ctx, ncclCommDeregister(comm, recvHandle));
  NCCL_OK(ctx, ncclMemFree(recv));
  free(send);
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

/* ncclCommWindowRegister (collective) on aligned buffers, symmetric and default, used, then
 * deregistered. */
int testWindow(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  const size_t bytes = 4 * NCCL_WIN_REQUIRED_ALIGNMENT;
  void *send = NULL, *recv = NULL;
  CHECK(ctx, posix_memalign(&send, NCCL_WIN_REQUIRED_ALIGNMENT, bytes) == 0 &&
                 posix_memalign(&recv, NCCL_WIN_REQUIRED_ALIGNMENT, bytes) == 0,
        "no memory");
  ncclWindow_t sendWin = NULL, recvWin = NULL;
  NCCL_OK(ctx, ncclCommWindowRegister(comm, send, bytes, &sendWin, NCCL_WIN_COLL_SYMMETRIC));
  NCCL_OK(ctx, ncclCommWindowRegister(comm, recv, bytes, &recvWin, NCCL_WIN_DEFAULT));
  const int total = worldTotal(ctx);
  if (expectSumIn(ctx, comm, send, recv, bytes / sizeof(int32_t), ctx->rank + 1, total,
                  "in windows"))
    return 1;
  NCCL_OK(ctx, ncclCommWindowDeregister(comm, sendWin));
  NCCL_OK(ctx, ncclCommWindowDeregister(comm, recvWin));
  free(send);
  free(recv);
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

/* A blocking communicator: ncclCommFinalize returns when done, its state is then ncclSuccess,
 * and ncclCommDestroy frees it. */
int testFinalize(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  if (expectWorldSum(ctx, comm, "world")) return 1;
  NCCL_OK(ctx, ncclCommFinalize(comm));
  ncclResult_t state = ncclInternalError;
  NCCL_OK(ctx, ncclCommGetAsyncError(comm, &state));
  CHECK(ctx, state == ncclSuccess, "after ncclCommFinalize the state is %d (%s)", (int)state,
        ncclGetErrorString(state));
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

#define SIM_ELEMENTS ((size_t)1 << 20)

/* One simulated group of `calls` float sum allreduces of count elements: its estimate, which
 * must be positive, with no byte of recvbuff written. */
static int simulate(const Rank* ctx, ncclComm_t comm, const float* send, unsigned char* recv,
                    size_t count, int calls, float* estimate) {
  memset(recv, SENTINEL, SIM_ELEMENTS * sizeof(float));
  NCCL_OK(ctx, ncclGroupStart());
  for (int i = 0; i < calls; ++i)
    NCCL_OK(ctx, ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL));
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  NCCL_OK(ctx, ncclGroupSimulateEnd(&info));
  *estimate = info.estimatedTime;
  CHECK(ctx, info.estimatedTime > 0, "%d allreduce(s) of %zu floats: estimatedTime %g", calls,
        count, (double)info.estimatedTime);
  for (size_t k = 0; k < SIM_ELEMENTS * sizeof(float); ++k)
    CHECK(ctx, recv[k] == SENTINEL, "a simulated group wrote recvbuff (byte %zu)", k);
  return 0;
}

/* ncclGroupSimulateEnd: a positive estimate that grows with the message and the number of
 * calls, and nothing run; the communicator works normally afterwards. */
int testSimulate(Rank* ctx) {
  ncclComm_t comm = NULL;
  if (initWorld(ctx, &comm)) return 1;
  float* send = calloc(SIM_ELEMENTS, sizeof(float));
  unsigned char* recv = malloc(SIM_ELEMENTS * sizeof(float));
  CHECK(ctx, send && recv, "no memory");
  static const size_t counts[3] = {1024, (size_t)1 << 16, SIM_ELEMENTS};
  float estimates[3], twice = 0;
  for (int k = 0; k < 3; ++k) {
    if (simulate(ctx, comm, send, recv, counts[k], 1, &estimates[k])) return 1;
    CHECK(ctx, k == 0 || estimates[k] > estimates[k - 1],
          "estimates do not grow with the size: %g us for %zu floats, %g us for %zu",
          (double)estimates[k - 1], counts[k - 1], (double)estimates[k], counts[k]);
  }
  if (simulate(ctx, comm, send, recv, counts[1], 2, &twice)) return 1;
  CHECK(ctx, twice > estimates[1], "two allreduces of %zu floats: %g us, one: %g us", counts[1],
        (double)twice, (double)estimates[1]);
  free(send);
  free(recv);
  if (expectWorldSum(ctx, comm, "after")) return 1;
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}
