// LOOM_CHECK: calls that differ between the ranks end on every rank with loomInvalidUsage that
// names the ranks and what differed, the communicator then refuses every call; calls that
// agree give exact results, over shm and over tcp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "base/params.h"
#include "comm/comm.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

// Long enough for a loaded machine, short beside the 300 s default: a mismatch the check
// missed would show as a timeout instead of the check's error.
constexpr int kTimeoutMs = 20000;

class CallCheck : public ::testing::TestWithParam<const char*> {};

// A communicator of ctx's ranks with LOOM_CHECK=1 over the test's transport.
loomResult_t checkedComm(RankContext& ctx, const char* transport, loomComm_t* comm) {
  setenv("LOOM_CHECK", "1", 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = transport;
  config.timeoutMs = kTimeoutMs;
  return initComm(ctx, comm, &config);
}

// Runs `call` on n ranks with LOOM_CHECK=1; every rank must get loomInvalidUsage within a few
// seconds, with every one of `expected` in its message, and the next call must fail too.
void expectMismatch(int n, const char* transport, std::vector<std::string> expected,
                    const std::function<loomResult_t(int rank, loomComm_t comm)>& call) {
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(checkedComm(ctx, transport, &comm));
    const auto start = std::chrono::steady_clock::now();
    loomResult_t rc = call(ctx.rank(), comm);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = loomGetLastError(comm);
    RANK_CHECK(rc == loomInvalidUsage, "rc %s: %s", loomGetErrorString(rc), msg.c_str());
    RANK_CHECK(seconds < 5, "the mismatch took %.1f s to report", seconds);
    RANK_CHECK(msg.find("LOOM_CHECK") != std::string::npos, "message: %s", msg.c_str());
    for (const std::string& e : expected)
      RANK_CHECK(msg.find(e) != std::string::npos, "no \"%s\" in: %s", e.c_str(), msg.c_str());
    int32_t x = 1, y = 0;
    rc = loomAllReduce(&x, &y, 1, loomInt32, loomSum, comm, nullptr);
    RANK_CHECK(rc == loomInvalidUsage, "the call after the mismatch: %s",
               loomGetErrorString(rc));
    RANK_CHECK(std::string(loomGetLastError(comm)).find("failed earlier") != std::string::npos,
               "after: %s", loomGetLastError(comm));
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

TEST_P(CallCheck, CountMismatch) {
  expectMismatch(4, GetParam(),
                 {"rank 1 called allreduce of 1000 elements (int32, sum)",
                  "ranks 0, 2, 3 allreduce of 100 elements (int32, sum)", "call 2"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> in(1000, 1), out(1000);
                   // A first call that agrees: the check numbers the calls.
                   loomResult_t rc = loomAllReduce(in.data(), out.data(), 10, loomInt32,
                                                   loomSum, comm, nullptr);
                   if (rc != loomSuccess) return rc;
                   return loomAllReduce(in.data(), out.data(), rank == 1 ? 1000 : 100,
                                        loomInt32, loomSum, comm, nullptr);
                 });
}

TEST_P(CallCheck, CollectiveMismatch) {
  expectMismatch(3, GetParam(),
                 {"rank 1 called allgather of 100 elements (int32)",
                  "ranks 0, 2 allreduce of 100 elements (int32, sum)"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> in(100, 1), out(300);
                   if (rank == 1)
                     return loomAllGather(in.data(), out.data(), 100, loomInt32, comm, nullptr);
                   return loomAllReduce(in.data(), out.data(), 100, loomInt32, loomSum, comm,
                                        nullptr);
                 });
}

TEST_P(CallCheck, DtypeMismatch) {
  expectMismatch(2, GetParam(),
                 {"rank 0 called allreduce of 64 elements (float, sum)",
                  "rank 1 allreduce of 64 elements (int32, sum)"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> in(64, 1), out(64);
                   return loomAllReduce(in.data(), out.data(), 64,
                                        rank == 0 ? loomFloat32 : loomInt32, loomSum, comm,
                                        nullptr);
                 });
}

TEST_P(CallCheck, RootMismatch) {
  expectMismatch(3, GetParam(),
                 {"rank 2 called broadcast of 8 elements (int32, root 1)",
                  "ranks 0, 1 broadcast of 8 elements (int32, root 0)"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> buf(8, rank);
                   return loomBroadcast(buf.data(), buf.data(), 8, loomInt32, rank == 2 ? 1 : 0,
                                        comm, nullptr);
                 });
}

TEST_P(CallCheck, OpMismatch) {
  expectMismatch(3, GetParam(),
                 {"rank 0 called reduce of 16 elements (int32, max, root 2)",
                  "ranks 1, 2 reduce of 16 elements (int32, sum, root 2)"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> in(16, rank), out(16);
                   return loomReduce(in.data(), out.data(), 16, loomInt32,
                                     rank == 0 ? loomMax : loomSum, 2, comm, nullptr);
                 });
}

TEST_P(CallCheck, SendRecvSizesMismatchInAGroup) {
  // Rank 1 expects 800 bytes where rank 0 sends 400.
  expectMismatch(2, GetParam(), {"do not pair", "400 bytes", "800 bytes", "sendrecv call 1"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> out(200, rank), in(200);
                   const int peer = 1 - rank;
                   loomGroupStart();
                   loomSend(out.data(), 100, loomInt32, peer, comm, nullptr);
                   loomRecv(in.data(), rank == 1 ? 200 : 100, loomInt32, peer, comm, nullptr);
                   return loomGroupEnd();
                 });
}

TEST_P(CallCheck, AlltoallvCountsMismatch) {
  expectMismatch(2, GetParam(),
                 {"alltoallv counts do not pair", "rank 0 sends 3 elements to rank 1, which "
                  "receives 2 from rank 0"},
                 [](int rank, loomComm_t comm) {
                   std::vector<int32_t> in(8, rank), out(8);
                   std::vector<size_t> counts = {3, 3}, displs = {0, 4};
                   std::vector<size_t> recv = {rank == 1 ? size_t(2) : size_t(3), 3};
                   return loomAlltoAllv(in.data(), counts.data(), displs.data(), out.data(),
                                        recv.data(), displs.data(), loomInt32, comm, nullptr);
                 });
}

// Every collective, and sends and receives, with the check on: exact results.
int runEveryCollective(RankContext& ctx, loomComm_t comm) {
  const int n = ctx.nranks(), me = ctx.rank();
  const size_t c = 5;
  auto value = [](int r, size_t i) { return int32_t(r * 1000 + int(i)); };
  std::vector<int32_t> in(c * n), out(c * n), want(c * n);
  for (size_t i = 0; i < in.size(); ++i) in[i] = value(me, i);
  // allreduce
  RANK_LOOM(loomAllReduce(in.data(), out.data(), c, loomInt32, loomSum, comm, nullptr));
  for (size_t i = 0; i < c; ++i)
    RANK_CHECK(out[i] == int32_t(1000 * n * (n - 1) / 2 + n * int(i)), "allreduce[%zu]", i);
  // broadcast from rank n-1
  RANK_LOOM(loomBroadcast(in.data(), out.data(), c, loomInt32, n - 1, comm, nullptr));
  for (size_t i = 0; i < c; ++i) RANK_CHECK(out[i] == value(n - 1, i), "broadcast[%zu]", i);
  // reduce (max) to rank 1
  RANK_LOOM(loomReduce(in.data(), out.data(), c, loomInt32, loomMax, 1, comm, nullptr));
  if (me == 1)
    for (size_t i = 0; i < c; ++i) RANK_CHECK(out[i] == value(n - 1, i), "reduce[%zu]", i);
  // allgather
  RANK_LOOM(loomAllGather(in.data(), out.data(), c, loomInt32, comm, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < c; ++i)
      RANK_CHECK(out[r * c + i] == value(r, i), "allgather[%d][%zu]", r, i);
  // reduce-scatter
  RANK_LOOM(loomReduceScatter(in.data(), out.data(), c, loomInt32, loomSum, comm, nullptr));
  for (size_t i = 0; i < c; ++i)
    RANK_CHECK(out[i] == int32_t(1000 * n * (n - 1) / 2 + n * int(me * c + i)), "rs[%zu]", i);
  // alltoall: block j of rank r goes to rank j
  RANK_LOOM(loomAlltoAll(in.data(), out.data(), c, loomInt32, comm, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < c; ++i)
      RANK_CHECK(out[r * c + i] == value(r, me * c + i), "alltoall[%d][%zu]", r, i);
  // alltoallv: rank r sends r+1 elements to every rank
  std::vector<size_t> sc(n, size_t(me + 1)), sd(n), rc(n), rd(n);
  for (int r = 0; r < n; ++r) sd[r] = size_t(r) * c, rc[r] = size_t(r + 1), rd[r] = size_t(r) * c;
  std::fill(out.begin(), out.end(), -1);
  RANK_LOOM(loomAlltoAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(),
                          loomInt32, comm, nullptr));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i <= size_t(r); ++i)
      RANK_CHECK(out[r * c + i] == value(r, me * c + i), "alltoallv[%d][%zu]", r, i);
  // gather to rank 0, scatter from rank 0
  RANK_LOOM(loomGather(in.data(), out.data(), c, loomInt32, 0, comm, nullptr));
  if (me == 0)
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < c; ++i)
        RANK_CHECK(out[r * c + i] == value(r, i), "gather[%d][%zu]", r, i);
  RANK_LOOM(loomScatter(in.data(), out.data(), c, loomInt32, 0, comm, nullptr));
  for (size_t i = 0; i < c; ++i) RANK_CHECK(out[i] == value(0, me * c + i), "scatter[%zu]", i);
  return 0;
}

// Sends and receives: a ring in one group, then a pair (ranks 0 and 1) the others do not
// join, then an allreduce of everyone: the check involves only a call's peers.
int runSendsAndReceives(RankContext& ctx, loomComm_t comm) {
  const int n = ctx.nranks(), me = ctx.rank();
  std::vector<int32_t> out(7, me), in(7, -1);
  RANK_LOOM(loomGroupStart());
  RANK_LOOM(loomSend(out.data(), 7, loomInt32, (me + 1) % n, comm, nullptr));
  RANK_LOOM(loomRecv(in.data(), 7, loomInt32, (me + n - 1) % n, comm, nullptr));
  RANK_LOOM(loomGroupEnd());
  for (int32_t v : in) RANK_CHECK(v == (me + n - 1) % n, "ring got %d", v);
  if (me == 0) RANK_LOOM(loomSend(out.data(), 3, loomInt32, 1, comm, nullptr));
  if (me == 1) {
    RANK_LOOM(loomRecv(in.data(), 3, loomInt32, 0, comm, nullptr));
    RANK_CHECK(in[0] == 0 && in[2] == 0, "pair got %d", in[0]);
  }
  int32_t one = 1, sum = 0;
  RANK_LOOM(loomAllReduce(&one, &sum, 1, loomInt32, loomSum, comm, nullptr));
  RANK_CHECK(sum == n, "sum %d", sum);
  return 0;
}

TEST_P(CallCheck, MatchingCallsGiveExactResults) {
  const char* transport = GetParam();
  for (int n : {2, 3, 4}) {
    auto results = runRanks(n, [&](RankContext& ctx) {
      loomComm_t comm = nullptr;
      RANK_LOOM(checkedComm(ctx, transport, &comm));
      if (int rc = runEveryCollective(ctx, comm)) return rc;
      if (int rc = runSendsAndReceives(ctx, comm)) return rc;
      RANK_LOOM(loomCommDestroy(comm));
      return 0;
    }, ForkOptions::timeout(90));
    EXPECT_EQ(describeFailures(results), "") << n << " ranks";
  }
}

TEST(CallCheckInit, MustBeSetOnEveryRank) {
  auto results = runRanks(3, [](RankContext& ctx) {
    if (ctx.rank() == 1) setenv("LOOM_CHECK", "1", 1);
    else unsetenv("LOOM_CHECK");
    params::reloadFromEnvironment();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = kTimeoutMs;
    loomComm_t comm = nullptr;
    loomResult_t rc = initComm(ctx, &comm, &config);
    const std::string msg = loomGetLastError(nullptr);
    RANK_CHECK(rc == loomInvalidUsage, "init: %s: %s", loomGetErrorString(rc), msg.c_str());
    RANK_CHECK(msg.find("LOOM_CHECK=1 on rank 1 only") != std::string::npos, "%s", msg.c_str());
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// The store's take, which the check's sends and receives use: a value goes to the one rank that
// takes it, whether it was put before or after, and the root then forgets the key.
TEST(CallCheckInit, TakeGivesAKeyOnceThenForgetsIt) {
  auto results = runRanks(2, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    Bootstrap& boot = commOf(comm).bootstrap();
    std::string value;
    if (ctx.rank() == 0) {
      RANK_CHECK(boot.put("before", "one", Deadline(kTimeoutMs)).isOk(), "put");
      Status st = boot.take("after", &value, Deadline(kTimeoutMs));
      RANK_CHECK(st.isOk() && value == "two", "take before the put: %s, \"%s\"",
                 st.message().c_str(), value.c_str());
    } else {
      Status st = boot.take("before", &value, Deadline(kTimeoutMs));
      RANK_CHECK(st.isOk() && value == "one", "take after the put: %s, \"%s\"",
                 st.message().c_str(), value.c_str());
      st = boot.take("before", &value, Deadline(300));
      RANK_CHECK(st.code() == loomTimeout, "a taken key is still there: %s",
                 st.message().c_str());
      RANK_CHECK(boot.put("after", "two", Deadline(kTimeoutMs)).isOk(), "put");
    }
    ctx.allgather("");  // neither leaves before the other is done with the root
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, CallCheck, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace loom::testing
