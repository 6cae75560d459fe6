// The data of each call: inputs chosen so that every reduction is exact in any order, and the
// check of every rank's output against the result the call must produce.
#pragma once

#include <cstddef>

#include "perf/perf_common.h"

namespace loom::perf {

/** Fills rank `rank`'s input (sendCount elements) for the call. */
void fillInput(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank, int root,
               const CollSizes& sizes, void* send);
/** Writes the output the call must produce on `rank` (for tests and self-checks). */
void writeExpected(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                   int root, const CollSizes& sizes, void* recv);
/** Whether rank `rank` receives a result: every rank but the non-roots of reduce and gather. */
bool rankHasOutput(Collective c, int rank, int root);
/** Elements of rank `rank`'s output (recvCount elements at recv) that differ from the
 *  expected result. Ranks without output (rankHasOutput) always count 0. */
size_t countWrong(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                  int root, const CollSizes& sizes, const void* recv);

}  // namespace loom::perf
