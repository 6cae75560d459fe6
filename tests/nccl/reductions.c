/* The reducing collectives: every dtype × op × count × placement (× root), and pre-multiplied
 * sums made with a host scalar. */
#include <string.h>

#include "check.h"
#include "subtests.h"
#include "values.h"

/* The sendbuff of an out-of-place call holds rank r's inputs still (elements 0..count-1). */
static int inputsKept(const Rank* ctx, Buffers* b, const Case* c, size_t count) {
  fillInputs(b->want, c, ctx->nranks, ctx->rank, 0, count);
  return expectElements(ctx, c, "sendbuff changed", b->send, b->want, count, 1);
}

static int allReduceCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type);
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, bytes);
  fillInputs(b->send, c, ctx->nranks, ctx->rank, 0, c->count);
  char* dst = c->inPlace ? b->send : b->recv;
  CASE_OK(ctx, c, ncclAllReduce(b->send, dst, c->count, c->type, c->op, comm, NULL));
  fillResults(b->want, c, ctx->nranks, 0, c->count);
  if (expectElements(ctx, c, "recvbuff", dst, b->want, c->count, 1)) return 1;
  return c->inPlace ? 0 : inputsKept(ctx, b, c, c->count);
}

/* Non-roots pass recvbuff NULL out of place, as NCCL allows. */
static int reduceCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t bytes = c->count * typeSize(c->type);
  const int isRoot = ctx->rank == c->root;
  clearWithGuard(b->send, bytes);
  clearWithGuard(b->recv, bytes);
  fillInputs(b->send, c, ctx->nranks, ctx->rank, 0, c->count);
  char* dst = c->inPlace ? b->send : isRoot ? b->recv : NULL;
  CASE_OK(ctx, c, ncclReduce(b->send, dst, c->count, c->type, c->op, c->root, comm, NULL));
  if (isRoot) {
    fillResults(b->want, c, ctx->nranks, 0, c->count);
    if (expectElements(ctx, c, "root's recvbuff", dst, b->want, c->count, 1)) return 1;
  }
  return c->inPlace ? 0 : inputsKept(ctx, b, c, c->count);
}

/* In place, rank r's block of sendbuff receives its result; the other blocks are NCCL's. */
static int reduceScatterCase(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c) {
  const size_t es = typeSize(c->type), n = (size_t)ctx->nranks, r = (size_t)ctx->rank;
  clearWithGuard(b->send, n * c->count * es);
  clearWithGuard(b->recv, c->count * es);
  fillInputs(b->send, c, ctx->nranks, ctx->rank, 0, n * c->count);
  char* dst = c->inPlace ? b->send + r * c->count * es : b->recv;
  CASE_OK(ctx, c, ncclReduceScatter(b->send, dst, c->count, c->type, c->op, comm, NULL));
  fillResults(b->want, c, ctx->nranks, r * c->count, c->count);
  if (expectElements(ctx, c, "recvbuff", dst, b->want, c->count, !c->inPlace)) return 1;
  return c->inPlace ? 0 : inputsKept(ctx, b, c, n * c->count);
}

int testAllReduce(Rank* ctx) {
  return sweepCollective(ctx, "allreduce", allReduceCase, SWEEP_OPS | SWEEP_IN_PLACE);
}

int testReduce(Rank* ctx) {
  return sweepCollective(ctx, "reduce", reduceCase, SWEEP_OPS | SWEEP_ROOTS | SWEEP_IN_PLACE);
}

int testReduceScatter(Rank* ctx) {
  return sweepCollective(ctx, "reducescatter", reduceScatterCase, SWEEP_OPS | SWEEP_IN_PLACE);
}

/* allreduce (both placements), reduce to the last rank and reduce-scatter with one op. */
static int preMulCases(const Rank* ctx, ncclComm_t comm, Buffers* b, Case* c) {
  c->count = 1031;
  c->root = -1;
  for (c->inPlace = 0; c->inPlace < 2; ++c->inPlace) {
    c->collective = "allreduce";
    if (allReduceCase(ctx, comm, b, c)) return 1;
    c->collective = "reducescatter";
    if (reduceScatterCase(ctx, comm, b, c)) return 1;
  }
  c->collective = "reduce";
  c->inPlace = 0;
  c->root = ctx->nranks - 1;
  return reduceCase(ctx, comm, b, c);
}

/* ncclRedOpCreatePreMulSum with a host scalar (2, and 0.5 or 3), read when the op is made:
 * the scalar's memory is overwritten before the op is used. A destroyed op is refused. */
int testPreMulSum(Rank* ctx) {
  ncclComm_t comm = NULL;
  Buffers b;
  if (openSweep(ctx, &comm, &b)) return 1;
  Case c;
  memset(&c, 0, sizeof c);
  c.premul = 1;
  for (int t = 0; t < NCCL_TEST_NTYPES; ++t)
    for (int variant = 0; variant < 2; ++variant) {
      c.type = kTypes[t];
      c.scalar = preMulScalar(c.type, variant);
      unsigned char scalar[8];
      encodeValue(c.type, c.scalar, scalar);
      NCCL_OK(ctx, ncclRedOpCreatePreMulSum(&c.op, scalar, c.type, ncclScalarHostImmediate,
                                            comm));
      CHECK(ctx, (int)c.op >= (int)ncclNumOps, "a pre-multiplied sum op numbered %d", (int)c.op);
      memset(scalar, 0x7f, sizeof scalar);
      if (preMulCases(ctx, comm, &b, &c)) return 1;
      NCCL_OK(ctx, ncclRedOpDestroy(c.op, comm));
    }
  const ncclResult_t rc = ncclAllReduce(b.send, b.recv, 1, c.type, c.op, comm, NULL);
  CHECK(ctx, rc == ncclInvalidArgument,
        "an allreduce with a destroyed op returned %d (%s), not ncclInvalidArgument", (int)rc,
        ncclGetErrorString(rc));
  return closeSweep(ctx, comm, &b);
}
