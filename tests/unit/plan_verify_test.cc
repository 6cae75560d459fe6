// Every plan builder, run through the symbolic verifier for N = 1..64 and awkward counts, in
// place and out of place; their cost formulas; and broken plans the verifier must reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <ctime>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/builders.h"
#include "collectives/builders_reduce.h"
#include "collectives/plan.h"
#include "tests/support/plan_test_util.h"
#include "tests/support/verifier.h"

namespace loom::test {
namespace {

using namespace collectives;

constexpr int kMaxRanks = 64;
constexpr int kLaneHints[] = {1, 2, 4};

std::vector<int> rootsFor(Collective c, int n) {
  if (!hasRoot(c)) return {0};
  std::vector<int> r = {0, n / 2, n - 1};
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// Verifies builder `name` of collective c for every N up to maxRanks, every count of
// sweepCounts, every lane hint, both placements and every root. A lane hint that yields the
// same plans as a smaller one (too little data for more lanes) is not verified twice.
void sweep(Collective c, const char* name, int maxRanks = kMaxRanks) {
  const Builder& b = builderNamed(c, name);
  std::vector<CollArgs> cases;
  for (int n = 1; n <= sweepRanksUpTo(maxRanks); ++n) {
    for (uint64_t count : sweepCounts(n)) {
      for (int root : rootsFor(c, n)) addLaneHints(b, makeArgs(c, n, count, 1, root), &cases);
    }
  }
  EXPECT_EQ(verifyCases(b, cases), "");
}

TEST(PlanVerify, RingAllReduce) { sweep(Collective::AllReduce, "ring"); }
TEST(PlanVerify, RingAllGather) { sweep(Collective::AllGather, "ring"); }
TEST(PlanVerify, RingReduceScatter) { sweep(Collective::ReduceScatter, "ring"); }
TEST(PlanVerify, ChainBroadcast) { sweep(Collective::Broadcast, "chain"); }
TEST(PlanVerify, ChainReduce) { sweep(Collective::Reduce, "chain"); }
TEST(PlanVerify, PairwiseAlltoAll) { sweep(Collective::AlltoAll, "pairwise"); }
TEST(PlanVerify, PairwiseAllGather) { sweep(Collective::AllGather, "pairwise"); }

// ---- Alltoallv --------------------------------------------------------------------------------

TEST(PlanVerify, PairwiseAlltoAllv) {
  const Builder& b = builderNamed(Collective::AlltoAllv, "pairwise");
  for (int n = 1; n <= sweepRanksUpTo(kMaxRanks); ++n) {
    std::vector<std::vector<uint64_t>> skewed(n, std::vector<uint64_t>(n));
    std::vector<std::vector<uint64_t>> hotspot = skewed;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        // Many zero blocks, the rest of uneven sizes.
        skewed[size_t(i)][size_t(j)] =
            (i * 7 + j * 3) % 5 == 0 ? 0 : uint64_t((i + 1) * (j + 2) % 11);
        // One huge block toward rank 0, nothing else but the diagonal.
        hotspot[size_t(i)][size_t(j)] = j == 0 ? kLargeCount + uint64_t(i) : i == j ? 1 : 0;
      }
    }
    for (const auto* sends : {&skewed, &hotspot}) {
      for (int lanes : kLaneHints) {
        const VerifyResult r = verifyBuilder(b, alltoallvArgs(*sends, lanes), false);
        ASSERT_TRUE(verified(r)) << "N=" << n << " lanes=" << lanes;
      }
    }
  }
}

// ---- Point-to-point groups ------------------------------------------------------------------

// A random group: `messages` messages between random ranks (self included, some of zero
// bytes), each rank issuing its operations in a random order that keeps, per peer and
// direction, the order of the messages (which is what matches them).
std::vector<std::vector<P2POp>> randomGroup(int n, int messages, std::mt19937& rng) {
  std::vector<std::vector<P2POp>> ops(n);
  std::uniform_int_distribution<int> rank(0, n - 1), bytes(0, 300);
  for (int m = 0; m < messages; ++m) {
    const int from = rank(rng), to = rank(rng);
    const uint64_t size = uint64_t(m % 7 == 0 ? 0 : bytes(rng));
    ops[size_t(from)].push_back({to, P2POp::Kind::Send, size});
    ops[size_t(to)].push_back({from, P2POp::Kind::Recv, size});
  }
  for (auto& list : ops) {
    // Shuffle the slots, then put each (peer, kind) class back in its own order.
    std::vector<size_t> order(list.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<P2POp> shuffled(list.size());
    for (int peer = 0; peer < n; ++peer) {
      for (P2POp::Kind kind : {P2POp::Kind::Send, P2POp::Kind::Recv}) {
        std::vector<size_t> slots;
        std::vector<P2POp> members;
        for (size_t i = 0; i < list.size(); ++i) {
          if (list[i].peer == peer && list[i].kind == kind) {
            slots.push_back(order[i]);
            members.push_back(list[i]);
          }
        }
        std::sort(slots.begin(), slots.end());
        for (size_t k = 0; k < slots.size(); ++k) shuffled[slots[k]] = members[k];
      }
    }
    list = std::move(shuffled);
  }
  return ops;
}

TEST(PlanVerify, P2PGroupsInAnyOrder) {
  std::mt19937 rng(12345);
  for (int n = 1; n <= 16; ++n) {
    for (int trial = 0; trial < 8; ++trial) {
      const auto ops = randomGroup(n, 4 * n, rng);
      ASSERT_TRUE(verified(verifyP2P(ops))) << "N=" << n << " trial " << trial;
    }
  }
}

TEST(PlanVerify, P2PSendsBeforeReceivesDoNotDeadlock) {
  // Every rank sends to both neighbours before receiving: a deadlock with blocking calls, fine
  // in a group.
  for (int n = 1; n <= sweepRanksUpTo(kMaxRanks); ++n) {
    std::vector<std::vector<P2POp>> ops(n);
    for (int r = 0; r < n; ++r) {
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      ops[size_t(r)] = {{next, P2POp::Kind::Send, 100},
                        {prev, P2POp::Kind::Send, 7},
                        {prev, P2POp::Kind::Recv, 100},
                        {next, P2POp::Kind::Recv, 7}};
    }
    ASSERT_TRUE(verified(verifyP2P(ops))) << "N=" << n;
  }
}

// ---- Cost formulas (collectives/builders.h) ----------------------------------------------------

// Lane l's elements and the size of its chunk i, as builders.h defines n_l and c_l(i).
uint64_t laneElems(uint64_t count, int lanes, int l) { return partCount(count, lanes, l); }
uint64_t chunk(uint64_t count, int lanes, int l, int n, int i) {
  return partCount(laneElems(count, lanes, l), n, uint64_t(((i % n) + n) % n));
}

void expectCounts(const VerifyResult& r, int rank, uint64_t steps, uint64_t messages,
                  uint64_t elements, const std::string& what) {
  ASSERT_TRUE(r.ok) << what << r.message;
  const RankCounts& c = r.counts[size_t(rank)];
  EXPECT_EQ(c.steps, steps) << what << "rank " << rank;
  EXPECT_EQ(c.messagesSent, messages) << what << "rank " << rank;
  EXPECT_EQ(c.elementsSent, elements) << what << "rank " << rank;
}

// Ranks and counts for the cost checks; counts ≥ L·N so that every chunk holds an element.
constexpr int kCostRanks[] = {1, 2, 3, 5, 8, 13, 64};
std::vector<uint64_t> costCounts(int n, int lanes) {
  return {uint64_t(n * lanes * 7), uint64_t(n * lanes) + 1, kPrimeCount * uint64_t(lanes),
          kLargeCount};
}

TEST(PlanCost, RingAllReduce) {
  for (int n : kCostRanks) {
    for (int hint : kLaneHints) {
      for (uint64_t count : costCounts(n, hint)) {
        const CollArgs a = makeArgs(Collective::AllReduce, n, count, hint);
        const VerifyResult r = verifyBuilder(builderNamed(a.coll, "ring"), a, false);
        const int lanes = n == 1 ? 1 : hint;
        for (int rank = 0; rank < n; ++rank) {
          uint64_t elements = 0;
          for (int l = 0; l < lanes && n > 1; ++l) {
            elements += 2 * laneElems(count, lanes, l) - chunk(count, lanes, l, n, rank + 1) -
                        chunk(count, lanes, l, n, rank + 2);
          }
          if (count % (uint64_t(n) * lanes) == 0) {
            EXPECT_EQ(elements, 2 * uint64_t(n - 1) * count / uint64_t(n));
          }
          const uint64_t steps = n == 1 ? 1 : 4 * uint64_t(n - 1) * lanes;
          expectCounts(r, rank, steps, 2 * uint64_t(n - 1) * lanes, elements,
                       describeCase(a, false));
        }
        EXPECT_EQ(r.rounds, 2 * uint64_t(n - 1)) << describeCase(a, false);
      }
    }
  }
}

TEST(PlanCost, RingAllGatherAndReduceScatter) {
  for (int n : kCostRanks) {
    for (int hint : kLaneHints) {
      for (uint64_t count : costCounts(n, hint)) {
        const int lanes = n == 1 ? 1 : hint;
        const uint64_t sent = uint64_t(n - 1) * count;
        const CollArgs ag = makeArgs(Collective::AllGather, n, count, hint);
        const VerifyResult g = verifyBuilder(builderNamed(ag.coll, "ring"), ag, false);
        const CollArgs rs = makeArgs(Collective::ReduceScatter, n, count, hint);
        const VerifyResult s = verifyBuilder(builderNamed(rs.coll, "ring"), rs, false);
        for (int rank = 0; rank < n; ++rank) {
          expectCounts(g, rank, uint64_t(2 * n - 1) * lanes, uint64_t(n - 1) * lanes, sent,
                       describeCase(ag, false));
          expectCounts(s, rank, n == 1 ? 1 : 2 * uint64_t(n - 1) * lanes, uint64_t(n - 1) * lanes,
                       sent, describeCase(rs, false));
        }
        EXPECT_EQ(g.rounds, uint64_t(n - 1));
        EXPECT_EQ(s.rounds, uint64_t(n - 1));
        const RankPlan plan = buildRingReduceScatter(rs, 0);
        EXPECT_EQ(plan.scratchCount, n > 2 ? 2 * count : 0);
      }
    }
  }
}

TEST(PlanCost, ChainBroadcastAndReduce) {
  for (int n : kCostRanks) {
    for (int hint : kLaneHints) {
      for (uint64_t count : costCounts(n, hint)) {
        const int lanes = n == 1 ? 1 : hint;
        for (int root : rootsFor(Collective::Broadcast, n)) {
          const CollArgs bc = makeArgs(Collective::Broadcast, n, count, hint, root);
          const VerifyResult b = verifyBuilder(builderNamed(bc.coll, "chain"), bc, false);
          const CollArgs rd = makeArgs(Collective::Reduce, n, count, hint, root);
          const VerifyResult d = verifyBuilder(builderNamed(rd.coll, "chain"), rd, false);
          for (int rank = 0; rank < n; ++rank) {
            const int pos = (rank - root + n) % n;
            const bool last = pos == n - 1;
            // Broadcast: everyone but the last forwards; the root also copies.
            const uint64_t bSteps = n == 1 ? 1 : uint64_t(last ? 1 : 2) * lanes;
            expectCounts(b, rank, bSteps, last ? 0 : lanes, last ? 0 : count,
                         describeCase(bc, false));
            // Reduce: everyone but the root sends; the ends have one step per lane.
            const uint64_t dSteps = n == 1 ? 1 : uint64_t(pos == 0 || last ? 1 : 2) * lanes;
            expectCounts(d, rank, dSteps, pos == 0 ? 0 : lanes, pos == 0 ? 0 : count,
                         describeCase(rd, false));
            const bool between = pos > 0 && !last;
            EXPECT_EQ(buildChainReduce(rd, rank).scratchCount, between ? count : 0);
          }
          EXPECT_EQ(b.rounds, uint64_t(n - 1));
          EXPECT_EQ(d.rounds, uint64_t(n - 1));
        }
      }
    }
  }
}

TEST(PlanCost, PairwiseAlltoAllAndAllGather) {
  for (int n : kCostRanks) {
    for (int hint : kLaneHints) {
      for (Collective c : {Collective::AlltoAll, Collective::AllGather}) {
      const uint64_t count = 37;
      const CollArgs a = makeArgs(c, n, count, hint);
      const VerifyResult r = verifyBuilder(builderNamed(a.coll, "pairwise"), a, false);
      for (int rank = 0; rank < n; ++rank) {
        expectCounts(r, rank, 1 + 2 * uint64_t(n - 1), uint64_t(n - 1), uint64_t(n - 1) * count,
                     describeCase(a, false));
      }
      EXPECT_EQ(r.rounds, n > 1 ? 1u : 0u);
      }
    }
  }
}

TEST(PlanCost, PairwiseAlltoAllvSkipsEmptyBlocks) {
  const int n = 9;
  std::vector<std::vector<uint64_t>> sends(n, std::vector<uint64_t>(n));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) sends[size_t(i)][size_t(j)] = uint64_t((i + 2 * j) % 4);
  }
  const auto args = alltoallvArgs(sends, 2);
  const VerifyResult r =
      verifyBuilder(builderNamed(Collective::AlltoAllv, "pairwise"), args, false);
  for (int rank = 0; rank < n; ++rank) {
    uint64_t messages = 0, elements = 0, recvs = 0;
    for (int j = 0; j < n; ++j) {
      if (j == rank) continue;
      messages += sends[size_t(rank)][size_t(j)] > 0;
      elements += sends[size_t(rank)][size_t(j)];
      recvs += sends[size_t(j)][size_t(rank)] > 0;
    }
    const uint64_t steps = messages + recvs + (sends[size_t(rank)][size_t(rank)] > 0);
    expectCounts(r, rank, steps, messages, elements, "alltoallv: ");
  }
}

TEST(PlanCost, P2PGroup) {
  std::mt19937 rng(7);
  const auto ops = randomGroup(6, 30, rng);
  const VerifyResult r = verifyP2P(ops);
  for (int rank = 0; rank < 6; ++rank) {
    uint64_t steps = 0, messages = 0, bytes = 0;
    for (const P2POp& op : ops[size_t(rank)]) {
      if (op.bytes == 0) continue;
      ++steps;
      if (op.kind == P2POp::Kind::Send) ++messages, bytes += op.bytes;
    }
    expectCounts(r, rank, steps, messages, bytes, "p2p: ");
  }
}

// The verifier keeps up with large jobs: a thousand ranks and a million elements (about 4 s of
// CPU). The bound is on CPU time, not wall time, so a busy machine does not fail it; it is there
// to catch a verifier that stops scaling.
TEST(PlanVerify, ScalesToAThousandRanks) {
  const std::clock_t start = std::clock();
  const CollArgs a = makeArgs(Collective::AllReduce, 1000, kLargeCount, 1);
  const VerifyResult r = verifyBuilder(builderNamed(a.coll, "ring"), a, true);
  EXPECT_TRUE(verified(r));
  EXPECT_EQ(r.counts[0].messagesSent, 2u * 999u);
  EXPECT_EQ(r.rounds, 2u * 999u);
  EXPECT_LT(double(std::clock() - start) / CLOCKS_PER_SEC, 20.0);
}

// ---- Registry and buffer sizes ----------------------------------------------------------------

TEST(PlanBuilders, Registry) {
  // The foundation's builder comes first in each collective's list (loom-info's order).
  EXPECT_EQ(builderNames(Collective::AllReduce).front(), "ring");
  EXPECT_EQ(builderNames(Collective::Broadcast).front(), "chain");
  EXPECT_EQ(builderNames(Collective::AlltoAllv).front(), "pairwise");
  EXPECT_EQ(findBuilder(Collective::AllReduce, "chain"), nullptr);
  EXPECT_EQ(findBuilder(Collective::AllReduce, "no-such-algorithm"), nullptr);
  ASSERT_NE(findBuilder(Collective::Reduce, "chain"), nullptr);
  EXPECT_EQ(findBuilder(Collective::Reduce, "chain")->build, &buildChainReduce);
  for (Collective c : {Collective::AllReduce, Collective::Broadcast, Collective::Reduce,
                       Collective::AllGather, Collective::ReduceScatter, Collective::AlltoAll,
                       Collective::AlltoAllv, Collective::SendRecv}) {
    ASSERT_FALSE(builderNames(c).empty()) << collectiveName(c);
    const Builder& b = *findBuilder(c, builderNames(c).front());
    EXPECT_EQ(b.coll, c);
    EXPECT_EQ(findBuilder(c, b.name), &b);
    EXPECT_EQ(b.build == nullptr, c == Collective::SendRecv);
  }
  EXPECT_STREQ(collectiveName(Collective::ReduceScatter), "reducescatter");
  EXPECT_STREQ(stepKindName(StepKind::RecvReduce), "RecvReduce");
}

TEST(PlanBuilders, BufferCounts) {
  EXPECT_EQ(inputCount(makeArgs(Collective::AllGather, 4, 10), 1), 10u);
  EXPECT_EQ(outputCount(makeArgs(Collective::AllGather, 4, 10), 1), 40u);
  EXPECT_EQ(inputCount(makeArgs(Collective::ReduceScatter, 4, 10), 1), 40u);
  EXPECT_EQ(outputCount(makeArgs(Collective::ReduceScatter, 4, 10), 1), 10u);
  EXPECT_EQ(inputCount(makeArgs(Collective::Broadcast, 4, 10, 1, 2), 1), 0u);
  EXPECT_EQ(inputCount(makeArgs(Collective::Broadcast, 4, 10, 1, 2), 2), 10u);
  EXPECT_EQ(outputCount(makeArgs(Collective::Reduce, 4, 10, 1, 2), 1), 0u);
  EXPECT_EQ(outputCount(makeArgs(Collective::Reduce, 4, 10, 1, 2), 2), 10u);
  CollArgs v = makeArgs(Collective::AlltoAllv, 3, 0);
  v.sendCounts = {2, 0, 5};
  v.sendDispls = {10, 100, 0};  // out of order; the empty block's displacement is ignored
  v.recvCounts = {1, 1, 1};
  v.recvDispls = {0, 4, 2};
  EXPECT_EQ(inputCount(v, 0), 12u);
  EXPECT_EQ(outputCount(v, 0), 5u);
}

// ---- Broken plans the verifier must reject ------------------------------------------------------

Region in(uint64_t off, uint64_t count) { return {kInput, off, count}; }
Region out(uint64_t off, uint64_t count) { return {kOutput, off, count}; }
Region scratch(uint64_t off, uint64_t count) { return {kScratch, off, count}; }
Step send(int peer, Region src) { return {StepKind::Send, peer, src, {}}; }
Step recv(int peer, Region dst) { return {StepKind::Recv, peer, {}, dst}; }
Step recvReduce(int peer, Region src, Region dst) { return {StepKind::RecvReduce, peer, src, dst}; }
Step copy(Region src, Region dst) { return {StepKind::Copy, -1, src, dst}; }
Step reduce(Region src, Region dst) { return {StepKind::Reduce, -1, src, dst}; }

RankPlan plan(std::vector<std::vector<Step>> lanes, uint64_t scratchCount = 0) {
  RankPlan p;
  for (auto& steps : lanes) p.lanes.push_back({std::move(steps)});
  p.scratchCount = scratchCount;
  p.algorithm = "handwritten";
  return p;
}

VerifyResult verifyHandwritten(Collective c, uint64_t count, std::vector<RankPlan> plans,
                               bool inPlace = false) {
  const CollArgs a = makeArgs(c, int(plans.size()), count);
  return verifyPlans(std::vector<CollArgs>(plans.size(), a), plans, inPlace);
}

void expectRejected(const VerifyResult& r, const std::string& needle) {
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find(needle), std::string::npos) << "message: " << r.message;
}

// A correct two-rank allreduce, the base the broken variants start from.
std::vector<RankPlan> twoRankAllReduce(uint64_t count) {
  std::vector<RankPlan> plans;
  for (int r = 0; r < 2; ++r) {
    plans.push_back(
        plan({{send(1 - r, in(0, count)), recvReduce(1 - r, in(0, count), out(0, count))}}));
  }
  return plans;
}

TEST(VerifierRejects, NothingWhenThePlanIsRight) {
  EXPECT_TRUE(verified(verifyHandwritten(Collective::AllReduce, 4, twoRankAllReduce(4))));
}

TEST(VerifierRejects, MismatchedSize) {
  auto plans = twoRankAllReduce(4);
  plans[0].lanes[0].steps[0].src.count = 3;
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 0 (Send to 1, 3 elements) meets rank 1 lane 0 step 1 "
                 "(RecvReduce from 0, 4 elements): counts differ");
}

TEST(VerifierRejects, UnmatchedMessages) {
  auto plans = twoRankAllReduce(4);
  plans[0].lanes[0].steps.push_back(send(1, in(0, 4)));
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 2 (Send to 1, 4 elements) has no matching receive");
  plans = twoRankAllReduce(4);
  plans[1].lanes[0].steps.erase(plans[1].lanes[0].steps.begin());
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 1 (RecvReduce from 1, 4 elements) has no matching Send");
}

TEST(VerifierRejects, DeadlockingCycle) {
  // Each rank forwards what it receives before anything has been sent: a cycle of waits.
  std::vector<RankPlan> plans;
  for (int r = 0; r < 3; ++r) {
    plans.push_back(plan({{recv((r + 2) % 3, out(0, 4)), send((r + 1) % 3, out(0, 4))}}));
  }
  expectRejected(verifyHandwritten(Collective::Broadcast, 4, plans),
                 "deadlock: 6 of 6 steps never complete; rank 0 lane 0 step 0 (Recv from 2, 4 "
                 "elements) waits for rank 2 lane 0 step 1 (Send to 0, 4 elements), which "
                 "waits for its lane's step 0");
}

TEST(VerifierRejects, FifoOrderDeadlock) {
  // Rank 0's second message needs nothing, but FIFO order holds it behind the first, which
  // forwards what rank 1 sends only after receiving the second message: a cycle through FIFO.
  std::vector<RankPlan> plans = {
      plan({{recv(1, out(0, 2)), send(1, out(0, 2)), send(1, in(2, 2))}}),
      plan({{recv(0, out(0, 2)), recv(0, out(2, 2)), send(0, out(2, 2))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans), "deadlock: 6 of 6 steps");
}

TEST(VerifierRejects, DoubleCountedReduction) {
  auto plans = twoRankAllReduce(4);
  plans[0].lanes[0].steps.push_back(send(1, in(0, 4)));
  plans[1].lanes[0].steps.push_back(recvReduce(0, out(0, 4), out(0, 4)));
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 1 lane 0 step 2 (RecvReduce from 0, 4 elements): at Output[0] counts "
                 "some ranks twice: Input[0] of ranks {0-1} with Input[0] of ranks {0}");
}

TEST(VerifierRejects, MissingContribution) {
  // Rank 0 sums its own and rank 1's data and hands the result out: rank 2's part is missing.
  std::vector<RankPlan> plans = {
      plan({{recvReduce(1, in(0, 5), out(0, 5)), send(1, out(0, 5)), send(2, out(0, 5))}}),
      plan({{send(0, in(0, 5)), recv(0, out(0, 5))}}), plan({{recv(0, out(0, 5))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 5, plans),
                 "rank 0 Output[0] holds Input[0] of ranks {0-1}, expected Input[0] of ranks "
                 "{0-2}");
}

TEST(VerifierRejects, DifferentElementsCombined) {
  // Rank 0 sends the second half of its Input where rank 1 expects the first.
  std::vector<RankPlan> plans = {plan({{send(1, in(4, 4)), recvReduce(1, in(0, 4), out(0, 4))}}),
                                 plan({{send(0, in(0, 4)), recvReduce(0, in(0, 4), out(0, 4))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 8, plans),
                 "rank 1 lane 0 step 1 (RecvReduce from 0, 4 elements): at Output[0] combines "
                 "different elements: Input[0] of ranks {1} with Input[4] of ranks {0}");
}

TEST(VerifierRejects, RegionOutsideItsBuffer) {
  auto plans = twoRankAllReduce(4);
  plans[1].lanes[0].steps[1].dst = out(2, 4);
  plans[1].lanes[0].steps[1].src = in(0, 4);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 1 lane 0 step 1 (RecvReduce from 0, 4 elements): destination "
                 "Output[2+4] lies outside the buffer of 4 elements");
  // Scratch the plan did not ask for.
  plans = twoRankAllReduce(4);
  plans[0].lanes[0].steps[0].src = scratch(0, 4);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans), "lies outside");
}

TEST(VerifierRejects, WritesToInput) {
  auto plans = twoRankAllReduce(4);
  plans[1].lanes[0].steps[1].dst = in(0, 4);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "writes Input, which the call must leave unchanged");
}

TEST(VerifierRejects, ReadsWhatNobodyWrote) {
  auto plans = twoRankAllReduce(4);
  plans[0].lanes[0].steps[0].src = scratch(0, 4);
  plans[0].scratchCount = 4;
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "reads Scratch[0] on rank 0, which nobody wrote");
}

TEST(VerifierRejects, LanesRacing) {
  // Two lanes of one rank write the same Output elements.
  std::vector<RankPlan> plans = {plan({{copy(in(0, 4), out(0, 4))}, {copy(in(2, 2), out(2, 2))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 0 (Copy, 4 elements) and rank 0 lane 1 step 0 (Copy, 2 "
                 "elements) touch the same elements from different lanes");
}

TEST(VerifierRejects, InPlaceOverwriteBeforeTheSendIsDone) {
  // In place, each rank's RecvReduce overwrites the elements its own Send still reads; the
  // send only completes when the peer's RecvReduce does, which waits for the peer's send.
  const auto plans = twoRankAllReduce(4);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans, true),
                 "deadlock: 4 of 4 steps never complete; rank 0 lane 0 step 0 (Send to 1, 4 "
                 "elements) waits for rank 1 lane 0 step 1 (RecvReduce from 0, 4 elements), "
                 "which waits for its lane's step 0");
}

TEST(VerifierRejects, InPlaceInputGoneBeforeItIsAdded) {
  // Rank 0 receives the peer's data into Output, then adds Input: right out of place, but in
  // place Input is gone by then and the Reduce adds the received data to itself.
  std::vector<RankPlan> plans = {
      plan({{send(1, in(0, 4)), recv(1, out(0, 4)), reduce(in(0, 4), out(0, 4))}}),
      plan({{recv(0, scratch(0, 4)), send(0, in(0, 4)), copy(in(0, 4), out(0, 4)),
             reduce(scratch(0, 4), out(0, 4))}},
           4)};
  EXPECT_TRUE(verified(verifyHandwritten(Collective::AllReduce, 4, plans, false)));
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans, true),
                 "rank 0 lane 0 step 2 (Reduce, 4 elements): at Output[0] counts some ranks "
                 "twice: Input[0] of ranks {1} with Input[0] of ranks {1}");
}

// ---- Barriers and the Shared memory ----

Region shared(uint64_t off, uint64_t count) { return {kShared, off, count}; }
Step barrier() { return {StepKind::Barrier, -1, {}, {}}; }

// The direct allreduce's plans for n ranks (one-shot for small counts).
std::vector<RankPlan> directPlans(int n, uint64_t count) {
  std::vector<RankPlan> plans;
  for (int r = 0; r < n; ++r) {
    plans.push_back(buildDirectAllReduce(makeArgs(Collective::AllReduce, n, count), r));
  }
  return plans;
}

void eraseBarriers(RankPlan& p) {
  auto& steps = p.lanes[0].steps;
  std::erase_if(steps, [](const Step& s) { return s.kind == StepKind::Barrier; });
}

TEST(VerifierRejects, NothingWhenTheDirectPlanIsRight) {
  for (uint64_t count : {uint64_t(4), uint64_t(14), uint64_t(15), uint64_t(100000)}) {
    const auto plans = directPlans(3, count);
    const VerifyResult r = verifyHandwritten(Collective::AllReduce, count, plans);
    EXPECT_TRUE(verified(r));
    EXPECT_GE(r.counts[0].barriers, 1u);
    // Up to 14 floats fit beside the flag in a slot's first line: the flags go there.
    for (const Step& s : plans[0].lanes[0].steps) {
      if (s.kind == StepKind::Barrier) {
        EXPECT_EQ(s.src.count > 0, count <= 14) << count;
      }
    }
  }
}

TEST(VerifierRejects, MissingBarrierIsARace) {
  // Without its barrier the one-shot plan reads the peers' slots while they are being filled.
  auto plans = directPlans(2, 4);
  for (RankPlan& p : plans) eraseBarriers(p);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "touch the same Shared elements between the same two barriers, one of them "
                 "writing: a race");
}

TEST(VerifierRejects, TwoRanksWritingOneSlot) {
  // Both ranks copy their Input into the same Shared elements before the barrier.
  std::vector<RankPlan> plans;
  for (int r = 0; r < 2; ++r) {
    plans.push_back(plan({{copy(in(0, 4), shared(0, 4)), barrier(), copy(shared(0, 4), out(0, 4)),
                           reduce(shared(4, 4), out(0, 4))}}));
  }
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 0 (Copy, 4 elements) and rank 1 lane 0 step 0 (Copy, 4 "
                 "elements) touch the same Shared elements between the same two barriers");
}

TEST(VerifierRejects, BarrierCountsDiffer) {
  auto plans = directPlans(3, 100000);
  auto& steps = plans[1].lanes[0].steps;
  steps.erase(std::find_if(steps.begin(), steps.end(),
                           [](const Step& s) { return s.kind == StepKind::Barrier; }));
  expectRejected(verifyHandwritten(Collective::AllReduce, 100000, plans),
                 "has no matching Barrier on rank 1, which has only");
}

TEST(VerifierRejects, BarrierMisplaced) {
  std::vector<RankPlan> plans = {plan({{copy(in(0, 4), out(0, 4))}, {barrier()}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 1 step 0 (Barrier): a Barrier has no regions and sits on lane 0");
  plans = {plan({{barrier()}, {copy(in(0, 4), shared(0, 4)), copy(shared(0, 4), out(0, 4))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "Shared regions belong on lane 0");
}

// Flags in Shared (a Barrier's src): rank r's 8 bytes at src.offset + r·src.count.
Step flagBarrier(uint64_t offset, uint64_t stride) {
  return {StepKind::Barrier, -1, shared(offset, stride), {}};
}

// n ranks: each copies its Input into its line just past its flag, one flagged barrier, then
// sums the lines; `extra` (may be empty) goes right after the barrier on every rank.
std::vector<RankPlan> flaggedPlans(int n, Step barrierStep, std::vector<Step> extra = {}) {
  std::vector<RankPlan> plans;
  for (int r = 0; r < n; ++r) {
    std::vector<Step> steps = {copy(in(0, 4), shared(uint64_t(r) * 16 + 2, 4)), barrierStep};
    steps.insert(steps.end(), extra.begin(), extra.end());
    steps.push_back(copy(shared(2, 4), out(0, 4)));
    for (int j = 1; j < n; ++j) steps.push_back(reduce(shared(uint64_t(j) * 16 + 2, 4), out(0, 4)));
    plans.push_back(plan({steps}, 4));
  }
  return plans;
}

TEST(VerifierRejects, BarrierFlagsMisplacedOrTouched) {
  // Right: 16-element (64-byte) lines, each rank's flag in its first 2 elements.
  EXPECT_TRUE(verified(verifyHandwritten(Collective::AllReduce, 4, flaggedPlans(3, flagBarrier(0, 16)))));
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, flaggedPlans(2, flagBarrier(1, 16))),
                 "(Barrier): flags every 16 elements from Shared element 1 are not 8-byte aligned");
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, flaggedPlans(2, flagBarrier(0, 1))),
                 "are not 8-byte aligned, or do not fit");
  auto plans = flaggedPlans(2, flagBarrier(0, 16));
  plans[1].lanes[0].steps[1] = flagBarrier(0, 32);
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 1 lane 0 step 1 (Barrier) puts its flags elsewhere than rank 0 lane 0 step 1 "
                 "(Barrier)");
  // The flags lie on the data each rank wrote before arriving.
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, flaggedPlans(2, flagBarrier(2, 16))),
                 "touch the same Shared elements between the same two barriers");
  // Read while the slower rank may still be looking for it.
  expectRejected(
      verifyHandwritten(Collective::AllReduce, 4,
                        flaggedPlans(2, flagBarrier(0, 16), {copy(shared(16, 4), scratch(0, 4))})),
      "touch the same Shared elements between the same two barriers");
  // The next barrier's flags overwrite this one's before every rank has seen it...
  expectRejected(verifyHandwritten(Collective::AllReduce, 4,
                                   flaggedPlans(2, flagBarrier(0, 16), {flagBarrier(0, 16)})),
                 "touch the same Shared elements between the same two barriers");
  // ...which is safe two barriers on: every rank has passed the first by then.
  EXPECT_TRUE(verified(verifyHandwritten(
      Collective::AllReduce, 4,
      flaggedPlans(2, flagBarrier(0, 16), {barrier(), flagBarrier(0, 16)}))));
}

TEST(VerifierRejects, BarrierAcrossHosts) {
  auto plans = directPlans(2, 4);
  CollArgs a = makeArgs(Collective::AllReduce, 2, 4);
  a.hostOf = {0, 1};
  expectRejected(verifyPlans({a, a}, plans, false),
                 "rank 0 and rank 1 have Barrier steps but are on different hosts");
}

TEST(VerifierRejects, DeadlockThroughABarrier) {
  // Rank 0 waits for a message that rank 1 sends only after a barrier rank 0 never reaches.
  std::vector<RankPlan> plans = {plan({{recv(1, out(0, 4)), barrier()}}),
                                 plan({{barrier(), send(0, in(0, 4)), copy(in(0, 4), out(0, 4))}})};
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans, false),
                 "rank 1 lane 0 step 0 (Barrier) waits for rank 0 to reach its barrier 0");
}

TEST(VerifierRejects, SharedReadBeforeAnyoneWroteIt) {
  std::vector<RankPlan> plans;
  for (int r = 0; r < 2; ++r) {
    plans.push_back(plan({{barrier(), copy(shared(0, 4), out(0, 4))}}));
  }
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans), "reads Shared[0] on rank");
}

// ---- Peers' buffers (plan.h, peerBuffer) ----

Region peerIn(int rank, uint64_t off, uint64_t count) {
  return {peerBuffer(rank, kInput), off, count};
}
Region peerOut(int rank, uint64_t off, uint64_t count) {
  return {peerBuffer(rank, kOutput), off, count};
}

// A two-rank allreduce of 4 elements by peer reads: rank r sums half r of both Inputs into its
// Output, then copies the other half from the other rank's Output. Both marked readByPeers.
std::vector<RankPlan> peerAllReduce(std::vector<std::vector<Step>> rank0,
                                    std::vector<std::vector<Step>> rank1) {
  std::vector<RankPlan> plans = {plan(std::move(rank0)), plan(std::move(rank1))};
  for (RankPlan& p : plans) p.readByPeers = true;
  return plans;
}

TEST(VerifierRejects, NothingWhenPeerReadsAreRight) {
  const auto plans = peerAllReduce(
      {{barrier(), copy(in(0, 2), out(0, 2)), reduce(peerIn(1, 0, 2), out(0, 2)), barrier(),
        copy(peerOut(1, 2, 2), out(2, 2)), barrier()}},
      {{barrier(), copy(in(2, 2), out(2, 2)), reduce(peerIn(0, 2, 2), out(2, 2)), barrier(),
        copy(peerOut(0, 0, 2), out(0, 2)), barrier()}});
  EXPECT_TRUE(verified(verifyHandwritten(Collective::AllReduce, 4, plans, false)));
  EXPECT_TRUE(verified(verifyHandwritten(Collective::AllReduce, 4, plans, true)));
}

TEST(VerifierRejects, PeerReadBeforeTheFirstOrAfterTheLastBarrier) {
  auto plans = peerAllReduce({{reduce(peerIn(1, 0, 4), out(0, 4)), barrier()}},
                             {{copy(in(0, 4), out(0, 4)), barrier()}});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "rank 0 lane 0 step 0 (Reduce, 4 elements): reads rank 1's Input before the "
                 "plan's first Barrier");
  plans = peerAllReduce({{barrier(), copy(peerIn(1, 0, 4), out(0, 4))}},
                        {{barrier(), copy(in(0, 4), out(0, 4))}});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "reads rank 1's Input after the plan's last Barrier");
}

TEST(VerifierRejects, PeerReadRacesTheOwnersWrite) {
  // Rank 1 copies rank 0's Output in the phase in which rank 0 writes it.
  const auto plans =
      peerAllReduce({{barrier(), copy(in(0, 4), out(0, 4)), reduce(peerIn(1, 0, 4), out(0, 4)),
                      barrier()}},
                    {{barrier(), copy(peerOut(0, 0, 4), out(0, 4)), barrier()}});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "touch the same elements of a rank's buffer between the same two barriers");
}

TEST(VerifierRejects, PeerBufferMisused) {
  // Written, not read; read by a Send; read from an owner whose plan does not say so.
  auto plans = peerAllReduce({{barrier(), copy(in(0, 4), peerOut(1, 0, 4)), barrier()}},
                             {{barrier(), barrier()}});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "only a Copy's or Reduce's source may name rank 1's Output");
  plans = peerAllReduce({{barrier(), send(1, peerIn(1, 0, 4)), barrier()}},
                        {{barrier(), recv(0, out(0, 4)), barrier()}});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "only a Copy's or Reduce's source may name rank 1's Input");
  plans = peerAllReduce({{barrier(), copy(peerIn(1, 0, 4), out(0, 4)), barrier()}},
                        {{barrier(), copy(in(0, 4), out(0, 4)), barrier()}});
  plans[1].readByPeers = false;
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "reads rank 1's Input, whose plan is not a one-lane plan marked readByPeers");
  plans[1].readByPeers = true;
  plans[0].lanes.push_back({});
  expectRejected(verifyHandwritten(Collective::AllReduce, 4, plans),
                 "only one-lane plans read peers");
}

TEST(VerifierRejects, P2PReceiveOfTheWrongMessage) {
  // Two messages from rank 0 to rank 1, received in the wrong buffers: the sizes match, the
  // contents do not.
  std::vector<std::vector<P2POp>> ops = {{{1, P2POp::Kind::Send, 8}, {1, P2POp::Kind::Send, 8}},
                                         {{0, P2POp::Kind::Recv, 8}, {0, P2POp::Kind::Recv, 8}}};
  std::vector<RankPlan> plans = {buildP2P(ops[0]), buildP2P(ops[1])};
  std::swap(plans[1].lanes[0].steps[0], plans[1].lanes[0].steps[1]);
  expectRejected(verifyP2PPlans(ops, plans),
                 "rank 1 op0[0] holds op1[0] of ranks {0}, expected op0[0] of ranks {0}");
}

}  // namespace
}  // namespace loom::test
