// The allreduce, allgather and reduce-scatter algorithms of collectives/builders_reduce.h,
// forced through loomConfig_t.algorithms, run by forked ranks over shm and tcp and checked
// bit for bit; hierarchical and torus also across two network-namespace hosts.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>

#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/rank_sets.h"
#include "tests/support/two_hosts.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

const loomDataType_t kTypes[] = {loomInt8,    loomUint8,   loomInt32,   loomUint32,
                                 loomInt64,   loomUint64,  loomFloat16, loomBfloat16,
                                 loomFloat32, loomFloat64, loomFloat8e4m3, loomFloat8e5m2};
const uint64_t kFp32Counts[] = {0, 1, 7, uint64_t(1) << 16, uint64_t(1) << 20};

// Every new builder appears in one of these; each line is one communicator.
struct Forced {
  const char* algorithms;
  const char* torusDims;  // LOOM_TORUS_DIMS for the communicator, or null
};
const Forced kForced[] = {
    {"allreduce=tree,allgather=rd,reducescatter=rh", nullptr},
    {"allreduce=rhd,allgather=bruck,reducescatter=hierarchical", nullptr},
    {"allreduce=rd,allgather=hierarchical", nullptr},
    {"allreduce=hierarchical", nullptr},
    {"allreduce=direct,allgather=direct", nullptr},
    {"allreduce=peer,allgather=peer,reducescatter=peer", nullptr},
    {"allgather=pairwise", nullptr},
    {"allreduce=torus", nullptr},   // near-square grid
    {"allreduce=torus", "given"},  // X × Y from LOOM_TORUS_DIMS: 2 × N/2, or 1 × N
};

// A byte of rank r's allgather block: names its origin, whatever the dtype.
char originByte(int r, size_t i) { return char((r * 131 + i * 7) & 0xff); }

// Runs allreduce, reduce-scatter and allgather of `count` elements of t (sum) on comm;
// returns the failures, one per line.
std::string runCase(loomComm_t comm, int rank, int n, loomDataType_t t, uint64_t count,
                    bool inPlace) {
  std::string failures;
  const size_t es = typeSize(t);
  const std::string what = strprintf("%s count %llu %s", typeName(t), (unsigned long long)count,
                                     inPlace ? "in place" : "out of place");
  auto fail = [&](const std::string& msg) { failures += what + ": " + msg + "\n"; };
  auto call = [&](const char* coll, loomResult_t rc) {
    if (rc != loomSuccess) fail(strprintf("%s -> %s", coll, loomGetLastError(comm)));
    return rc == loomSuccess;
  };
  {
    std::vector<char> in(count * es + 1), out(count * es + 1);
    fillInput(in.data(), count, loomSum, t, n, rank);
    void* dst = inPlace ? in.data() : out.data();
    if (call("allreduce", loomAllReduce(in.data(), dst, count, t, loomSum, comm, nullptr))) {
      const uint64_t bad = countReductionErrors(dst, count, loomSum, t, n);
      if (bad) fail(strprintf("allreduce: %llu wrong elements", (unsigned long long)bad));
    }
  }
  {
    std::vector<char> in(count * n * es + 1), out(count * es + 1);
    fillInput(in.data(), count * n, loomSum, t, n, rank);
    void* dst = inPlace ? in.data() + rank * count * es : out.data();
    if (call("reducescatter",
             loomReduceScatter(in.data(), dst, count, t, loomSum, comm, nullptr))) {
      const uint64_t bad = countReductionErrors(dst, count, loomSum, t, n, rank * count);
      if (bad) fail(strprintf("reducescatter: %llu wrong elements", (unsigned long long)bad));
    }
  }
  {
    const size_t block = count * es;
    std::vector<char> in(block + 1), out(block * n + 1);
    char* src = inPlace ? out.data() + rank * block : in.data();
    for (size_t i = 0; i < block; ++i) src[i] = originByte(rank, i);
    if (call("allgather", loomAllGather(src, out.data(), count, t, comm, nullptr))) {
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < block; ++i) {
          if (out[r * block + i] != originByte(r, i)) {
            fail(strprintf("allgather: block %d byte %zu is wrong", r, i));
            r = n;
            break;
          }
        }
      }
    }
  }
  return failures;
}

// Every forced algorithm set × the case matrix, in one set of ranks.
int runAll(RankContext& ctx, const char* transport) {
  const int n = ctx.nranks(), rank = ctx.rank();
  int failures = 0;
  for (const Forced& f : kForced) {
    // No shared memory over LOOM_TRANSPORT=tcp or ucx, so direct refuses there (direct_test.cc).
    if (directWithoutArena(f.algorithms, transport)) continue;
    std::string dims;
    if (f.torusDims) dims = n % 2 == 0 ? strprintf("2x%d", n / 2) : strprintf("1x%d", n);
    // The communicator reads LOOM_TORUS_DIMS when it is created; parameters are cached per
    // process, so each change is followed by a reload.
    if (f.torusDims) setenv("LOOM_TORUS_DIMS", dims.c_str(), 1);
    params::reloadFromEnvironment();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = transport;
    config.algorithms = f.algorithms;
    config.timeoutMs = 60000;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    unsetenv("LOOM_TORUS_DIMS");
    params::reloadFromEnvironment();
    auto report = [&](const std::string& text) {
      if (text.empty()) return;
      fprintf(stderr, "rank %d [%s %s]: %s", rank, f.algorithms, dims.c_str(), text.c_str());
      ++failures;
    };
    for (bool inPlace : {false, true}) {
      for (loomDataType_t t : kTypes) report(runCase(comm, rank, n, t, 1001, inPlace));
      for (uint64_t count : kFp32Counts) {
        report(runCase(comm, rank, n, loomFloat32, count, inPlace));
      }
    }
    RANK_LOOM(loomCommDestroy(comm));
  }
  return failures == 0 ? 0 : 1;
}

class Algorithms : public ::testing::TestWithParam<RankSet> {};

TEST_P(Algorithms, EveryForcedAlgorithm) {
  const RankSet p = GetParam();
  RankSetEnvironment environment(p);
  const auto results = runRanks(
      p.nranks, [&](RankContext& ctx) { return runAll(ctx, p.transport); },
      ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Algorithms, algorithmRankSets(), rankSetName);

// Hierarchical and torus across network-namespace hosts, two ranks each, dealt round robin
// (rank r on host r mod H) so that a host's ranks are not numbered together: hierarchical must
// group them by host, and torus must still work.
int hierarchicalAndTorus(RankContext& ctx, const std::vector<std::string>& hosts,
                         std::initializer_list<uint64_t> counts,
                         const char* transport = nullptr) {
  const int n = ctx.nranks();
  RANK_CHECK(TwoHostsTest::enter(hosts[size_t(ctx.rank()) % hosts.size()]) == 0, "setns failed");
  struct stat ns = {};
  RANK_CHECK(stat("/proc/self/ns/net", &ns) == 0, "no network namespace");
  std::vector<std::string> all = ctx.allgather(std::to_string(ns.st_ino));
  std::sort(all.begin(), all.end());
  RANK_CHECK(std::unique(all.begin(), all.end()) - all.begin() == long(hosts.size()),
             "the ranks are not on %zu hosts", hosts.size());
  int failures = 0;
  for (const char* algos :
       {"allreduce=hierarchical,allgather=hierarchical,reducescatter=hierarchical",
        "allreduce=torus"}) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.algorithms = algos;
    config.timeoutMs = 30000;
    config.transport = transport;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    for (bool inPlace : {false, true}) {
      for (uint64_t count : counts) {
        const std::string text = runCase(comm, ctx.rank(), n, loomFloat32, count, inPlace);
        if (!text.empty()) fprintf(stderr, "%s: %s", algos, text.c_str()), ++failures;
      }
    }
    RANK_LOOM(loomCommDestroy(comm));
  }
  return failures == 0 ? 0 : 1;
}

class AlgorithmsTwoHosts : public TwoHostsTest {};

TEST_F(AlgorithmsTwoHosts, HierarchicalAndTorus) {
  const auto results = runRanks(4, [&](RankContext& ctx) {
    return hierarchicalAndTorus(ctx, hosts_, {0, 1, 1001, uint64_t(1) << 20});
  }, ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

class AlgorithmsFourHosts : public TwoHostsTest {
  int hostCount() const override { return 4; }
};

// 8 ranks on this machine's cores: smaller counts keep it short.
TEST_F(AlgorithmsFourHosts, HierarchicalAndTorus) {
  const auto results = runRanks(8, [&](RankContext& ctx) {
    return hierarchicalAndTorus(ctx, hosts_, {0, 1, 1001, uint64_t(1) << 17});
  }, ForkOptions::timeout(180));
  EXPECT_EQ(describeFailures(results), "");
}

// The same over UCX between four hosts (two ranks each).
class UcxFourHosts : public TwoHostsTest {
  int hostCount() const override { return 4; }
};

TEST_F(UcxFourHosts, HierarchicalAndTorus) {
  const auto results = runRanks(8, [&](RankContext& ctx) {
    return hierarchicalAndTorus(ctx, hosts_, {0, 1, 1001, uint64_t(1) << 17}, "ucx");
  }, ForkOptions::timeout(180));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
