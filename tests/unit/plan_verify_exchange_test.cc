// The alltoall, broadcast and reduce builders of collectives/builders_exchange.h through the
// symbolic verifier: N = 1..64 (every 5th above 32 for the slowest builders) plus 128, 256 and
// 1000 (not for bruck and hierarchical alltoall), awkward counts, every root class, in
// place and out of place, host layouts; the incast fan-in bound; cost formulas; refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
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
constexpr int kFanIns[] = {1, 2, 4};



// Verifies every case with builder b, in place too where the collective has that form.
void verifyAll(const Builder& b, const std::vector<CollArgs>& cases) {
  EXPECT_EQ(verifyCases(b, cases), "") << b.name;
}

std::vector<uint64_t> countsFor(int n, uint64_t large) {
  std::vector<uint64_t> c = {0, 1, uint64_t(n - 1), uint64_t(2 * n + 1), kPrimeCount, large};
  if (n > kMaxRanks) c = {uint64_t(n + 3)};  // the big N: one count
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// Which N a builder is verified at. The verifier's time grows with N² (or N² log N) steps per
// call, so the slowest builders thin the wide range: N ≤ 32 holds every shape (odd, prime,
// powers of two and their neighbours) and 33..64 then adds breadth, not new kinds of case.
struct Sweep {
  int wideStride = 1;     // in 33..kMaxRanks keep every wideStride-th N, and kMaxRanks itself
  bool thousand = true;   // N = 1000; 128 and 256 already cover the big shapes
};
constexpr Sweep kFullSweep;
constexpr Sweep kThinSweep{5, true};
constexpr Sweep kThinSweepNoThousand{5, false};

std::vector<int> ranksToSweep(const Sweep& sweep = kFullSweep) {
  std::vector<int> n;
  for (int i = 1; i <= sweepRanksUpTo(kMaxRanks); ++i) {
    if (i > 32 && i < kMaxRanks && (i - 33) % sweep.wideStride != 0) continue;
    n.push_back(i);
  }
  for (int big : kBigRanks) {
    if ((big == 1000 && !sweep.thousand) || !sweepBigRanks()) continue;
    n.push_back(big);
  }
  return n;
}

// Host layouts: one host, blocks of 4, round robin over 3, each rank alone, one big + singles.
std::vector<std::vector<int32_t>> hostLayouts(int n) {
  std::vector<std::vector<int32_t>> layouts = {{}};
  const size_t size = static_cast<size_t>(n);
  std::vector<int32_t> blocks(size), robin(size), alone(size), lopsided(size);
  for (int r = 0; r < n; ++r) {
    blocks[size_t(r)] = r / 4;
    robin[size_t(r)] = r % 3;
    alone[size_t(r)] = r;
    lopsided[size_t(r)] = r < n / 2 ? 0 : r - n / 2;
  }
  for (auto* l : {&blocks, &robin, &alone, &lopsided}) layouts.push_back(*l);
  return layouts;
}

// Cases for builder `name`: every N, its counts, lane hints, roots and (alltoall) host layouts
// or fan-ins; vary(a) appends the variants of one base case.
std::vector<CollArgs> cases(Collective c, uint64_t large,
                            const std::function<void(CollArgs, std::vector<CollArgs>&)>& vary,
                            const Sweep& sweep = kFullSweep) {
  std::vector<CollArgs> out;
  for (int n : ranksToSweep(sweep)) {
    for (uint64_t count : countsFor(n, large)) {
      std::vector<int> roots = {0};
      const bool rootedCall = hasRoot(c);
      if (rootedCall && n <= kMaxRanks) roots = {0, n / 2, n - 1};
      if (rootedCall && n > kMaxRanks) roots = {n / 2};
      roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
      for (int root : roots) vary(makeArgs(c, n, count, 1, root), out);
    }
  }
  return out;
}

void withLanes(CollArgs a, std::vector<CollArgs>& out) {
  for (int lanes : {1, 2, 4}) {
    if (lanes > 1 && a.nranks > kMaxRanks) break;
    a.lanes = lanes;
    out.push_back(a);
  }
}

// ---- Alltoall -------------------------------------------------------------------------------

TEST(ExchangeVerify, XorAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "xor"), cases(Collective::AlltoAll, 4096, withLanes));
}

TEST(ExchangeVerify, BruckAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "bruck"),
            cases(Collective::AlltoAll, 4096, [](CollArgs a, std::vector<CollArgs>& out) {
              out.push_back(a);
            },
            kThinSweepNoThousand));
}

TEST(ExchangeVerify, HierarchicalAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "hierarchical"),
            cases(Collective::AlltoAll, 4096, [](CollArgs a, std::vector<CollArgs>& out) {
              for (const auto& layout : hostLayouts(a.nranks)) {
                if (a.nranks > kMaxRanks && (layout.empty() || layout[1] != 0)) continue;  // blocks
                a.hostOf = layout;
                out.push_back(a);
              }
            },
            kThinSweepNoThousand));
}

// The arena's default size (one chunk), and arenas of 1 and 3 elements per block and slot (a
// chunk per element or three) for the counts up to 2N + 1 of N ≤ 64: a plan has 2N − 1 steps
// per chunk, so larger counts through tiny arenas would only add time.
TEST(ExchangeVerify, DirectAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "direct"),
            cases(Collective::AlltoAll, 4096, [](CollArgs a, std::vector<CollArgs>& out) {
              out.push_back(a);
              if (a.nranks > kMaxRanks || a.count > uint64_t(2 * a.nranks + 1)) return;
              for (uint64_t perBlock : {1, 3}) {
                a.sharedBytes = 2 * uint64_t(a.nranks) * uint64_t(a.nranks) * perBlock * a.elemSize;
                out.push_back(a);
              }
            },
            kThinSweepNoThousand));
}

TEST(ExchangeVerify, PeerAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "peer"),
            cases(Collective::AlltoAll, 4096, [](CollArgs a, std::vector<CollArgs>& out) {
              out.push_back(a);
            },
            kThinSweepNoThousand));
}

TEST(ExchangeVerify, IncastAlltoAll) {
  verifyAll(builderNamed(Collective::AlltoAll, "incast"),
            cases(Collective::AlltoAll, 4096, [](CollArgs a, std::vector<CollArgs>& out) {
              for (int k : {1, 2, 4, 1 << 20}) {
                if (a.nranks > kMaxRanks && k != 2) continue;
                a.fanIn = k;
                a.fanInLeadBytes = 0;
                out.push_back(a);
                if (k > 2 || a.nranks > kMaxRanks) continue;
                // Leads of one element, half a block and more (messages split, or not gated).
                for (uint64_t lead : {uint64_t(1), a.count / 2 + 1, 3 * a.count}) {
                  a.fanInLeadBytes = lead * a.elemSize;
                  out.push_back(a);
                }
              }
            },
            kThinSweep));
}

// ---- Alltoallv ------------------------------------------------------------------------------

// Uneven blocks with many zeros; and a hot receiver (rank 0) that everyone floods.
std::vector<std::vector<uint64_t>> skewed(int n) {
  const size_t size = static_cast<size_t>(n);
  std::vector<std::vector<uint64_t>> m(size, std::vector<uint64_t>(size));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      m[size_t(i)][size_t(j)] = (i * 7 + j * 3) % 5 == 0 ? 0 : uint64_t((i + 1) * (j + 2) % 11);
    }
  }
  return m;
}

std::vector<std::vector<uint64_t>> hotspot(int n) {
  const size_t size = static_cast<size_t>(n);
  std::vector<std::vector<uint64_t>> m(size, std::vector<uint64_t>(size));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      m[size_t(i)][size_t(j)] = j == 0 ? kLargeCount + uint64_t(i) * 977 : (i + j) % 3 == 0 ? 2 : 0;
    }
  }
  return m;
}

void sweepAlltoallv(const char* name, const Sweep& sweep) {
  const Builder& b = builderNamed(Collective::AlltoAllv, name);
  std::vector<std::vector<CollArgs>> all;
  for (int n : ranksToSweep(sweep)) {
    if (n > 256) continue;  // alltoallv's matrices cost N² per case
    for (int k : {1, 2, 4}) {
      for (int lanes : {1, 3}) {
        all.push_back(alltoallvArgs(skewed(n), lanes, k));
        all.push_back(alltoallvArgs(hotspot(n), lanes, k));
      }
    }
  }
  const std::string failure = forEachParallel(all.size(), [&](size_t i) -> std::string {
    const VerifyResult r = verifyBuilder(b, all[i], false);
    return r.ok ? "" : describeCase(all[i][0], false) + r.message;
  });
  EXPECT_EQ(failure, "") << name;
}

TEST(ExchangeVerify, XorAlltoAllv) { sweepAlltoallv("xor", kFullSweep); }
TEST(ExchangeVerify, IncastAlltoAllv) { sweepAlltoallv("incast", kThinSweep); }

// ---- Fan-in ---------------------------------------------------------------------------------

// Incast plans never let more than k data messages into a rank at once, and do use k (the
// measure is tight: unscheduled pairwise exchange lets all N−1 in).
TEST(ExchangeFanIn, IncastAlltoAllBoundedByK) {
  const Builder& b = builderNamed(Collective::AlltoAll, "incast");
  std::vector<CollArgs> all;
  for (int n = 1; n <= 48; ++n) {
    for (int k : kFanIns) {
      CollArgs a = makeArgs(Collective::AlltoAll, n, 5);
      a.fanIn = k;
      all.push_back(a);
    }
  }
  const std::string failure = forEachParallel(all.size(), [&](size_t i) -> std::string {
    const CollArgs& a = all[i];
    const VerifyResult r = verifyBuilderFanIn(b, std::vector<CollArgs>(size_t(a.nranks), a));
    if (!r.ok) return describeCase(a, false) + r.message;
    const uint64_t want = uint64_t(std::min(a.fanIn, a.nranks - 1));
    if (r.maxFanIn != want) {
      return describeCase(a, false) + "fan-in " + std::to_string(r.maxFanIn) + " at rank " +
             std::to_string(r.fanInRank) + ", want " + std::to_string(want);
    }
    return "";
  });
  EXPECT_EQ(failure, "");
}

// With a lead of ℓ elements, a receiver still has at most k messages of more than ℓ elements
// in flight (the measure ignores the split-off tails of at most ℓ), and does use the lead: the
// first ⌊ℓ/c⌋ + 1 messages of every slot go at once, as in the plain exchange.
TEST(ExchangeFanIn, IncastAlltoAllWithALeadStaysBounded) {
  const Builder& b = builderNamed(Collective::AlltoAll, "incast");
  std::vector<CollArgs> all;
  for (int n = 2; n <= 33; n += 3) {
    for (int k : kFanIns) {
      for (uint64_t lead : {3, 7, 16}) {
        CollArgs a = makeArgs(Collective::AlltoAll, n, 5);
        a.fanIn = k;
        a.fanInLeadBytes = lead * a.elemSize;
        all.push_back(a);
      }
    }
  }
  const std::string failure = forEachParallel(all.size(), [&](size_t i) -> std::string {
    const CollArgs& a = all[i];
    const std::vector<CollArgs> args(size_t(a.nranks), a);
    const uint64_t lead = a.fanInLeadBytes / a.elemSize, c = a.count;
    const uint64_t k = uint64_t(std::min(a.fanIn, a.nranks - 1));
    const VerifyResult beyond = verifyBuilderFanIn(b, args, lead);
    if (!beyond.ok) return describeCase(a, false) + beyond.message;
    // Messages of more than ℓ elements exist only where c > ℓ.
    const uint64_t wantBeyond = c > lead ? k : 0;
    if (beyond.maxFanIn != wantBeyond)
      return describeCase(a, false) + "fan-in beyond the lead " +
             std::to_string(beyond.maxFanIn) + ", want " + std::to_string(wantBeyond);
    const VerifyResult every = verifyBuilderFanIn(b, args);
    const uint64_t atOnce = std::min(uint64_t(a.nranks - 1), k * (lead / c + 1));
    if (every.maxFanIn < atOnce)
      return describeCase(a, false) + "fan-in " + std::to_string(every.maxFanIn) +
             ", want at least " + std::to_string(atOnce);
    return "";
  });
  EXPECT_EQ(failure, "");
  // A lead of a whole row: nothing waits, as in the plain exchange.
  CollArgs a = makeArgs(Collective::AlltoAll, 9, 5);
  a.fanInLeadBytes = 8 * 5 * a.elemSize;
  const VerifyResult r = verifyBuilderFanIn(b, std::vector<CollArgs>(9, a));
  ASSERT_TRUE(verified(r));
  EXPECT_EQ(r.maxFanIn, 8u);
  EXPECT_EQ(r.counts[0].messagesSent, 8u);
}

TEST(ExchangeFanIn, PairwiseIsUnbounded) {
  const CollArgs a = makeArgs(Collective::AlltoAll, 9, 5);
  const VerifyResult r = verifyBuilderFanIn(builderNamed(Collective::AlltoAll, "pairwise"),
                                            std::vector<CollArgs>(9, a));
  ASSERT_TRUE(verified(r));
  EXPECT_EQ(r.maxFanIn, 8u);
}

// A hot receiver: every rank floods rank 0. Incast keeps exactly k senders on it (busy, not
// flooded); skewed matrices stay within k everywhere.
TEST(ExchangeFanIn, IncastAlltoAllvHotReceiver) {
  const Builder& b = builderNamed(Collective::AlltoAllv, "incast");
  std::vector<std::pair<std::vector<CollArgs>, int>> all;
  for (int n = 2; n <= 40; n += 3) {
    for (int k : kFanIns) {
      all.emplace_back(alltoallvArgs(hotspot(n), 1, k), k);
      all.emplace_back(alltoallvArgs(skewed(n), 1, k), k);
    }
  }
  const std::string failure = forEachParallel(all.size(), [&](size_t i) -> std::string {
    const auto& [args, k] = all[i];
    const VerifyResult r = verifyBuilderFanIn(b, args);
    if (!r.ok) return describeCase(args[0], false) + r.message;
    if (r.maxFanIn > uint64_t(k)) {
      return describeCase(args[0], false) + "fan-in " + std::to_string(r.maxFanIn) + " at rank " +
             std::to_string(r.fanInRank) + " exceeds " + std::to_string(k);
    }
    const bool hot = args[0].recvCounts[1] >= kLargeCount;
    const uint64_t want = uint64_t(std::min(k, args[0].nranks - 1));
    if (hot && r.maxFanIn != want) {
      return describeCase(args[0], false) + "hot receiver has fan-in " + std::to_string(r.maxFanIn);
    }
    return "";
  });
  EXPECT_EQ(failure, "");
}

// ---- Broadcast and reduce -------------------------------------------------------------------

TEST(ExchangeVerify, TreeBroadcast) {
  verifyAll(builderNamed(Collective::Broadcast, "tree"),
            cases(Collective::Broadcast, kLargeCount, withLanes));
}
TEST(ExchangeVerify, ScatterAllgatherBroadcast) {
  verifyAll(builderNamed(Collective::Broadcast, "scatter_allgather"),
            cases(Collective::Broadcast, kLargeCount, withLanes, kThinSweep));
}
TEST(ExchangeVerify, TreeReduce) {
  verifyAll(builderNamed(Collective::Reduce, "tree"), cases(Collective::Reduce, kLargeCount, withLanes));
}
TEST(ExchangeVerify, PeerBroadcastAndReduce) {
  const auto plain = [](CollArgs a, std::vector<CollArgs>& out) { out.push_back(a); };
  verifyAll(builderNamed(Collective::Broadcast, "peer"),
            cases(Collective::Broadcast, kLargeCount, plain, kThinSweep));
  verifyAll(builderNamed(Collective::Reduce, "peer"),
            cases(Collective::Reduce, kLargeCount, plain, kThinSweep));
}
TEST(ExchangeVerify, RsagReduce) {
  verifyAll(builderNamed(Collective::Reduce, "rsag"),
            cases(Collective::Reduce, kLargeCount, withLanes, kThinSweep));
}

// ---- Cost formulas (collectives/builders_exchange.h) ----------------------------------------

constexpr int kCostRanks[] = {1, 2, 3, 5, 8, 13, 64};

VerifyResult verifyUniform(const Builder& b, const CollArgs& a) {
  const VerifyResult r = verifyBuilder(b, a, false);
  EXPECT_TRUE(verified(r)) << describeCase(a, false);
  return r;
}

TEST(ExchangeCost, XorAlltoAll) {
  for (int n : kCostRanks) {
    const uint64_t c = 7, m = uint64_t(n - 1);
    const VerifyResult r = verifyUniform(builderNamed(Collective::AlltoAll, "xor"),
                                         makeArgs(Collective::AlltoAll, n, c, 2));
    for (const RankCounts& rc : r.counts) {
      EXPECT_EQ(rc.steps, 1 + 2 * m);
      EXPECT_EQ(rc.messagesSent, m);
      EXPECT_EQ(rc.elementsSent, m * c);
    }
    EXPECT_EQ(r.rounds, n > 1 ? 1u : 0u);
  }
}

TEST(ExchangeCost, BruckAlltoAll) {
  for (int n : kCostRanks) {
    const uint64_t c = 3;
    const CollArgs a = makeArgs(Collective::AlltoAll, n, c);
    const VerifyResult r = verifyUniform(builderNamed(Collective::AlltoAll, "bruck"), a);
    uint64_t rounds = 0, moved = 0, copies = 0;
    for (int d = 1; d < n; d <<= 1) {
      uint64_t mb = 0;
      for (int i = 0; i < n; ++i) mb += (i & d) ? 1 : 0;
      ++rounds, moved += mb, copies += 2 * mb + 2;
    }
    for (int rank = 0; rank < n; ++rank) {
      const RankCounts& rc = r.counts[size_t(rank)];
      if (n == 1) {
        EXPECT_EQ(rc.steps, 1u);
        continue;
      }
      EXPECT_EQ(rc.steps, 1 + (rank > 0) + copies + uint64_t(n)) << n;
      EXPECT_EQ(rc.messagesSent, rounds);
      EXPECT_EQ(rc.elementsSent, moved * c);
    }
    EXPECT_EQ(r.rounds, rounds);
    const uint64_t half = (uint64_t(n) + 1) / 2;
    if (n > 1) {
      EXPECT_EQ(buildBruckAlltoAll(a, 0).scratchCount, (uint64_t(n) + 2 * half) * c);
    }
  }
}

TEST(ExchangeCost, HierarchicalAlltoAll) {
  // 3 hosts of 4, 4 and 2 ranks, interleaved.
  const int n = 10;
  const std::vector<int32_t> hosts = {0, 1, 0, 2, 1, 0, 1, 2, 0, 1};
  CollArgs a = makeArgs(Collective::AlltoAll, n, 5);
  a.hostOf = hosts;
  const VerifyResult r = verifyUniform(builderNamed(Collective::AlltoAll, "hierarchical"), a);
  const uint64_t c = 5, row = uint64_t(n) * c;
  const int leaders[] = {0, 1, 3};
  const uint64_t sizes[] = {4, 4, 2};
  for (int h = 0; h < 3; ++h) {
    const uint64_t l = sizes[h];
    const RankCounts& rc = r.counts[size_t(leaders[h])];
    EXPECT_EQ(rc.messagesSent, (l - 1) + 2);
    EXPECT_EQ(rc.elementsSent, (l - 1) * row + l * (uint64_t(n) - l) * c);
    EXPECT_EQ(buildHierarchicalAlltoAll(a, leaders[h]).scratchCount,
              2 * (l - 1) * row + 2 * l * (uint64_t(n) - l) * c);
  }
  const RankCounts& other = r.counts[9];
  EXPECT_EQ(other.steps, 2u);
  EXPECT_EQ(other.messagesSent, 1u);
  EXPECT_EQ(other.elementsSent, row);
  EXPECT_EQ(r.rounds, 3u);
}

TEST(ExchangeCost, IncastAlltoAll) {
  for (int n : kCostRanks) {
    for (int k : kFanIns) {
      for (uint64_t lead : {0, 4, 6, 15}) {  // elements; blocks of 6
        const uint64_t c = 6, m = uint64_t(n - 1);
        const uint64_t kk = uint64_t(std::max(1, std::min(k, n - 1)));
        // Gated and split positions, as the header counts them.
        uint64_t g = 0, s = 0;
        for (uint64_t p = 0; p < m; ++p) {
          g += p / kk > lead / c;
          s += lead % c != 0 && (p / kk + lead / c + 1) * kk + p % kk <= m - 1;
        }
        if (lead == 0) {
          EXPECT_EQ(g, m - std::min(m, kk));
        }
        CollArgs a = makeArgs(Collective::AlltoAll, n, c);
        a.fanIn = k;
        a.fanInLeadBytes = lead * a.elemSize;
        const VerifyResult r = verifyUniform(builderNamed(Collective::AlltoAll, "incast"), a);
        for (const RankCounts& rc : r.counts) {
          EXPECT_EQ(rc.steps, 1 + 2 * m + 3 * g + 2 * s) << n << " " << k << " " << lead;
          EXPECT_EQ(rc.messagesSent, m + g + s);
          EXPECT_EQ(rc.elementsSent, m * c + g);
        }
        EXPECT_EQ(buildIncastAlltoAll(a, 0).scratchCount, g * c);
        if (n > 1 && lead == 0) {
          // A token hop per gated message at most; FIFO order on a channel can add to the
          // chain that the ideal 2·⌈(N−1)/k⌉ − 1 counts.
          EXPECT_GE(r.rounds, 2 * ((m + kk - 1) / kk) - 1) << n << " " << k;
          EXPECT_LE(r.rounds, 2 * m) << n << " " << k;
        }
      }
    }
  }
}

uint64_t depth(int v) {
  uint64_t d = 0;
  for (; v > 0; v = (v - 1) / 2) ++d;
  return d;
}

TEST(ExchangeCost, TreeBroadcastAndReduce) {
  for (int n : kCostRanks) {
    for (int root : {0, n - 1}) {
      const uint64_t c = 100, lanes = 2;
      const CollArgs bc = makeArgs(Collective::Broadcast, n, c, int(lanes), root);
      const CollArgs rd = makeArgs(Collective::Reduce, n, c, int(lanes), root);
      const VerifyResult b = verifyUniform(builderNamed(Collective::Broadcast, "tree"), bc);
      const VerifyResult d = verifyUniform(builderNamed(Collective::Reduce, "tree"), rd);
      for (int r = 0; r < n; ++r) {
        const int v = wrap(r - root, n);
        const uint64_t children = uint64_t((2 * v + 1 < n) + (2 * v + 2 < n));
        const uint64_t l = n == 1 ? 1 : lanes;
        EXPECT_EQ(b.counts[size_t(r)].messagesSent, l * children);
        EXPECT_EQ(b.counts[size_t(r)].elementsSent, c * children);
        EXPECT_EQ(b.counts[size_t(r)].steps, l * (1 + children));
        if (n == 1) continue;
        EXPECT_EQ(d.counts[size_t(r)].steps, l * children + l * (v != 0));
        EXPECT_EQ(d.counts[size_t(r)].messagesSent, v != 0 ? l : 0);
        EXPECT_EQ(d.counts[size_t(r)].elementsSent, v != 0 ? c : 0);
      }
      EXPECT_EQ(b.rounds, depth(n - 1));
      // The second child's sum is combined after the first's, so a level can cost two.
      EXPECT_LE(d.rounds, 2 * depth(n - 1));
    }
  }
}

TEST(ExchangeCost, ScatterAllgatherBroadcast) {
  for (int n : kCostRanks) {
    const uint64_t c = 1000;
    const VerifyResult r = verifyUniform(builderNamed(Collective::Broadcast, "scatter_allgather"),
                                         makeArgs(Collective::Broadcast, n, c, 1, n / 2));
    uint64_t lg = 0;
    while ((1 << lg) < n) ++lg;
    for (int rank = 0; rank < n; ++rank) {
      const RankCounts& rc = r.counts[size_t(rank)];
      // Every non-root receives the buffer exactly once; the root receives nothing.
      EXPECT_EQ(rc.elementsReceived, rank == n / 2 ? 0 : c) << n;
      EXPECT_LE(rc.elementsSent, 2 * c);
    }
    EXPECT_LE(r.rounds, lg + uint64_t(n) - 1);
  }
}

TEST(ExchangeCost, RsagReduce) {
  for (int n : kCostRanks) {
    if (n == 1) continue;
    const uint64_t c = 1000;
    const int root = n - 1;
    const CollArgs a = makeArgs(Collective::Reduce, n, c, 1, root);
    const VerifyResult r = verifyUniform(builderNamed(Collective::Reduce, "rsag"), a);
    const uint64_t m = uint64_t(n - 1);
    for (int rank = 0; rank < n; ++rank) {
      const RankCounts& rc = r.counts[size_t(rank)];
      const uint64_t own = partCount(c, uint64_t(n), 0);
      if (rank == root) {
        EXPECT_EQ(rc.steps, 2 * m + m);
        EXPECT_EQ(rc.messagesSent, m);
        EXPECT_EQ(rc.elementsSent, c - own);
      } else {
        EXPECT_EQ(rc.steps, 2 * m + 1);
        EXPECT_EQ(rc.messagesSent, m + 1);
        EXPECT_EQ(rc.elementsSent, c);
      }
    }
    EXPECT_EQ(r.rounds, uint64_t(n));
  }
}

// ---- Refusals and registry ------------------------------------------------------------------

TEST(ExchangeBuilders, Refusals) {
  const Builder& h = builderNamed(Collective::AlltoAll, "hierarchical");
  ASSERT_NE(h.refuse, nullptr);
  CollArgs a = makeArgs(Collective::AlltoAll, 4, 8);
  EXPECT_EQ(h.refuse(a), "");
  a.hostOf = {0, 0, 1, 1};
  EXPECT_EQ(h.refuse(a), "");
  a.hostOf = {0, 0, 1};
  EXPECT_EQ(h.refuse(a), "hostOf has 3 entries for 4 ranks");
  a.hostOf = {0, 0, 1, 7};
  EXPECT_EQ(h.refuse(a), "hostOf[3] = 7 is not a host index below 4");
  for (Collective c : {Collective::AlltoAll, Collective::AlltoAllv}) {
    const Builder& b = builderNamed(c, "incast");
    ASSERT_NE(b.refuse, nullptr);
    CollArgs f = makeArgs(c, 4, 8);
    f.fanIn = 2;
    EXPECT_EQ(b.refuse(f), "");
    f.fanIn = 0;
    EXPECT_EQ(b.refuse(f), "fanIn is 0; it must be at least 1");
  }
  for (auto [c, name] : {std::pair{Collective::AlltoAll, "xor"}, {Collective::AlltoAll, "bruck"},
                         {Collective::AlltoAllv, "xor"}, {Collective::Broadcast, "tree"},
                         {Collective::Broadcast, "scatter_allgather"}, {Collective::Reduce, "tree"},
                         {Collective::Reduce, "rsag"}}) {
    EXPECT_EQ(builderNamed(c, name).refuse, nullptr) << name;
  }
}

}  // namespace
}  // namespace loom::test
