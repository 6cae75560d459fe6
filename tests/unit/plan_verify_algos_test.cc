// The allreduce, allgather and reduce-scatter algorithms of collectives/builders_reduce.h
// through the symbolic verifier: N = 1..64 and a few large N, awkward counts, in place and
// out of place, host layouts and torus shapes; their cost formulas; refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/builders.h"
#include "collectives/builders_reduce.h"
#include "collectives/plan.h"
#include "base/status.h"
#include "tests/support/plan_test_util.h"
#include "tests/support/verifier.h"

namespace loom::test {
namespace {

using namespace collectives;

constexpr int kMaxRanks = 64;
constexpr int kLargeRanks[] = {128, 256, 1000};
constexpr int kLaneHints[] = {1, 2, 4};

// Builders whose plan depends on a.hostOf (the recursive ones order the ranks host-minor).
bool hostAware(const std::string& name) {
  return name == "hierarchical" || name == "torus" || name == "rhd" || name == "rh" ||
         name == "rd";
}

// Host layouts: `hosts` hosts of equal size, ranks numbered host by host (blocked) or dealt
// round-robin (so a host's ranks are not contiguous).
std::vector<int32_t> hostLayout(int n, int hosts, bool blocked) {
  std::vector<int32_t> of(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) of[size_t(r)] = blocked ? r / (n / hosts) : r % hosts;
  return of;
}

// The argument variants a builder is verified with: every builder gets the plain call; the
// host-aware ones also get 2 and 4 equal hosts (blocked and round-robin) and one rank per
// host; the torus also given shapes (X × Y, 1 × N, N × 1) and one dimension only.
std::vector<CollArgs> variants(const char* name, CollArgs a) {
  std::vector<CollArgs> v = {a};
  const int n = a.nranks;
  const std::string algo = name;
  if (hostAware(algo)) {
    for (int hosts : {2, 4}) {
      if (n % hosts != 0 || n == hosts) continue;
      for (bool blocked : {true, false}) {
        if (!blocked && algo == "torus") continue;
        a.hostOf = hostLayout(n, hosts, blocked);
        v.push_back(a);
      }
    }
    if (algo == "hierarchical" && n > 1) {
      a.hostOf = hostLayout(n, n, true);  // every rank its own host
      v.push_back(a);
    }
    a.hostOf.clear();
  }
  if (algo == "direct") {
    // Arenas of 1 and 3 elements per slot: many chunks, most ranks' slices empty or short.
    for (uint64_t slot : {1, 3}) {
      a.sharedBytes = 2 * uint64_t(n) * slot * a.elemSize;
      v.push_back(a);
    }
    a.sharedBytes = kSweepSharedBytes;
  }
  if (algo == "torus") {
    int d = 2;
    while (d < n && n % d != 0) ++d;
    for (auto [x, y] : {std::pair{d, n / d}, std::pair{1, n}, std::pair{n, 1}, std::pair{0, d}}) {
      if (y == 0 || n % d != 0) continue;
      a.torusX = x, a.torusY = y;
      v.push_back(a);
    }
  }
  return v;
}

std::vector<uint64_t> countsFor(int n) {
  std::vector<uint64_t> c;
  if (n > kMaxRanks) {
    // Fewer elements than ranks, and a large odd count (not at a thousand ranks, where the
    // builders whose messages grow with N take seconds per case).
    c = {uint64_t(n - 1)};
    if (n < 1000) c.push_back(65537);
  } else {
    c = {0, 1, uint64_t(n - 1), uint64_t(n), uint64_t(2 * n + 1), kPrimeCount, kLargeCount};
  }
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// Verifies builder `name` of collective c for N = 1..64 and the large N up to largestN, every
// count of countsFor, every lane hint that changes the plan, every variant, both placements.
void sweep(Collective c, const char* name, int largestN = kLargeRanks[std::size(kLargeRanks) - 1]) {
  const Builder& b = builderNamed(c, name);
  std::vector<int> ranks;
  for (int n = 1; n <= sweepRanksUpTo(kMaxRanks); ++n) ranks.push_back(n);
  for (int n : kLargeRanks) {
    if (n <= largestN && sweepBigRanks()) ranks.push_back(n);
  }
  std::vector<CollArgs> cases;
  for (int n : ranks) {
    for (uint64_t count : countsFor(n)) {
      size_t lanesSeen = 0;
      for (int hint : kLaneHints) {
        if (n > kMaxRanks && hint != 2) continue;
        const size_t lanes = b.build(makeArgs(c, n, count, hint), 0).lanes.size();
        if (lanes == lanesSeen) continue;
        lanesSeen = lanes;
        // Host layouts and torus shapes multiply the cases: they get one lane hint and one
        // count that splits unevenly; a large N gets a near-square layout instead.
        const CollArgs plain = makeArgs(c, n, count, hint);
        std::vector<CollArgs> all = {plain};
        if (hint == 1 && count == uint64_t(2 * n + 1)) {
          all = variants(name, plain);
        } else if (n > kMaxRanks && hostAware(name)) {
          // Rings of a thousand ranks are slow to verify (the ring builders' own test has
          // one); a near-square host layout keeps these plans two-level.
          int hosts = 1;
          for (int d = 1; d * d <= n; ++d) hosts = n % d == 0 ? d : hosts;
          all[0].hostOf = hostLayout(n, hosts, true);
        }
        for (const CollArgs& a : all) {
          if (b.refuse && !b.refuse(a).empty()) {
            ADD_FAILURE() << describeCase(a, false) << "refused: " << b.refuse(a);
            continue;
          }
          cases.push_back(a);
        }
      }
    }
  }
  // Largest first, so that the slowest cases do not end up alone at the end.
  std::stable_sort(cases.begin(), cases.end(),
                   [](const CollArgs& x, const CollArgs& y) { return x.nranks > y.nranks; });
  EXPECT_EQ(verifyCases(b, cases), "");
}

TEST(PlanVerifyAlgos, TreeAllReduce) { sweep(Collective::AllReduce, "tree"); }
TEST(PlanVerifyAlgos, RhdAllReduce) { sweep(Collective::AllReduce, "rhd"); }
TEST(PlanVerifyAlgos, RdAllReduce) { sweep(Collective::AllReduce, "rd"); }
TEST(PlanVerifyAlgos, TorusAllReduce) { sweep(Collective::AllReduce, "torus"); }
TEST(PlanVerifyAlgos, HierarchicalAllReduce) { sweep(Collective::AllReduce, "hierarchical"); }
// Direct plans have about N² steps per chunk: a thousand ranks would take minutes.
TEST(PlanVerifyAlgos, DirectAllReduce) { sweep(Collective::AllReduce, "direct", 256); }
TEST(PlanVerifyAlgos, DirectAllGather) { sweep(Collective::AllGather, "direct", 256); }
// Peer plans have about 2N steps per rank, N² in all.
TEST(PlanVerifyAlgos, PeerAllReduce) { sweep(Collective::AllReduce, "peer", 256); }
TEST(PlanVerifyAlgos, PeerAllGather) { sweep(Collective::AllGather, "peer", 256); }
TEST(PlanVerifyAlgos, PeerReduceScatter) { sweep(Collective::ReduceScatter, "peer", 256); }
TEST(PlanVerifyAlgos, RdAllGather) { sweep(Collective::AllGather, "rd"); }
TEST(PlanVerifyAlgos, BruckAllGather) { sweep(Collective::AllGather, "bruck"); }
TEST(PlanVerifyAlgos, HierarchicalAllGather) { sweep(Collective::AllGather, "hierarchical"); }
TEST(PlanVerifyAlgos, RhReduceScatter) { sweep(Collective::ReduceScatter, "rh"); }
TEST(PlanVerifyAlgos, HierarchicalReduceScatter) {
  sweep(Collective::ReduceScatter, "hierarchical");
}

// ---- Refusals -------------------------------------------------------------------------------

TEST(PlanVerifyAlgos, TorusRefusesShapesThatDoNotFit) {
  const Builder& b = builderNamed(Collective::AllReduce, "torus");
  CollArgs a = makeArgs(Collective::AllReduce, 8, 100);
  a.torusX = 3, a.torusY = 3;
  EXPECT_EQ(b.refuse(a), "torus: grid 3x3 does not fit 8 ranks (X·Y must equal N)");
  a.torusX = 3, a.torusY = 0;
  EXPECT_EQ(b.refuse(a), "torus: grid 3x0 does not fit 8 ranks (X·Y must equal N)");
  a.torusX = -2, a.torusY = 4;
  EXPECT_EQ(b.refuse(a), "torus: dimensions -2x4 must be positive");
  // Derived shapes always fit: near-square, from hosts, and a prime N becomes a ring.
  int x = 0, y = 0;
  a.torusX = a.torusY = 0;
  EXPECT_EQ(b.refuse(a), "");
  EXPECT_EQ(torusShape(a, &x, &y), "");
  EXPECT_EQ(x * 10 + y, 42);
  a.hostOf = hostLayout(8, 4, true);
  EXPECT_EQ(torusShape(a, &x, &y), "");
  EXPECT_EQ(x * 10 + y, 24);
  a = makeArgs(Collective::AllReduce, 13, 100);
  EXPECT_EQ(torusShape(a, &x, &y), "");
  EXPECT_EQ(x * 100 + y, 1301);
}

TEST(PlanVerifyAlgos, HierarchicalRefusesUnequalHosts) {
  for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter}) {
    const Builder& b = builderNamed(c, "hierarchical");
    CollArgs a = makeArgs(c, 4, 100);
    EXPECT_EQ(b.refuse(a), "");  // one host
    a.hostOf = {0, 0, 0, 1};
    EXPECT_EQ(b.refuse(a),
              "hierarchical needs the same number of ranks on every host, but host 0 has 3 and "
              "host 1 has 1; use another algorithm");
    a.hostOf = {0, 1, 0};
    EXPECT_EQ(b.refuse(a), "hierarchical: hostOf has 3 entries for 4 ranks");
    a.hostOf = {0, 1, 1, 0};
    EXPECT_EQ(b.refuse(a), "");
  }
}

// The arena's algorithms (refuseOffHost) alike; direct also needs room for its slots.
TEST(PlanVerifyAlgos, DirectAndPeerRefuseSeveralHostsAndNoArena) {
  for (const char* name : {"direct", "peer"}) {
    const Builder& b = builderNamed(Collective::AllReduce, name);
    CollArgs a = makeArgs(Collective::AllReduce, 4, 100);
    EXPECT_EQ(b.refuse(a), "");
    a.hostOf = {0, 0, 0, 0};
    EXPECT_EQ(b.refuse(a), "");
    for (auto [layout, other] : {std::pair{std::vector<int32_t>{0, 0, 1, 0}, 2},
                                 std::pair{std::vector<int32_t>{0, 1, 0, 0}, 1}}) {
      a.hostOf = layout;
      EXPECT_EQ(b.refuse(a), strprintf("%s needs every rank on one host, but ranks 0 and %d are "
                                       "on different hosts; use another algorithm",
                                       name, other));
    }
    a.hostOf.clear();
    a.sharedBytes = 0;
    EXPECT_EQ(b.refuse(a), strprintf("%s: no shared-memory arena (LOOM_SHM_DIRECT_BYTES is 0, or "
                                     "LOOM_TRANSPORT=tcp)",
                                     name));
  }
  const Builder& b = builderNamed(Collective::AllReduce, "direct");
  CollArgs a = makeArgs(Collective::AllReduce, 4, 100);
  a.sharedBytes = 2 * 4 * 4 - 1;  // one float short of a slot each
  EXPECT_EQ(b.refuse(a),
            "direct: 31 bytes of arena per call cannot hold 2 x 4 slots of 1 4-byte "
            "element(s); raise LOOM_SHM_DIRECT_BYTES");
  a.sharedBytes = 2 * 4 * 4;
  EXPECT_EQ(b.refuse(a), "");
  // An alltoall slot holds a piece of every block: one element per rank at least.
  const Builder& alltoall = builderNamed(Collective::AlltoAll, "direct");
  a = makeArgs(Collective::AlltoAll, 4, 100);
  a.sharedBytes = 2 * 4 * 4 * 4 - 1;
  EXPECT_EQ(alltoall.refuse(a),
            "direct: 127 bytes of arena per call cannot hold 2 x 4 slots of 4 4-byte "
            "element(s); raise LOOM_SHM_DIRECT_BYTES");
  a.sharedBytes = 2 * 4 * 4 * 4;
  EXPECT_EQ(alltoall.refuse(a), "");
  // One rank needs no arena: its plan is a Copy.
  a = makeArgs(Collective::AllReduce, 1, 100);
  a.sharedBytes = 0;
  EXPECT_EQ(b.refuse(a), "");
  EXPECT_TRUE(verified(verifyBuilder(b, a, false)));
}

// ---- Cost formulas (collectives/builders_reduce.h) ------------------------------------------

constexpr int kCostRanks[] = {1, 2, 3, 5, 6, 8, 13, 16, 64};

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}
int floorLog2(int n) { return ceilLog2(n + 1) - 1; }

void expectCounts(const VerifyResult& r, int rank, uint64_t steps, uint64_t messages,
                  uint64_t elements, const std::string& what) {
  ASSERT_TRUE(r.ok) << what << r.message;
  const RankCounts& c = r.counts[size_t(rank)];
  EXPECT_EQ(c.steps, steps) << what << "rank " << rank;
  EXPECT_EQ(c.messagesSent, messages) << what << "rank " << rank;
  EXPECT_EQ(c.elementsSent, elements) << what << "rank " << rank;
}

TEST(PlanCostAlgos, TreeAllReduce) {
  for (int n : kCostRanks) {
    for (int hint : kLaneHints) {
      const uint64_t count = 4 * kPrimeCount;
      const CollArgs a = makeArgs(Collective::AllReduce, n, count, hint);
      const VerifyResult r = verifyBuilder(builderNamed(a.coll, "tree"), a, false);
      const int lanes = n == 1 ? 1 : std::max(2, hint);
      for (int rank = 0; rank < n; ++rank) {
        uint64_t steps = 0, messages = 0, elements = 0;
        for (int l = 0; l < lanes && n > 1; ++l) {
          uint64_t links = treeParent(n, l % 2, rank) >= 0;
          for (int c = 0; c < n; ++c) links += treeParent(n, l % 2, c) == rank;
          steps += 2 * links, messages += links;
          elements += links * partCount(count, uint64_t(lanes), uint64_t(l));
        }
        expectCounts(r, rank, n == 1 ? 1 : steps, messages, elements, describeCase(a, false));
        // Every rank is interior (has children) in at most one tree, rank 0 aside for odd N.
        int interior = 0;
        for (int t = 0; t < 2 && n > 1; ++t) {
          for (int c = 0; c < n; ++c) interior += treeParent(n, t, c) == rank ? 1 << t : 0;
        }
        if (rank != 0 || n % 2 == 0) {
          EXPECT_NE(interior, 3) << describeCase(a, false) << "rank " << rank;
        }
      }
      EXPECT_GE(r.rounds, 2 * uint64_t(ceilLog2(n))) << describeCase(a, false);
      EXPECT_LE(r.rounds, 4 * uint64_t(ceilLog2(n))) << describeCase(a, false);
    }
  }
}

// The fold's share of a cost: a folded-out rank, its partner, or a rank without a pair.
enum class FoldRole { Out, Partner, None };
FoldRole foldRole(int n, int rank) {
  const int extra = n - (1 << floorLog2(n));
  if (rank >= 2 * extra) return FoldRole::None;
  return rank % 2 == 0 ? FoldRole::Out : FoldRole::Partner;
}

TEST(PlanCostAlgos, RhdAndRdAllReduce) {
  for (int n : kCostRanks) {
    const int lg = floorLog2(n), p = 1 << lg;
    const bool folded = p != n;
    for (int hint : kLaneHints) {
      const int lanes = n == 1 ? 1 : hint;
      const uint64_t count = uint64_t(p * lanes) * 37;  // p·L divides it
      const CollArgs a = makeArgs(Collective::AllReduce, n, count, hint);
      const VerifyResult rhd = verifyBuilder(builderNamed(a.coll, "rhd"), a, false);
      const VerifyResult rd = verifyBuilder(builderNamed(a.coll, "rd"), a, false);
      for (int rank = 0; rank < n && n > 1; ++rank) {
        const FoldRole role = foldRole(n, rank);
        const uint64_t extra = role == FoldRole::Partner;
        if (role == FoldRole::Out) {
          expectCounts(rhd, rank, 2 * uint64_t(lanes), lanes, count, describeCase(a, false));
          expectCounts(rd, rank, 2 * uint64_t(lanes), lanes, count, describeCase(a, false));
          continue;
        }
        expectCounts(rhd, rank, (4 * lg + 2 * extra) * lanes, (2 * lg + extra) * lanes,
                     2 * uint64_t(p - 1) * count / p + extra * count, describeCase(a, false));
        expectCounts(rd, rank, (3 * lg + (lg == 1) + 2 * extra) * lanes, (lg + extra) * lanes,
                     (lg + extra) * count, describeCase(a, false));
      }
      EXPECT_EQ(rhd.rounds, 2 * uint64_t(lg) + 2 * folded) << describeCase(a, false);
      EXPECT_EQ(rd.rounds, uint64_t(lg) + 2 * folded) << describeCase(a, false);
      EXPECT_EQ(buildRdAllReduce(a, n - 1).scratchCount, uint64_t(std::min(lg, 2)) * count);
    }
  }
}

TEST(PlanCostAlgos, RdBruckAndRh) {
  for (int n : kCostRanks) {
    const int lg = floorLog2(n), p = 1 << lg;
    const uint64_t count = 37;
    const CollArgs ag = makeArgs(Collective::AllGather, n, count, 2);
    const CollArgs rs = makeArgs(Collective::ReduceScatter, n, count, 2);
    const VerifyResult rd = verifyBuilder(builderNamed(ag.coll, "rd"), ag, false);
    const VerifyResult bruck = verifyBuilder(builderNamed(ag.coll, "bruck"), ag, false);
    const VerifyResult rh = verifyBuilder(builderNamed(rs.coll, "rh"), rs, false);
    const uint64_t sent = uint64_t(n - 1) * count;
    for (int rank = 0; rank < n; ++rank) {
      const uint64_t rotation = n == 1 ? 0 : rank == 0 || rank == n - 1 ? 1 : 2;
      expectCounts(bruck, rank, n == 1 ? 1 : 2 + 2 * ceilLog2(n) + rotation, ceilLog2(n), sent,
                   describeCase(ag, false));
      if (p != n) continue;  // the formulas below are for powers of two
      expectCounts(rd, rank, 1 + 2 * uint64_t(lg), lg, sent, describeCase(ag, false));
      expectCounts(rh, rank, n == 1 ? 1 : 2 * uint64_t(lg), lg, sent, describeCase(rs, false));
    }
    EXPECT_LE(bruck.rounds, uint64_t(ceilLog2(n)));
    EXPECT_GE(bruck.rounds, uint64_t(floorLog2(n)));
    EXPECT_EQ(buildBruckAllGather(ag, 0).scratchCount, n > 1 ? n * count : 0);
    EXPECT_EQ(buildRhReduceScatter(rs, 0).scratchCount, n > 2 ? n * count : 0);
    if (p == n) {
      EXPECT_EQ(rd.rounds, uint64_t(lg));
      EXPECT_EQ(rh.rounds, uint64_t(lg));
    } else {
      EXPECT_GE(rd.rounds, uint64_t(lg) + 1);  // the fold adds one or two
      EXPECT_LE(rd.rounds, uint64_t(lg) + 2);
      EXPECT_EQ(rh.rounds, uint64_t(lg) + 2);
    }
  }
}

// On H hosts of M ranks (N = H·M a power of two), the recursive builders order the ranks
// host-minor: the exchanges that cross hosts are the small ones. Per rank, across hosts:
// rd allgather and rh reduce-scatter (H−1)·count elements (host-major order: M times that),
// rhd allreduce 2(H−1)·count/N; the messages and elements in all stay those of the plain plan.
TEST(PlanCostAlgos, RecursiveBuildersCrossHostsWithTheSmallestMessages) {
  for (auto [hosts, m] : {std::pair{2, 2}, std::pair{2, 4}, std::pair{4, 2}, std::pair{4, 4},
                          std::pair{8, 2}}) {
    const int n = hosts * m;
    const uint64_t count = uint64_t(n) * 5;
    // Blocked, and a scattered layout: host of rank r is (3r + r/hosts) mod hosts.
    std::vector<int32_t> scattered(size_t(n), 0);
    for (int r = 0; r < n; ++r) scattered[size_t(r)] = (3 * r + r / hosts) % hosts;
    for (const auto& layout : {hostLayout(n, hosts, true), scattered}) {
      for (auto [coll, name, crossing] :
           {std::tuple{Collective::AllGather, "rd", uint64_t(hosts - 1) * count},
            std::tuple{Collective::ReduceScatter, "rh", uint64_t(hosts - 1) * count},
            std::tuple{Collective::AllReduce, "rhd", 2 * uint64_t(hosts - 1) * count / n}}) {
        CollArgs a = makeArgs(coll, n, count, 1);
        a.hostOf = layout;
        const Builder& b = builderNamed(coll, name);
        const VerifyResult plain = verifyBuilder(b, makeArgs(coll, n, count, 1), false);
        const VerifyResult ordered = verifyBuilder(b, a, false);
        ASSERT_TRUE(ordered.ok) << describeCase(a, false) << ordered.message;
        EXPECT_EQ(ordered.rounds, plain.rounds) << describeCase(a, false);
        for (int rank = 0; rank < n; ++rank) {
          uint64_t across = 0;
          const RankPlan plan = b.build(a, rank);
          for (const Step& s : plan.lanes[0].steps) {
            if (s.kind == StepKind::Send && layout[size_t(s.peer)] != layout[size_t(rank)]) {
              across += s.src.count;
            }
          }
          EXPECT_EQ(across, crossing) << describeCase(a, false) << " rank " << rank;
          EXPECT_EQ(ordered.counts[size_t(rank)].messagesSent,
                    plain.counts[size_t(rank)].messagesSent);
          EXPECT_EQ(ordered.counts[size_t(rank)].elementsSent,
                    plain.counts[size_t(rank)].elementsSent);
        }
      }
    }
  }
}

// The grid allreduce's elements sent per lane (builders_reduce.h, torus).
uint64_t gridElements(uint64_t len, int x, int y, int xi, int yi) {
  auto c = [&](int i) { return partCount(len, uint64_t(x), uint64_t(((i % x) + x) % x)); };
  const uint64_t m = c(xi + 1);
  auto d = [&](int j) { return partCount(m, uint64_t(y), uint64_t(((j % y) + y) % y)); };
  return (len - c(xi + 1)) + (len - c(xi + 2)) + 2 * m - d(yi + 1) - d(yi + 2);
}

TEST(PlanCostAlgos, TorusAndHierarchicalAllReduce) {
  for (auto [x, y] : {std::pair{1, 1}, std::pair{1, 5}, std::pair{4, 1}, std::pair{2, 3},
                      std::pair{4, 4}, std::pair{8, 2}}) {
    const int n = x * y;
    for (int hint : kLaneHints) {
      const int lanes = n == 1 ? 1 : hint;
      for (uint64_t count : {uint64_t(n * lanes * 7), kPrimeCount * 3}) {
        CollArgs a = makeArgs(Collective::AllReduce, n, count, hint);
        a.torusX = x, a.torusY = y;
        const VerifyResult torus = verifyBuilder(builderNamed(a.coll, "torus"), a, false);
        CollArgs h = makeArgs(Collective::AllReduce, n, count, hint);
        h.hostOf = hostLayout(n, y, false);  // round-robin: local index r / y, host r % y
        const VerifyResult hier = verifyBuilder(builderNamed(h.coll, "hierarchical"), h, false);
        for (int rank = 0; rank < n; ++rank) {
          uint64_t torusElems = 0, hierElems = 0;
          for (int l = 0; l < lanes; ++l) {
            const uint64_t len = partCount(count, uint64_t(lanes), uint64_t(l));
            torusElems += gridElements(len, x, y, rank % x, rank / x);
            hierElems += gridElements(len, x, y, rank / y, rank % y);
          }
          const uint64_t steps = n == 1 ? 1 : (4 * uint64_t(x - 1) + 4 * uint64_t(y - 1)) * lanes;
          const uint64_t messages = (2 * uint64_t(x - 1) + 2 * uint64_t(y - 1)) * lanes;
          expectCounts(torus, rank, steps, messages, torusElems, describeCase(a, false));
          expectCounts(hier, rank, steps, messages, hierElems, describeCase(h, false));
        }
        EXPECT_EQ(torus.rounds, 2 * uint64_t(x - 1) + 2 * uint64_t(y - 1))
            << describeCase(a, false);
        EXPECT_EQ(hier.rounds, 2 * uint64_t(x - 1) + 2 * uint64_t(y - 1)) << describeCase(h, false);
      }
    }
  }
}

TEST(PlanCostAlgos, HierarchicalAllGatherAndReduceScatter) {
  for (auto [m, hosts] :
       {std::pair{1, 1}, std::pair{3, 1}, std::pair{1, 4}, std::pair{2, 2}, std::pair{3, 4}}) {
    const int n = m * hosts;
    for (int hint : kLaneHints) {
      const int lanes = n == 1 ? 1 : hint;
      const uint64_t count = 101;
      CollArgs ag = makeArgs(Collective::AllGather, n, count, hint);
      ag.hostOf = hostLayout(n, hosts, true);
      CollArgs rs = ag;
      rs.coll = Collective::ReduceScatter;
      const VerifyResult g = verifyBuilder(builderNamed(ag.coll, "hierarchical"), ag, false);
      const VerifyResult s = verifyBuilder(builderNamed(rs.coll, "hierarchical"), rs, false);
      const uint64_t messages = uint64_t(hosts - 1) + uint64_t(hosts) * (m - 1);
      for (int rank = 0; rank < n; ++rank) {
        expectCounts(g, rank, (1 + 2 * messages) * lanes, messages * lanes, messages * count,
                     describeCase(ag, false));
        expectCounts(s, rank, n == 1 ? 1 : 2 * messages * lanes, messages * lanes, messages * count,
                     describeCase(rs, false));
      }
      EXPECT_EQ(buildHierarchicalReduceScatter(rs, 0).scratchCount,
                n > 1 ? uint64_t(3 * hosts + 2) * count : 0);
    }
  }
}

TEST(PlanCostAlgos, DirectAllReduce) {
  for (int n : kCostRanks) {
    const Builder& b = builderNamed(Collective::AllReduce, "direct");
    // One-shot: fits a slot and 16 KiB. Chunked: a 16 KiB buffer through slots of 64 floats
    // (one line past 16 KiB for a single chunk would also do, but this takes many chunks).
    for (auto [count, slot] : {std::pair<uint64_t, uint64_t>{1000, 0},
                               {4096, 64},
                               {4097, 64},
                               {kPrimeCount, 16},
                               {uint64_t(5000), 0}}) {
      CollArgs a = makeArgs(Collective::AllReduce, n, count);
      if (slot > 0) a.sharedBytes = 2 * uint64_t(n) * slot * a.elemSize;
      const VerifyResult r = verifyBuilder(b, a, false);
      ASSERT_TRUE(r.ok) << describeCase(a, false) << r.message;
      const uint64_t s = a.sharedBytes / a.elemSize / 2 / uint64_t(n) / 16 * 16;
      const bool oneShot = count <= s && count * a.elemSize <= (16 << 10);
      const uint64_t chunks = (count + s - 1) / s;
      for (int rank = 0; rank < n; ++rank) {
        uint64_t steps = 0, barriers = 0;
        if (n == 1) {
          steps = 1;
        } else if (oneShot) {
          steps = uint64_t(n) + 2, barriers = 1;
        } else {
          steps = 4 * chunks, barriers = 2 * chunks;
          for (uint64_t k = 0; k < chunks; ++k) {
            const uint64_t len = std::min(s, count - k * s);
            if (partCount(len, uint64_t(n), uint64_t(rank)) > 0) steps += uint64_t(n - 1);
          }
        }
        expectCounts(r, rank, steps, 0, 0, describeCase(a, false));
        EXPECT_EQ(r.counts[size_t(rank)].barriers, barriers) << describeCase(a, false);
        EXPECT_EQ(r.rounds, barriers) << describeCase(a, false);
      }
      EXPECT_EQ(buildDirectAllReduce(a, 0).scratchCount, 0u);
    }
  }
}

// Allgather and alltoall through the arena: chunks of S (allgather) or ⌊S/N⌋ (alltoall)
// elements per block, one barrier each.
// builders_reduce.h: 3 barriers + 1 + 2(N−1) steps for allreduce (every slice non-empty),
// N + 2 for reduce-scatter, allgather, alltoall and the root of reduce and gather, 3 for
// broadcast and scatter, 2 for a non-root of reduce and gather; no messages; every barrier a
// round; one Copy for N = 1.
TEST(PlanCostAlgos, PeerReads) {
  for (int n : kCostRanks) {
    for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                         Collective::AlltoAll, Collective::Broadcast, Collective::Reduce,
                         Collective::Gather, Collective::Scatter}) {
      const Builder& b = builderNamed(c, "peer");
      CollArgs a = makeArgs(c, n, kPrimeCount);
      a.root = n / 2;
      for (bool inPlace : {false, true}) {
        if (inPlace && c == Collective::AlltoAll) continue;  // runs on a copy of its input
        const VerifyResult r = verifyBuilder(b, a, inPlace);
        ASSERT_TRUE(r.ok) << describeCase(a, inPlace) << r.message;
        const uint64_t barriers = n == 1 ? 0 : c == Collective::AllReduce ? 3 : 2;
        EXPECT_EQ(r.rounds, barriers) << describeCase(a, inPlace);
        for (int rank = 0; rank < n; ++rank) {
          uint64_t steps = uint64_t(n) + 2;
          const bool rootOnly = c == Collective::Reduce || c == Collective::Gather;
          if (n == 1) steps = 1;
          else if (c == Collective::AllReduce) steps = 2 * uint64_t(n) + 2;
          else if (c == Collective::Broadcast || c == Collective::Scatter) steps = 3;
          else if (rootOnly && rank != a.root) steps = 2;
          expectCounts(r, rank, steps, 0, 0, describeCase(a, inPlace));
          EXPECT_EQ(r.counts[size_t(rank)].barriers, barriers);
        }
      }
    }
  }
}

TEST(PlanCostAlgos, DirectAllGatherAndAlltoAll) {
  for (int n : kCostRanks) {
    for (Collective c : {Collective::AllGather, Collective::AlltoAll}) {
      const Builder& b = builderNamed(c, "direct");
      for (auto [count, slot] : {std::pair<uint64_t, uint64_t>{1000, 0},
                                 {4096, 64},
                                 {4097, 64},
                                 {kPrimeCount, 16}}) {
        CollArgs a = makeArgs(c, n, count);
        if (slot > 0) a.sharedBytes = 2 * uint64_t(n) * uint64_t(n) * slot * a.elemSize;
        const VerifyResult r = verifyBuilder(b, a, false);
        ASSERT_TRUE(r.ok) << describeCase(a, false) << r.message;
        const uint64_t s = a.sharedBytes / a.elemSize / 2 / uint64_t(n) / 16 * 16;
        const uint64_t perChunk = c == Collective::AlltoAll ? s / uint64_t(n) : s;
        const uint64_t chunks = n == 1 ? 0 : (count + perChunk - 1) / perChunk;
        const uint64_t perChunkSteps = c == Collective::AlltoAll ? 2 * uint64_t(n) - 1 : n + 1;
        for (int rank = 0; rank < n; ++rank) {
          expectCounts(r, rank, 1 + chunks * perChunkSteps, 0, 0, describeCase(a, false));
          EXPECT_EQ(r.counts[size_t(rank)].barriers, chunks) << describeCase(a, false);
        }
        EXPECT_EQ(r.rounds, chunks) << describeCase(a, false);
        EXPECT_EQ(b.build(a, 0).scratchCount, 0u);
      }
    }
  }
}

TEST(PlanBuildersAlgos, Registered) {
  for (auto [c, name] :
       {std::pair{Collective::AllReduce, "tree"}, std::pair{Collective::AllReduce, "rhd"},
        std::pair{Collective::AllReduce, "rd"}, std::pair{Collective::AllReduce, "torus"},
        std::pair{Collective::AllReduce, "hierarchical"},
        std::pair{Collective::AllReduce, "direct"}, std::pair{Collective::AllGather, "direct"},
        std::pair{Collective::AlltoAll, "direct"}, std::pair{Collective::AllGather, "rd"},
        std::pair{Collective::AllGather, "bruck"}, std::pair{Collective::AllGather, "hierarchical"},
        std::pair{Collective::AllGather, "pairwise"},
        std::pair{Collective::ReduceScatter, "rh"},
        std::pair{Collective::ReduceScatter, "hierarchical"}}) {
    const Builder* b = findBuilder(c, name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(b->build(makeArgs(c, 5, 10), 2).algorithm, name);
  }
}

}  // namespace
}  // namespace loom::test
