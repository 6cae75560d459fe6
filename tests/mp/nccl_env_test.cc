// NCCL's environment variables on real communicators: NCCL_ALGO forcing a builder (LOOM_ALGO
// winning over it), an invalid NCCL_ALGO failing creation, NCCL_DEBUG / NCCL_DEBUG_SUBSYS /
// NCCL_DEBUG_FILE driving the log, LOOM_ROOT and NCCL_COMM_ID (every rank makes the id, rank 0
// serves the root; a wrong address fails within the deadline; split still works), and
// loom-info's NCCL section (the built program, run as a subprocess).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.h"
#include "base/params.h"
#include "tests/support/comm_harness.h"
#include "tests/support/temp_dir.h"

namespace loom::testing {
namespace {

// Sets (nullptr: unsets) the variables in this rank and has parameters and log read them anew.
void useVariables(std::initializer_list<std::pair<const char*, const char*>> vars) {
  for (const auto& [name, value] : vars) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  params::reloadFromEnvironment();
  log::reload();
}

// A TCP port on 127.0.0.1 that was free a moment ago.
int freePort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  close(s);
  return ntohs(a.sin_port);
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// An allreduce of 1000 doubles whose result is checked exactly; returns 0 or 1 (RANK_CHECK).
int allreduceChecked(RankContext& ctx, loomComm_t comm) {
  double x[1000], y[1000];
  for (int i = 0; i < 1000; ++i) x[i] = i * (ctx.rank() + 1);
  RANK_LOOM(loomAllReduce(x, y, 1000, loomFloat64, loomSum, comm, nullptr));
  const double factor = ctx.nranks() * (ctx.nranks() + 1) / 2.0;
  for (int i = 0; i < 1000; ++i) RANK_CHECK(y[i] == factor * i, "element %d = %f", i, y[i]);
  return 0;
}

TEST(NcclEnvComm, AlgoForcesTheBuilderAndLoomAlgoWins) {
  auto results = runRanks(3, [](RankContext& ctx) {
    useVariables({{"LOOM_ALGO", nullptr}, {"NCCL_ALGO", "allreduce:nvls,tree,ring"}});
    for (const char* loomAlgo : {static_cast<const char*>(nullptr), "allreduce=ring"}) {
      useVariables({{"LOOM_ALGO", loomAlgo}});
      loomComm_t comm = nullptr;
      RANK_LOOM(initComm(ctx, &comm));
      if (allreduceChecked(ctx, comm) != 0) return 1;
      const char* ran = nullptr;
      RANK_LOOM(loomCommGetLastAlgorithm(comm, &ran));
      const char* want = loomAlgo ? "ring" : "tree";
      RANK_CHECK(strcmp(ran, want) == 0, "ran %s, want %s", ran, want);
      RANK_LOOM(loomCommDestroy(comm));
    }
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(NcclEnvComm, AnInvalidAlgoFailsCreationNamingIt) {
  auto results = runRanks(1, [](RankContext& ctx) {
    useVariables({{"LOOM_ALGO", nullptr}, {"NCCL_ALGO", "allreduce:fastest"}});
    loomComm_t comm = nullptr;
    const loomResult_t rc = initComm(ctx, &comm);
    RANK_CHECK(rc == loomInvalidArgument, "got %s", loomGetErrorString(rc));
    const char* msg = loomGetLastError(nullptr);
    RANK_CHECK(strstr(msg, "NCCL_ALGO=\"allreduce:fastest\": unknown algorithm \"fastest\"") !=
                   nullptr,
               "message: %s", msg);
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

// NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=^NET logs loom's INFO lines but its TCP ones to
// NCCL_DEBUG_FILE (%h, %p expanded); NET alone logs the TCP ones only.
TEST(NcclEnvComm, DebugVariablesDriveTheLog) {
  TempDir dir("nccl-debug");
  std::filesystem::create_directories(dir.path());
  for (const char* subsys : {"^NET", "NET"}) {
    SCOPED_TRACE(subsys);
    auto results = runRanks(2, [&](RankContext& ctx) {
      const std::string pattern = dir.path() + "/" + subsys + ".%h.%p.log";
      useVariables({{"LOOM_DEBUG", nullptr},
                    {"LOOM_DEBUG_SUBSYS", nullptr},
                    {"LOOM_DEBUG_FILE", nullptr},
                    {"NCCL_DEBUG", "INFO"},
                    {"NCCL_DEBUG_SUBSYS", subsys},
                    {"NCCL_DEBUG_FILE", pattern.c_str()}});
      loomConfig_t config = LOOM_CONFIG_INITIALIZER;
      config.transport = "tcp";
      loomComm_t comm = nullptr;
      RANK_LOOM(initComm(ctx, &comm, &config));
      if (allreduceChecked(ctx, comm) != 0) return 1;
      RANK_LOOM(loomCommDestroy(comm));
      char host[64] = {};
      gethostname(host, sizeof(host) - 1);
      const std::string file = dir.path() + "/" + subsys + "." + host + "." +
                               std::to_string(getpid()) + ".log";
      const std::string text = readAll(file);
      const size_t tcp = linesWith(text, " INFO TCP ").size();
      const size_t init = linesWith(text, " INFO INIT ").size();
      if (subsys[0] == '^')
        RANK_CHECK(tcp == 0 && init > 0, "%s: %zu TCP, %zu INIT lines:\n%s", file.c_str(), tcp,
                   init, text.c_str());
      else
        RANK_CHECK(tcp > 0 && init == 0, "%s: %zu TCP, %zu INIT lines:\n%s", file.c_str(), tcp,
                   init, text.c_str());
      return 0;
    }, ForkOptions::timeout(60));
    EXPECT_EQ(describeFailures(results), "");
  }
}

// Every rank makes the id itself from LOOM_ROOT (or NCCL_COMM_ID); all make the same one, and
// rank 0 serves the root at that address.
TEST(NcclEnvComm, EveryRankMakesTheIdFromTheRootAddress) {
  for (const char* variable : {"LOOM_ROOT", "NCCL_COMM_ID"}) {
    SCOPED_TRACE(variable);
    const std::string root = "127.0.0.1:" + std::to_string(freePort());
    auto results = runRanks(3, [&](RankContext& ctx) {
      useVariables({{"LOOM_ROOT", nullptr}, {"NCCL_COMM_ID", nullptr}});
      useVariables({{variable, root.c_str()}});
      loomUniqueId id;
      RANK_LOOM(loomGetUniqueId(&id));
      const std::string mine(id.internal, sizeof(id.internal));
      for (const std::string& theirs : ctx.allgather(mine))
        RANK_CHECK(theirs == mine, "rank %d: the ranks' ids differ", ctx.rank());
      loomComm_t comm = nullptr;
      RANK_LOOM(loomCommInitRank(&comm, ctx.nranks(), id, ctx.rank()));
      if (allreduceChecked(ctx, comm) != 0) return 1;
      // A split makes roots of its own, not at the address of the parent's.
      loomComm_t half = nullptr;
      RANK_LOOM(loomCommSplit(comm, ctx.rank() % 2, ctx.rank(), &half, nullptr));
      int64_t v = ctx.rank(), sum = 0;
      RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt64, loomSum, half, nullptr));
      const int64_t want = ctx.rank() % 2 == 0 ? 0 + 2 : 1;
      RANK_CHECK(sum == want, "split sum %lld, want %lld", (long long)sum, (long long)want);
      RANK_LOOM(loomCommDestroy(half));
      RANK_LOOM(loomCommDestroy(comm));
      return 0;
    }, ForkOptions::timeout(60));
    EXPECT_EQ(describeFailures(results), "");
  }
}

// A root address that is not rank 0's: rank 0 cannot listen there and says so at once; the
// others cannot reach it and give up at the deadline, not later.
TEST(NcclEnvComm, AWrongRootAddressFailsWithinTheDeadline) {
  auto results = runRanks(2, [](RankContext& ctx) {
    useVariables({{"LOOM_ROOT", "192.0.2.1:29500"}});  // TEST-NET-1: no host has it
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 2000;
    loomUniqueId id;
    RANK_LOOM(loomGetUniqueId(&id));
    const auto start = std::chrono::steady_clock::now();
    loomComm_t comm = nullptr;
    const loomResult_t rc = loomCommInitRankConfig(&comm, 2, id, ctx.rank(), &config);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const char* msg = loomGetLastError(nullptr);
    RANK_CHECK(rc != loomSuccess, "rank %d: init succeeded", ctx.rank());
    RANK_CHECK(seconds < 6, "rank %d: failed after %.1f s (deadline 2 s)", ctx.rank(), seconds);
    const char* want = ctx.rank() == 0 ? "rank 0 cannot serve the root at 192.0.2.1:29500"
                                       : "cannot reach the root at 192.0.2.1:29500";
    RANK_CHECK(strstr(msg, want) != nullptr, "rank %d: message: %s", ctx.rank(), msg);
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(NcclEnvComm, ARootAddressWithoutAPortIsAClearError) {
  auto results = runRanks(1, [](RankContext&) {
    useVariables({{"LOOM_ROOT", nullptr}, {"NCCL_COMM_ID", "127.0.0.1"}});
    loomUniqueId id;
    const loomResult_t rc = loomGetUniqueId(&id);
    RANK_CHECK(rc == loomInvalidArgument, "got %s", loomGetErrorString(rc));
    const char* msg = loomGetLastError(nullptr);
    RANK_CHECK(strcmp(msg, "loomGetUniqueId: NCCL_COMM_ID: \"127.0.0.1\" names no port "
                           "(expected host:port)") == 0,
               "message: %s", msg);
    return 0;
  }, ForkOptions::timeout(30));
  EXPECT_EQ(describeFailures(results), "");
}

#ifdef LOOM_INFO_BINARY
TEST(LoomInfo, PrintsTheNcclMapping) {
  const std::string command =
      "env -u LOOM_ALGO -u LOOM_DEBUG_SUBSYS -u LOOM_TRANSPORT LOOM_DEBUG=INFO NCCL_DEBUG=TRACE "
      "NCCL_ALGO='allreduce:nvls,tree;allgather:ring' NCCL_DEBUG_SUBSYS='^NET' "
      "NCCL_PROTO=LL128 NCCL_IB_HCA=mlx5_0 NCCL_SHM_DISABLE=bad " LOOM_INFO_BINARY " --nccl";
  FILE* p = popen(command.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  for (const char* line : {
           "  NCCL_DEBUG           -> LOOM_DEBUG           = \"INFO\" (from LOOM_DEBUG; "
           "NCCL_DEBUG=\"TRACE\" overridden)\n",
           "  NCCL_DEBUG_SUBSYS    -> LOOM_DEBUG_SUBSYS    = \"^TCP\" (from "
           "NCCL_DEBUG_SUBSYS=\"^NET\")\n",
           "  NCCL_ALGO            -> LOOM_ALGO            = \"allreduce=tree,allgather=ring\" "
           "(from NCCL_ALGO=\"allreduce:nvls,tree;allgather:ring\")\n"
           "      warning: loom has no counterpart for NVLS; left out\n",
           "  NCCL_SHM_DISABLE     -> LOOM_TRANSPORT       = \"auto\" (from default)\n"
           "      invalid: NCCL_SHM_DISABLE=\"bad\": expected an integer (1 disables) (a "
           "communicator fails to initialise)\n",
           "  NCCL_TOPO_FILE         NCCL's XML describes",
           "  NCCL_PROTO=\"LL128\": loom has no protocols",
           "  NCCL_IB_HCA=\"mlx5_0\": loom has no InfiniBand or RoCE transport\n",
       })
    EXPECT_NE(out.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << out;
}
#endif

}  // namespace
}  // namespace loom::testing
