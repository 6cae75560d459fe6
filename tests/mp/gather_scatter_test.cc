// loomGather and loomScatter between forked ranks, 1 to 8 of them over shm and tcp: every
// dtype, every root, in place and out of place, zero count, the model's choice and every
// builder forced; results checked bit for bit, and what the root alone owns (gather's
// recvbuff, scatter's sendbuff) never touched on the other ranks. Then bad input: a clear
// error on every rank, and the communicator still works.
#include <gtest/gtest.h>

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
#include "tests/support/values.h"

namespace loom::testing {
namespace {

const uint64_t kCounts[] = {0, 1, 7, 1001};

// One communicator's cases; failures go to stderr and are counted.
class Cases : public CaseLog {
 public:
  // forced: the algorithm every call must run ("linear"), or "" where the tuner chooses.
  Cases(loomComm_t comm, int rank, int n, std::string label, std::string forced)
      : CaseLog(rank, n, std::move(label)), comm_(comm), forced_(std::move(forced)) {}

  // In place on the root: sendbuff = recvbuff + root·count. A non-root passes a buffer of the
  // root's size with its block in the same place, or NULL (nullOthers), as NCCL allows.
  void gather(loomDataType_t t, uint64_t count, bool inPlace, int root, bool nullOthers) {
    const std::string what = describe("gather", t, count, inPlace, root, nullOthers);
    const uint64_t block = count * typeSize(t);
    std::vector<char> in = guardedBuffer(block), out = guardedBuffer(block * n_);
    char* send = inPlace ? out.data() + rank_ * block : in.data();
    fillOrigin(send, block, rank_, root);
    const bool isRoot = rank_ == root;
    char* recv = isRoot || !nullOthers ? out.data() : nullptr;
    if (!call(what, loomGather(send, recv, count, t, root, comm_, nullptr))) return;
    if (!isOrigin(send, block, rank_, root)) return fail(what, "sendbuff changed");
    if (!guardIntact(out)) return fail(what, "wrote past recvbuff");
    for (int j = 0; j < n_; ++j) {
      const char* b = out.data() + j * block;
      if (isRoot && !isOrigin(b, block, j, root))
        return fail(what, strprintf("block %d is wrong", j));
      if (!isRoot && !(inPlace && j == rank_) && !isUntouched(b, block))
        return fail(what, strprintf("a non-root's recvbuff block %d was written", j));
    }
  }

  // In place on the root: recvbuff = sendbuff + root·count. A non-root passes a sendbuff of the
  // root's size (recvbuff its block of it, in place), or NULL (nullOthers).
  void scatter(loomDataType_t t, uint64_t count, bool inPlace, int root, bool nullOthers) {
    const std::string what = describe("scatter", t, count, inPlace, root, nullOthers);
    const uint64_t block = count * typeSize(t);
    std::vector<char> in = guardedBuffer(block * n_), out = guardedBuffer(block);
    const bool isRoot = rank_ == root;
    if (isRoot)
      for (int j = 0; j < n_; ++j) fillOrigin(in.data() + j * block, block, root, j);
    char* recv = inPlace ? in.data() + rank_ * block : out.data();
    const char* send = isRoot || !nullOthers ? in.data() : nullptr;
    if (!call(what, loomScatter(send, recv, count, t, root, comm_, nullptr))) return;
    if (!isOrigin(recv, block, root, rank_)) return fail(what, "wrong data");
    if (!guardIntact(out) || !guardIntact(in)) return fail(what, "wrote past a buffer");
    for (int j = 0; j < n_; ++j) {
      const char* b = in.data() + j * block;
      if (isRoot && !isOrigin(b, block, root, j))
        return fail(what, strprintf("sendbuff block %d changed", j));
      if (!isRoot && !(inPlace && j == rank_) && !isUntouched(b, block))
        return fail(what, strprintf("a non-root's sendbuff block %d was written", j));
    }
  }

 private:
  static std::string describe(const char* coll, loomDataType_t t, uint64_t count, bool inPlace,
                              int root, bool nullOthers) {
    return strprintf("%s %s count %llu %s root %d%s", coll, typeName(t),
                     (unsigned long long)count, inPlace ? "in place" : "out of place", root,
                     nullOthers ? " (NULL on non-roots)" : "");
  }
  bool call(const std::string& what, loomResult_t rc) {
    if (rc != loomSuccess) {
      fail(what, strprintf("%s: %s", loomGetErrorString(rc), loomGetLastError(comm_)));
      return false;
    }
    const char* ran = "";
    if (loomCommGetLastAlgorithm(comm_, &ran) != loomSuccess ||
        std::string(ran).rfind(forced_, 0) != 0) {
      fail(what, strprintf("ran \"%s\", not %s", ran, forced_.c_str()));
      return false;
    }
    return true;
  }
  loomComm_t comm_;
  std::string forced_;
};

// The model's (or built-in table's) choice, then each builder forced; linear also on 3 lanes.
struct Forced {
  const char* algorithm;  // null: the tuner chooses
  int lanes;
};
const Forced kForced[] = {{nullptr, 1}, {"linear", 1}, {"linear", 3}, {"tree", 1}, {"peer", 1}};

int runForced(RankContext& ctx, const Forced& f, const char* transport) {
  setenv("LOOM_LANES", std::to_string(f.lanes).c_str(), 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  const std::string algorithms =
      f.algorithm ? strprintf("gather=%s,scatter=%s", f.algorithm, f.algorithm) : "";
  config.transport = transport;
  config.algorithms = f.algorithm ? algorithms.c_str() : nullptr;
  config.timeoutMs = 60000;
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm, &config));
  const int n = ctx.nranks();
  Cases cases(comm, ctx.rank(), n,
              strprintf("%s lanes %d %s", f.algorithm ? f.algorithm : "auto", f.lanes, transport),
              f.algorithm ? f.algorithm : "");
  for (loomDataType_t t : kAllTypes)
    for (uint64_t count : kCounts)
      for (bool inPlace : {false, true})
        for (int root = 0; root < n; ++root) {
          cases.gather(t, count, inPlace, root, false);
          cases.scatter(t, count, inPlace, root, false);
        }
  for (int root = 0; root < n; ++root) {
    cases.gather(loomInt32, 7, false, root, true);
    cases.scatter(loomInt32, 7, false, root, true);
  }
  RANK_LOOM(loomCommDestroy(comm));
  return cases.failures();
}

class GatherScatter : public ::testing::TestWithParam<RankSet> {};

TEST_P(GatherScatter, EveryTypeRootAndAlgorithm) {
  const RankSet p = GetParam();
  RankSetEnvironment environment(p);
  const auto results = runRanks(
      p.nranks,
      [&](RankContext& ctx) {
        int failures = 0;
        for (const Forced& f : kForced)
          if (!f.algorithm || !directWithoutArena(f.algorithm, p.transport))
            failures += runForced(ctx, f, p.transport);
        return failures == 0 ? 0 : 1;
      },
      ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, GatherScatter,
    ::testing::Values(RankSet{1, "shm"}, RankSet{2, "shm"}, RankSet{3, "shm"}, RankSet{4, "shm"},
                      RankSet{5, "shm"}, RankSet{6, "shm"}, RankSet{7, "shm"}, RankSet{8, "shm"},
                      RankSet{2, "tcp"}, RankSet{3, "tcp"}, RankSet{5, "tcp"}, RankSet{8, "tcp"},
                      RankSet{1, "ucx"}, LOOM_UCX_ALGORITHM_RANK_SETS),
    rankSetName);

// Inside a rank: the call fails with `code`, and its message (loomGetLastError) says `text`.
#define RANK_FAILS(call, code, text)                                                        \
  do {                                                                                      \
    const loomResult_t failsRc_ = (call);                                                   \
    const std::string failsMsg_ = loomGetLastError(comm);                                   \
    RANK_CHECK(failsRc_ == (code) && failsMsg_.find(text) != std::string::npos,             \
               "%s -> %s: %s", #call, loomGetErrorString(failsRc_), failsMsg_.c_str());     \
  } while (0)

// Every rank gets its clear error for a bad root, a NULL buffer or a count too large, none
// waits for the others, and the communicator works afterwards.
TEST(GatherScatterErrors, ClearOnEveryRank) {
  const auto results = runRanks(
      3,
      [](RankContext& ctx) {
        loomConfig_t config = LOOM_CONFIG_INITIALIZER;
        config.timeoutMs = 20000;
        loomComm_t comm = nullptr;
        RANK_LOOM(initComm(ctx, &comm, &config));
        const int rank = ctx.rank(), root = 1;
        const bool isRoot = rank == root;
        int32_t all[12] = {}, mine[4] = {};
        for (int bad : {3, -1}) {
          const std::string text = strprintf("root %d is out of range", bad);
          RANK_FAILS(loomGather(mine, all, 4, loomInt32, bad, comm, nullptr),
                     loomInvalidArgument, "loomGather: " + text);
          RANK_FAILS(loomScatter(all, mine, 4, loomInt32, bad, comm, nullptr),
                     loomInvalidArgument, "loomScatter: " + text);
        }
        // The root's NULL buffer of the whole call; the others' NULL buffer of their block.
        RANK_FAILS(loomGather(isRoot ? mine : nullptr, isRoot ? nullptr : all, 4, loomInt32,
                              root, comm, nullptr),
                   loomInvalidArgument,
                   isRoot ? "recvbuff is NULL but 48 bytes" : "sendbuff is NULL but 16 bytes");
        RANK_FAILS(loomScatter(isRoot ? nullptr : all, isRoot ? mine : nullptr, 4, loomInt32,
                               root, comm, nullptr),
                   loomInvalidArgument,
                   isRoot ? "sendbuff is NULL but 48 bytes" : "recvbuff is NULL but 16 bytes");
        RANK_FAILS(loomGather(mine, all, SIZE_MAX / 8, loomInt32, root, comm, nullptr),
                   loomInvalidArgument, "too many bytes");
        RANK_FAILS(loomScatter(all, mine, 4, loomDataType_t(99), root, comm, nullptr),
                   loomInvalidArgument, "unknown datatype 99");
        // Nothing to move: NULL everywhere is fine.
        RANK_LOOM(loomGather(nullptr, nullptr, 0, loomInt32, root, comm, nullptr));
        RANK_LOOM(loomScatter(nullptr, nullptr, 0, loomInt32, root, comm, nullptr));
        // Still healthy: a gather and a scatter of the ranks' numbers.
        for (int i = 0; i < 4; ++i) mine[i] = rank * 10 + i;
        RANK_LOOM(loomGather(mine, all, 4, loomInt32, root, comm, nullptr));
        for (int i = 0; i < 12 && isRoot; ++i)
          RANK_CHECK(all[i] == i / 4 * 10 + i % 4, "gathered [%d] = %d", i, all[i]);
        for (int i = 0; i < 12 && isRoot; ++i) all[i] = 100 + i;
        RANK_LOOM(loomScatter(all, mine, 4, loomInt32, root, comm, nullptr));
        for (int i = 0; i < 4; ++i)
          RANK_CHECK(mine[i] == 100 + rank * 4 + i, "scattered [%d] = %d", i, mine[i]);
        RANK_LOOM(loomCommDestroy(comm));
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// On the root the rank's block may be the other buffer's block root (in place) but may not
// overlap it anywhere else.
TEST(GatherScatterErrors, OverlapOutsideTheInPlaceLayout) {
  const auto results = runRanks(
      2,
      [](RankContext& ctx) {
        loomComm_t comm = nullptr;
        RANK_LOOM(initComm(ctx, &comm));
        const int rank = ctx.rank(), root = 1;
        int32_t buf[9] = {};
        // Ranks' blocks are 4 elements: on the root, buf + 4 is in place, buf + 5 is not.
        int32_t* block = buf + 4 + (rank == root ? 1 : 0);
        if (rank == root) {
          RANK_FAILS(loomGather(block, buf, 4, loomInt32, root, comm, nullptr),
                     loomInvalidArgument, "sendbuff overlaps recvbuff but is not recvbuff");
          RANK_FAILS(loomScatter(buf, block, 4, loomInt32, root, comm, nullptr),
                     loomInvalidArgument, "recvbuff overlaps sendbuff but is not sendbuff");
        }
        // In place; a non-root's buffers may overlap as they like (only its block counts).
        for (int i = 0; i < 4; ++i) buf[4 * rank + i] = rank * 10 + i;
        RANK_LOOM(loomGather(buf + 4 * rank, buf, 4, loomInt32, root, comm, nullptr));
        for (int i = 0; i < 8 && rank == root; ++i)
          RANK_CHECK(buf[i] == i / 4 * 10 + i % 4, "gathered [%d] = %d", i, buf[i]);
        RANK_LOOM(loomScatter(buf, buf + 4 * rank, 4, loomInt32, root, comm, nullptr));
        for (int i = 0; i < 4; ++i)
          RANK_CHECK(buf[4 * rank + i] == rank * 10 + i, "scattered [%d] = %d", i,
                     buf[4 * rank + i]);
        RANK_LOOM(loomCommDestroy(comm));
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
