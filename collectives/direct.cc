// The direct shared-memory builders ("direct": allreduce, allgather and alltoall; their costs
// are in builders_reduce.h and builders_exchange.h): the ranks of one host exchange data through
// the host's Shared arena instead of passing messages.
#include <algorithm>
#include <string>

#include "collectives/builders_exchange.h"
#include "collectives/builders_reduce.h"
#include "base/status.h"

namespace loom::collectives {
namespace {

// Up to this many bytes every rank reduces the whole buffer itself after a single barrier
// (one-shot): N times the reduction work of the two-phase plan, but one barrier instead of
// two, and at this size the barrier is what the call costs.
constexpr uint64_t kOneShotBytes = 16 << 10;
// Slots start on cache lines, so that ranks filling neighbouring slots share no line.
constexpr uint64_t kLineBytes = 64;

// The fewest elements a slot must hold: an alltoall slot carries a piece of each of the N
// blocks the rank sends.
uint64_t slotMinimum(const CollArgs& a) {
  return a.coll == Collective::AlltoAll ? uint64_t(std::max(1, a.nranks)) : 1;
}

// Elements per slot: the Shared buffer holds two halves (consecutive chunks alternate between
// them) of N slots each, whole cache lines where that still leaves slotMinimum. 0 when not
// even one element fits.
uint64_t slotElements(const CollArgs& a) {
  const uint64_t es = std::max<uint32_t>(1, a.elemSize);
  uint64_t slot = a.sharedBytes / es / 2 / uint64_t(std::max(1, a.nranks));
  const uint64_t line = std::max<uint64_t>(1, kLineBytes / es);
  if (slot >= line && slot - slot % line >= slotMinimum(a)) slot -= slot % line;
  return slot;
}

// Where slot j of half h starts in the Shared buffer, with slots of `slot` elements.
uint64_t slotStart(uint64_t slot, uint64_t n, uint64_t half, uint64_t j) {
  return (half * n + j) * slot;
}

// Elements a chunk keeps at the start of each slot for its rank's barrier flag: the flag's, when
// the chunk's data (`used` elements of the slot) fits beside it in the slot's first cache line,
// so that a peer takes flag and data in one transfer (2 ranks, 8 bytes: ~0.13 us less); else 0,
// and the flags stay in the arena's records.
uint64_t flagRoom(const CollArgs& a, uint64_t slot, uint64_t used) {
  const uint64_t flag = flagElements(a.elemSize), es = a.elemSize;
  if (flag == 0 || slot * es % kLineBytes != 0 || (flag + used) * es > kLineBytes) return 0;
  return flag;
}

// The Barrier of a chunk in half h: its flags at the start of the slots if they have room.
void addSlotBarrier(Lane& lane, uint64_t slot, uint64_t n, uint64_t half, uint64_t room) {
  addBarrier(lane, room > 0 ? Region{kShared, slotStart(slot, n, half, 0), slot} : Region{});
}

}  // namespace

std::string refuseOffHost(const char* algorithm, const CollArgs& a) {
  for (size_t r = 1; r < a.hostOf.size(); ++r) {
    if (a.hostOf[r] != a.hostOf[0]) {
      return strprintf(
          "%s needs every rank on one host, but ranks 0 and %zu are on different hosts; use "
          "another algorithm",
          algorithm, r);
    }
  }
  if (a.nranks > 1 && a.sharedBytes == 0)
    return strprintf(
        "%s: no shared-memory arena (LOOM_SHM_DIRECT_BYTES is 0, or LOOM_TRANSPORT=tcp)",
        algorithm);
  return "";
}

std::string refuseDirect(const CollArgs& a) {
  if (std::string why = refuseOffHost("direct", a); !why.empty()) return why;
  if (a.nranks > 1 && slotElements(a) < slotMinimum(a)) {
    return strprintf(
        "direct: %llu bytes of arena per call cannot hold 2 x %d slots of %llu %u-byte "
        "element(s); raise LOOM_SHM_DIRECT_BYTES",
        (unsigned long long)a.sharedBytes, a.nranks, (unsigned long long)slotMinimum(a),
        a.elemSize);
  }
  return "";
}

RankPlan buildDirectAllReduce(const CollArgs& a, int rank) {
  RankPlan plan;
  plan.algorithm = "direct";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  const uint64_t count = a.count, n = uint64_t(a.nranks);
  const Region input{kInput, 0, count}, output{kOutput, 0, count};
  if (n == 1) {
    addCopy(lane, input, output);
    return plan;
  }
  if (count == 0) return plan;
  const uint64_t slot = slotElements(a);
  // Slot j of half h holds rank j's copy of the current chunk.
  auto shared = [&](uint64_t half, uint64_t j, uint64_t offset, uint64_t len) {
    return Region{kShared, slotStart(slot, n, half, j) + offset, len};
  };
  if (count <= slot && count * a.elemSize <= kOneShotBytes) {
    const uint64_t room = flagRoom(a, slot, count);
    addCopy(lane, input, shared(0, uint64_t(rank), room, count));
    addSlotBarrier(lane, slot, n, 0, room);
    // Every rank combines the slots in the same order, so all get bit-identical results.
    addCopy(lane, shared(0, 0, room, count), output);
    for (uint64_t j = 1; j < n; ++j) addReduce(lane, shared(0, j, room, count), output);
    return plan;
  }
  // Two phases per chunk: rank r sums slice r of the chunk over all slots into slot 0, then
  // every rank copies the whole sum out. The next chunk's copy-in shares a phase with this
  // copy-out, so it goes to the other half; two chunks later the half is free again, as the
  // barrier between has seen every rank finish its copy-out.
  for (uint64_t base = 0, k = 0; base < count; base += slot, ++k) {
    const uint64_t len = std::min(slot, count - base), half = k % 2;
    const uint64_t off = partOffset(len, n, uint64_t(rank)),
                   mine = partCount(len, n, uint64_t(rank));
    addCopy(lane, {kInput, base, len}, shared(half, uint64_t(rank), 0, len));
    addBarrier(lane);
    for (uint64_t j = 1; j < n; ++j)
      addReduce(lane, shared(half, j, off, mine), shared(half, 0, off, mine));
    addBarrier(lane);
    addCopy(lane, shared(half, 0, 0, len), {kOutput, base, len});
  }
  return plan;
}

// Allgather and alltoall move data without reducing it, so they share one plan shape: per
// chunk, every rank copies what it gives into its slot, one barrier, then every rank copies what
// it takes out of the others' slots; consecutive chunks alternate halves as in the allreduce
// (the barrier of chunk k+1 sees every rank done with chunk k's copy-out before chunk k+2
// reuses its half). The own block goes straight from Input to Output.
//   give(lane, slotBase, base, len): Copies rank's part [base, base+len) into its slot;
//   take(lane, j, slotOf(j), base, len): Copies what this rank takes from rank j's slot;
//   blocksPerSlot: how many len-element pieces a slot holds (alltoall: one for each rank).
namespace {

template <typename Give, typename Take>
RankPlan directExchange(const CollArgs& a, int rank, uint64_t blockCount, uint64_t perChunk,
                        uint64_t blocksPerSlot, Region ownIn, Region ownOut, Give give,
                        Take take) {
  RankPlan plan;
  plan.algorithm = "direct";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  const uint64_t n = uint64_t(a.nranks);
  addCopy(lane, ownIn, ownOut);
  if (n == 1 || blockCount == 0) return plan;
  const uint64_t slot = slotElements(a);
  for (uint64_t base = 0, k = 0; base < blockCount; base += perChunk, ++k) {
    const uint64_t len = std::min(perChunk, blockCount - base), half = k % 2;
    const uint64_t room = flagRoom(a, slot, blocksPerSlot * len);
    give(lane, slotStart(slot, n, half, uint64_t(rank)) + room, base, len);
    addSlotBarrier(lane, slot, n, half, room);
    for (uint64_t j = 0; j < n; ++j) {
      if (j != uint64_t(rank)) take(lane, j, slotStart(slot, n, half, j) + room, base, len);
    }
  }
  return plan;
}

}  // namespace

RankPlan buildDirectAllGather(const CollArgs& a, int rank) {
  const uint64_t c = a.count;
  const Region own{kOutput, uint64_t(rank) * c, c};
  return directExchange(
      a, rank, c, a.nranks > 1 ? slotElements(a) : c, 1, {kInput, 0, c}, own,
      [&](Lane& lane, uint64_t slotAt, uint64_t base, uint64_t len) {
        addCopy(lane, {kInput, base, len}, {kShared, slotAt, len});
      },
      [&](Lane& lane, uint64_t j, uint64_t slotAt, uint64_t base, uint64_t len) {
        addCopy(lane, {kShared, slotAt, len}, {kOutput, j * c + base, len});
      });
}

RankPlan buildDirectAlltoAll(const CollArgs& a, int rank) {
  // A slot holds piece [base, base+len) of each of the N blocks, block j's at j·len.
  const uint64_t c = a.count, n = uint64_t(a.nranks), r = uint64_t(rank);
  return directExchange(
      a, rank, c, n > 1 ? slotElements(a) / n : c, n, {kInput, r * c, c}, {kOutput, r * c, c},
      [&](Lane& lane, uint64_t slotAt, uint64_t base, uint64_t len) {
        for (uint64_t j = 0; j < n; ++j) {
          if (j != r) addCopy(lane, {kInput, j * c + base, len}, {kShared, slotAt + j * len, len});
        }
      },
      [&](Lane& lane, uint64_t j, uint64_t slotAt, uint64_t base, uint64_t len) {
        addCopy(lane, {kShared, slotAt + r * len, len}, {kOutput, j * c + base, len});
      });
}

}  // namespace loom::collectives
