// A communicator's life beyond init and destroy: non-blocking init, groups that create ranks
// and hold several communicators, revoke and abort from another thread, shrink after a rank
// died, pre-multiplied sums, simulated groups, and many communicators made and destroyed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"

namespace loom::testing {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A communicator whose waits end after timeoutMs.
loomResult_t initWithTimeout(RankContext& ctx, loomComm_t* comm, int timeoutMs) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = timeoutMs;
  return initComm(ctx, comm, &config);
}

// Rank 0's unique id, on every rank; and the init of a non-blocking communicator with it.
loomResult_t initNonBlocking(RankContext& ctx, loomComm_t* comm) {
  loomUniqueId id;
  if (ctx.rank() == 0 && loomGetUniqueId(&id) != loomSuccess) return loomSystemError;
  std::string all = ctx.allgather(std::string(id.internal, sizeof(id)))[0];
  memcpy(id.internal, all.data(), sizeof(id));
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.blocking = 0;
  return loomCommInitRankConfig(comm, ctx.nranks(), id, ctx.rank(), &config);
}

// Every rank's allreduce of (rank + 1) over count floats gives n(n+1)/2 in every element.
int checkAllReduce(loomComm_t comm, size_t count = 1000) {
  int rank = -1, n = 0;
  RANK_LOOM(loomCommUserRank(comm, &rank));
  RANK_LOOM(loomCommCount(comm, &n));
  std::vector<float> x(count, float(rank + 1)), y(count, -1);
  RANK_LOOM(loomAllReduce(x.data(), y.data(), count, loomFloat32, loomSum, comm, nullptr));
  for (size_t i = 0; i < count; ++i)
    RANK_CHECK(y[i] == float(n * (n + 1) / 2), "rank %d: y[%zu] = %g, expected %d", rank, i,
               y[i], n * (n + 1) / 2);
  return 0;
}

TEST(NonBlocking, InitReturnsInProgressAndPollsToSuccess) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    loomResult_t rc = initNonBlocking(ctx, &comm);
    RANK_CHECK(rc == loomInProgress, "init returned %s", loomGetErrorString(rc));
    RANK_CHECK(comm != nullptr, "no handle while in progress");
    loomResult_t state = loomInProgress;
    auto start = std::chrono::steady_clock::now();
    while (state == loomInProgress && secondsSince(start) < 30) {
      RANK_LOOM(loomCommGetAsyncError(comm, &state));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RANK_CHECK(state == loomSuccess, "state %s", loomGetErrorString(state));
    if (checkAllReduce(comm)) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

TEST(NonBlocking, ACallWaitsForTheInit) {
  auto results = runRanks(2, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    loomResult_t rc = initNonBlocking(ctx, &comm);
    RANK_CHECK(rc == loomInProgress, "init returned %s", loomGetErrorString(rc));
    if (checkAllReduce(comm)) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// One process, one thread, three ranks: made in one group, then driven in groups.
TEST(Groups, OneThreadCreatesAndDrivesSeveralRanks) {
  auto results = runRanks(1, [](RankContext&) {
    const int n = 3;
    loomUniqueId id;
    RANK_LOOM(loomGetUniqueId(&id));
    loomComm_t comms[n] = {};
    RANK_LOOM(loomGroupStart());
    for (int r = 0; r < n; ++r) RANK_LOOM(loomCommInitRank(&comms[r], n, id, r));
    // Not made yet: a call before the group's end is refused, not run.
    int count = 0;
    RANK_CHECK(loomCommCount(comms[0], &count) == loomInvalidUsage, "used before made");
    RANK_LOOM(loomGroupEnd());
    std::vector<std::vector<int32_t>> in(n), out(n);
    for (int r = 0; r < n; ++r) in[r].assign(257, r + 1), out[r].assign(257, 0);
    RANK_LOOM(loomGroupStart());
    for (int r = 0; r < n; ++r)
      RANK_LOOM(loomAllReduce(in[r].data(), out[r].data(), 257, loomInt32, loomSum, comms[r],
                              nullptr));
    RANK_LOOM(loomGroupEnd());
    for (int r = 0; r < n; ++r)
      for (int32_t v : out[r]) RANK_CHECK(v == 6, "rank %d got %d", r, v);
    // A ring of sends and receives across the ranks, in one nested group.
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomGroupStart());
    for (int r = 0; r < n; ++r) {
      RANK_LOOM(loomRecv(out[r].data(), 257, loomInt32, (r + n - 1) % n, comms[r], nullptr));
      RANK_LOOM(loomSend(in[r].data(), 257, loomInt32, (r + 1) % n, comms[r], nullptr));
    }
    RANK_LOOM(loomGroupEnd());
    RANK_LOOM(loomGroupEnd());
    for (int r = 0; r < n; ++r)
      RANK_CHECK(out[r][0] == (r + n - 1) % n + 1 && out[r][256] == out[r][0],
                 "rank %d received %d", r, out[r][0]);
    for (int r = 0; r < n; ++r) RANK_LOOM(loomCommDestroy(comms[r]));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// A group with a call on the parent and one on a split child: both run, in either order on
// different ranks, without deadlock.
TEST(Groups, SeveralCommunicatorsInOneGroup) {
  auto results = runRanks(4, [](RankContext& ctx) {
    loomComm_t world = nullptr, half = nullptr;
    RANK_LOOM(initComm(ctx, &world));
    RANK_LOOM(loomCommSplit(world, ctx.rank() % 2, ctx.rank(), &half, nullptr));
    std::vector<double> a(5000, ctx.rank() + 1), b(5000), c(5000, 1), d(5000);
    RANK_LOOM(loomGroupStart());
    if (ctx.rank() < 2) {
      RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat64, loomSum, world, nullptr));
      RANK_LOOM(loomAllReduce(c.data(), d.data(), c.size(), loomFloat64, loomSum, half, nullptr));
    } else {
      RANK_LOOM(loomAllReduce(c.data(), d.data(), c.size(), loomFloat64, loomSum, half, nullptr));
      RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat64, loomSum, world, nullptr));
    }
    RANK_LOOM(loomGroupEnd());
    RANK_CHECK(b[0] == 10 && b[4999] == 10, "world sum %g", b[0]);
    RANK_CHECK(d[0] == 2 && d[4999] == 2, "half sum %g", d[0]);
    RANK_LOOM(loomCommDestroy(half));
    RANK_LOOM(loomCommDestroy(world));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// Ranks 0 and 1 wait in an allreduce that rank 2 never joins; rank 2 revokes: both calls end
// with an error long before the deadline, and rank 2's own calls are refused.
TEST(Revoke, EndsThePeersCallsInFlight) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initWithTimeout(ctx, &comm, 60000));
    std::vector<float> x(1 << 16, 1), y(1 << 16);
    if (ctx.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      RANK_LOOM(loomCommRevoke(comm));
      loomResult_t rc = loomAllReduce(x.data(), y.data(), x.size(), loomFloat32, loomSum, comm,
                                      nullptr);
      RANK_CHECK(rc == loomInvalidUsage, "a revoked communicator ran a call: %s",
                 loomGetErrorString(rc));
      std::string msg = loomGetLastError(comm);
      RANK_CHECK(msg.find("revoked") != std::string::npos, "message: %s", msg.c_str());
    } else {
      auto start = std::chrono::steady_clock::now();
      loomResult_t rc = loomAllReduce(x.data(), y.data(), x.size(), loomFloat32, loomSum, comm,
                                      nullptr);
      RANK_CHECK(rc == loomRemoteError, "got %s", loomGetErrorString(rc));
      RANK_CHECK(secondsSince(start) < 10, "took %.1f s", secondsSince(start));
      std::string msg = loomGetLastError(comm);
      RANK_CHECK(msg.find("revoked") != std::string::npos, "message: %s", msg.c_str());
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// A thread revokes (or aborts) the communicator while another thread of the same rank waits
// in a call: the call returns an error within seconds instead of waiting for its deadline.
class FromAnotherThread : public ::testing::TestWithParam<bool> {};

TEST_P(FromAnotherThread, EndsTheCallInFlight) {
  const bool abort = GetParam();
  auto results = runRanks(2, [abort](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initWithTimeout(ctx, &comm, 60000));
    std::vector<float> x(1 << 16, 1), y(1 << 16);
    if (ctx.rank() == 1) {  // never joins; its communicator ends with the peer's revoke
      std::this_thread::sleep_for(std::chrono::seconds(3));
      loomResult_t async = loomSuccess;
      RANK_LOOM(loomCommGetAsyncError(comm, &async));
      RANK_CHECK(async == loomRemoteError, "rank 1 async state %s", loomGetErrorString(async));
      RANK_LOOM(loomCommDestroy(comm));
      return 0;
    }
    std::thread other([comm, abort] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (abort) loomCommAbort(comm);
      else loomCommRevoke(comm);
    });
    auto start = std::chrono::steady_clock::now();
    loomResult_t rc = loomAllReduce(x.data(), y.data(), x.size(), loomFloat32, loomSum, comm,
                                    nullptr);
    double s = secondsSince(start);
    other.join();
    RANK_CHECK(rc == loomInvalidUsage, "got %s: %s", loomGetErrorString(rc),
               loomGetLastError(nullptr));
    RANK_CHECK(s < 5, "took %.1f s", s);
    if (!abort) RANK_LOOM(loomCommDestroy(comm));
    else RANK_CHECK(loomCommDestroy(comm) == loomInvalidUsage, "aborted handle still live");
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(RevokeOrAbort, FromAnotherThread, ::testing::Values(false, true));

// Rank 3 dies; the others' calls fail; they shrink it away and carry on, bit for bit.
TEST(Shrink, TheRanksLeftCarryOnAfterOneDied) {
  const int n = 4, victim = 3;
  ForkOptions options;
  options.timeoutSec = 90;
  options.expectedToDie = {victim};
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initWithTimeout(ctx, &comm, 30000));
    if (checkAllReduce(comm)) return 1;
    if (ctx.rank() == victim) raise(SIGKILL);
    std::vector<float> x(1 << 16, 1), y(1 << 16);
    loomResult_t rc = loomSuccess;
    for (int i = 0; i < 1000 && rc == loomSuccess; ++i)
      rc = loomAllReduce(x.data(), y.data(), x.size(), loomFloat32, loomSum, comm, nullptr);
    RANK_CHECK(rc == loomRemoteError, "got %s", loomGetErrorString(rc));
    int excluded[] = {victim};
    loomComm_t smaller = nullptr;
    RANK_CHECK(loomCommShrink(comm, excluded, 1, &smaller, nullptr, LOOM_SHRINK_DEFAULT) ==
                   loomRemoteError,
               "LOOM_SHRINK_DEFAULT shrank a failed communicator");
    RANK_LOOM(loomCommShrink(comm, excluded, 1, &smaller, nullptr, LOOM_SHRINK_ABORT));
    int size = 0, rank = -1;
    RANK_LOOM(loomCommCount(smaller, &size));
    RANK_LOOM(loomCommUserRank(smaller, &rank));
    RANK_CHECK(size == 3 && rank == ctx.rank(), "size %d rank %d", size, rank);
    if (checkAllReduce(smaller)) return 1;
    RANK_LOOM(loomCommDestroy(smaller));
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, options);
  EXPECT_EQ(describeFailures(results, options), "");
}

// A healthy communicator shrinks without the ranks it excludes, which need not call.
TEST(Shrink, HealthyCommunicatorExcludesRanks) {
  auto results = runRanks(4, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    if (ctx.rank() == 0) {  // excluded
      RANK_LOOM(loomCommDestroy(comm));
      return 0;
    }
    int excluded[] = {0};
    loomComm_t smaller = nullptr;
    RANK_LOOM(loomCommShrink(comm, excluded, 1, &smaller, nullptr, LOOM_SHRINK_DEFAULT));
    int rank = -1;
    RANK_LOOM(loomCommUserRank(smaller, &rank));
    RANK_CHECK(rank == ctx.rank() - 1, "new rank %d", rank);
    if (checkAllReduce(smaller)) return 1;
    RANK_LOOM(loomCommDestroy(smaller));
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

TEST(Shrink, BadArgumentsAreRefusedAndDifferentListsTimeOut) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomComm_t comm = nullptr, out = nullptr;
    RANK_LOOM(initWithTimeout(ctx, &comm, 1500));
    int self[] = {ctx.rank()}, twice[] = {1, 1}, bad[] = {7};
    RANK_CHECK(loomCommShrink(comm, self, 1, &out, nullptr, 0) == loomInvalidUsage, "self");
    RANK_CHECK(loomCommShrink(comm, twice, 2, &out, nullptr, 0) == loomInvalidArgument, "twice");
    RANK_CHECK(loomCommShrink(comm, bad, 1, &out, nullptr, 0) == loomInvalidArgument, "range");
    RANK_CHECK(loomCommShrink(comm, bad, 1, &out, nullptr, 5) == loomInvalidArgument, "flags");
    // Ranks 0 and 1 disagree on whom to exclude (rank 2 and nobody): neither gets an id.
    if (ctx.rank() < 2) {
      int two[] = {2};
      auto start = std::chrono::steady_clock::now();
      loomResult_t rc = loomCommShrink(comm, two, ctx.rank() == 0 ? 1 : 0, &out, nullptr, 0);
      RANK_CHECK(rc != loomSuccess, "disagreeing ranks made a communicator");
      RANK_CHECK(secondsSince(start) < 10, "took %.1f s", secondsSince(start));
    }
    ctx.allgather("");
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// Pre-multiplied sums: each rank's input times the scalar, summed; values chosen so every
// type holds the result exactly.
TEST(PreMulSum, ScalesThenSumsInEveryType) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    const size_t count = 3000;  // several blocks of the scaling
    struct Case {
      loomDataType_t dtype;
      std::vector<unsigned char> scalar;  // 2 in the type
      std::vector<unsigned char> one;     // 1 in the type
      std::vector<unsigned char> six;     // 6 in the type: 3 ranks x 1 x 2
    };
    const Case cases[] = {
        {loomFloat32, {0, 0, 0, 0x40}, {0, 0, 0x80, 0x3f}, {0, 0, 0xc0, 0x40}},
        {loomFloat64, {0, 0, 0, 0, 0, 0, 0, 0x40}, {0, 0, 0, 0, 0, 0, 0xf0, 0x3f},
         {0, 0, 0, 0, 0, 0, 0x18, 0x40}},
        {loomFloat16, {0, 0x40}, {0, 0x3c}, {0, 0x46}},
        {loomBfloat16, {0, 0x40}, {0x80, 0x3f}, {0xc0, 0x40}},
        {loomFloat8e4m3, {0x40}, {0x38}, {0x4c}},
        {loomFloat8e5m2, {0x40}, {0x3c}, {0x46}},
        {loomInt32, {2, 0, 0, 0}, {1, 0, 0, 0}, {6, 0, 0, 0}},
        {loomUint8, {2}, {1}, {6}},
    };
    for (const Case& c : cases) {
      const size_t es = c.one.size();
      std::vector<unsigned char> in(count * es), out(count * es, 0xAA);
      for (size_t i = 0; i < count; ++i) memcpy(&in[i * es], c.one.data(), es);
      loomRedOp_t op;
      RANK_LOOM(loomRedOpCreatePreMulSum(&op, c.scalar.data(), c.dtype, comm));
      RANK_CHECK(op >= loomNumOps, "op %d", int(op));
      RANK_LOOM(loomAllReduce(in.data(), out.data(), count, c.dtype, op, comm, nullptr));
      std::vector<unsigned char> six(count * es);
      for (size_t i = 0; i < count; ++i) memcpy(&six[i * es], c.six.data(), es);
      RANK_CHECK(out == six, "dtype %d: element 0 starts %02x, expected %02x", c.dtype, out[0],
                 six[0]);
      // In place, and inside a group with another pre-multiplied call.
      std::vector<unsigned char> inplace = in, second = in;
      RANK_LOOM(loomGroupStart());
      RANK_LOOM(loomAllReduce(inplace.data(), inplace.data(), count, c.dtype, op, comm, nullptr));
      RANK_LOOM(loomAllReduce(second.data(), second.data(), count, c.dtype, op, comm, nullptr));
      RANK_LOOM(loomGroupEnd());
      RANK_CHECK(inplace == six && second == six, "dtype %d: in place differs", c.dtype);
      RANK_LOOM(loomRedOpDestroy(op, comm));
      RANK_CHECK(loomAllReduce(in.data(), out.data(), count, c.dtype, op, comm, nullptr) ==
                     loomInvalidArgument,
                 "a destroyed op was accepted");
    }
    // An op of one type refuses another type.
    float two = 2;
    loomRedOp_t op;
    RANK_LOOM(loomRedOpCreatePreMulSum(&op, &two, loomFloat32, comm));
    double d = 1;
    RANK_CHECK(loomAllReduce(&d, &d, 1, loomFloat64, op, comm, nullptr) == loomInvalidArgument,
               "float op on doubles");
    RANK_CHECK(loomRedOpDestroy(loomRedOp_t(99), comm) == loomInvalidArgument, "bogus op");
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

// On the transports' default figures (no measurement at init, and an empty cache: figures that
// other tests measured on a loaded machine can price a small call's latency near a large one's
// transfer).
TEST(GroupSimulateEnd, EstimatesWithoutRunning) {
  TempDir cache("simulate-end-cache");
  auto results = runRanks(2, [&](RankContext& ctx) {
    setenv("LOOM_TOPO_MEASURE", "0", 1);
    setenv("LOOM_CACHE_DIR", cache.path().c_str(), 1);
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    std::vector<float> small(256, 1), big(1 << 20, 1);
    std::vector<float> out(1 << 20, -1);
    float tSmall = -1, tBig = -1, tP2P = -1;
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomAllReduce(small.data(), out.data(), small.size(), loomFloat32, loomSum, comm,
                            nullptr));
    RANK_LOOM(loomGroupSimulateEnd(&tSmall));
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomAllReduce(big.data(), out.data(), big.size(), loomFloat32, loomSum, comm,
                            nullptr));
    RANK_LOOM(loomGroupSimulateEnd(&tBig));
    RANK_CHECK(out[0] == -1, "a simulated group ran");
    RANK_CHECK(tSmall > 0 && tBig > 10 * tSmall, "estimates %g us and %g us", tSmall, tBig);
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomSend(big.data(), big.size(), loomFloat32, 1 - ctx.rank(), comm, nullptr));
    RANK_LOOM(loomRecv(out.data(), big.size(), loomFloat32, 1 - ctx.rank(), comm, nullptr));
    RANK_LOOM(loomGroupSimulateEnd(&tP2P));
    RANK_CHECK(tP2P > 0 && out[0] == -1, "send/recv estimate %g us", tP2P);
    RANK_CHECK(loomGroupSimulateEnd(&tP2P) == loomInvalidUsage, "end without a start");
    // Priced as named algorithms: on 4 MiB of floats recursive doubling (the whole buffer in
    // one exchange) and the ring (two halves in turn) are priced apart, and an algorithm the
    // collective lacks is refused without running anything.
    float tRd = -1, tRing = -1, tNone = -1;
    for (auto [name, t] : {std::pair{"rd", &tRd}, std::pair{"ring", &tRing}}) {
      RANK_LOOM(loomGroupStart());
      RANK_LOOM(loomAllReduce(big.data(), out.data(), big.size(), loomFloat32, loomSum, comm,
                              nullptr));
      RANK_LOOM(loomGroupSimulateEndAs(name, t));
    }
    RANK_CHECK(tRd > 0 && tRing > 0 && tRd != tRing, "rd %g us, ring %g us", tRd, tRing);
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomAllReduce(big.data(), out.data(), big.size(), loomFloat32, loomSum, comm,
                            nullptr));
    RANK_CHECK(loomGroupSimulateEndAs("pairwise", &tNone) == loomInvalidArgument && tNone == -1,
               "an allreduce priced as pairwise: %g us", tNone);
    RANK_CHECK(out[0] == -1, "a simulated group ran");
    // The communicator still works: nothing was left queued.
    if (checkAllReduce(comm)) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  });
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing

namespace loom::testing {
namespace {

int openDescriptors() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Resident pages of this process (/proc/self/statm's second field).
long residentPages() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

// Nothing left behind across many communicators: each cycle makes one (a fresh unique id, a
// root thread, sockets, shared memory), runs an allreduce and destroys it. After the cycles the
// open descriptors are what they were after the first few, and the resident memory has not
// grown past slack for the allocator. Over tcp 10,000 cycles (about 4 ms each); over shm, whose
// init maps and clears the host's arena (about 14 ms), 3,000, to stay inside the test's limit.
struct Cycles {
  const char* transport;
  int count;
};
class ManyCommunicators : public ::testing::TestWithParam<Cycles> {};

TEST_P(ManyCommunicators, LeaveNoDescriptorsOrMemoryBehind) {
  const Cycles cycles = GetParam();
  constexpr int kWarmCycles = 20;
  auto results = runRanks(2, [cycles](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = cycles.transport;
    int fdsAfterWarmUp = 0;
    long pagesAfterWarmUp = 0;
    for (int cycle = 0; cycle < kWarmCycles + cycles.count; ++cycle) {
      if (cycle == kWarmCycles) {
        fdsAfterWarmUp = openDescriptors();
        pagesAfterWarmUp = residentPages();
      }
      loomComm_t comm = nullptr;
      RANK_LOOM(initComm(ctx, &comm, &config));
      if (int failed = checkAllReduce(comm, 64)) return failed;
      RANK_LOOM(loomCommDestroy(comm));
    }
    const int fds = openDescriptors();
    const long grownKiB = (residentPages() - pagesAfterWarmUp) * (sysconf(_SC_PAGESIZE) / 1024);
    RANK_CHECK(fds == fdsAfterWarmUp, "%d descriptors open after %d more communicators, %d before",
               fds, cycles.count, fdsAfterWarmUp);
    RANK_CHECK(grownKiB < 4096, "resident memory grew by %ld KiB over %d communicators",
               grownKiB, cycles.count);
    return 0;
  }, ForkOptions::timeout(280));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Transports, ManyCommunicators,
                         ::testing::Values(Cycles{"shm", 3000}, Cycles{"tcp", 10000}),
                         [](const ::testing::TestParamInfo<Cycles>& i) {
                           return std::string(i.param.transport);
                         });

}  // namespace
}  // namespace loom::testing
