/* The collectives that move data without reducing it, and send/recv in groups. Rank r's data
 * is movedByte(r, offset) at each byte offset of its stream, so a block in the wrong place,
 * from the wrong rank or shifted by a byte shows. */
#include <string.h>

#include "check.h"
#include "subtests.h"
#include "values.h"

/* Out of place, non-roots pass sendbuff NULL (read on the root only); in place, ncclBroadcast
 * with sendbuff == recvbuff and then ncclBcast. */
static int broadcastCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type);
  const int isRoot = ctx->rank == c->root;
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, bytes);
  if (isRoot) fillMoved(b->send, c->root, 0, bytes);
  fillMoved(b->want, c->root, 0, bytes);
  if (!c->inPlace) {
    CASE_OK(ctx, c, ncclBroadcast(isRoot ? b->send : NULL, b->recv, c->count, c->type, c->root,
                                  comm, NULL));
    if (expectElements(ctx, c, "recvbuff", b->recv, b->want, c->count, 1)) return 1;
    return isRoot ? expectElements(ctx, c, "sendbuff changed", b->send, b->want, c->count, 1) : 0;
  }
  CASE_OK(ctx, c, ncclBroadcast(b->send, b->send, c->count, c->type, c->root, comm, NULL));
  if (expectElements(ctx, c, "buffer", b->send, b->want, c->count, 1)) return 1;
  if (isRoot) fillMoved(b->recv, c->root, 0, bytes);
  CASE_OK(ctx, c, ncclBcast(b->recv, c->count, c->type, c->root, comm, NULL));
  return expectElements(ctx, c, "ncclBcast's buffer", b->recv, b->want, c->count, 1);
}

/* In place, rank r's contribution sits at recvbuff + r*count. */
static int allGatherCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, n * bytes);
  char* src = c->inPlace ? b->recv + (size_t)ctx->rank * bytes : b->send;
  fillMoved(src, ctx->rank, 0, bytes);
  CASE_OK(ctx, c, ncclAllGather(src, b->recv, c->count, c->type, comm, NULL));
  for (size_t j = 0; j < n; ++j) fillMoved(b->want + j * bytes, (int)j, 0, bytes);
  return expectElements(ctx, c, "recvbuff", b->recv, b->want, n * c->count, 1);
}

/* Block j of rank r's sendbuff goes to rank j's block r. */
static int alltoallCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  const size_t r = (size_t)ctx->rank;
  clearWithGuard(b->send, n * bytes);
  clearWithGuard(b->recv, n * bytes);
  fillMoved(b->send, ctx->rank, 0, n * bytes);
  char* dst = c->inPlace ? b->send : b->recv;
  CASE_OK(ctx, c, ncclAlltoAll(b->send, dst, c->count, c->type, comm, NULL));
  for (size_t j = 0; j < n; ++j) fillMoved(b->want + j * bytes, (int)j, r * bytes, bytes);
  if (expectElements(ctx, c, "recvbuff", dst, b->want, n * c->count, 1)) return 1;
  if (c->inPlace) return 0;
  fillMoved(b->want, ctx->rank, 0, n * bytes);
  return expectElements(ctx, c, "sendbuff changed", b->send, b->want, n * c->count, 1);
}

/* The root receives rank j's data at recvbuff + j*count (its own, in place, is there already);
 * non-roots pass recvbuff NULL. */
static int gatherCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  const int isRoot = ctx->rank == c->root;
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, n * bytes);
  char* src = c->inPlace && isRoot ? b->recv + (size_t)c->root * bytes : b->send;
  fillMoved(src, ctx->rank, 0, bytes);
  CASE_OK(ctx, c, ncclGather(src, isRoot ? b->recv : NULL, c->count, c->type, c->root, comm,
                             NULL));
  if (!isRoot) return 0;
  for (size_t j = 0; j < n; ++j) fillMoved(b->want + j * bytes, (int)j, 0, bytes);
  return expectElements(ctx, c, "root's recvbuff", b->recv, b->want, n * c->count, 1);
}

/* Rank r receives block r of the root's sendbuff (the root's own, in place, stays where it
 * is); non-roots pass sendbuff NULL. */
static int scatterCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  const int isRoot = ctx->rank == c->root, inPlace = c->inPlace && isRoot;
  clearWithGuard(b->send, n * bytes);
  clearWithGuard(b->recv, bytes);
  if (isRoot) fillMoved(b->send, c->root, 0, n * bytes);
  char* dst = inPlace ? b->send + (size_t)c->root * bytes : b->recv;
  CASE_OK(ctx, c, ncclScatter(isRoot ? b->send : NULL, dst, c->count, c->type, c->root, comm,
                              NULL));
  fillMoved(b->want, c->root, (size_t)ctx->rank * bytes, bytes);
  return expectElements(ctx, c, "recvbuff", dst, b->want, c->count, !inPlace);
}

int testBroadcast(Rank* ctx) {
  return sweepCollective(ctx, "broadcast", broadcastCase, SWEEP_ROOTS | SWEEP_IN_PLACE);
}

int testAllGather(Rank* ctx) {
  return sweepCollective(ctx, "allgather", allGatherCase, SWEEP_IN_PLACE);
}

int testAlltoAll(Rank* ctx) {
  return sweepCollective(ctx, "alltoall", alltoallCase, SWEEP_IN_PLACE);
}

int testGather(Rank* ctx) {
  return sweepCollective(ctx, "gather", gatherCase, SWEEP_ROOTS | SWEEP_IN_PLACE);
}

int testScatter(Rank* ctx) {
  return sweepCollective(ctx, "scatter", scatterCase, SWEEP_ROOTS | SWEEP_IN_PLACE);
}

/* A ring in one group: to rank r+1, from rank r-1 (with one rank: itself); the two calls in
 * either order (inPlace picks: 0 send first, 1 recv first). */
static int ringCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type);
  const int n = ctx->nranks, next = (ctx->rank + 1) % n, prev = (ctx->rank + n - 1) % n;
  Case named = *c;
  named.variant = c->inPlace ? "ring, recv first" : "ring, send first";
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, bytes);
  fillMoved(b->send, ctx->rank, 0, bytes);
  CASE_OK(ctx, &named, ncclGroupStart());
  if (!c->inPlace) CASE_OK(ctx, &named, ncclSend(b->send, c->count, c->type, next, comm, NULL));
  CASE_OK(ctx, &named, ncclRecv(b->recv, c->count, c->type, prev, comm, NULL));
  if (c->inPlace) CASE_OK(ctx, &named, ncclSend(b->send, c->count, c->type, next, comm, NULL));
  CASE_OK(ctx, &named, ncclGroupEnd());
  fillMoved(b->want, prev, 0, bytes);
  return expectElements(ctx, &named, "recvbuff", b->recv, b->want, c->count, 1);
}

int testSendRecv(Rank* ctx) {
  return sweepCollective(ctx, "sendrecv", ringCase, SWEEP_IN_PLACE);
}

/* Every rank sends block p of its stream to each rank p (itself included) and receives each
 * rank's block into recvbuff + p*count, in an order that differs by rank: the peers visited
 * from r onwards, the send or the receive first by turns (reversed with inPlace). Posts the
 * calls only: the caller's group runs them. */
int postAllPairs(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  const size_t r = (size_t)ctx->rank;
  clearWithGuard(b->send, n * bytes);
  clearWithGuard(b->recv, n * bytes);
  fillMoved(b->send, ctx->rank, 0, n * bytes);
  for (size_t j = 0; j < n; ++j) {
    const size_t p = c->inPlace ? (r + n - j) % n : (r + j) % n;
    char* out = b->send + p * bytes;
    char* in = b->recv + p * bytes;
    if (j % 2) CASE_OK(ctx, c, ncclSend(out, c->count, c->type, (int)p, comm, NULL));
    CASE_OK(ctx, c, ncclRecv(in, c->count, c->type, (int)p, comm, NULL));
    if (!(j % 2)) CASE_OK(ctx, c, ncclSend(out, c->count, c->type, (int)p, comm, NULL));
  }
  return 0;
}

int checkAllPairs(const Rank* ctx, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type), n = (size_t)ctx->nranks;
  for (size_t p = 0; p < n; ++p)
    fillMoved(b->want + p * bytes, (int)p, (size_t)ctx->rank * bytes, bytes);
  return expectElements(ctx, c, "recvbuff", b->recv, b->want, n * c->count, 1);
}

static int allPairsCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  Case named = *c;
  named.variant = c->inPlace ? "all pairs, descending" : "all pairs, ascending";
  CASE_OK(ctx, &named, ncclGroupStart());
  if (postAllPairs(ctx, comm, b, &named)) return 1;
  CASE_OK(ctx, &named, ncclGroupEnd());
  return checkAllPairs(ctx, b, &named);
}

int testSendRecvAllPairs(Rank* ctx) {
  return sweepCollective(ctx, "sendrecv", allPairsCase, SWEEP_IN_PLACE);
}
