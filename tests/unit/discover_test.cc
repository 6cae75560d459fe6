// The pure parts of the communicator's topology (topology/discover.h): the builder from per-rank
// records, the choice of measuring pairs, NUMA binding, the topology signature, and the per-host
// cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "base/params.h"
#include "comm/options.h"
#include "topology/analysis.h"
#include "topology/builders.h"
#include "topology/discover.h"
#include "topology/probe.h"

namespace loom::topology {
namespace {

constexpr LinkFigures kSame{2e-6, 6e9}, kCross{3e-6, 4e9}, kNet{40e-6, 1e9};

HostDescription host(const std::string& name, int numaNodes) {
  HostDescription h;
  h.name = name;
  h.cores = 8;
  h.numaNodes = numaNodes;
  h.sameNuma = kSame;
  h.crossNuma = kCross;
  return h;
}

// Rank r's route to rank q, as one message sees it.
PathFigures between(const Topology& t, int r, int q) {
  return pathFigures(t, t.ranks[size_t(r)].endpoint, t.ranks[size_t(q)].endpoint);
}

int countKind(const Topology& t, NodeKind kind) {
  int n = 0;
  for (const Node& node : t.nodes) n += node.kind == kind;
  return n;
}

TEST(CommTopology, TwoHostsTwoRanksEach) {
  CommDescription d;
  d.hosts = {host("box", 1), host("box", 1)};  // namespaces of one machine share a hostname
  d.rankHost = {0, 0, 1, 1};
  d.rankNuma = {0, 0, -1, 0};
  d.network = kNet;
  Topology t = buildCommTopology("two", d);
  Status s = t.validate();
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(t.hostCount(), 2);
  ASSERT_EQ(t.ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(t.ranks[size_t(r)].host, d.rankHost[size_t(r)]);
  EXPECT_EQ(countKind(t, NodeKind::Numa), 2);
  EXPECT_EQ(countKind(t, NodeKind::Cpu), 4);
  EXPECT_EQ(countKind(t, NodeKind::Nic), 2);
  EXPECT_EQ(countKind(t, NodeKind::Switch), 1);
  EXPECT_EQ(t.links.size(), 16u);  // 4 rank endpoints, 2 NICs on their hubs, 2 NICs on the switch
  std::vector<int32_t> hosts = t.hostNodes();
  EXPECT_EQ(t.nodes[size_t(hosts[0])].name, "box");
  EXPECT_EQ(t.nodes[size_t(hosts[1])].name, "box-1");
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.cores, 8);
  // Without measured memory figures: no copy rates (the simulator's default), and reads
  // through the kernel at the calibrated defaults.
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.memBandwidth, 0);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.cacheBytes, 0u);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.singleCopyOverhead, 1e-6);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.peerReadCopies, 1.1);
  // Nor is the kernel's work per TCP message, nor what a streamed copy saves.
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.netMessageOverhead, 6.5e-6);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.streamingCopies, 0.67);
  // Nor is reading another core's cache, and without a known private cache not modelled.
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.privateCacheBytes, 0u);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.dirtyReadCopies, 0);
  d.hosts[1].privateCacheBytes = 1 << 20;
  t = buildCommTopology("two", d);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.privateCacheBytes, 1u << 20);
  EXPECT_GT(t.nodes[size_t(hosts[1])].cpu.dirtyReadCopies, 0);
  // Measured memory figures become the host's copy rates and kernel-read costs; a kernel
  // that refused the reads (copies 0) leaves those at the defaults.
  d.hosts[1].cacheBytes = 32 << 20;
  d.hosts[1].memory = {50e9, 20e9, 4.1, 0.8e-6};
  t = buildCommTopology("two", d);
  const topology::HostCpu& cpu = t.nodes[size_t(hosts[1])].cpu;
  EXPECT_EQ(cpu.cacheBytes, 32u << 20);
  EXPECT_EQ(cpu.cacheBandwidth, 50e9);
  EXPECT_EQ(cpu.memBandwidth, 20e9);
  EXPECT_EQ(cpu.peerReadCopies, 4.1);
  EXPECT_EQ(cpu.singleCopyOverhead, 0.8e-6);
  EXPECT_EQ(t.nodes[size_t(hosts[0])].cpu.memBandwidth, 0);  // the other host has none
  d.hosts[1].memory.kernelReadCopies = 0;
  t = buildCommTopology("two", d);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.memBandwidth, 20e9);
  EXPECT_EQ(t.nodes[size_t(hosts[1])].cpu.peerReadCopies, 1.1);
  d.hosts[1].memory = {};
  // Within a host: the measured same-NUMA figures; across: the measured network figures.
  PathFigures local = between(t, 0, 1), remote = between(t, 1, 2);
  EXPECT_NEAR(local.latency, kSame.latency, 1e-12);
  EXPECT_DOUBLE_EQ(local.bandwidth, kSame.bandwidth);
  EXPECT_EQ(local.kind, "shm");
  EXPECT_NEAR(remote.latency, kNet.latency, 1e-12);
  EXPECT_DOUBLE_EQ(remote.bandwidth, kNet.bandwidth);
  EXPECT_EQ(remote.kind, "tcp");
  EXPECT_EQ(remote.hops, 6);
  // A measured shaper's burst is the burst of every NIC-switch link, and of no other.
  for (const topology::Link& l : t.links) EXPECT_EQ(l.burstBytes, 0u);
  d.network.burstBytes = 18000.7;
  t = buildCommTopology("two", d);
  int shaped = 0;
  for (const topology::Link& l : t.links) {
    EXPECT_EQ(l.burstBytes, l.kind == "tcp" ? 18000u : 0u);
    shaped += l.kind == "tcp";
  }
  EXPECT_EQ(shaped, 4);
}

TEST(CommTopology, OneHostFourRanksOnTwoNumaNodes) {
  CommDescription d;
  d.hosts = {host("big", 2)};
  d.rankHost = {0, 0, 0, 0};
  d.rankNuma = {0, 1, 0, 1};
  Topology t = buildCommTopology("one", d);
  Status s = t.validate();
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(t.hostCount(), 1);
  EXPECT_EQ(countKind(t, NodeKind::Numa), 2);
  EXPECT_EQ(countKind(t, NodeKind::Cpu), 4);
  EXPECT_EQ(countKind(t, NodeKind::Nic), 0);  // one host: no network
  EXPECT_EQ(countKind(t, NodeKind::Switch), 0);
  EXPECT_EQ(t.links.size(), 10u);  // 4 rank endpoints and one hub-to-hub connection
  PathFigures same = between(t, 0, 2), cross = between(t, 0, 1);
  EXPECT_NEAR(same.latency, kSame.latency, 1e-12);
  EXPECT_EQ(same.hops, 2);
  EXPECT_NEAR(cross.latency, kCross.latency, 1e-12);
  EXPECT_DOUBLE_EQ(cross.bandwidth, kCross.bandwidth);
  EXPECT_EQ(cross.kind, "upi");
  EXPECT_EQ(cross.hops, 3);
  // No one-core figure: messages of ranks that share a core cost what others do.
  const topology::HostCpu& cpu = t.nodes[size_t(t.hostNodes()[0])].cpu;
  EXPECT_EQ(cpu.sharedCoreLatency, 0);
  EXPECT_DOUBLE_EQ(cpu.barrierLatency, kSame.latency);
  // Where it was measured, it is the host's sharedCoreLatency, and a barrier's last flag may
  // be for the sender's own core.
  d.hosts[0].sameNuma.sharedCore = 1.5e-6;
  t = buildCommTopology("shared", d);
  const topology::HostCpu& shared = t.nodes[size_t(t.hostNodes()[0])].cpu;
  EXPECT_DOUBLE_EQ(shared.sharedCoreLatency, 1.5e-6);
  EXPECT_DOUBLE_EQ(shared.barrierLatency, kSame.latency + 1.5e-6);
  EXPECT_NEAR(between(t, 0, 2).latency, kSame.latency, 1e-12);
  // With more ranks than cores (4 on 2: each runs half the time), a message to another core
  // waits half a switch on average; one to the sender's own core still costs the one-core
  // trip, and so does a barrier.
  d.hosts[0].cores = 2;
  t = buildCommTopology("oversubscribed", d);
  const topology::HostCpu& over = t.nodes[size_t(t.hostNodes()[0])].cpu;
  EXPECT_NEAR(between(t, 0, 2).latency, kSame.latency + 0.75e-6, 1e-12);
  EXPECT_NEAR(over.sharedCoreLatency, 0.75e-6, 1e-12);
  EXPECT_NEAR(between(t, 0, 2).latency + over.sharedCoreLatency, kSame.latency + 1.5e-6, 1e-12);
  EXPECT_NEAR(between(t, 0, 1).latency, kCross.latency + 0.75e-6, 1e-12);  // across NUMA too
  EXPECT_DOUBLE_EQ(over.barrierLatency, kSame.latency + 1.5e-6);
  d.hosts[0].cores = 8;
  d.hosts[0].sameNuma.sharedCore = 0;
  // Unknown figures fall back to the defaults rather than a zero-bandwidth link.
  d.hosts[0].sameNuma = {};
  d.hosts[0].crossNuma = {};
  t = buildCommTopology("defaults", d);
  EXPECT_TRUE(t.validate().isOk());
  EXPECT_NEAR(between(t, 0, 2).latency, defaultFigures(LinkKind::SameNuma).latency, 1e-12);
  EXPECT_NEAR(between(t, 0, 1).latency, defaultFigures(LinkKind::CrossNuma).latency, 1e-12);
}

TEST(CommTopology, RoundTripsThroughJson) {
  CommDescription d;
  d.hosts = {host("a", 2), host("b", 1)};
  d.rankHost = {0, 0, 1};
  d.rankNuma = {0, 1, 0};
  d.network = kNet;
  Topology t = buildCommTopology("rt", d), back;
  Status s = parseTopology(toJson(t), &back);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_TRUE(back == t);
  EXPECT_EQ(topologySignature(back), topologySignature(t));
}

TEST(CommTopology, BoundNumaNode) {
  std::vector<std::vector<int>> numa = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(boundNumaNode({5}, numa), 1);
  EXPECT_EQ(boundNumaNode({0, 3}, numa), 0);
  EXPECT_EQ(boundNumaNode({3, 4}, numa), -1);  // spans both
  EXPECT_EQ(boundNumaNode({}, numa), -1);
  EXPECT_EQ(boundNumaNode({9}, numa), -1);
}

TEST(CommTopology, MeasurementPairs) {
  std::vector<bool> all2[kLinkKinds] = {{true, true}, {true, true}, {true}};
  auto pairs = measurementPairs({0, 0, 1, 1}, {0, 0, 0, 0}, all2);
  ASSERT_EQ(pairs.size(), 3u);  // nobody is on two NUMA nodes: no cross-NUMA pair
  EXPECT_EQ(pairs[0].kind, LinkKind::SameNuma);
  EXPECT_EQ(pairs[0].initiator, 0);
  EXPECT_EQ(pairs[0].responder, 1);
  EXPECT_EQ(pairs[1].kind, LinkKind::SameNuma);
  EXPECT_EQ(pairs[1].host, 1);
  EXPECT_EQ(pairs[1].initiator, 2);
  EXPECT_EQ(pairs[1].responder, 3);
  EXPECT_EQ(pairs[2].kind, LinkKind::Network);
  EXPECT_EQ(pairs[2].initiator, 0);
  EXPECT_EQ(pairs[2].responder, 2);

  std::vector<bool> one[kLinkKinds] = {{true}, {true}, {true}};
  pairs = measurementPairs({0, 0, 0, 0}, {0, 1, 0, 1}, one);
  ASSERT_EQ(pairs.size(), 2u);  // one host: no network pair
  EXPECT_EQ(pairs[0].kind, LinkKind::SameNuma);
  EXPECT_EQ(pairs[0].responder, 2);
  EXPECT_EQ(pairs[1].kind, LinkKind::CrossNuma);
  EXPECT_EQ(pairs[1].initiator, 0);
  EXPECT_EQ(pairs[1].responder, 1);

  std::vector<bool> cachedHost0[kLinkKinds] = {{false, true}, {false, false}, {false}};
  pairs = measurementPairs({0, 0, 1, 1}, {0, 0, 0, 0}, cachedHost0);
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].host, 1);

  // Pairs of one kind never share a rank, on any layout.
  std::vector<bool> many[kLinkKinds] = {
      std::vector<bool>(4, true), std::vector<bool>(4, true), {true}};
  pairs = measurementPairs({0, 1, 2, 3, 0, 1, 2, 3}, {0, 0, 0, 0, 1, 0, 1, 0}, many);
  for (int k = 0; k < kLinkKinds; ++k) {
    std::set<int32_t> seen;
    for (const MeasurePair& p : pairs) {
      if (int(p.kind) != k) continue;
      EXPECT_TRUE(seen.insert(p.initiator).second);
      EXPECT_TRUE(seen.insert(p.responder).second);
      EXPECT_LT(p.initiator, p.responder);
    }
  }
}

TEST(TopologySignature, StableAndSensitiveToStructure) {
  CpuHostSpec h;
  h.ranksPerSocket = 4;
  h.memory = {8.6e9, 1e-6, "shm"};
  Topology t = uniformHosts("sig", 1, h, {});
  std::string sig = topologySignature(t);
  EXPECT_TRUE(std::regex_match(sig, std::regex("1h4r-[0-9a-f]{16}"))) << sig;
  EXPECT_EQ(topologySignature(Topology(t)), sig);
  Topology renamed = t;
  renamed.name = "other";
  for (Node& n : renamed.nodes) n.name = "x" + n.name;
  EXPECT_EQ(topologySignature(renamed), sig) << "names are not structure";
  Topology noisy = t;
  for (Link& l : noisy.links) l.bandwidth = 9.0e9;  // +5%: measurement noise
  EXPECT_EQ(topologySignature(noisy), sig);

  CpuHostSpec fiveRanks = h;
  fiveRanks.ranksPerSocket = 5;
  EXPECT_NE(topologySignature(uniformHosts("sig", 1, fiveRanks, {})), sig);
  Topology faster = t;
  for (Link& l : faster.links) l.bandwidth *= 4;
  EXPECT_NE(topologySignature(faster), sig);
  Topology otherKind = t;
  otherKind.links[0].kind = "nvlink";
  EXPECT_NE(topologySignature(otherKind), sig);
  Topology withCores = t;
  withCores.nodes[0].cpu.cores = 2;
  EXPECT_NE(topologySignature(withCores), sig);
}

class HostCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("loom-cache-test-" + std::to_string(getpid())) / "nested")
               .string();
  }
  void TearDown() override {
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
    unsetenv("LOOM_CACHE_DIR");
    params::reloadFromEnvironment();
  }
  std::string dir_;
};

TEST_F(HostCacheTest, RoundTripInACreatedDirectory) {
  setenv("LOOM_CACHE_DIR", dir_.c_str(), 1);
  params::reloadFromEnvironment();
  ASSERT_EQ(readCacheDirectory(), dir_);
  std::string sig = hostSignature("testhost", 0x1234abcd);
  EXPECT_NE(sig.find("testhost"), std::string::npos);
  EXPECT_NE(sig.find("1234abcd"), std::string::npos);
  HostCache missing;
  EXPECT_EQ(loadHostCache(dir_, sig, &missing).code(), loomInvalidUsage);

  HostCache c;
  c.signature = sig;
  c.cores = 6;
  c.privateCacheBytes = 1 << 20;
  c.cacheInstanceBytes = 16 << 20;
  c.cacheBytes = 32 << 20;
  c.numaCpus = {{0, 1, 2}, {3, 4, 5}};
  c.memory = {51.5e9, 19.25e9, 4.125, 8.5e-7, 24 << 20};
  c.links["same-NUMA/shm"] = {1.25e-6, 7.5e9};
  c.links["same-NUMA/shm/shared-core"] = {0.5e-6, 7.5e9, 6.25e-8, 1.75e-6};
  c.links["network/tcp/00000000deadbeef"] = {3.3e-5, 1.1e9, 0, 0, 18125};
  Status s = saveHostCache(dir_, c);  // creates dir_ and its parent
  ASSERT_TRUE(s.isOk()) << s.message();
  HostCache back;
  s = loadHostCache(dir_, sig, &back);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(back.signature, sig);
  EXPECT_EQ(back.cores, 6);
  EXPECT_EQ(back.privateCacheBytes, 1u << 20);
  EXPECT_EQ(back.cacheInstanceBytes, 16u << 20);
  EXPECT_EQ(back.cacheBytes, 32u << 20);
  EXPECT_EQ(back.numaCpus, c.numaCpus);
  EXPECT_EQ(back.memory.cacheBandwidth, 51.5e9);
  EXPECT_EQ(back.memory.memBandwidth, 19.25e9);
  EXPECT_EQ(back.memory.kernelReadCopies, 4.125);
  EXPECT_EQ(back.memory.kernelReadOverhead, 8.5e-7);
  EXPECT_EQ(back.memory.cacheBytes, 24u << 20);
  ASSERT_EQ(back.links.size(), 3u);
  EXPECT_EQ(back.links["same-NUMA/shm"].latency, 1.25e-6);  // exact: doubles round-trip
  EXPECT_EQ(back.links["same-NUMA/shm"].sharedCore, 0);
  EXPECT_EQ(back.links["same-NUMA/shm/shared-core"].perMessage, 6.25e-8);
  EXPECT_EQ(back.links["same-NUMA/shm/shared-core"].sharedCore, 1.75e-6);
  EXPECT_EQ(back.links["network/tcp/00000000deadbeef"].bandwidth, 1.1e9);
  EXPECT_EQ(back.links["network/tcp/00000000deadbeef"].burstBytes, 18125);
  EXPECT_EQ(back.links["same-NUMA/shm"].burstBytes, 0);
  // Only the final file is left: the temporary one was renamed.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".json") << e.path();
  }
  EXPECT_EQ(files, 1);
  // Another signature is another host.
  EXPECT_EQ(loadHostCache(dir_, hostSignature("testhost", 0x99), &missing).code(),
            loomInvalidUsage);
}

// An entry filed before loom recorded the last-level cache keeps its measured links but not
// its probe fields, so that init probes the host once more and files what it found, 0
// included; it has no memory figures, so init measures them.
TEST_F(HostCacheTest, EntriesWithoutTheLastLevelCacheAreProbedAgain) {
  std::string sig = hostSignature("testhost", 8);
  std::filesystem::create_directories(dir_);
  std::ofstream(hostCachePath(dir_, sig))
      << R"({"signature": ")" << sig << R"(", "cores": 6, "numaCpus": [[0, 1, 2, 3, 4, 5]],)"
      << R"( "privateCacheBytes": 1048576,)"
      << R"( "links": {"same-NUMA/shm": {"latency": 1e-6, "bandwidth": 8e9}}})";
  HostCache old;
  ASSERT_TRUE(loadHostCache(dir_, sig, &old).isOk());
  EXPECT_EQ(old.cores, 0);
  EXPECT_TRUE(old.numaCpus.empty());
  EXPECT_EQ(old.privateCacheBytes, 0u);
  EXPECT_FALSE(old.memory.known());
  ASSERT_EQ(old.links.size(), 1u);
  EXPECT_EQ(old.links["same-NUMA/shm"].bandwidth, 8e9);
  old.cores = 6;
  old.numaCpus = {{0, 1, 2, 3, 4, 5}};
  old.privateCacheBytes = 0;  // a host whose probe names no per-core cache
  ASSERT_TRUE(saveHostCache(dir_, old).isOk());
  HostCache back;
  ASSERT_TRUE(loadHostCache(dir_, sig, &back).isOk());
  EXPECT_EQ(back.cores, 6);
  EXPECT_EQ(back.privateCacheBytes, 0u);
}

// An entry filed before loom checked hwloc's cache sizes (no "cacheChecked") may carry a
// hypervisor's fictitious last-level cache: its probe fields are dropped, its figures kept.
TEST_F(HostCacheTest, EntriesWithUncheckedCachesAreProbedAgain) {
  std::string sig = hostSignature("testhost", 9);
  std::filesystem::create_directories(dir_);
  const std::string entry =
      R"({"signature": ")" + sig + R"(", "cores": 2, "numaCpus": [[0, 1]],)" +
      R"( "privateCacheBytes": 532676608, "cacheInstanceBytes": 532676608,)" +
      R"( "cacheBytes": 1065353216, "links": {"same-NUMA/shm": {"latency": 1e-6,)" +
      R"( "bandwidth": 8e9}})";
  std::ofstream(hostCachePath(dir_, sig)) << entry << "}";
  HostCache old;
  ASSERT_TRUE(loadHostCache(dir_, sig, &old).isOk());
  EXPECT_EQ(old.cores, 0);
  EXPECT_EQ(old.cacheBytes, 0u);
  EXPECT_EQ(old.links["same-NUMA/shm"].bandwidth, 8e9);
  std::ofstream(hostCachePath(dir_, sig)) << entry << R"(, "cacheChecked": true})";
  HostCache checked;
  ASSERT_TRUE(loadHostCache(dir_, sig, &checked).isOk());
  EXPECT_EQ(checked.cores, 2);
  EXPECT_EQ(checked.cacheBytes, 1065353216u);
}

// Memory figures filed before the memory measurement checked hwloc's cache claim (their own
// "cacheChecked"), or checked by another rule of cachedReach ("cacheRule"), were measured with
// working sets the claim sized: they are measured again.
TEST_F(HostCacheTest, MemoryFiguresWithoutTheCacheCheckAreMeasuredAgain) {
  std::string sig = hostSignature("testhost", 10);
  std::filesystem::create_directories(dir_);
  const std::string head = R"({"signature": ")" + sig + R"(", "links": {},)" +
                           R"( "memory": {"cacheBandwidth": 3e10, "memBandwidth": 1e10,)" +
                           R"( "kernelReadCopies": 2, "kernelReadOverhead": 1e-6)";
  std::ofstream(hostCachePath(dir_, sig)) << head << "}}";
  HostCache old;
  ASSERT_TRUE(loadHostCache(dir_, sig, &old).isOk());
  EXPECT_FALSE(old.memory.known());
  // Checked by the rule before the harmonic mean's (no "cacheRule"): measured again.
  std::ofstream(hostCachePath(dir_, sig))
      << head << R"(, "cacheBytes": 33554432, "cacheChecked": true}})";
  HostCache earlierRule;
  ASSERT_TRUE(loadHostCache(dir_, sig, &earlierRule).isOk());
  EXPECT_FALSE(earlierRule.memory.known());
  std::ofstream(hostCachePath(dir_, sig))
      << head << R"(, "cacheBytes": 33554432, "cacheChecked": true, "cacheRule": )"
      << kCacheCheckRule << "}}";
  HostCache checked;
  ASSERT_TRUE(loadHostCache(dir_, sig, &checked).isOk());
  EXPECT_TRUE(checked.memory.known());
  EXPECT_EQ(checked.memory.cacheBytes, 32u << 20);
  // Saved, it says its rule, and loads back as it was.
  ASSERT_TRUE(saveHostCache(dir_, checked).isOk());
  HostCache again;
  ASSERT_TRUE(loadHostCache(dir_, sig, &again).isOk());
  EXPECT_TRUE(again.memory.known());
  EXPECT_EQ(again.memory.cacheBytes, 32u << 20);
}

TEST_F(HostCacheTest, MalformedFilesAndUnwritableDirectoriesAreReported) {
  std::string sig = hostSignature("testhost", 7);
  std::filesystem::create_directories(dir_);
  std::ofstream(hostCachePath(dir_, sig)) << "{\"signature\": 3";
  HostCache c;
  Status s = loadHostCache(dir_, sig, &c);
  EXPECT_EQ(s.code(), loomSystemError);
  EXPECT_NE(s.message().find(hostCachePath(dir_, sig)), std::string::npos) << s.message();
  // A regular file where the directory should be.
  std::string blocked = dir_ + "/file";
  std::ofstream(blocked) << "x";
  c.signature = sig;
  s = saveHostCache(blocked + "/sub", c);
  EXPECT_EQ(s.code(), loomSystemError);
  EXPECT_NE(s.message().find("cache directory"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom::topology
