// Bad input gets a clear code and message, and nothing crashes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdarg>
#include <cstring>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

std::string lastError() { return loomGetLastError(nullptr); }

TEST(InitErrors, BadArguments) {
  loomUniqueId id;
  ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
  loomComm_t comm = nullptr;
  EXPECT_EQ(loomCommInitRank(nullptr, 1, id, 0), loomInvalidArgument);
  EXPECT_EQ(loomCommInitRank(&comm, 0, id, 0), loomInvalidArgument);
  EXPECT_NE(lastError().find("nranks"), std::string::npos) << lastError();
  EXPECT_EQ(loomCommInitRank(&comm, -3, id, 0), loomInvalidArgument);
  EXPECT_EQ(loomCommInitRank(&comm, 2, id, 2), loomInvalidArgument);
  EXPECT_NE(lastError().find("out of range"), std::string::npos) << lastError();
  EXPECT_EQ(loomCommInitRank(&comm, 2, id, -1), loomInvalidArgument);
  EXPECT_EQ(loomGetUniqueId(nullptr), loomInvalidArgument);
  EXPECT_EQ(loomGetVersion(nullptr), loomInvalidArgument);
  int version = 0;
  EXPECT_EQ(loomGetVersion(&version), loomSuccess);
  EXPECT_EQ(version, LOOM_VERSION_CODE);
}

TEST(CommQueries, LastAlgorithmNamesWhatTheLastCollectiveRan) {
  loomUniqueId id;
  ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.algorithms = "allreduce=ring,allgather=rd";
  loomComm_t comm = nullptr;
  ASSERT_EQ(loomCommInitRankConfig(&comm, 1, id, 0, &config), loomSuccess) << lastError();
  const char* algorithm = nullptr;
  ASSERT_EQ(loomCommGetLastAlgorithm(comm, &algorithm), loomSuccess);
  EXPECT_STREQ(algorithm, "");  // no collective yet
  float x[2] = {3, 4}, y[2] = {0, 0};
  ASSERT_EQ(loomAllReduce(x, y, 2, loomFloat32, loomSum, comm, nullptr), loomSuccess);
  ASSERT_EQ(loomCommGetLastAlgorithm(comm, &algorithm), loomSuccess);
  EXPECT_STREQ(algorithm, "ring");
  ASSERT_EQ(loomAllGather(x, y, 2, loomFloat32, comm, nullptr), loomSuccess);
  ASSERT_EQ(loomCommGetLastAlgorithm(comm, &algorithm), loomSuccess);
  EXPECT_STREQ(algorithm, "rd");
  // Not forced: what the tuner chose, with its parameters.
  ASSERT_EQ(loomAlltoAll(x, y, 2, loomFloat32, comm, nullptr), loomSuccess);
  ASSERT_EQ(loomCommGetLastAlgorithm(comm, &algorithm), loomSuccess);
  EXPECT_GT(strlen(algorithm), 0u);
  EXPECT_EQ(loomCommGetLastAlgorithm(comm, nullptr), loomInvalidArgument);
  EXPECT_NE(lastError().find("algorithm is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(loomCommGetLastAlgorithm(nullptr, &algorithm), loomInvalidArgument);
  EXPECT_EQ(loomCommDestroy(comm), loomSuccess);
}

TEST(InitErrors, GarbageUniqueId) {
  loomUniqueId id;
  memset(&id, 0x17, sizeof(id));
  loomComm_t comm = nullptr;
  EXPECT_EQ(loomCommInitRank(&comm, 1, id, 0), loomInvalidArgument);
  EXPECT_NE(lastError().find("unique id is not valid"), std::string::npos) << lastError();
  EXPECT_EQ(comm, nullptr);
}

TEST(InitErrors, WrongSecretIsRefusedAndTheRightOneStillWorks) {
  loomUniqueId id;
  ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
  loomUniqueId forged = id;
  // The secret is the last 16 bytes of the id's payload (after magic, length and address).
  forged.internal[4 + 4 + 28] ^= 0x55;
  loomComm_t comm = nullptr;
  EXPECT_EQ(loomCommInitRank(&comm, 1, forged, 0), loomInvalidArgument);
  EXPECT_NE(lastError().find("secret"), std::string::npos) << lastError();
  ASSERT_EQ(loomCommInitRank(&comm, 1, id, 0), loomSuccess) << lastError();
  float x = 3, y = 0;
  EXPECT_EQ(loomAllReduce(&x, &y, 1, loomFloat32, loomSum, comm, nullptr), loomSuccess);
  EXPECT_EQ(y, 3);
  EXPECT_EQ(loomCommDestroy(comm), loomSuccess);
}

class SingleRank : public ::testing::Test {
 protected:
  void SetUp() override {
    loomUniqueId id;
    ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
    ASSERT_EQ(loomCommInitRank(&comm_, 1, id, 0), loomSuccess) << lastError();
  }
  void TearDown() override {
    if (comm_) {
      EXPECT_EQ(loomCommDestroy(comm_), loomSuccess);
    }
  }
  std::string commError() { return loomGetLastError(comm_); }
  loomComm_t comm_ = nullptr;
};

TEST_F(SingleRank, BadBuffersTypesOpsAndRoots) {
  float buf[4] = {1, 2, 3, 4};
  EXPECT_EQ(loomAllReduce(nullptr, buf, 4, loomFloat32, loomSum, comm_, nullptr),
            loomInvalidArgument);
  EXPECT_NE(commError().find("sendbuff is NULL"), std::string::npos) << commError();
  EXPECT_EQ(loomAllReduce(buf, nullptr, 4, loomFloat32, loomSum, comm_, nullptr),
            loomInvalidArgument);
  // Zero elements with NULL buffers is fine, as in NCCL.
  EXPECT_EQ(loomAllReduce(nullptr, nullptr, 0, loomFloat32, loomSum, comm_, nullptr),
            loomSuccess);
  EXPECT_EQ(loomAllReduce(buf, buf, SIZE_MAX / 2, loomFloat32, loomSum, comm_, nullptr),
            loomInvalidArgument);
  EXPECT_NE(commError().find("too many bytes"), std::string::npos) << commError();
  EXPECT_EQ(loomAllGather(buf, buf, SIZE_MAX / 4, loomInt32, comm_, nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomAllReduce(buf, buf, 4, loomDataType_t(99), loomSum, comm_, nullptr),
            loomInvalidArgument);
  EXPECT_NE(commError().find("unknown datatype 99"), std::string::npos) << commError();
  EXPECT_EQ(loomAllReduce(buf, buf, 4, loomFloat32, loomRedOp_t(42), comm_, nullptr),
            loomInvalidArgument);
  EXPECT_NE(commError().find("unknown reduction op 42"), std::string::npos) << commError();
  EXPECT_EQ(loomBroadcast(buf, buf, 4, loomFloat32, 1, comm_, nullptr), loomInvalidArgument);
  EXPECT_NE(commError().find("root 1 is out of range"), std::string::npos) << commError();
  EXPECT_EQ(loomReduce(buf, buf, 4, loomFloat32, loomSum, -1, comm_, nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomSend(buf, 4, loomFloat32, 3, comm_, nullptr), loomInvalidArgument);
  EXPECT_NE(commError().find("peer 3 is out of range"), std::string::npos) << commError();
  EXPECT_EQ(loomRecv(buf, 4, loomFloat32, -1, comm_, nullptr), loomInvalidArgument);
  // Where no device is in use (LOOM_DEVICE=auto without a CUDA runtime), a stream with host
  // buffers is only an order, which a call complete on return keeps: it runs now.
  int fakeStream = 0;
  float streamed[4] = {};
  EXPECT_EQ(loomAllReduce(buf, streamed, 4, loomFloat32, loomSum, comm_, &fakeStream),
            loomSuccess);
  EXPECT_EQ(memcmp(buf, streamed, sizeof(buf)), 0);
  size_t counts[1] = {4}, displs[1] = {0};
  EXPECT_EQ(loomAlltoAllv(buf, nullptr, displs, buf, counts, displs, loomFloat32, comm_,
                          nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomCommCount(comm_, nullptr), loomInvalidArgument);
  // The communicator is still healthy after all that.
  float out[4] = {};
  EXPECT_EQ(loomAllReduce(buf, out, 4, loomFloat32, loomSum, comm_, nullptr), loomSuccess);
  EXPECT_EQ(memcmp(buf, out, sizeof(buf)), 0);
}

TEST_F(SingleRank, OneRankCollectivesAndSelfSendRecv) {
  int count = 0, rank = -1;
  EXPECT_EQ(loomCommCount(comm_, &count), loomSuccess);
  EXPECT_EQ(loomCommUserRank(comm_, &rank), loomSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  int64_t a[3] = {5, -6, 7}, b[3] = {};
  EXPECT_EQ(loomAllGather(a, b, 3, loomInt64, comm_, nullptr), loomSuccess);
  EXPECT_EQ(memcmp(a, b, sizeof(a)), 0);
  int64_t c[3] = {};
  EXPECT_EQ(loomGroupStart(), loomSuccess);
  EXPECT_EQ(loomRecv(c, 3, loomInt64, 0, comm_, nullptr), loomSuccess);
  EXPECT_EQ(loomSend(a, 3, loomInt64, 0, comm_, nullptr), loomSuccess);
  EXPECT_EQ(loomGroupEnd(), loomSuccess);
  EXPECT_EQ(memcmp(a, c, sizeof(a)), 0);
  loomResult_t async = loomInternalError;
  EXPECT_EQ(loomCommGetAsyncError(comm_, &async), loomSuccess);
  EXPECT_EQ(async, loomSuccess);
}

TEST(ApiErrors, UseAfterDestroyAndGroupMisuse) {
  loomUniqueId id;
  ASSERT_EQ(loomGetUniqueId(&id), loomSuccess);
  loomComm_t comm = nullptr;
  ASSERT_EQ(loomCommInitRank(&comm, 1, id, 0), loomSuccess);
  ASSERT_EQ(loomCommDestroy(comm), loomSuccess);
  float x = 1;
  EXPECT_EQ(loomAllReduce(&x, &x, 1, loomFloat32, loomSum, comm, nullptr), loomInvalidUsage);
  EXPECT_NE(lastError().find("destroyed"), std::string::npos) << lastError();
  EXPECT_EQ(loomCommDestroy(comm), loomInvalidUsage);
  EXPECT_EQ(loomAllReduce(&x, &x, 1, loomFloat32, loomSum, nullptr, nullptr),
            loomInvalidArgument);
  EXPECT_EQ(loomGroupEnd(), loomInvalidUsage);
  EXPECT_STRNE(loomGetErrorString(loomTimeout), "");
  EXPECT_STREQ(loomGetErrorString(loomResult_t(1234)), "unknown result code");
}

TEST(ApiErrors, MismatchedSizesAcrossRanks) {
  // Rank 1 claims a different communicator size: the bootstrap refuses it clearly.
  auto results = runRanks(2, [](RankContext& ctx) {
    loomUniqueId id;
    std::string mine;
    if (ctx.rank() == 0) {
      RANK_LOOM(loomGetUniqueId(&id));
      mine.assign(id.internal, sizeof(id.internal));
    }
    std::string shared = ctx.allgather(mine)[0];
    memcpy(id.internal, shared.data(), sizeof(id.internal));
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 3000;
    loomComm_t comm = nullptr;
    loomResult_t rc = loomCommInitRankConfig(&comm, ctx.rank() == 0 ? 2 : 3, id,
                                             ctx.rank(), &config);
    RANK_CHECK(rc != loomSuccess, "init with mismatched sizes succeeded");
    std::string msg = loomGetLastError(nullptr);
    RANK_CHECK(msg.find("differs") != std::string::npos ||
                   msg.find("lost the connection") != std::string::npos,
               "unclear message: %s", msg.c_str());
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(ApiErrors, SplitIntoEvenAndOdd) {
  auto results = runRanks(4, [](RankContext& ctx) {
    loomComm_t comm = nullptr, sub = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    int color = ctx.rank() == 3 ? LOOM_SPLIT_NOCOLOR : ctx.rank() % 2;
    RANK_LOOM(loomCommSplit(comm, color, -ctx.rank(), &sub, nullptr));
    if (ctx.rank() == 3) {
      RANK_CHECK(sub == nullptr, "NOCOLOR rank got a communicator");
    } else {
      int n = 0, r = -1;
      RANK_LOOM(loomCommCount(sub, &n));
      RANK_LOOM(loomCommUserRank(sub, &r));
      int wantN = ctx.rank() % 2 == 0 ? 2 : 1;
      RANK_CHECK(n == wantN, "size %d, want %d", n, wantN);
      // Keys are -rank: the higher parent rank comes first.
      int wantR = ctx.rank() == 0 ? 1 : 0;
      RANK_CHECK(r == wantR, "rank %d, want %d", r, wantR);
      int32_t v = ctx.rank() + 1, sum = 0;
      RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt32, loomSum, sub, nullptr));
      int want = ctx.rank() % 2 == 0 ? 1 + 3 : 2;
      RANK_CHECK(sum == want, "sum %d, want %d", sum, want);
      RANK_LOOM(loomCommDestroy(sub));
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
