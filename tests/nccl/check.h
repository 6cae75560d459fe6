/* Buffers and exact checks of the collectives' sub-tests: each buffer has a guard of sentinel
 * bytes after what a call may write, and results are compared element by element, bytes
 * exact, with the first difference reported as index, expected and got. */
#ifndef LOOM_TESTS_NCCL_CHECK_H_
#define LOOM_TESTS_NCCL_CHECK_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

#define GUARD_BYTES 64
#define SENTINEL 0xA5

/* One case of a sweep. A pre-multiplied sum (premul) reduces with op, made with scalar. */
typedef struct {
  const char* collective;
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;
  int inPlace;
  int root;
  int premul;
  double scalar;
  const char* variant; /* printed instead of the placement when set ("recv first") */
} Case;

typedef struct {
  char* send;
  char* recv;
  char* want;
  size_t capacity; /* bytes each, guard included */
} Buffers;

int allocBuffers(const Rank* ctx, Buffers* b, size_t bytes);
void freeBuffers(Buffers* b);
/* Sets the first `bytes` + GUARD_BYTES bytes of buf to the sentinel. */
void clearWithGuard(void* buf, size_t bytes);

/* "allreduce f8e4m3 avg count 7 in place root 2" */
void describeCase(const Case* c, char* out, size_t size);

/* Rank r's reduction inputs (or pre-multiplied sum inputs) of elements first..first+count-1. */
void fillInputs(void* buf, const Case* c, int nranks, int r, size_t first, size_t count);
/* The exact results of elements first..first+count-1. */
void fillResults(void* buf, const Case* c, int nranks, size_t first, size_t count);
/* Rank r's bytes firstByte..firstByte+bytes-1 of data that is moved, not reduced. */
void fillMoved(void* buf, int r, size_t firstByte, size_t bytes);

/* Compares count elements of got with want; with guard, also that the GUARD_BYTES after them
 * still hold the sentinel. 0 when equal; otherwise reports the first difference. */
int expectElements(const Rank* ctx, const Case* c, const char* what, const void* got,
                   const void* want, size_t count, int guard);
/* Reports a call of case c that returned rc; returns 1. */
int caseCallFailed(const Rank* ctx, const Case* c, const char* call, ncclResult_t rc,
                   const char* file, int line);
#define CASE_OK(ctx, c, call)                                                    \
  do {                                                                           \
    ncclResult_t rc_ = (call);                                                   \
    if (rc_ != ncclSuccess) return caseCallFailed((ctx), (c), #call, rc_, __FILE__, __LINE__); \
  } while (0)

/* A sweep runs one case function over every dtype, count (0, 1, 7, 1031, and one large
 * float32 case), placement, and, as flags ask, every op and every root, on a communicator of
 * all ranks. Count is the per-rank count the collective's call takes. */
typedef int (*CaseFn)(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c);
enum { SWEEP_OPS = 1, SWEEP_ROOTS = 2, SWEEP_IN_PLACE = 4 };
int sweepCollective(const Rank* ctx, const char* collective, CaseFn fn, unsigned flags);
/* A communicator of all ranks and buffers for any case of a sweep; closeSweep frees both. */
int openSweep(const Rank* ctx, ncclComm_t* comm, Buffers* b);
int closeSweep(const Rank* ctx, ncclComm_t comm, Buffers* b);

/* An int32 sum allreduce of count elements from send to recv, send[i] = mine * (i + 1), that
 * must return ncclSuccess and give total * (i + 1): for the sub-tests about communicators and
 * memory rather than collectives. expectSum does it with 17 elements of its own. */
int expectSumIn(const Rank* ctx, ncclComm_t comm, int32_t* send, int32_t* recv, size_t count,
                int mine, int total, const char* what);
int expectSum(const Rank* ctx, ncclComm_t comm, int mine, int total, const char* what);
/* The sum of r + 1 over ctx's ranks, and expectSum with this rank's rank + 1 over them all. */
int worldTotal(const Rank* ctx);
int expectWorldSum(const Rank* ctx, ncclComm_t comm, const char* what);

#endif /* LOOM_TESTS_NCCL_CHECK_H_ */
