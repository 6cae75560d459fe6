// The communicator's topology (topology/comm_discovery.h) between forked ranks: the same
// model on every rank, measured figures that are sane and then cached, LOOM_TOPO_MEASURE=0,
// LOOM_TOPO_DUMP and LOOM_TOPO_FILE, and two network-namespace hosts joined by TCP.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "comm/comm.h"
#include "base/params.h"
#include "tests/support/comm_harness.h"
#include "tests/support/cpu_limit.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "tests/support/two_hosts.h"
#include "topology/analysis.h"
#include "topology/builders.h"
#include "topology/discover.h"
#include "topology/probe.h"

namespace loom::testing {
namespace {

using topology::LinkKind;
using topology::Topology;

// In a rank: the environment for this test's communicators.
void useEnvironment(std::initializer_list<std::pair<const char*, std::string>> vars) {
  for (const auto& [name, value] : vars) setenv(name, value.c_str(), 1);
  params::reloadFromEnvironment();
}

// A communicator as the library's internals see it (for its topology).
Status createComm(RankContext& ctx, std::unique_ptr<Comm>* out) {
  loomUniqueId id;
  std::string mine;
  if (ctx.rank() == 0) {
    if (loomGetUniqueId(&id) != loomSuccess) return errorf(loomSystemError, "loomGetUniqueId");
    mine.assign(id.internal, sizeof(id.internal));
  }
  std::string shared = ctx.allgather(mine)[0];
  memcpy(id.internal, shared.data(), sizeof(id.internal));
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = 30000;
  return Comm::create(ctx.nranks(), id, ctx.rank(), &config, out);
}

// Destroys the communicator and returns 0 once every rank has: the bootstrap root lives in rank
// 0, which must not exit while others still talk to it.
int leaveTogether(RankContext& ctx, std::unique_ptr<Comm>* comm) {
  (*comm)->leave();
  comm->reset();
  ctx.allgather("");
  return 0;
}

topology::PathFigures between(const Topology& t, int r, int q) {
  return topology::pathFigures(t, t.ranks[size_t(r)].endpoint, t.ranks[size_t(q)].endpoint);
}

// Checks, inside a rank, that every rank holds the same model (compared as JSON).
bool sameOnEveryRank(RankContext& ctx, const Topology& t) {
  std::vector<std::string> all = ctx.allgather(topology::toJson(t));
  for (const std::string& other : all)
    if (other != all[0]) return false;
  return true;
}

#define RANK_OK(expr)                                                        \
  do {                                                                       \
    Status rankOkStatus_ = (expr);                                           \
    RANK_CHECK(rankOkStatus_.isOk(), "%s", rankOkStatus_.message().c_str()); \
  } while (0)

TEST(CommTopology, SameOnEveryRankMeasuredThenCached) {
  TempDir cache("topo-cache");
  const int n = 4;
  std::string dir = cache.path();
  auto results = runRanks(
      n,
      [&](RankContext& ctx) {
        useEnvironment({{"LOOM_CACHE_DIR", dir}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        const Topology first = comm->topology();
        RANK_OK(first.validate());
        RANK_CHECK(first.ranks.size() == size_t(n), "%zu ranks", first.ranks.size());
        RANK_CHECK(first.hostCount() == 1, "%d hosts", first.hostCount());
        for (const auto& r : first.ranks) RANK_CHECK(r.host == 0, "a rank on host %d", r.host);
        RANK_CHECK(sameOnEveryRank(ctx, first), "the ranks hold different models");
        // Measured (this cache directory was empty): sane, and not the defaults.
        topology::PathFigures f = between(first, 0, 1);
        RANK_CHECK(f.latency > 0 && f.latency < 10e-3, "latency %g s", f.latency);
        RANK_CHECK(f.bandwidth > 10e6, "bandwidth %g B/s", f.bandwidth);
        RANK_CHECK(f.latency != topology::defaultFigures(LinkKind::SameNuma).latency,
                   "the default latency: the measurement did not happen or failed");
        // The burst of pings gives the host's CPU time per plan step: about a fraction of a
        // round trip (it can measure 0 when a loaded machine's noise hides the burst's extra
        // messages; under AddressSanitizer's instrumentation, whose cost falls on the steps'
        // code more than on a ping's wait, it measured 15 us beside a 5 us latency), and the
        // reload below must bring the same figure back. Sane: within tens of microseconds.
        const double step = first.nodes[size_t(first.hostNodes()[0])].cpu.stepOverhead;
        RANK_CHECK(step >= 0 && step < 2 * f.latency + 50e-6, "stepOverhead %g s (latency %g s)",
                   step, f.latency);
        // One core's copy rates, measured once for the host, where hwloc names its last-level
        // cache (the model has no use for them without its size). A claim the measurement
        // checks (measuredCacheReach) may become what the copies show, which differs between
        // measurements: at least the least it reports.
        const topology::HostCpu& cpu = first.nodes[size_t(first.hostNodes()[0])].cpu;
        topology::HostInfo info;
        if (topology::probeHost(&info, false).isOk() &&
            topology::lastLevelCacheOf(info).size > 0) {
          const topology::CacheLevel last = topology::lastLevelCacheOf(info);
          const uint64_t least =
              last.size > topology::kCacheClaimChecked ? topology::kCacheCheckFirst : last.size;
          RANK_CHECK(cpu.cacheBytes >= least, "cacheBytes %llu, least %llu",
                     (unsigned long long)cpu.cacheBytes, (unsigned long long)least);
          RANK_CHECK(cpu.memBandwidth > 5e8 && cpu.cacheBandwidth > 5e8,
                     "copy rates %g and %g B/s", cpu.memBandwidth, cpu.cacheBandwidth);
          RANK_CHECK(cpu.peerReadCopies > 0, "peerReadCopies %g", cpu.peerReadCopies);
        }
        std::string file = topology::hostCachePath(
            dir, topology::hostSignature(comm->peer(0).hostname, comm->peer(0).hostId));
        comm->leave();
        comm.reset();
        ctx.allgather("");  // rank 0 has written the cache before it returned from init
        RANK_CHECK(std::filesystem::exists(file), "no cache file %s", file.c_str());
        // The next communicator reads the figures back instead of measuring again.
        RANK_OK(createComm(ctx, &comm));
        RANK_CHECK(comm->topology() == first, "the cached model differs from the measured one");
        return leaveTogether(ctx, &comm);
      },
      ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

// Under LOOM_TRANSPORT=ucx the probe measures the links over UCX (here its shared memory) and
// files the figures under the transport's name, apart from shm's.
TEST(CommTopologyUcx, MeasuresUcxLinksAndCachesThemApart) {
  TempDir cache("topo-ucx");
  const std::string dir = cache.path();
  auto results = runRanks(
      2,
      [&](RankContext& ctx) {
        useEnvironment({{"LOOM_CACHE_DIR", dir}, {"LOOM_TRANSPORT", "ucx"}, {"UCX_TLS", "sm"}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        const Topology& t = comm->topology();
        RANK_OK(t.validate());
        const topology::PathFigures f = between(t, 0, 1);
        RANK_CHECK(f.latency > 0 && f.latency < 10e-3, "latency %g s", f.latency);
        RANK_CHECK(f.bandwidth > 10e6, "bandwidth %g B/s", f.bandwidth);
        RANK_CHECK(f.latency != topology::defaultFigures(LinkKind::SameNuma).latency,
                   "the default latency: the measurement did not happen or failed");
        const std::string file = topology::hostCachePath(
            dir, topology::hostSignature(comm->peer(0).hostname, comm->peer(0).hostId));
        const int rc = leaveTogether(ctx, &comm);
        std::string text;
        if (FILE* f = fopen(file.c_str(), "r")) {
          char buf[4096];
          for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
          fclose(f);
        }
        const std::string key = topology::linkCacheKey(LinkKind::SameNuma, "ucx");
        RANK_CHECK(text.find("\"" + key) != std::string::npos, "no %s figures in %s: %s",
                   key.c_str(), file.c_str(), text.c_str());
        return rc;
      },
      ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

// LOOM_BIND=auto: with more ranks than cores and nobody bound, every rank's thread is bound to
// one CPU, the ranks spread evenly (no CPU holds two more than another), until the communicator
// goes; with fewer ranks than cores, or LOOM_BIND=none, nothing is bound; a bad value is an
// error that names the parameter.
// The ranks run on at most 6 CPUs (up to 12 ranks), whatever the machine has.
TEST(CommTopology, RanksBeyondTheCoresSpreadOverThemOnePerCpu) {
  const CpuLimit limit(6);
  ASSERT_TRUE(limit.ok());
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  const int cpus = CPU_COUNT(&all);
  for (const char* mode : {"auto", "none"}) {
    for (int n : {std::max(1, cpus - 1), cpus + 1, 2 * cpus}) {
      SCOPED_TRACE(strprintf("LOOM_BIND=%s, %d ranks on %d CPUs", mode, n, cpus));
      const bool binds = std::strcmp(mode, "auto") == 0 && n > cpus;
      auto results = runRanks(n, [&](RankContext& ctx) {
        useEnvironment({{"LOOM_BIND", mode}, {"LOOM_TOPO_MEASURE", "0"}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        cpu_set_t now;
        RANK_CHECK(sched_getaffinity(0, sizeof(now), &now) == 0, "sched_getaffinity");
        int cpu = -1;
        for (int c = 0; c < CPU_SETSIZE && CPU_COUNT(&now) == 1; ++c)
          if (CPU_ISSET(c, &now)) cpu = c;
        RANK_CHECK(binds ? cpu >= 0 : CPU_EQUAL(&now, &all), "affinity: %d CPU(s)",
                   CPU_COUNT(&now));
        std::vector<std::string> chosen = ctx.allgather(std::to_string(cpu));
        if (binds) {
          std::map<std::string, int> perCpu;
          for (const std::string& c : chosen) ++perCpu[c];
          int most = 0, least = n;
          for (const auto& [c, k] : perCpu) most = std::max(most, k), least = std::min(least, k);
          RANK_CHECK(int(perCpu.size()) == cpus && most - least <= 1,
                     "%zu CPUs used, %d to %d ranks each", perCpu.size(), least, most);
        }
        comm->leave();
        comm.reset();
        RANK_CHECK(sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &all),
                   "the CPUs were not given back (%d of %d)", CPU_COUNT(&now), cpus);
        ctx.allgather("");
        return 0;
      }, ForkOptions::timeout(120));
      EXPECT_EQ(describeFailures(results), "");
    }
  }
  auto bad = runRanks(1, [&](RankContext& ctx) {
    useEnvironment({{"LOOM_BIND", "cores"}});
    std::unique_ptr<Comm> comm;
    Status st = createComm(ctx, &comm);
    RANK_CHECK(st.code() == loomInvalidArgument &&
                   st.message().find("LOOM_BIND=\"cores\": expected auto or none") !=
                       std::string::npos,
               "%s", st.message().c_str());
    return 0;
  });
  EXPECT_EQ(describeFailures(bad), "");
}

// With more ranks than the host has cores, a message waits for its receiver to get a core: the
// within-host latency is then measured with the measuring pair on one core and filed under its
// own key, beside (not over) the figures of communicators with a core per rank.
TEST(CommTopology, MoreRanksThanCoresMeasureOnOneCoreAndCacheApart) {
  // The test runs cores + 1 ranks and a pair of ranks that fits: on a machine of more than 7
  // cores the ranks run on fewer of them (hwloc counts, as loom does, the cores this process
  // may use; two CPUs of one core count once, so the limit grows until there are 2 cores).
  topology::HostInfo info;
  ASSERT_TRUE(topology::probeHost(&info, false).isOk());
  std::unique_ptr<CpuLimit> limit;
  for (int cpus = 2; (info.cores > 7 || info.cores < 2) && cpus <= 16; cpus *= 2) {
    limit.reset();  // the next limit is of all the CPUs again
    limit = std::make_unique<CpuLimit>(cpus);
    ASSERT_TRUE(limit->ok());
    ASSERT_TRUE(topology::probeHost(&info, false).isOk());
  }
  const int fit = std::max(1, info.cores), over = info.cores + 1;
  if (over > 8 || fit < 2)
    GTEST_SKIP() << "needs 2 cores at least (this process may use " << info.cores << ")";
  TempDir cache("topo-shared-core");
  const std::string dir = cache.path();
  const std::string plain = topology::linkCacheKey(LinkKind::SameNuma, "shm");
  const std::string shared = plain + "/shared-core";
  for (int n : {2, over}) {
    auto results = runRanks(n, [&](RankContext& ctx) {
      useEnvironment({{"LOOM_CACHE_DIR", dir}});
      std::unique_ptr<Comm> comm;
      RANK_OK(createComm(ctx, &comm));
      topology::PathFigures f = between(comm->topology(), 0, 1);
      RANK_CHECK(f.latency > 0 && f.latency < 10e-3, "latency %g s", f.latency);
      // Where the pair measured on one core and on two, the model prices a message between
      // ranks of one core with what the filed figures say one core adds (rank 0 filed them),
      // less the share of it that every message pays with more ranks than cores (cores / n).
      const topology::Topology& model = comm->topology();
      const double modelled = model.nodes[size_t(model.hostNodes()[0])].cpu.sharedCoreLatency;
      if (ctx.rank() == 0) {
        std::string hostname;
        const uint64_t hostId = topology::hostIdentity(&hostname);
        topology::HostCache filed;
        RANK_OK(topology::loadHostCache(dir, topology::hostSignature(hostname, hostId), &filed));
        const double measured =
            n == over ? filed.links[shared].sharedCore * info.cores / double(n) : 0;
        RANK_CHECK(std::abs(modelled - measured) <= 1e-9 * measured && measured >= 0,
                   "modelled %g s, filed share %g s", modelled, measured);
      }
      return leaveTogether(ctx, &comm);
    }, ForkOptions::timeout(120));
    ASSERT_EQ(describeFailures(results), "") << n << " ranks";
    std::string hostname;
    const uint64_t hostId = topology::hostIdentity(&hostname);
    topology::HostCache filed;
    ASSERT_TRUE(
        topology::loadHostCache(dir, topology::hostSignature(hostname, hostId), &filed).isOk());
    EXPECT_EQ(filed.links.count(plain), 1u) << n << " ranks";  // from the pair that fits
    EXPECT_EQ(filed.links.count(shared), n == over ? 1u : 0u) << n << " ranks";
  }
}

// Ranks bound to a core each (mpirun --bind-to core) have a core each: they spin. Each sees
// only its own core in its affinity; the machine's cores are those of all its ranks.
TEST(CommTopology, RanksBoundToACoreEachSpin) {
  cpu_set_t all;
  if (sched_getaffinity(0, sizeof(all), &all) != 0 || CPU_COUNT(&all) < 2)
    GTEST_SKIP() << "needs 2 CPUs to bind 2 ranks to one each";
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  auto results = runRanks(2, [&](RankContext& ctx) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[size_t(ctx.rank())], &one);
    RANK_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity failed");
    std::unique_ptr<Comm> comm;
    RANK_OK(createComm(ctx, &comm));
    RANK_CHECK(comm->machineRanks() == 2 && comm->machineCores() == 2,
               "%d rank(s) on this machine's %d core(s), expected 2 on 2", comm->machineRanks(),
               comm->machineCores());
    RANK_CHECK(comm->waitPolicy().spinCount == 2000, "spin count %lld, expected 2000",
               (long long)comm->waitPolicy().spinCount);
    return leaveTogether(ctx, &comm);
  }, ForkOptions::timeout(60));
  ASSERT_EQ(describeFailures(results), "");
}

TEST(CommTopology, MeasureZeroUsesDefaults) {
  TempDir cache("topo-nomeasure");
  std::string dir = cache.path();
  auto results = runRanks(
      3,
      [&](RankContext& ctx) {
        useEnvironment({{"LOOM_CACHE_DIR", dir}, {"LOOM_TOPO_MEASURE", "0"}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        topology::PathFigures f = between(comm->topology(), 0, 2);
        topology::LinkFigures d = topology::defaultFigures(LinkKind::SameNuma);
        RANK_CHECK(std::abs(f.latency - d.latency) < 1e-12 && f.bandwidth == d.bandwidth,
                   "figures %g s, %g B/s are not the defaults", f.latency, f.bandwidth);
        topology::HostCache c;
        std::string sig = topology::hostSignature(comm->peer(0).hostname, comm->peer(0).hostId);
        comm->leave();
        ctx.allgather("");
        RANK_OK(topology::loadHostCache(dir, sig, &c));  // the probe is cached, no figures
        RANK_CHECK(c.cores > 0 && !c.numaCpus.empty() && c.links.empty(),
                   "cache: %d cores, %zu NUMA nodes, %zu links", c.cores, c.numaCpus.size(),
                   c.links.size());
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(CommTopology, DumpLoadsBackAndTopoFileReplacesDetection) {
  TempDir out("topo-dump");
  std::string dir = out.path(), dump = dir + "/topology.json";
  std::filesystem::create_directories(dir);
  auto results = runRanks(
      4,
      [&](RankContext& ctx) {
        useEnvironment({{"LOOM_CACHE_DIR", dir}, {"LOOM_TOPO_DUMP", dump}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        Topology detected = comm->topology();
        comm->leave();
        comm.reset();
        ctx.allgather("");
        Topology loaded;
        RANK_OK(topology::loadTopology(dump, &loaded));
        RANK_CHECK(loaded == detected, "the dump differs from the communicator's model");
        // Loaded instead of detected: a model that is not this machine (four hosts).
        ctx.allgather("");  // everyone has read the dump before rank 0 overwrites it
        topology::CpuHostSpec host;
        host.memory = {5e9, 3e-6, "shm"};
        host.pcie = {16e9, 0.5e-6, "pcie"};
        Topology model = topology::uniformHosts("four-hosts", 4, host, {1e9, 50e-6, "tcp"});
        std::string modelFile = dir + "/model.json";
        if (ctx.rank() == 0) RANK_OK(topology::saveTopology(model, modelFile));
        ctx.allgather("");
        useEnvironment({{"LOOM_TOPO_FILE", modelFile}});
        RANK_OK(createComm(ctx, &comm));
        RANK_CHECK(comm->topology() == model, "LOOM_TOPO_FILE was not used as given");
        return leaveTogether(ctx, &comm);
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(CommTopology, TopoFileWithTheWrongRanksFailsInit) {
  TempDir out("topo-badfile");
  std::string dir = out.path();
  std::filesystem::create_directories(dir);
  topology::CpuHostSpec host;
  host.ranksPerSocket = 2;
  host.memory = {5e9, 3e-6, "shm"};
  Topology two = topology::uniformHosts("two-ranks", 1, host, {});
  ASSERT_TRUE(topology::saveTopology(two, dir + "/two.json").isOk());
  two.ranks.clear();
  ASSERT_TRUE(topology::saveTopology(two, dir + "/none.json").isOk());
  for (auto [file, expected] : {std::pair<std::string, std::string>{
                                    "two.json", "the model has 2 ranks but the communicator has 4"},
                                {"none.json", "the model has no ranks"}}) {
    SCOPED_TRACE(file);
    std::string path = dir + "/" + file, want = expected;
    auto results = runRanks(
        4,
        [&](RankContext& ctx) {
          useEnvironment({{"LOOM_TOPO_FILE", path}});
          loomComm_t comm = nullptr;
          loomResult_t rc = initComm(ctx, &comm);
          ctx.allgather("");  // the bootstrap root lives in rank 0: it must not exit first
          RANK_CHECK(rc == loomInvalidArgument, "init returned %s", loomGetErrorString(rc));
          std::string message = loomGetLastError(nullptr);
          RANK_CHECK(message.find(want) != std::string::npos, "message: %s", message.c_str());
          RANK_CHECK(message.find(path) != std::string::npos, "no file name in: %s",
                     message.c_str());
          return 0;
        },
        ForkOptions::timeout(60));
    EXPECT_EQ(describeFailures(results), "");
  }
}

TEST(CommTopology, BadMeasureSettingFailsInit) {
  auto results = runRanks(
      2,
      [&](RankContext& ctx) {
        useEnvironment({{"LOOM_TOPO_MEASURE", "3"}});
        loomComm_t comm = nullptr;
        loomResult_t rc = initComm(ctx, &comm);
        ctx.allgather("");  // the bootstrap root lives in rank 0: it must not exit first
        RANK_CHECK(rc == loomInvalidArgument, "init returned %s", loomGetErrorString(rc));
        std::string message = loomGetLastError(nullptr);
        RANK_CHECK(message.find("LOOM_TOPO_MEASURE=3: expected 0") != std::string::npos,
                   "message: %s", message.c_str());
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

using TopologyTwoHosts = TwoHostsTest;

TEST_F(TopologyTwoHosts, JoinedByTcp) {
  TempDir cache("topo-netns");
  std::string dir = cache.path(), a = hostA_, b = hostB_;
  auto results = runRanks(
      4,
      [&](RankContext& ctx) {
        RANK_CHECK(enter(ctx.rank() < 2 ? a : b) == 0, "setns failed");
        useEnvironment({{"LOOM_CACHE_DIR", dir}});
        std::unique_ptr<Comm> comm;
        RANK_OK(createComm(ctx, &comm));
        const Topology& t = comm->topology();
        RANK_OK(t.validate());
        RANK_CHECK(t.hostCount() == 2, "%d hosts", t.hostCount());
        for (int r = 0; r < 4; ++r)
          RANK_CHECK(t.ranks[size_t(r)].host == r / 2, "rank %d on host %d", r,
                     t.ranks[size_t(r)].host);
        int tcpHops = 0;
        for (int32_t l : t.route(t.ranks[1].endpoint, t.ranks[2].endpoint))
          tcpHops += t.links[size_t(l)].kind == "tcp";
        RANK_CHECK(tcpHops == 2, "%d tcp links between the hosts, want 2 (NIC-switch-NIC)",
                   tcpHops);
        topology::PathFigures f = between(t, 1, 2);
        RANK_CHECK(f.latency > 0 && f.latency < 10e-3, "latency %g s", f.latency);
        RANK_CHECK(f.bandwidth > 10e6, "bandwidth %g B/s", f.bandwidth);
        RANK_CHECK(f.latency != topology::defaultFigures(LinkKind::Network).latency,
                   "the default network latency: the measurement did not happen or failed");
        RANK_CHECK(sameOnEveryRank(ctx, t), "the ranks hold different models");
        return leaveTogether(ctx, &comm);
      },
      ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
