// Helpers shared by the plan-verification test files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/plan.h"

namespace loom::test {

// Counts every sweep includes besides the ones derived from N: a prime, and a large one
// (cheap to verify, since the verifier stores runs of elements).
inline constexpr uint64_t kPrimeCount = 1009;
inline constexpr uint64_t kLargeCount = uint64_t(1) << 20;

// The Shared arena the sweeps give each call: large enough that big counts take a few chunks
// of the direct allreduce at large N (its plans have ~N² steps per chunk); the direct tests add
// small arenas for many chunks.
inline constexpr uint64_t kSweepSharedBytes = uint64_t(32) << 20;

// How far the verifier's sweeps reach: every N up to `full` (64), then their big N (128 to
// 1000). LOOM_VERIFY_SWEEP=small, which the sanitizer builds' runs set (the verifier runs several
// times slower there), stops at 32 ranks, which hold every shape (odd, prime, powers of two and
// their neighbours; 33..64 add breadth, not new kinds of case), and leaves the big N out.
int sweepRanksUpTo(int full);
bool sweepBigRanks();

// The counts a sweep at N ranks verifies: none, one, fewer than ranks, exactly N, odd, prime
// and large (cheap to verify, since the verifier stores runs of elements).
std::vector<uint64_t> sweepCounts(int n);

// A call's arguments with the fields every builder reads (sharedBytes = kSweepSharedBytes); the
// rest keep their defaults.
collectives::CollArgs makeArgs(collectives::Collective coll, int n, uint64_t count, int lanes = 1,
                               int root = 0);

// Per-rank alltoallv arguments from a matrix of counts (sends[i][j]: elements i → j). Send
// blocks are laid out in reverse peer order with gaps and receive blocks in order with gaps,
// so displacements, not positions, decide where data goes.
std::vector<collectives::CollArgs> alltoallvArgs(const std::vector<std::vector<uint64_t>>& sends,
                                                 int lanes = 1, int fanIn = 1);

// Appends `a` with lane hints 1, 2 and 4 to *out, leaving out a hint whose plan (rank 0's, by
// builder b) has as many lanes as the smaller hint's: too little data for more lanes, the
// same plans.
void addLaneHints(const collectives::Builder& b, collectives::CollArgs a,
                  std::vector<collectives::CollArgs>* out);

// The registered builder; throws (failing the test) when there is none.
const collectives::Builder& builderNamed(collectives::Collective c, const char* name);

// Whether the builder's plans are verified in place: every collective's but alltoallv's, and an
// alltoall's only where it runs in place without a copy of the input (alltoallInPlace).
bool hasInPlaceForm(const collectives::Builder& b);

// "allreduce N=8 count=17 lanes=2 root=0 ...: ", the prefix of a failure message.
std::string describeCase(const collectives::CollArgs& a, bool inPlace);

// Runs check(i) for i in [0, jobs) on every core (builders and the verifier are pure, so the
// cases are independent). Returns the failure of the lowest failing case, or "".
std::string forEachParallel(size_t jobs, const std::function<std::string(size_t)>& check);

// Verifies every case with builder b, out of place and, where the collective has that form,
// in place. Returns the first failure (with describeCase's prefix), or "".
std::string verifyCases(const collectives::Builder& b,
                        const std::vector<collectives::CollArgs>& cases);

}  // namespace loom::test
