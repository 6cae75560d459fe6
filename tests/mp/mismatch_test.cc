// Calls that do not match, without LOOM_CHECK: every message carries its call's stamp
// (transports::CallStamp) and the host's arena stamps the calls through it, so a mismatch ends
// the call with an error on every rank that could otherwise return another call's data, naming
// the ranks and what differed, within seconds; the communicator then refuses every call. Over
// tcp, over shm by messages (forced ring and tree algorithms), over shm's arena (the default
// choice for these sizes: direct and peer) and over UCX, 2 and 4 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

// Long beside the few seconds a mismatch may take to report: one the stamps missed shows as a
// hang into this deadline instead.
constexpr int kTimeoutMs = 20000;
constexpr double kReportSeconds = 5;

struct Setup {
  const char* name;
  const char* transport;
  const char* algorithms;  // null: the model's choice
  const char* tune = nullptr;  // LOOM_TUNE's rules, where given
};

const Setup kSetups[] = {
    {"tcp", "tcp", nullptr},
    {"shmMessages", "shm", "allreduce=ring,allgather=ring,broadcast=tree,reduce=tree"},
    {"shmArena", "shm", nullptr},
    {"ucx", "ucx", nullptr},  // ucx.* in ctest, where UCX is built
};

// One mismatched call as a rank makes it: its result, and whether that rank may return success
// with `dataRight` (its data that of its own call). Such a rank saw only peers whose calls
// matched its own, or only sent (a root, a leaf): no stamp reaches it in this call, and its next
// call fails.
struct Outcome {
  loomResult_t rc = loomSuccess;
  bool mayPass = false;
  bool dataRight = true;
};
using Mismatched = std::function<Outcome(int rank, int nranks, loomComm_t comm)>;

// The other rank an error names first ("rank 3"), -1 if none: a mismatch names a peer.
int otherRankNamed(const std::string& msg, int self) {
  static const std::regex any("rank (\\d+)");
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), any); it != std::sregex_iterator();
       ++it)
    if (std::stoi((*it)[1]) != self) return std::stoi((*it)[1]);
  return -1;
}

// Runs `call` on n ranks of `setup` (LOOM_CHECK off): every rank's call fails within a few
// seconds (but for a rank allowed to pass, whose data must then be its own call's), with
// "do not match", another rank and each of `differs` in its message; then a matched allreduce
// fails on every rank.
void expectDetected(const Setup& setup, int n, const std::vector<std::string>& differs,
                    const Mismatched& call) {
  auto results = runRanks(n, [&](RankContext& ctx) {
    unsetenv("LOOM_CHECK");
    if (setup.tune != nullptr) setenv("LOOM_TUNE", setup.tune, 1);
    params::reloadFromEnvironment();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = setup.transport;
    config.algorithms = setup.algorithms;
    config.timeoutMs = kTimeoutMs;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    int32_t one = 1, sum = 0;  // a matched call first: the links and the arena carry calls
    RANK_LOOM(loomAllReduce(&one, &sum, 1, loomInt32, loomSum, comm, nullptr));
    RANK_CHECK(sum == n, "the matched call before: %d", sum);
    const auto start = std::chrono::steady_clock::now();
    const Outcome out = call(ctx.rank(), n, comm);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = out.rc == loomSuccess ? "" : loomGetLastError(comm);
    fprintf(stderr, "MISMATCH %s n=%d rank %d: %s after %.2f s: %s\n", setup.name, n,
            ctx.rank(), loomGetErrorString(out.rc), seconds, msg.c_str());
    RANK_CHECK(seconds < kReportSeconds, "the mismatched call took %.1f s: %s", seconds,
               msg.c_str());
    if (out.rc == loomSuccess) {
      RANK_CHECK(out.mayPass, "the mismatched call returned success");
      RANK_CHECK(out.dataRight, "the mismatched call returned success with wrong data");
    } else {
      RANK_CHECK(out.rc == loomInvalidUsage || out.rc == loomRemoteError, "rc %s: %s",
                 loomGetErrorString(out.rc), msg.c_str());
      RANK_CHECK(msg.find("do not match") != std::string::npos ||
                     msg.find("no longer line up") != std::string::npos,
                 "no mismatch in: %s", msg.c_str());
      RANK_CHECK(otherRankNamed(msg, ctx.rank()) >= 0, "names no other rank: %s", msg.c_str());
      for (const std::string& d : differs)
        RANK_CHECK(msg.find(d) != std::string::npos, "no \"%s\" in: %s", d.c_str(), msg.c_str());
    }
    // The next call matches, and fails: the communicator is unusable, not silently wrong.
    const auto next = std::chrono::steady_clock::now();
    one = 1, sum = 0;
    loomResult_t rc = loomAllReduce(&one, &sum, 1, loomInt32, loomSum, comm, nullptr);
    const double nextSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - next).count();
    RANK_CHECK(rc == loomInvalidUsage || rc == loomRemoteError,
               "the matched call after the mismatch: %s (sum %d)", loomGetErrorString(rc), sum);
    RANK_CHECK(nextSeconds < kReportSeconds, "the call after took %.1f s", nextSeconds);
    if (out.rc != loomSuccess)
      RANK_CHECK(std::string(loomGetLastError(comm)).find("failed earlier") != std::string::npos,
                 "after: %s", loomGetLastError(comm));
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "") << setup.name << ", " << n << " ranks";
}

class Mismatch : public ::testing::TestWithParam<Setup> {};

// Rank 1 allreduces 1,000,000 elements, the others 100.
Outcome countMismatch(int rank, int, loomComm_t comm) {
  std::vector<int32_t> in(1000000, 1), out(1000000);
  Outcome o;
  o.rc = loomAllReduce(in.data(), out.data(), rank == 1 ? 1000000 : 100, loomInt32, loomSum, comm,
                       nullptr);
  return o;
}
const std::vector<std::string> kCountsDiffer = {"allreduce of 1000000 elements",
                                                "allreduce of 100 elements"};

TEST_P(Mismatch, Count) {
  for (int n : {2, 4}) expectDetected(GetParam(), n, kCountsDiffer, countMismatch);
}

// Rank 1's call goes by messages (ring), the others' through the host's arena (direct): rank 1
// waits for a message while its peers are in an arena call it has not made.
TEST(MismatchArenaAndMessages, Count) {
  const loom::testing::Setup setup{"shmArenaAndRing", "shm", nullptr,
                    "allreduce size=0-1M -> direct; allreduce size=1M-* -> ring"};
  for (int n : {2, 4}) expectDetected(setup, n, kCountsDiffer, countMismatch);
}

TEST_P(Mismatch, Collective) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n, {"allgather of 64 elements", "allreduce of 64 elements"},
                   [](int rank, int nranks, loomComm_t comm) {
                     std::vector<int32_t> in(64, rank), out(64 * size_t(nranks));
                     Outcome o;
                     o.rc = rank == 1 ? loomAllGather(in.data(), out.data(), 64, loomInt32, comm,
                                                      nullptr)
                                      : loomAllReduce(in.data(), out.data(), 64, loomInt32,
                                                      loomSum, comm, nullptr);
                     return o;
                   });
}

TEST_P(Mismatch, Dtype) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n, {"(float, sum)", "(int32, sum)"},
                   [](int rank, int, loomComm_t comm) {
                     std::vector<int32_t> in(64, 1), out(64);
                     Outcome o;
                     o.rc = loomAllReduce(in.data(), out.data(), 64,
                                          rank == 0 ? loomFloat32 : loomInt32, loomSum, comm,
                                          nullptr);
                     return o;
                   });
}

// Ranks below half broadcast from rank 0, the others from the last rank: each root only sends
// in its own call, and may return success with its own data, as may a rank that got its own
// root's data.
TEST_P(Mismatch, BroadcastRoot) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n, {"broadcast of 16 elements"},
                   [](int rank, int nranks, loomComm_t comm) {
                     const int root = rank < nranks / 2 ? 0 : nranks - 1;
                     std::vector<int32_t> buf(16, rank + 100);
                     Outcome o;
                     o.rc = loomBroadcast(buf.data(), buf.data(), 16, loomInt32, root, comm,
                                          nullptr);
                     o.mayPass = true;
                     for (int32_t v : buf) o.dataRight = o.dataRight && v == root + 100;
                     return o;
                   });
}

TEST_P(Mismatch, ReduceRoot) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n, {"reduce of 32 elements"},
                   [](int rank, int nranks, loomComm_t comm) {
                     const int root = rank == 1 ? 0 : nranks - 1;
                     std::vector<int32_t> in(32, rank + 1), out(32);
                     Outcome o;
                     o.rc = loomReduce(in.data(), out.data(), 32, loomInt32, loomSum, root, comm,
                                       nullptr);
                     // A rank that is not its call's root has no result by it; a root that
                     // passes must hold every rank's contribution.
                     o.mayPass = true;
                     const int32_t want = int32_t(nranks * (nranks + 1) / 2);
                     if (rank == root)
                       for (int32_t v : out) o.dataRight = o.dataRight && v == want;
                     return o;
                   });
}

// Every rank reduces to itself: each waits for contributions its peers do not send. With two
// ranks each waits for the other; with four (a chain) they wait in a cycle. Over tcp nothing
// reaches a waiting rank: the ranks' waiting calls meet at the bootstrap root
// (Bootstrap::reportCall), which finds two of the same number that differ.
TEST_P(Mismatch, ReduceEachToItself) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n,
                   n == 2 ? std::vector<std::string>{"reduce of 32 elements (int32, sum, root 0)",
                                                     "reduce of 32 elements (int32, sum, root 1)"}
                          : std::vector<std::string>{"reduce of 32 elements (int32, sum, root"},
                   [](int rank, int, loomComm_t comm) {
                     std::vector<int32_t> in(32, rank + 1), out(32);
                     Outcome o;
                     o.rc = loomReduce(in.data(), out.data(), 32, loomInt32, loomSum, rank, comm,
                                       nullptr);
                     return o;
                   });
}

// Ranks 0 and 1 exchange in a group, rank 1 expecting twice what rank 0 sends; the other ranks
// take no part (their call is nothing), and then the allreduce of everyone fails.
TEST_P(Mismatch, SendRecvSizes) {
  for (int n : {2, 4})
    expectDetected(GetParam(), n, {"400", "800", "send/receive group"},
                   [](int rank, int, loomComm_t comm) {
                     Outcome o;
                     o.mayPass = true;
                     if (rank > 1) return o;
                     std::vector<int32_t> out(200, rank), in(200, -1);
                     const int peer = 1 - rank;
                     loomGroupStart();
                     loomSend(out.data(), 100, loomInt32, peer, comm, nullptr);
                     loomRecv(in.data(), rank == 1 ? 200 : 100, loomInt32, peer, comm, nullptr);
                     o.rc = loomGroupEnd();
                     for (size_t i = 0; i < 100; ++i) o.dataRight = o.dataRight && in[i] == peer;
                     return o;
                   });
}

INSTANTIATE_TEST_SUITE_P(Transports, Mismatch, ::testing::ValuesIn(kSetups),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace loom::testing
