// nccl-tests' units, which loom-perf and its peers report in and loom-sim and loom-tune predict
// in: a call's element counts from the sweep's size, busbw from algbw, the size sweep, and
// the medians that repeated runs are summarized by.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "toolkit/names.h"

namespace loom::toolkit {

/** busbw = algbw * factor, as nccl-tests defines it (allreduce 2(n-1)/n; allgather,
 *  reduce-scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1). */
double busBwFactor(Collective c, int nranks);

/** Element counts of one call, as nccl-tests' getCollByteCount derives them from a size. */
struct CollSizes {
  size_t sendCount = 0;   // elements in each rank's send buffer
  size_t recvCount = 0;   // elements in each rank's receive buffer
  size_t paramCount = 0;  // the count argument of the call (the table's "count")
  // In-place layout: the send / receive buffer is the shared buffer plus rank * offset
  // (allgather, gather: send at rank * sendcount; reduce-scatter, scatter: receive at
  // rank * recvcount).
  size_t sendInPlaceOffset = 0;
  size_t recvInPlaceOffset = 0;
  /** The table's "size" column: max(send, receive) bytes per rank. */
  size_t bytes(size_t elemSize) const {
    return (sendCount > recvCount ? sendCount : recvCount) * elemSize;
  }
};
/** sizeBytes is the sweep's size; counts round down to whole elements per rank (gather and
 *  scatter: to whole 16 bytes per rank, as nccl-tests does). */
CollSizes collSizes(Collective c, size_t sizeBytes, size_t elemSize, int nranks);

/** "8", "64K", "256M", "1G" (powers of 1024, either case); nullopt when malformed. */
std::optional<size_t> parseSize(std::string_view text);
/** nccl-tests' sweep: min, then *factor when factor > 1, else +step, while <= max. */
std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, int factor, size_t stepBytes);

/** The median of v (the mean of the middle two when even); -1 when empty. */
double medianOf(std::vector<double> v);
/** Two --race entries' times of the same rounds (perf's ResultRow::roundsUs): the median over
 *  rounds of a's over b's in the same round, -1 where they have no rounds in common. A round
 *  gives every entry its turn in close succession, so the machine's drift between rounds, which
 *  can move both medians by 20%, cancels. */
double pairedRatio(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace loom::toolkit
