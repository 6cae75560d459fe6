// The symbolic plan verifier (docs/ARCHITECTURE.md): runs every rank's plan of one call in one
// process, with symbolic values instead of data. Each element carries the index of the input
// element it derives from and the set of ranks that contributed to it; buffers are stored as
// runs of consecutive elements and rank sets as interval lists, so a plan over a million
// elements and a thousand ranks verifies in seconds.
//
// It checks, and reports the first failure with the rank, lane, step index and kind:
//  1. matching: each Send meets a Recv or RecvReduce on the same lane between the same pair,
//     in FIFO order, with equal counts, and no receive is left over;
//  2. regions: every region lies inside its buffer (Input/Output sized by inputCount and
//     outputCount, Scratch by scratchCount, a p2p operation's buffer by its bytes), no step
//     writes Input or a send buffer, two-region steps have equal counts, and no two lanes of a
//     rank touch the same elements when one of them writes (lanes run concurrently);
//  3. deadlock freedom: a step may complete once every earlier step of its lane that
//     conflicts with it (overlapping elements of one memory, one of them writing) and every
//     earlier step on its (peer, lane, direction) has completed; a Send and its receive
//     complete together once both may. Steps complete until all are done or none can;
//  4. reductions never combine different elements, elements with overlapping contributor sets
//     (double counting), or elements nobody wrote; no step reads an element nobody wrote;
//  5. the postcondition of the collective on every rank's Output (or receive buffers);
//  6. barriers and Shared memory (one memory per host, shared by its ranks): the k-th Barrier
//     of every rank's lane 0 meet, so all ranks need the same number, on one host; a Barrier
//     waits for the earlier steps of its lane and holds back the later ones; between two
//     barriers no rank writes Shared elements that another rank reads or writes (a race).
//     Ranks then run phase by phase between barriers; a barrier counts as a round.
// In place, Input and Output alias as the NCCL API defines (allreduce, broadcast, reduce: the
// same buffer; allgather: Input = Output block rank; reduce-scatter: Output = Input block
// rank; gather, on the root: Input = Output block root; scatter, on the root: Output = Input
// block root; alltoall: the same buffer, for the builders marked alltoallInPlace), and the
// verifier treats them as one memory for conflicts and values. A Copy whose source and
// destination are the same memory is skipped, as the executor skips it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/plan.h"

namespace loom::test {

// What one rank's plan costs, as the builders' headers state it.
struct RankCounts {
  uint64_t steps = 0;  // plan steps over all lanes
  uint64_t messagesSent = 0;
  uint64_t elementsSent = 0;
  uint64_t messagesReceived = 0;  // Recv and RecvReduce steps
  uint64_t elementsReceived = 0;
  uint64_t barriers = 0;  // Barrier steps
};

struct VerifyResult {
  bool ok = true;
  std::string message;             // on failure: what went wrong and where
  std::vector<RankCounts> counts;  // per rank; filled whenever the plans are well formed
  // The longest chain of messages and barriers that follow one another.
  uint64_t rounds = 0;
  // Filled only by the *FanIn functions: the most data messages into one rank that can be in
  // flight at once (see verifyPlansFanIn), and the first rank that has that many.
  uint64_t maxFanIn = 0;
  int fanInRank = -1;
};

// Verifies one collective call: args[r] and plans[r] are rank r's (args differ between ranks
// only in alltoallv counts). inPlace: Input and Output alias as described above.
VerifyResult verifyPlans(const std::vector<collectives::CollArgs>& args,
                         const std::vector<collectives::RankPlan>& plans, bool inPlace);

// Verifies a group of point-to-point operations: ops[r] and plans[r] are rank r's. Each
// receive buffer must end up holding the send buffer it is matched with (the k-th receive
// from a peer matches that peer's k-th send to this rank).
VerifyResult verifyP2PPlans(const std::vector<std::vector<collectives::P2POp>>& ops,
                            const std::vector<collectives::RankPlan>& plans);

// Builds every rank's plan with builder b (from args[r], or from `a` on every rank) and
// verifies them.
VerifyResult verifyBuilder(const collectives::Builder& b,
                           const std::vector<collectives::CollArgs>& args, bool inPlace);
VerifyResult verifyBuilder(const collectives::Builder& b, const collectives::CollArgs& a,
                           bool inPlace);
// Builds every rank's plan with buildP2P and verifies them.
VerifyResult verifyP2P(const std::vector<std::vector<collectives::P2POp>>& ops);

// As verifyPlans / verifyBuilder, and also measures fan-in: for every rank R, the largest set
// of messages into R of which none must complete before another one's Send may start under the
// execution semantics above (a maximum antichain of the happens-before order, by Dilworth's
// theorem M − a maximum matching). Those messages may all be in flight into R at once; an
// incast-aware plan keeps that at most its fanIn. Messages of at most controlElements elements
// (tokens that carry no data) are not counted. Costs O(steps · N · M/64) on top of verifying,
// so it is meant for N up to a few hundred.
VerifyResult verifyPlansFanIn(const std::vector<collectives::CollArgs>& args,
                              const std::vector<collectives::RankPlan>& plans,
                              uint64_t controlElements = 1);
VerifyResult verifyBuilderFanIn(const collectives::Builder& b,
                                const std::vector<collectives::CollArgs>& args,
                                uint64_t controlElements = 1);

// For EXPECT_TRUE(verified(result)): prints the verifier's message on failure.
inline ::testing::AssertionResult verified(const VerifyResult& r) {
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.message;
}

}  // namespace loom::test
