// The alltoall(v), broadcast and reduce algorithms of collectives/builders_exchange.h, forced
// through loomConfig_t.algorithms, run by forked ranks over shm and tcp and checked bit for
// bit; hierarchical and incast alltoall also across two network-namespace hosts.
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/origin_blocks.h"
#include "tests/support/rank_sets.h"
#include "tests/support/two_hosts.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

const loomDataType_t kTypes[] = {loomInt8,    loomUint8,   loomInt32,   loomUint32,
                                 loomInt64,   loomUint64,  loomFloat16, loomBfloat16,
                                 loomFloat32, loomFloat64, loomFloat8e4m3, loomFloat8e5m2};
const loomRedOp_t kOps[] = {loomSum, loomProd, loomMin, loomMax, loomAvg};
constexpr uint64_t kTypeCount = 1001;  // per block: odd, so no split comes out even
const uint64_t kFp32Counts[] = {0, 1, 7, uint64_t(1) << 16};

// Which collectives a forced configuration exercises: only those whose algorithm it forces,
// so that no time goes into re-testing the defaults.
enum : unsigned { kAlltoAll = 1, kAlltoAllv = 2, kBroadcast = 4, kReduce = 8, kAll = 15 };

// One communicator each. Every builder of builders_exchange.h appears at least once; pairwise
// alltoallv rides along because it is the third builder registered for alltoallv.
struct Forced {
  const char* algorithms;
  int fanIn;  // LOOM_ALLTOALL_FANIN, read when the communicator is created
  unsigned colls;
  int lead = -1;  // LOOM_ALLTOALL_LEAD (bytes; -1: the model's round trip)
};
const Forced kForced[] = {
    {"alltoall=xor,alltoallv=xor,broadcast=tree,reduce=tree", 1, kAll},
    {"alltoall=bruck,alltoallv=pairwise,broadcast=scatter_allgather,reduce=rsag", 1, kAll},
    {"alltoall=hierarchical", 1, kAlltoAll},
    {"alltoall=direct", 1, kAlltoAll},
    {"alltoall=peer,broadcast=peer,reduce=peer", 1, kAll & ~kAlltoAllv},
    // No lead (every turn waits for the whole previous message); 12 bytes (messages split
    // short of their end, small ones not gated); the model's.
    {"alltoall=incast,alltoallv=incast", 1, kAlltoAll | kAlltoAllv, 0},
    {"alltoall=incast,alltoallv=incast", 2, kAlltoAll | kAlltoAllv, 12},
    {"alltoall=incast,alltoallv=incast", 4, kAlltoAll | kAlltoAllv},
};

// Runs the cases of one communicator and collects their failures on stderr.
class Cases : public CaseLog {
 public:
  Cases(loomComm_t comm, int rank, int n, std::string label)
      : CaseLog(rank, n, std::move(label)), comm_(comm) {}

  void alltoall(loomDataType_t t, uint64_t count, bool inPlace) {
    const std::string what = strprintf("alltoall %s count %llu %s", typeName(t),
                                       (unsigned long long)count, placeName(inPlace));
    const uint64_t block = count * typeSize(t);
    std::vector<char> in = guardedBuffer(block * n_), out = guardedBuffer(block * n_);
    for (int j = 0; j < n_; ++j) fillOrigin(in.data() + j * block, block, rank_, j);
    std::vector<char>& dst = inPlace ? in : out;
    if (!call(what, loomAlltoAll(in.data(), dst.data(), count, t, comm_, nullptr))) return;
    for (int j = 0; j < n_; ++j) {
      if (!isOrigin(dst.data() + j * block, block, j, rank_)) {
        return fail(what, strprintf("block from rank %d is wrong", j));
      }
    }
    if (!guardIntact(dst)) fail(what, "wrote past recvbuff");
  }

  // Skewed counts in units of `unit` elements: zero blocks wherever (s + 2d + salt) % 4 == 0,
  // and rank 0 a hot receiver that gets extra from every odd rank. Blocks are laid out with
  // gaps (send blocks in reverse peer order), which must stay untouched.
  void alltoallv(loomDataType_t t, uint64_t unit) {
    const std::string what =
        strprintf("alltoallv %s unit %llu", typeName(t), (unsigned long long)unit);
    const size_t es = typeSize(t);
    const uint64_t salt = unit % 4;
    auto cnt = [&](int s, int d) -> uint64_t {
      return (uint64_t(s + 2 * d) + salt) % 4 * unit + (d == 0 && s % 2 == 1 ? 2 * unit : 0);
    };
    std::vector<size_t> sc(n_), sd(n_), rc(n_), rd(n_);
    size_t inTotal = 0, outTotal = 0;
    for (int k = 0; k < n_; ++k) {
      const int j = n_ - 1 - k;
      sc[j] = cnt(rank_, j), sd[j] = inTotal, inTotal += sc[j] + 3;
      rc[k] = cnt(k, rank_), rd[k] = outTotal, outTotal += rc[k] + 1;
    }
    std::vector<char> in = guardedBuffer(inTotal * es), out = guardedBuffer(outTotal * es);
    for (int j = 0; j < n_; ++j) fillOrigin(in.data() + sd[j] * es, sc[j] * es, rank_, j);
    if (!call(what, loomAlltoAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(),
                                  rd.data(), t, comm_, nullptr))) {
      return;
    }
    for (int j = 0; j < n_; ++j) {
      const char* block = out.data() + rd[j] * es;
      if (!isOrigin(block, rc[j] * es, j, rank_)) {
        return fail(what, strprintf("block from rank %d (%zu elements) is wrong", j, rc[j]));
      }
      if (!isUntouched(block + rc[j] * es, es)) {
        return fail(what, strprintf("the gap after block %d was written", j));
      }
    }
    if (!guardIntact(out)) fail(what, "wrote past recvbuff");
  }

  void broadcast(loomDataType_t t, uint64_t count, bool inPlace, int root) {
    const std::string what = strprintf("broadcast %s count %llu %s root %d", typeName(t),
                                       (unsigned long long)count, placeName(inPlace), root);
    const uint64_t bytes = count * typeSize(t);
    std::vector<char> in = guardedBuffer(bytes), out = guardedBuffer(bytes);
    if (rank_ == root) fillOrigin(in.data(), bytes, root, root);
    std::vector<char>& dst = inPlace ? in : out;
    if (!call(what, loomBroadcast(in.data(), dst.data(), count, t, root, comm_, nullptr))) return;
    if (!isOrigin(dst.data(), bytes, root, root)) return fail(what, "wrong data");
    if (!guardIntact(dst)) fail(what, "wrote past recvbuff");
  }

  void reduce(loomDataType_t t, loomRedOp_t op, uint64_t count, bool inPlace, int root) {
    const std::string what =
        strprintf("reduce %s %s count %llu %s root %d", typeName(t), opNameOf(op),
                  (unsigned long long)count, placeName(inPlace), root);
    const uint64_t bytes = count * typeSize(t);
    std::vector<char> in = guardedBuffer(bytes), out = guardedBuffer(bytes);
    fillInput(in.data(), count, op, t, n_, rank_);
    std::vector<char>& dst = inPlace ? in : out;
    if (!call(what, loomReduce(in.data(), dst.data(), count, t, op, root, comm_, nullptr))) {
      return;
    }
    if (rank_ == root) {
      uint64_t firstBad = 0;
      const uint64_t bad = countReductionErrors(dst.data(), count, op, t, n_, 0, &firstBad);
      if (bad) {
        return fail(what, strprintf("%llu wrong elements at the root, first at %llu",
                                    (unsigned long long)bad, (unsigned long long)firstBad));
      }
    } else if (!inPlace && !isUntouched(out.data(), bytes)) {
      return fail(what, "a non-root's recvbuff was written");
    }
    if (!guardIntact(in) || !guardIntact(out)) fail(what, "wrote past a buffer");
  }

 private:
  static const char* placeName(bool inPlace) { return inPlace ? "in place" : "out of place"; }

  bool call(const std::string& what, loomResult_t rc) {
    if (rc == loomSuccess) return true;
    fail(what, strprintf("%s: %s", loomGetErrorString(rc), loomGetLastError(comm_)));
    return false;
  }

  loomComm_t comm_;
};

// Roots 0, a middle one and N−1, without repeats.
std::vector<int> rootsFor(int n) {
  std::vector<int> roots = {0};
  if (n / 2 != 0) roots.push_back(n / 2);
  if (n - 1 != n / 2) roots.push_back(n - 1);
  return roots;
}

// Every dtype at kTypeCount, then fp32 at kFp32Counts: the (dtype, count) pairs each case
// runs with.
std::vector<std::pair<loomDataType_t, uint64_t>> typesAndCounts() {
  std::vector<std::pair<loomDataType_t, uint64_t>> out;
  for (loomDataType_t t : kTypes) out.emplace_back(t, kTypeCount);
  for (uint64_t c : kFp32Counts) out.emplace_back(loomFloat32, c);
  return out;
}

// The op of the index-th reduce case (values.h keeps every op exact for every type).
loomRedOp_t opFor(loomDataType_t /*t*/, size_t index) { return kOps[index % 5]; }

// One communicator with f's algorithms and fan-in; runs its cases. transport null: auto.
// Returns the number of failed cases (or 1 if the communicator could not be made).
int runForced(RankContext& ctx, const Forced& f, const char* transport) {
  const int n = ctx.nranks(), rank = ctx.rank();
  // The communicator reads its fan-in and lead from the parameters when it is created.
  setenv("LOOM_ALLTOALL_FANIN", std::to_string(f.fanIn).c_str(), 1);
  setenv("LOOM_ALLTOALL_LEAD", std::to_string(f.lead).c_str(), 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = transport;
  config.algorithms = f.algorithms;
  config.timeoutMs = 60000;
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm, &config));
  Cases cases(comm, rank, n, strprintf("%s fanIn %d lead %d %s", f.algorithms, f.fanIn, f.lead,
                                       transport ? transport : "auto"));
  size_t index = 0;
  for (const auto& [t, count] : typesAndCounts()) {
    if (f.colls & kAlltoAllv) cases.alltoallv(t, count);
    for (bool inPlace : {false, true}) {
      if (f.colls & kAlltoAll) cases.alltoall(t, count, inPlace);
      for (int root : rootsFor(n)) {
        if (f.colls & kBroadcast) cases.broadcast(t, count, inPlace, root);
        // Ops rotate over the cases: every op meets several dtypes, roots and both forms,
        // without multiplying the matrix by five.
        if (f.colls & kReduce) cases.reduce(t, opFor(t, index++), count, inPlace, root);
      }
    }
  }
  RANK_LOOM(loomCommDestroy(comm));
  return cases.failures();
}

int runAll(RankContext& ctx, const char* transport) {
  int failures = 0;
  for (const Forced& f : kForced) {
    // No shared memory over LOOM_TRANSPORT=tcp or ucx, so direct refuses there (direct_test.cc).
    if (!directWithoutArena(f.algorithms, transport)) failures += runForced(ctx, f, transport);
  }
  return failures == 0 ? 0 : 1;
}

class ExchangeAlgorithms : public ::testing::TestWithParam<RankSet> {};

TEST_P(ExchangeAlgorithms, EveryForcedAlgorithm) {
  const RankSet p = GetParam();
  RankSetEnvironment environment(p);
  const auto results = runRanks(
      p.nranks, [&](RankContext& ctx) { return runAll(ctx, p.transport); },
      ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExchangeAlgorithms, algorithmRankSets(), rankSetName);

// Two hosts × two ranks, interleaved (ranks 0 and 2 on host A): hierarchical alltoall then
// sees two real hosts whose ranks are not numbered together, and incast's gated sends cross
// TCP and shm inside one plan.
class ExchangeAlgorithmsTwoHosts : public TwoHostsTest {};

TEST_F(ExchangeAlgorithmsTwoHosts, HierarchicalAndIncastAlltoAll) {
  const std::string a = hostA_, b = hostB_;
  const Forced forced[] = {
      {"alltoall=hierarchical", 1, kAlltoAll},
      {"alltoall=incast,alltoallv=incast", 1, kAlltoAll | kAlltoAllv},
      {"alltoall=incast,alltoallv=incast", 2, kAlltoAll | kAlltoAllv},
  };
  const auto results = runRanks(
      4,
      [&](RankContext& ctx) {
        RANK_CHECK(enter(ctx.rank() % 2 == 0 ? a : b) == 0, "setns failed");
        int failures = 0;
        for (const Forced& f : forced) failures += runForced(ctx, f, nullptr);
        return failures == 0 ? 0 : 1;
      },
      ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
