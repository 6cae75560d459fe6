// Exact test values for every dtype: small integers whose sums, products, minima and maxima
// are exact in every format and any order, encoded bit for bit without loom's own code.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::testing {

// Every dtype and every reduction op of the API, for tests that sweep them.
inline constexpr loomDataType_t kAllTypes[] = {
    loomInt8,    loomUint8,    loomInt32,   loomUint32,  loomInt64,      loomUint64,
    loomFloat16, loomBfloat16, loomFloat32, loomFloat64, loomFloat8e4m3, loomFloat8e5m2};
inline constexpr loomRedOp_t kAllOps[] = {loomSum, loomProd, loomMin, loomMax, loomAvg};

size_t typeSize(loomDataType_t t);
// Writes the exactly representable value v (a small integer) as dtype t at p.
void encodeValue(loomDataType_t t, double v, void* p);
// The dtype's bytes for v (wrapping for integer types, as unsigned arithmetic does).
std::string encoded(loomDataType_t t, double v);

// Input value of element i on rank r for a reduction op, and the exact expected result.
double inputValue(loomRedOp_t op, loomDataType_t t, int nranks, int r, uint64_t i);
double expectedReduction(loomRedOp_t op, loomDataType_t t, int nranks, uint64_t i,
                         uint64_t indexOffset = 0);

// Fills count elements starting at element index `first` for rank r.
void fillInput(void* buf, uint64_t count, loomRedOp_t op, loomDataType_t t, int nranks, int r,
               uint64_t first = 0);
// Counts elements of buf that differ from the expected reduction (index offset `first`);
// the index of the first difference goes to *firstBad.
uint64_t countReductionErrors(const void* buf, uint64_t count, loomRedOp_t op,
                              loomDataType_t t, int nranks, uint64_t first = 0,
                              uint64_t* firstBad = nullptr);

const char* typeName(loomDataType_t t);
const char* opNameOf(loomRedOp_t op);

}  // namespace loom::testing
