// The gather and scatter builders (linear, tree, peer) through the symbolic verifier: N = 1..64
// with every root, plus 128, 256 and 1000; awkward counts, lane hints, in place and out of
// place; the cost formulas of linear and tree (collectives/builders.h, builders_exchange.h;
// peer's are with the other peer builders', plan_verify_algos_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/builders_exchange.h"
#include "collectives/plan.h"
#include "tests/support/plan_test_util.h"
#include "tests/support/verifier.h"

namespace loom::test {
namespace {

using namespace collectives;

constexpr int kMaxRanks = 64;
constexpr int kBigRanks[] = {128, 256, 1000};
constexpr Collective kRooted[] = {Collective::Gather, Collective::Scatter};

// Every N up to 64 with every root, count and lane hint (a hint that gives the plans of a
// smaller one is left out); then the big N, roots 0, N/2 and N−1, one count.
std::vector<CollArgs> cases(const Builder& b) {
  std::vector<CollArgs> out;
  for (int n = 1; n <= sweepRanksUpTo(kMaxRanks); ++n) {
    for (uint64_t count : sweepCounts(n)) {
      for (int root = 0; root < n; ++root)
        addLaneHints(b, makeArgs(b.coll, n, count, 1, root), &out);
    }
  }
  for (int n : kBigRanks)
    for (int root : {0, n / 2, n - 1})
      if (sweepBigRanks()) out.push_back(makeArgs(b.coll, n, uint64_t(n + 3), 2, root));
  return out;
}

void sweep(Collective c, const char* name) {
  const Builder& b = builderNamed(c, name);
  EXPECT_EQ(verifyCases(b, cases(b)), "") << collectiveName(c) << " " << name;
}

TEST(GatherVerify, Linear) { sweep(Collective::Gather, "linear"); }
TEST(GatherVerify, Tree) { sweep(Collective::Gather, "tree"); }
TEST(GatherVerify, Peer) { sweep(Collective::Gather, "peer"); }
TEST(ScatterVerify, Linear) { sweep(Collective::Scatter, "linear"); }
TEST(ScatterVerify, Tree) { sweep(Collective::Scatter, "tree"); }
TEST(ScatterVerify, Peer) { sweep(Collective::Scatter, "peer"); }

// ---- Cost formulas --------------------------------------------------------------------------

constexpr int kCostRanks[] = {1, 2, 3, 5, 8, 13, 64};

VerifyResult verifyUniform(const Builder& b, const CollArgs& a) {
  const VerifyResult r = verifyBuilder(b, a, false);
  EXPECT_TRUE(verified(r)) << describeCase(a, false);
  return r;
}

uint64_t ceilLog2(int n) {
  uint64_t lg = 0;
  while ((1 << lg) < n) ++lg;
  return lg;
}

TEST(GatherScatterCost, Linear) {
  for (Collective c : kRooted) {
    for (int n : kCostRanks) {
      for (int root : {0, n - 1}) {
        const uint64_t count = 100, lanes = n == 1 ? 1 : 2;
        const CollArgs a = makeArgs(c, n, count, 2, root);
        const VerifyResult r = verifyUniform(builderNamed(c, "linear"), a);
        const uint64_t others = uint64_t(n - 1);
        for (int rank = 0; rank < n; ++rank) {
          const RankCounts& rc = r.counts[size_t(rank)];
          const bool isRoot = rank == root;
          EXPECT_EQ(rc.steps, isRoot ? lanes * uint64_t(n) : lanes) << describeCase(a, false);
          // Gather: every non-root sends its block; scatter: the root sends every other block.
          const bool sends = c == Collective::Gather ? !isRoot : isRoot;
          EXPECT_EQ(rc.messagesSent, sends ? (isRoot ? others * lanes : lanes) : 0);
          EXPECT_EQ(rc.elementsSent, sends ? (isRoot ? others * count : count) : 0);
          const uint64_t received = c == Collective::Gather ? (isRoot ? others * count : 0)
                                                            : (isRoot ? 0 : count);
          EXPECT_EQ(rc.elementsReceived, received);
        }
        EXPECT_EQ(r.rounds, n > 1 ? 1u : 0u);
      }
    }
  }
}

// The tree's message counts: one per child's range (two for the range that wraps past rank
// N−1 on its way to or from the root), every block crossing each level once.
TEST(GatherScatterCost, Tree) {
  for (Collective c : kRooted) {
    for (int n : kCostRanks) {
      for (int root : {0, 1, n / 2, n - 1}) {
        if (root >= n) continue;
        const uint64_t count = 10;
        const CollArgs a = makeArgs(c, n, count, 1, root);
        const VerifyResult r = verifyUniform(builderNamed(c, "tree"), a);
        uint64_t rootMessages = 0, totalElements = 0;
        for (int rank = 0; rank < n; ++rank) {
          const RankCounts& rc = r.counts[size_t(rank)];
          totalElements += rc.elementsSent;
          const int v = wrap(rank - root, n);
          const int span = binomialSpan(v, n), size = std::min(span, n - v);
          if (v == 0) {
            rootMessages = c == Collective::Gather ? rc.messagesReceived : rc.messagesSent;
            const uint64_t sent = c == Collective::Scatter ? uint64_t(n - 1) * count : 0;
            EXPECT_EQ(rc.elementsSent, sent) << describeCase(a, false);
          } else if (c == Collective::Gather) {
            EXPECT_EQ(rc.elementsSent, uint64_t(size) * count) << describeCase(a, false);
          } else {
            EXPECT_EQ(rc.elementsSent, uint64_t(size - 1) * count) << describeCase(a, false);
          }
          EXPECT_EQ(builderNamed(c, "tree").build(a, rank).scratchCount,
                    v != 0 && size > 1 ? uint64_t(size) * count : 0);
        }
        // ⌈log2 N⌉ children of the root, one of whose ranges may wrap.
        const uint64_t lg = ceilLog2(n);
        EXPECT_GE(rootMessages, lg) << describeCase(a, false);
        EXPECT_LE(rootMessages, lg + (root > 0 ? 1 : 0)) << describeCase(a, false);
        if (root == 0) {
          EXPECT_EQ(rootMessages, lg);
        }
        // Every block but the root's travels once per level of the tree below the root.
        uint64_t hops = 0;
        for (int v = 1; v < n; ++v) hops += uint64_t(__builtin_popcount(unsigned(v)));
        EXPECT_EQ(totalElements, hops * count) << describeCase(a, false);
        // The longest chain: the block of a place with the most bits set, ⌊log2 N⌋ hops; a
        // message split in two adds a FIFO link.
        const uint64_t depth = ceilLog2(n + 1) - 1;
        EXPECT_GE(r.rounds, depth) << describeCase(a, false);
        EXPECT_LE(r.rounds, depth + (root > 0 ? 1 : 0)) << describeCase(a, false);
      }
    }
  }
}

// ---- Registry ---------------------------------------------------------------------------------

TEST(GatherScatterBuilders, RegistryAndBufferCounts) {
  for (Collective c : kRooted) {
    EXPECT_TRUE(hasRoot(c));
    const std::vector<std::string_view> names = builderNames(c);
    EXPECT_EQ(names, (std::vector<std::string_view>{"linear", "tree", "peer"}))
        << collectiveName(c);
    EXPECT_EQ(builderNamed(c, "linear").refuse, nullptr);
    EXPECT_EQ(builderNamed(c, "tree").refuse, nullptr);
    ASSERT_NE(builderNamed(c, "peer").refuse, nullptr);
    CollArgs twoHosts = makeArgs(c, 4, 8, 1, 1);
    twoHosts.hostOf = {0, 0, 1, 1};
    EXPECT_NE(builderNamed(c, "peer").refuse(twoHosts), "");
  }
  EXPECT_STREQ(collectiveName(Collective::Gather), "gather");
  EXPECT_STREQ(collectiveName(Collective::Scatter), "scatter");
  // Only the root has the gathered (scattered) buffer.
  const CollArgs g = makeArgs(Collective::Gather, 4, 10, 1, 2);
  EXPECT_EQ(inputCount(g, 1), 10u);
  EXPECT_EQ(outputCount(g, 1), 0u);
  EXPECT_EQ(outputCount(g, 2), 40u);
  const CollArgs s = makeArgs(Collective::Scatter, 4, 10, 1, 2);
  EXPECT_EQ(inputCount(s, 1), 0u);
  EXPECT_EQ(inputCount(s, 2), 40u);
  EXPECT_EQ(outputCount(s, 1), 10u);
}

}  // namespace
}  // namespace loom::test
