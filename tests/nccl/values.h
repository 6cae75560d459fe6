/* Exact test values for every dtype and op of nccl.h.
 *
 * Inputs are small integers (and halves, for a pre-multiplied sum by 0.5) chosen so that every
 * partial result, in any order of reduction, is exact in every format: fp8 e5m2 holds the
 * integers only up to 8, so sums of {-1, 0, 1} over at most 8 ranks stay exact everywhere.
 * Expected results are computed from the inputs in int64/double arithmetic, not by any code of
 * the library under test, and compared byte for byte after encoding. */
#ifndef LOOM_TESTS_NCCL_VALUES_H_
#define LOOM_TESTS_NCCL_VALUES_H_

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#define NCCL_TEST_NTYPES 12
#define NCCL_TEST_NOPS 5
extern const ncclDataType_t kTypes[NCCL_TEST_NTYPES];
extern const ncclRedOp_t kOps[NCCL_TEST_NOPS];

size_t typeSize(ncclDataType_t t);
const char* typeName(ncclDataType_t t);
const char* opName(ncclRedOp_t op);
int isFloatType(ncclDataType_t t);
int isSignedType(ncclDataType_t t);

/* Writes v, exactly representable in t (integers wrap as unsigned arithmetic does), at p. */
void encodeValue(ncclDataType_t t, double v, void* p);
/* The value of the element at p, for messages. */
double decodeValue(ncclDataType_t t, const void* p);

/* Rank r's input at element i for a reduction op over n ranks, and the exact result. */
double reductionInput(ncclRedOp_t op, ncclDataType_t t, int n, int r, size_t i);
double reductionResult(ncclRedOp_t op, ncclDataType_t t, int n, size_t i);

/* A pre-multiplied sum: rank r's input at i, the scalar for t (variant 0: 2 or 3 for integers;
 * variant 1: 0.5 for floats, 3 for integers), and the result of sum over ranks of scalar*x. */
double preMulInput(ncclDataType_t t, int r, size_t i);
double preMulScalar(ncclDataType_t t, int variant);
double preMulResult(ncclDataType_t t, double scalar, int n, size_t i);

/* The byte at offset k of rank r's data for the collectives that only move data (broadcast,
 * gathers, alltoall, send/recv): distinct per rank and offset within a test's sizes. */
uint8_t movedByte(int r, size_t k);

#endif /* LOOM_TESTS_NCCL_VALUES_H_ */
