#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "values.h"

int allocBuffers(const Rank* ctx, Buffers* b, size_t bytes) {
  b->capacity = bytes + GUARD_BYTES;
  b->send = malloc(b->capacity);
  b->recv = malloc(b->capacity);
  b->want = malloc(b->capacity);
  CHECK(ctx, b->send && b->recv && b->want, "out of memory (%zu bytes)", b->capacity);
  return 0;
}

void freeBuffers(Buffers* b) {
  free(b->send);
  free(b->recv);
  free(b->want);
  memset(b, 0, sizeof *b);
}

void clearWithGuard(void* buf, size_t bytes) { memset(buf, SENTINEL, bytes + GUARD_BYTES); }

void describeCase(const Case* c, char* out, size_t size) {
  char root[24] = "";
  if (c->root >= 0) snprintf(root, sizeof root, " root %d", c->root);
  char op[40] = "";
  if (c->premul) snprintf(op, sizeof op, " premulsum(%g)", c->scalar);
  else if (c->op != ncclNumOps) snprintf(op, sizeof op, " %s", opName(c->op));
  const char* variant = c->variant ? c->variant : c->inPlace ? "in place" : "out of place";
  snprintf(out, size, "%s %s%s count %zu %s%s", c->collective, typeName(c->type), op, c->count,
           variant, root);
}

void fillInputs(void* buf, const Case* c, int nranks, int r, size_t first, size_t count) {
  const size_t es = typeSize(c->type);
  for (size_t i = 0; i < count; ++i) {
    const double v = c->premul ? preMulInput(c->type, r, first + i)
                               : reductionInput(c->op, c->type, nranks, r, first + i);
    encodeValue(c->type, v, (char*)buf + i * es);
  }
}

void fillResults(void* buf, const Case* c, int nranks, size_t first, size_t count) {
  const size_t es = typeSize(c->type);
  for (size_t i = 0; i < count; ++i) {
    const double v = c->premul ? preMulResult(c->type, c->scalar, nranks, first + i)
                               : reductionResult(c->op, c->type, nranks, first + i);
    encodeValue(c->type, v, (char*)buf + i * es);
  }
}

void fillMoved(void* buf, int r, size_t firstByte, size_t bytes) {
  for (size_t k = 0; k < bytes; ++k) ((unsigned char*)buf)[k] = movedByte(r, firstByte + k);
}

static void hexBytes(const unsigned char* p, size_t n, char* out) {
  for (size_t k = 0; k < n; ++k) sprintf(out + 2 * k, "%02x", p[n - 1 - k]); /* little end */
}

int expectElements(const Rank* ctx, const Case* c, const char* what, const void* got,
                   const void* want, size_t count, int guard) {
  const size_t es = typeSize(c->type);
  const unsigned char* g = got;
  const unsigned char* w = want;
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (memcmp(g + i * es, w + i * es, es) == 0) continue;
    if (wrong++ == 0) first = i;
  }
  char desc[160];
  describeCase(c, desc, sizeof desc);
  if (wrong) {
    char wantHex[20], gotHex[20];
    hexBytes(w + first * es, es, wantHex);
    hexBytes(g + first * es, es, gotHex);
    return FAIL(ctx, "%s: %s: index %zu: expected %g (0x%s) got %g (0x%s); %zu of %zu wrong",
                desc, what, first, decodeValue(c->type, w + first * es), wantHex,
                decodeValue(c->type, g + first * es), gotHex, wrong, count);
  }
  for (size_t k = 0; guard && k < GUARD_BYTES; ++k)
    CHECK(ctx, g[count * es + k] == SENTINEL,
          "%s: %s: byte %zu after the last element was written (0x%02x)", desc, what, k,
          g[count * es + k]);
  return 0;
}

int caseCallFailed(const Rank* ctx, const Case* c, const char* call, ncclResult_t rc,
                   const char* file, int line) {
  char desc[160];
  describeCase(c, desc, sizeof desc);
  return failAt(ctx, file, line, "%s: %s returned %d (%s): %s", desc, call, (int)rc,
                ncclGetErrorString(rc), ncclGetLastError(NULL));
}

static const size_t kCounts[] = {0, 1, 7, 1031};
#define LARGE_ELEMENTS ((size_t)1 << 18) /* float32: 1 MiB over all ranks' blocks */

int openSweep(const Rank* ctx, ncclComm_t* comm, Buffers* b) {
  const size_t small = (size_t)ctx->nranks * 1031 * 8;
  return initWorld(ctx, comm) ||
         allocBuffers(ctx, b, small > LARGE_ELEMENTS * 4 ? small : LARGE_ELEMENTS * 4);
}

int closeSweep(const Rank* ctx, ncclComm_t comm, Buffers* b) {
  freeBuffers(b);
  NCCL_OK(ctx, ncclCommDestroy(comm));
  return 0;
}

static int noteCase(const Rank* ctx, const Case* c) {
  char desc[160];
  describeCase(c, desc, sizeof desc);
  noteStep(ctx, desc);
  return 0;
}

/* Every case of one root; 1 at the first failure. */
static int sweepRoot(const Rank* ctx, ncclComm_t comm, Buffers* b, Case* c, CaseFn fn,
                     unsigned flags) {
  const int places = flags & SWEEP_IN_PLACE ? 2 : 1;
  const int nops = flags & SWEEP_OPS ? NCCL_TEST_NOPS : 1;
  for (int t = 0; t < NCCL_TEST_NTYPES; ++t)
    for (int o = 0; o < nops; ++o)
      for (size_t k = 0; k < sizeof kCounts / sizeof kCounts[0]; ++k)
        for (int p = 0; p < places; ++p) {
          c->type = kTypes[t];
          c->op = flags & SWEEP_OPS ? kOps[o] : ncclNumOps;
          c->count = kCounts[k];
          c->inPlace = p;
          if (noteCase(ctx, c) || fn(ctx, comm, b, c)) return 1;
        }
  /* One large case, split over the ranks where the count is per rank of a whole. */
  c->type = ncclFloat32;
  c->op = flags & SWEEP_OPS ? ncclSum : ncclNumOps;
  c->count = LARGE_ELEMENTS / (size_t)ctx->nranks;
  for (int p = 0; p < places; ++p) {
    c->inPlace = p;
    if (noteCase(ctx, c) || fn(ctx, comm, b, c)) return 1;
  }
  return 0;
}

int sweepCollective(const Rank* ctx, const char* collective, CaseFn fn, unsigned flags) {
  ncclComm_t comm = NULL;
  Buffers b;
  if (openSweep(ctx, &comm, &b)) return 1;
  Case c;
  memset(&c, 0, sizeof c);
  c.collective = collective;
  int failed = 0;
  const int roots = flags & SWEEP_ROOTS ? ctx->nranks : 1;
  for (int root = 0; root < roots && !failed; ++root) {
    c.root = flags & SWEEP_ROOTS ? root : -1;
    failed = sweepRoot(ctx, comm, &b, &c, fn, flags);
  }
  return failed || closeSweep(ctx, comm, &b);
}

int expectSumIn(const Rank* ctx, ncclComm_t comm, int32_t* send, int32_t* recv, size_t count,
                int mine, int total, const char* what) {
  noteStep(ctx, what);
  for (size_t i = 0; i < count; ++i) send[i] = mine * (int32_t)(i + 1), recv[i] = -1;
  const ncclResult_t rc = ncclAllReduce(send, recv, count, ncclInt32, ncclSum, comm, NULL);
  CHECK(ctx, rc == ncclSuccess, "%s: allreduce returned %d (%s): %s", what, (int)rc,
        ncclGetErrorString(rc), ncclGetLastError(NULL));
  for (size_t i = 0; i < count; ++i)
    CHECK(ctx, recv[i] == total * (int32_t)(i + 1), "%s: allreduce index %zu: expected %d got %d",
          what, i, total * (int)(i + 1), (int)recv[i]);
  return 0;
}

int expectSum(const Rank* ctx, ncclComm_t comm, int mine, int total, const char* what) {
  int32_t send[17], recv[17];
  return expectSumIn(ctx, comm, send, recv, 17, mine, total, what);
}

int worldTotal(const Rank* ctx) { return ctx->nranks * (ctx->nranks + 1) / 2; }

int expectWorldSum(const Rank* ctx, ncclComm_t comm, const char* what) {
  return expectSum(ctx, comm, ctx->rank + 1, worldTotal(ctx), what);
}
