// Ranks on two "hosts": network namespaces joined by a veth pair. Ranks in one namespace talk
// over shared memory, across namespaces over TCP, inside one communicator. Needs root and
// iproute2; skips (and says why) otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "comm/comm.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "tests/support/two_hosts.h"
#include "tests/support/values.h"
#include "topology/discover.h"
#include "topology/probe.h"
#include "topology/topology.h"

namespace loom::testing {
namespace {

using TwoHosts = TwoHostsTest;

// Ranks 0,1 on host A, 2,3 on host B: every collective kind at counts 0 to 1 Mi, exact, over
// `transport` (null: auto, which is shm within a host and TCP across).
std::vector<RankResult> everyCollectiveOnTwoHosts(const std::string& a, const std::string& b,
                                                  const char* transport) {
  const int n = 4;
  return runRanks(n, [&](RankContext& ctx) {
    RANK_CHECK(TwoHostsTest::enter(ctx.rank() < 2 ? a : b) == 0, "setns failed");
    loomComm_t comm = nullptr;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 30000;
    config.transport = transport;
    RANK_LOOM(initComm(ctx, &comm, &config));
    for (uint64_t count : {uint64_t(0), uint64_t(1), uint64_t(1001), uint64_t(1) << 20}) {
      for (loomRedOp_t op : {loomSum, loomMax}) {
        std::vector<float> in(count + 1), out(count + 1);
        fillInput(in.data(), count, op, loomFloat32, n, ctx.rank());
        RANK_LOOM(loomAllReduce(in.data(), out.data(), count, loomFloat32, op, comm, nullptr));
        uint64_t bad = countReductionErrors(out.data(), count, op, loomFloat32, n);
        RANK_CHECK(bad == 0, "allreduce count %llu: %llu wrong", (unsigned long long)count,
                   (unsigned long long)bad);
      }
      std::vector<int32_t> mine(count + 1, ctx.rank() * 10 + 1), all(count * n + 1);
      RANK_LOOM(loomAllGather(mine.data(), all.data(), count, loomInt32, comm, nullptr));
      for (uint64_t i = 0; i < count * n; ++i)
        RANK_CHECK(all[i] == int32_t(i / count) * 10 + 1, "allgather element %llu",
                   (unsigned long long)i);
      std::vector<int32_t> bc(count + 1, ctx.rank() == 3 ? 77 : 0);
      RANK_LOOM(loomBroadcast(bc.data(), bc.data(), count, loomInt32, 3, comm, nullptr));
      for (uint64_t i = 0; i < count; ++i) RANK_CHECK(bc[i] == 77, "broadcast");
      std::vector<int32_t> send(count * n + 1), recv(count * n + 1);
      for (uint64_t i = 0; i < count * n; ++i) send[i] = int32_t(ctx.rank() * 1000 + i / count);
      RANK_LOOM(loomAlltoAll(send.data(), recv.data(), count, loomInt32, comm, nullptr));
      for (uint64_t i = 0; i < count * n; ++i)
        RANK_CHECK(recv[i] == int32_t((i / count) * 1000 + ctx.rank()), "alltoall");
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
}

TEST_F(TwoHosts, ShmInsideTcpAcrossEveryCollective) {
  EXPECT_EQ(describeFailures(everyCollectiveOnTwoHosts(hostA_, hostB_, nullptr)), "");
}

// The same over UCX: its TCP across the hosts (UCX's peer error handling on those endpoints)
// and whatever UCX chooses within a host.
class UcxTwoHosts : public TwoHostsTest {};

TEST_F(UcxTwoHosts, EveryCollective) {
  EXPECT_EQ(describeFailures(everyCollectiveOnTwoHosts(hostA_, hostB_, "ucx")), "");
}

TEST_F(UcxTwoHosts, EveryCollectiveOverUcxTcp) {
  setenv("UCX_TLS", "tcp", 1);
  const auto results = everyCollectiveOnTwoHosts(hostA_, hostB_, "ucx");
  unsetenv("UCX_TLS");
  EXPECT_EQ(describeFailures(results), "");
}

// Under LOOM_TRANSPORT=auto with UCX built, the links between hosts go over tcp or UCX, the one
// the network link's figures make cheaper (topology::NetworkChoice). Four ranks, two per host,
// with the per-host cache in cacheDir and LOOM_TOPO_MEASURE=measure; before init, the first rank
// of each host applies `edit` (where set) to its host's cache entry. Each rank then runs an
// allreduce and an allgather, exact, which connect it to every other rank, and logs at INFO.
std::vector<RankResult> chooseNetworkOnTwoHosts(
    const std::string& a, const std::string& b, const std::string& cacheDir, const char* measure,
    const std::function<int(topology::HostCache*)>& edit = nullptr) {
  const int n = 4;
  return runRanks(n, [&](RankContext& ctx) {
    RANK_CHECK(TwoHostsTest::enter(ctx.rank() < 2 ? a : b) == 0, "setns failed");
    setenv("LOOM_CACHE_DIR", cacheDir.c_str(), 1);
    setenv("LOOM_TOPO_MEASURE", measure, 1);
    params::reloadFromEnvironment();
    logInRank("INFO", "INIT");
    if (edit && ctx.rank() % 2 == 0) {
      std::string hostname;
      const uint64_t hostId = topology::hostIdentity(&hostname);
      topology::HostCache cache;
      const std::string signature = topology::hostSignature(hostname, hostId);
      RANK_CHECK(topology::loadHostCache(cacheDir, signature, &cache).isOk(), "no cache entry");
      if (edit(&cache) != 0) return 1;
      RANK_CHECK(topology::saveHostCache(cacheDir, cache).isOk(), "cannot save the cache");
    }
    loomComm_t comm = nullptr;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 30000;
    config.transport = "auto";
    RANK_LOOM(initComm(ctx, &comm, &config));
    for (uint64_t count : {uint64_t(1001), uint64_t(1) << 18}) {
      std::vector<float> in(count), out(count);
      fillInput(in.data(), count, loomSum, loomFloat32, n, ctx.rank());
      RANK_LOOM(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr));
      const uint64_t bad = countReductionErrors(out.data(), count, loomSum, loomFloat32, n);
      RANK_CHECK(bad == 0, "allreduce count %llu: %llu wrong", (unsigned long long)count,
                 (unsigned long long)bad);
      std::vector<int32_t> mine(count, ctx.rank() * 10 + 1), all(count * n);
      RANK_LOOM(loomAllGather(mine.data(), all.data(), count, loomInt32, comm, nullptr));
      for (uint64_t i = 0; i < count * n; ++i)
        RANK_CHECK(all[i] == int32_t(i / count) * 10 + 1, "allgather element %llu",
                   (unsigned long long)i);
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
}

// The transport every rank chose for the links between hosts ("" where they differ or one did
// not say), checking that the connections went over it across hosts and over shm within one,
// and that there were some across (a test failure otherwise).
std::string networkChosenByEveryRank(const std::vector<RankResult>& results) {
  std::string chosen;
  int acrossHosts = 0;
  for (size_t r = 0; r < results.size(); ++r) {
    const std::vector<std::string> said = linesWith(results[r].output, "links between hosts over ");
    if (said.size() != 1) {
      ADD_FAILURE() << "rank " << r << " said " << said.size() << " times: " << results[r].output;
      return "";
    }
    const size_t at = said[0].find("over ") + 5;
    const std::string mine = said[0].substr(at, said[0].find(':', at) - at);
    if (r > 0 && mine != chosen) {
      ADD_FAILURE() << "rank " << r << " chose " << mine << ", rank 0 " << chosen;
      return "";
    }
    chosen = mine;
    for (const std::string& line : linesWith(results[r].output, "connected to rank ")) {
      const int peer = atoi(line.c_str() + line.find("connected to rank ") + 18);
      const bool across = (peer < 2) != (r < 2);
      acrossHosts += across;
      EXPECT_TRUE(line.ends_with(across ? " over " + chosen : " over shm")) << "rank " << r
                                                                              << ": " << line;
    }
  }
  EXPECT_GT(acrossHosts, 0) << "no rank connected to the other host";
  return chosen;
}

// Makes the network link's figures over `cheaper` those over the other transport with four
// times the bandwidth and half the latency; 0, or non-zero with RANK_CHECK's message where the
// cache lacks either.
int makeCheaper(topology::HostCache* cache, const std::string& cheaper) {
  const std::string other = cheaper == "ucx" ? "tcp" : "ucx";
  int edited = 0;
  for (auto& [key, figures] : cache->links) {
    if (!key.starts_with("network/" + cheaper + "/")) continue;
    const std::string otherKey = "network/" + other + key.substr(key.find('/', 8));
    RANK_CHECK(cache->links.count(otherKey) == 1, "no %s figures", otherKey.c_str());
    figures = cache->links.at(otherKey);
    figures.bandwidth *= 4;
    figures.latency /= 2;
    ++edited;
  }
  RANK_CHECK(edited == 1, "%d network/%s figures in the cache", edited, cheaper.c_str());
  return 0;
}

// Measured over both (LOOM_TOPO_MEASURE=2), every rank chooses the same and files both
// transports' figures; from the cache, where those make one transport clearly cheaper, every
// rank chooses that one, either way, and the collectives are exact over it.
TEST_F(UcxTwoHosts, AutoCarriesTheLinksBetweenHostsOverTheCheaperTransport) {
  TempDir cache("netns-choice");
  auto results = chooseNetworkOnTwoHosts(hostA_, hostB_, cache.path(), "2");
  ASSERT_EQ(describeFailures(results), "");
  const std::string measured = networkChosenByEveryRank(results);
  EXPECT_TRUE(measured == "tcp" || measured == "ucx") << measured;
  EXPECT_FALSE(linesWith(results[0].output, "(measured), ucx ").empty()) << results[0].output;
  for (const std::string cheaper : {"ucx", "tcp"}) {
    results = chooseNetworkOnTwoHosts(hostA_, hostB_, cache.path(), "1",
                                      [&](topology::HostCache* c) { return makeCheaper(c, cheaper); });
    ASSERT_EQ(describeFailures(results), "");
    EXPECT_EQ(networkChosenByEveryRank(results), cheaper);
    EXPECT_FALSE(linesWith(results[0].output, "(cached), ucx ").empty()) << results[0].output;
  }
}

// Without figures (LOOM_TOPO_MEASURE=0, nothing cached) UCX carries the links between hosts
// only where every rank has an RDMA device.
TEST_F(UcxTwoHosts, AutoWithoutFiguresTakesUcxOnlyWithRdmaDevices) {
  TempDir cache("netns-choice");
  const auto results = chooseNetworkOnTwoHosts(hostA_, hostB_, cache.path(), "0");
  ASSERT_EQ(describeFailures(results), "");
  EXPECT_EQ(networkChosenByEveryRank(results), topology::rdmaDevices().empty() ? "tcp" : "ucx");
  EXPECT_FALSE(linesWith(results[0].output, "RDMA device").empty()) << results[0].output;
}

// What a rank does with its communicator before destroying it: 0, or non-zero with
// RANK_CHECK's message.
using UseComm = std::function<int(int rank, loomComm_t comm)>;

// One rank in each namespace creates a communicator, uses it and destroys it, after
// setup(rank) (which returns 0, or non-zero with RANK_CHECK's message).
std::vector<RankResult> initOnBothHosts(const std::string& a, const std::string& b,
                                        const std::function<int(int rank)>& setup,
                                        const UseComm& use = nullptr) {
  return runRanks(2, [&](RankContext& ctx) {
    RANK_CHECK(TwoHostsTest::enter(ctx.rank() == 0 ? a : b) == 0, "setns failed");
    if (setup(ctx.rank()) != 0) return 1;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    if (use && use(ctx.rank(), comm) != 0) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
}

// initOnBothHosts with rank 0 writing the communicator's model (LOOM_TOPO_DUMP), read back into
// *model (a test failure where it cannot be read); with infoSubsystems, the ranks log those at
// INFO into their output.
std::vector<RankResult> initDumpingTheModel(const std::string& a, const std::string& b,
                                            const char* infoSubsystems,
                                            topology::Topology* model,
                                            const UseComm& use = nullptr) {
  TempDir dir("netns-model");
  std::filesystem::create_directories(dir.path());
  const std::string file = dir.path() + "/model.json";
  auto results = initOnBothHosts(a, b, [&](int rank) {
    if (rank == 0) setenv("LOOM_TOPO_DUMP", file.c_str(), 1);
    params::reloadFromEnvironment();
    if (infoSubsystems != nullptr) logInRank("INFO", infoSubsystems);
    return 0;
  }, use);
  if (describeFailures(results).empty()) {
    const Status st = topology::loadTopology(file, model);
    if (!st.isOk()) ADD_FAILURE() << "the dumped model: " << st.message();
  }
  return results;
}

// Namespaces are other hosts to the plans but not other CPUs: two ranks pinned to one core, one
// in each namespace, are each alone on their host yet share the core, so neither may spin
// (a spinning rank would hold the core its peer needs).
TEST_F(TwoHosts, RanksInOtherNamespacesCountAsSharingTheCores) {
  auto results = initOnBothHosts(hostA_, hostB_, [](int) {
    cpu_set_t one;  // both ranks on CPU 0: the machine's ranks have one core between them
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    RANK_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity failed");
    return 0;
  }, [](int, loomComm_t handle) {
    const Comm& comm = commOf(handle);
    RANK_CHECK(comm.topology().hostCount() == 2, "%d host(s), expected 2",
               comm.topology().hostCount());
    RANK_CHECK(comm.machineRanks() == 2 && comm.machineCores() == 1,
               "%d rank(s) on this machine's %d core(s), expected 2 on 1", comm.machineRanks(),
               comm.machineCores());
    RANK_CHECK(comm.waitPolicy().spinCount == 0, "spin count %lld, expected 0",
               (long long)comm.waitPolicy().spinCount);
    return 0;
  });
  ASSERT_EQ(describeFailures(results), "");
}

// Two namespaces of one machine, one rank each: the communicator's model says that both
// "hosts" run on one machine (HostCpu::machine) and gives each the machine's cores, which the
// simulator then counts once for both, not twice over.
TEST_F(TwoHosts, HostsOfOneMachineShareItsCoresInTheModel) {
  topology::Topology model;
  auto results = initDumpingTheModel(hostA_, hostB_, nullptr, &model);
  ASSERT_EQ(describeFailures(results), "");
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  ASSERT_EQ(model.hostCount(), 2);
  const std::vector<int32_t> hosts = model.hostNodes();
  const topology::HostCpu &a = model.nodes[size_t(hosts[0])].cpu,
                          &b = model.nodes[size_t(hosts[1])].cpu;
  EXPECT_EQ(a.cores, CPU_COUNT(&mine));
  EXPECT_EQ(b.cores, a.cores);
  EXPECT_FALSE(a.machine.empty());
  EXPECT_EQ(b.machine, a.machine);
}

// The pacing rate (SO_MAX_PACING_RATE, bytes/s) of each of this process's connected TCP
// sockets that has one; unpaced sockets (the kernel's ~0) are left out.
std::vector<uint64_t> pacedSockets() {
  std::vector<uint64_t> rates;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    int type = 0;
    socklen_t len = sizeof(type);
    sockaddr_storage peer{};
    socklen_t peerLen = sizeof(peer);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerLen) != 0)
      continue;
    unsigned long rate = 0;
    len = sizeof(rate);
    if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len) == 0 && rate != ~0UL)
      rates.push_back(rate);
  }
  return rates;
}

// LOOM_TCP_PACING=-1, the default: each rank paces its sockets to the other host at the
// slowest network link of the communicator's model on the way (here the measured link), once
// it sends more at once than a burst that needs none. After an allreduce of one float, which
// connects the ranks, no socket is paced; after one of 1 MiB, each rank reports its sockets'
// pacing.
TEST_F(TwoHosts, SocketsToTheOtherHostArePacedAtTheModelsLink) {
  // TCP between the hosts whatever auto's figures say (one rank per host: tcp is auto's path).
  setenv("LOOM_TRANSPORT", "tcp", 1);
  topology::Topology model;
  auto results = initDumpingTheModel(hostA_, hostB_, nullptr, &model, [](int, loomComm_t comm) {
    float in = 1, out = 0;
    RANK_LOOM(loomAllReduce(&in, &out, 1, loomFloat32, loomSum, comm, nullptr));
    RANK_CHECK(pacedSockets().empty(), "%zu sockets paced after an allreduce of 4 bytes",
               pacedSockets().size());
    std::vector<float> big(size_t(1) << 18, 1.0f), sum(big.size(), 0.0f);
    RANK_LOOM(loomAllReduce(big.data(), sum.data(), big.size(), loomFloat32, loomSum, comm,
                            nullptr));
    RANK_CHECK(out == 2 && sum.front() == 2 && sum.back() == 2, "allreduce gave %g, %g", out,
               double(sum.back()));
    for (uint64_t rate : pacedSockets())  // into the rank's output, which the test reads
      fprintf(stderr, "socket paced at %llu B/s\n", (unsigned long long)rate);
    return 0;
  });
  unsetenv("LOOM_TRANSPORT");
  ASSERT_EQ(describeFailures(results), "");
  const uint64_t rate = uint64_t(topology::slowestNetworkLink(model, 0, 1));
  ASSERT_GT(rate, 0u);
  for (const auto& r : results) {
    const std::vector<std::string> paced = linesWith(r.output, "socket paced at ");
    EXPECT_FALSE(paced.empty()) << r.output;
    for (const std::string& line : paced)
      EXPECT_NE(line.find(strprintf("socket paced at %llu B/s", (unsigned long long)rate)),
                std::string::npos)
          << line;
  }
}

// A shaped link's token bucket (tc htb burst) is measured at init and is the burst of the
// model's network links (topology Link::burstBytes), which the simulator then prices.
TEST_F(TwoHosts, TheModelsNetworkLinksHaveTheShapersBurst) {
  constexpr int kBurst = 24000;
  if (!shapeLinks("200mbit", kBurst)) GTEST_SKIP() << "tc cannot shape the links (no htb?)";
  setenv("LOOM_TOPO_MEASURE", "2", 1);  // measured, not a cached figure of an unshaped link
  setenv("LOOM_TRANSPORT", "tcp", 1);    // the figures of tcp, whatever auto would choose
  topology::Topology model;
  auto results = initDumpingTheModel(hostA_, hostB_, nullptr, &model);
  unsetenv("LOOM_TOPO_MEASURE");
  unsetenv("LOOM_TRANSPORT");
  ASSERT_EQ(describeFailures(results), "");
  int shaped = 0;
  for (const topology::Link& l : model.links) {
    if (l.kind != "tcp") continue;
    ++shaped;
    EXPECT_NEAR(l.bandwidth, 25e6, 5e6);
    EXPECT_GT(l.burstBytes, kBurst / 2);
    EXPECT_LT(l.burstBytes, kBurst * 3 / 2);
  }
  EXPECT_EQ(shaped, 4);  // each host's NIC to the switch and back
}

}  // namespace
}  // namespace loom::testing
