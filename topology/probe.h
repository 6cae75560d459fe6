// The probe: what this host is (hwloc: packages, NUMA nodes, cores, caches, PCI NICs and GPUs
// with their NUMA locality), as a Topology the communicator adds its ranks to, plus a short
// bounded measurement of the local links. hwloc stays inside probe.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/builders.h"
#include "topology/discover.h"
#include "topology/topology.h"

namespace loom::topology {

struct CacheLevel {
  std::string name;   // "L1d", "L2", "L3"...
  int level = 0;
  uint64_t size = 0;  // bytes per instance (0 when hwloc does not say)
  int count = 0;      // instances on the host
  uint64_t claimedSize = 0;  // hwloc's size where a measurement replaced it (checkCacheClaim)
};

struct PciDevice {
  NodeKind kind = NodeKind::Nic;  // Nic or Gpu
  std::string name;               // OS name: "eth0", "mlx5_0", "card0", "cuda0"...
  std::string busId;              // "0000:3b:00.0"
  int numa = -1;                  // logical NUMA node it hangs off; -1 when unknown
  double pcieBandwidth = 0;       // bytes/s of its PCIe link as hwloc reports it (0: unknown)
  double linkBandwidth = 0;       // NICs: bytes/s of the port (/sys/class/net), 0 if unknown
};

struct HostInfo {
  std::string hostname;
  int packages = 0, numaNodes = 0, cores = 0, pus = 0;
  std::vector<uint64_t> numaMemory;      // bytes per NUMA node (0 when unknown)
  std::vector<int> coresPerNuma;
  std::vector<std::vector<int>> numaCpus;  // OS CPU numbers per NUMA node (for rank binding)
  std::vector<CacheLevel> caches;        // data and unified caches, innermost first
  std::vector<PciDevice> devices;
};

// The largest cache every core has one of its own (the outermost level with an instance per
// core, usually L2); 0 when hwloc says of none. A level over kCacheClaimChecked is none: no core
// has that much of its own, and such a claim is a hypervisor's (checkCacheClaim).
uint64_t privateCacheOf(const HostInfo& info);

// The outermost cache level (usually L3): bytes per instance and the instances on the host;
// a level of size 0 when hwloc says of none.
CacheLevel lastLevelCacheOf(const HostInfo& info);

// Working sets whose copy rate the cache check compares (checkCacheClaim): a last-level
// instance larger than kCacheClaimChecked is checked, with memcpy working sets doubling from
// kCacheCheckFirst to kCacheCheckLast, each against the rate of the first.
constexpr uint64_t kCacheClaimChecked = 64ull << 20;
constexpr uint64_t kCacheCheckFirst = 4ull << 20;
constexpr uint64_t kCacheCheckLast = 128ull << 20;

// One core's memcpy rate (bytes/s) with a working set (source plus destination) of `bytes`.
struct CopyRate {
  uint64_t bytes = 0;
  double rate = 0;
};

// A copy rate at most this fraction of the fastest is a fall out of the cache; nearer, the
// difference is what a busy core's best-of-three can show.
constexpr double kCacheFallRatio = 0.75;
// The rule of cachedReach that memory figures in the host cache were found by; figures filed
// under another are measured again.
constexpr int kCacheCheckRule = 2;

// The largest working set of `rates` (ascending), from the fastest on, whose time per byte is
// nearer the fastest's than the slowest's after it (the harmonic mean of the two rates: half
// of it from the cache, half from memory). A rule of "half the fastest rate" never fires where
// memory is more than half as fast as the cache (an Intel VM: 14.4 GB/s in cache, 8.1 from
// 128 MiB on, whose claimed 480 MiB L3 would stand). Returns the last entry's size where none
// falls below kCacheFallRatio of the fastest; 0 for no rates.
uint64_t cachedReach(const std::vector<CopyRate>& rates);

// hwloc reads cache sizes from CPUID, which a hypervisor may fake: one VM reported each of its
// two cores as having a 508 MiB L3 (the package's total) when one core's copies fell to memory
// speed between 32 and 64 MiB. A claimed last-level instance over kCacheClaimChecked is
// therefore measured (~30 ms of copies and 128 MiB, so with the host otherwise quiet): the
// largest working set still copied at cache speed where the copies fall to memory speed within
// the claim; 0 where they do not (the claim stands) or it is not checked.
uint64_t measuredCacheReach(uint64_t claimedInstance);

// Where `reach` (measuredCacheReach) is not 0, the last-level cache becomes one instance of
// that size, shared by all cores, and claimedSize keeps what hwloc said.
void applyCacheReach(HostInfo* info, uint64_t reach);

// Both: checks info's last-level cache and applies what the copies show.
void checkCacheClaim(HostInfo* info);

// Reads hwloc: the caches as it says (the check is measureMemory's, or checkCacheClaim's).
// Fails only when hwloc itself cannot load a topology. Without `withDevices` the PCI scan (the
// slow part) is skipped and `devices` stays empty.
Status probeHost(HostInfo* out, bool withDevices = true);

// The port speed of network interface `ifname` in bytes/s (/sys/class/net), 0 where the kernel
// does not say (virtual links, loopback).
double nicLinkBandwidth(const std::string& ifname);

// The host's RDMA devices (InfiniBand, RoCE, iWARP: /sys/class/infiniband, what hwloc reports
// as OpenFabrics devices), by name ("mlx5_0"); empty where the kernel has none. Under
// LOOM_TRANSPORT=auto, hosts that all have one take UCX between them unless the measured
// figures make tcp clearly cheaper (comm/connections.h).
std::vector<std::string> rdmaDevices();

// Figures for the local links; defaults are conservative guesses, overwritten by measurement.
struct LocalLinkFigures {
  LinkSpec memory{10e9, 1e-6, "shm"};        // rank endpoint ↔ NUMA hub
  LinkSpec interSocket{40e9, 0.2e-6, "upi"};  // NUMA hub ↔ NUMA hub
  double pcieLatency = 0.5e-6;
  double pcieBandwidth = 16e9;               // when hwloc does not report the link speed
};

// The local host as a one-host Topology: Host node "<hostname>", NUMA hubs "<host>/numa<i>"
// joined pairwise, NICs and GPUs on their NUMA hub over PCIe. No ranks: the caller adds them
// with TopologyBuilder::addCpuRank-like endpoints (see addLocalRank).
Topology localTopology(const HostInfo& info, const LocalLinkFigures& figures = {});
// Adds a rank bound to NUMA node `numa` (its own Cpu endpoint on that hub).
int32_t addLocalRank(Topology* t, int numa, const LinkSpec& memory);

// One core's copy rates (MemoryFigures), measured with the host otherwise quiet: first the
// last-level cache instance hwloc claims (`cacheBytes`; 0: unknown, taken as 16 MiB) where it
// is implausible (measuredCacheReach: the figures' cacheBytes, and the instance used below);
// then memcpy of buffers a quarter of that instance between them, clamped to 256 KiB – 4 MiB; memcpy between two buffers of that instance's size
// (8 – 64 MiB each, on huge pages where the kernel gives them, so that their page faults cost
// little); process_vm_readv of this process's own memory on ordinary pages, as user buffers
// are, as the shm transport's single-copy receive and peer reads do. Each figure is the best of
// a few passes; the whole takes ~10 ms plus the faults of the buffers, more only when
// `budgetSeconds` allows more passes. kernelReadCopies stays 0 where the kernel refuses
// process_vm_readv (a seccomp profile, say).
MemoryFigures measureMemory(uint64_t cacheBytes, double budgetSeconds);

// A short measurement of the local links for loom-topo, bounded by `budgetSeconds` (60% for
// memory, 40% for TCP; each stops when its share runs out, after at least one sample). Pure: no
// global state, no logging.
struct LinkMeasurement {
  MemoryFigures memory;
  double memcpyLatency = 0;  // s for a 64-byte copy (cache-hot; the floor of a shm message)
  double tcpLatency = 0;     // s, one-way (1-byte ping-pong over 127.0.0.1); 0: failed
};
LinkMeasurement measureLocalLinks(uint64_t cacheBytes, double budgetSeconds);

}  // namespace loom::topology
