// The communicator's topology, from what every rank knows after init's allgathers: where each
// rank sits (host, NUMA node), the shape of each host, and the figures of each kind of link
// (measured at init, read from the per-host cache, or defaults). Everything here is pure or
// plain file I/O, so it builds and tests without sockets; topology/comm_discovery.h does the
// exchanges and topology/link_measure.h the measurement. docs/TOPOLOGY.md describes the whole
// of discovery.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace loom::topology {

// One kind of link as two ranks see it: one-way latency of a small message, and the bandwidth
// of one stream. Zero means "not known".
struct LinkFigures {
  double latency = 0;    // s
  double bandwidth = 0;  // bytes/s
  // s each further message of a back-to-back burst adds: the CPU time a rank spends per
  // message on this link (posting, polling, bookkeeping), which lanes and extra plan steps
  // cost even when their latencies overlap. 0: not measured.
  double perMessage = 0;
  // s a message takes beyond `latency` where its two ends share one core (HostCpu::
  // sharedCoreLatency): measured where a host's ranks outnumber its cores, with the pair on
  // one core and then on two. 0: not measured (then `latency` is the one-core figure where
  // the ranks share cores).
  double sharedCore = 0;
  // Bytes the link passes at once after idling, beyond what its bandwidth passes: the depth of
  // a token bucket that shapes it (tc htb/tbf "burst"; topology Link::burstBytes). Measured on
  // the network link only, up to the probe message's size; 0: none seen.
  double burstBytes = 0;
  bool known() const { return latency > 0 && bandwidth > 0; }
};

// One core's copy rates on a host (topology::measureMemory), which the cost model's HostCpu
// takes as cacheBandwidth, memBandwidth, peerReadCopies and singleCopyOverhead. Zero means
// "not known".
struct MemoryFigures {
  double cacheBandwidth = 0;  // bytes/s of memcpy between buffers in the last-level cache
  double memBandwidth = 0;    // bytes/s of memcpy between buffers beyond it
  // A byte read through the kernel (process_vm_readv, ordinary pages), in cached memcpy bytes:
  // the page pinning makes it several.
  double kernelReadCopies = 0;
  double kernelReadOverhead = 0;  // s each such read costs besides its bytes
  // The last-level cache the copies show (one instance, shared by every core), where they fall
  // to memory speed well within what hwloc claims (measuredCacheReach); 0: the claim stands.
  uint64_t cacheBytes = 0;
  bool known() const { return cacheBandwidth > 0 && memBandwidth > 0; }
};

// The link kinds discovery measures, in the order a rank measures them.
enum class LinkKind : uint8_t { SameNuma, CrossNuma, Network };
constexpr int kLinkKinds = 3;
const char* linkKindName(LinkKind k);  // "same-NUMA", "cross-NUMA", "network"

// Where a figure came from (for the init log).
enum class FigureSource : uint8_t { Default, Cached, Measured };
const char* figureSourceName(FigureSource s);  // "default", "cached", "measured"

// Used when nothing better is known: a memcpy-class shared-memory copy, a socket-to-socket hop
// (UPI-class) on top of it across NUMA nodes, and 10 Gbit Ethernet through the kernel.
LinkFigures defaultFigures(LinkKind k);

// The shape and figures of one host of the communicator.
struct HostDescription {
  std::string name;  // node name; unique among the hosts
  int cores = 0;     // 0: unknown; where hosts share a machine, the machine's
  std::string machine;  // hosts that share a machine name the same (HostCpu::machine); "": own
  int numaNodes = 1;
  uint64_t privateCacheBytes = 0;  // each core's own cache (privateCacheOf); 0: unknown
  uint64_t cacheBytes = 0;         // the last-level caches of all its cores; 0: unknown
  MemoryFigures memory;            // unknown: the model gives the host no copy rates
  LinkFigures sameNuma, crossNuma;  // rank to rank within the host (sameNuma.perMessage is
                                    // the model's HostCpu::stepOverhead)
};

// Everything buildCommTopology needs; identical on every rank by construction.
struct CommDescription {
  std::vector<HostDescription> hosts;
  std::vector<int32_t> rankHost;  // host index per rank
  std::vector<int32_t> rankNuma;  // NUMA node per rank (-1: not bound to one; put on node 0)
  LinkFigures network;            // rank to rank across hosts
};

// Per host a Host node (with its core count), its NUMA hubs joined pairwise ("upi"), a Cpu
// endpoint per rank on its hub ("shm"); with several hosts a NIC per host on hub 0 ("pcie")
// and one switch joining the NICs ("tcp"). Link figures are chosen so that the route between
// two ranks adds up to the measured rank-to-rank latency, with the measured bandwidth at its
// narrowest link.
Topology buildCommTopology(const std::string& name, const CommDescription& d);

// The NUMA node whose CPUs include all of `allowedCpus` (the rank's affinity), or -1 when
// they span several nodes (or none is known).
int boundNumaNode(const std::vector<int>& allowedCpus,
                  const std::vector<std::vector<int>>& numaCpus);

// Which pair of ranks measures which link kind: for each host the lowest pair of ranks on one
// NUMA node and the lowest pair on two; the first ranks of hosts 0 and 1 for the network.
// `wanted[kind]` (per host, or index 0 for the network) says which are needed. Pairs of one
// kind never share a rank, and every rank runs its pairs in LinkKind order, so no two ranks
// wait on each other in opposite orders.
struct MeasurePair {
  LinkKind kind = LinkKind::SameNuma;
  int32_t host = 0;       // the host measured (0 for the network)
  int32_t initiator = 0;  // the lower rank: drives the exchange and computes the figures
  int32_t responder = 0;
};
std::vector<MeasurePair> measurementPairs(const std::vector<int32_t>& rankHost,
                                          const std::vector<int32_t>& rankNuma,
                                          const std::vector<bool> wanted[kLinkKinds]);

// The per-host cache: what the probe found (so init need not run hwloc again) and the link
// figures measured there, in one small JSON file per host signature.
struct HostCache {
  std::string signature;
  int cores = 0;
  uint64_t privateCacheBytes = 0;            // privateCacheOf the probe (0: it found none)
  uint64_t cacheInstanceBytes = 0;           // lastLevelCacheOf the probe: one instance
  uint64_t cacheBytes = 0;                   // and all of them (0: it found none)
  std::vector<std::vector<int>> numaCpus;    // OS CPU numbers per NUMA node
  MemoryFigures memory;                      // measured once, by the host's first rank
  std::map<std::string, LinkFigures> links;  // by linkCacheKey
};

// "same-NUMA/shm", "cross-NUMA/tcp", "network/tcp/<peer host id>": the figures of a link kind
// over a transport, and for the network, to a given host.
std::string linkCacheKey(LinkKind kind, const std::string& transport, uint64_t peerHostId = 0);

// A host is its hostname, boot id and network namespace: ranks in different network
// namespaces of one machine count as different hosts (that is how tests play a cluster).
// Sets *hostname too.
uint64_t hostIdentity(std::string* hostname);
// The running kernel (its boot id): processes that share it share the CPUs, whatever their
// hostname or network namespace, so this is what decides whether ranks oversubscribe cores.
uint64_t machineIdentity();

// This host as the cache knows it: hostname, `hostId` (boot id and network namespace, see
// comm/comm.cc), and the configured CPU count and online NUMA nodes, which only change with
// the hardware.
std::string hostSignature(const std::string& hostname, uint64_t hostId);
// `dir` is created when missing. Load: loomInvalidUsage when there is no entry for the
// signature (normal on a first run), loomSystemError for an unreadable or malformed file.
// Save writes a temporary file and renames it, so concurrent ranks never see half a file.
Status loadHostCache(const std::string& dir, const std::string& signature, HostCache* out);
Status saveHostCache(const std::string& dir, const HostCache& cache);
std::string hostCachePath(const std::string& dir, const std::string& signature);
// Writes `text` to a temporary file beside `path` and renames it over `path` (creating the
// directory when missing), so concurrent readers and writers never see half a file.
Status writeFileAtomically(const std::string& path, const std::string& text);
// The cache directory: `setting` (a communicator's LOOM_CACHE_DIR, comm/options.h) where it is
// not empty, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom; "" when none is set.
std::string cacheDirectory(const std::string& setting);

}  // namespace loom::topology
